// ErrorState: the CUDA runtime's error semantics, kept by flyt's libcudart.
//
//   - Every failing call sets the calling thread's "last error", which cudaGetLastError returns
//     and resets and cudaPeekAtLastError returns without resetting. cudaErrorNotReady (a query's
//     "not yet") is not an error and is never recorded.
//   - A sticky error (an illegal address, a launch failure: the context is corrupt) is kept for the
//     whole process: every later call that touches the device returns it, and cudaGetLastError
//     keeps returning it after a reset of the last error, until cudaDeviceReset.
//   - Errors of asynchronous work surface at the next synchronising call (the runtime passes them
//     through Record like any other).
//
// Thread safety: the last error is per thread (thread_local); the sticky error is an atomic.
// One ErrorState exists per process (inside the runtime's state); tests may make their own.
#pragma once

#include <atomic>
#include <cstdint>

#include "remote/cuda_status.h"

namespace flyt::runtime {

using remote::CudaError;

class ErrorState {
 public:
  // Notes the outcome of a call and returns it.
  CudaError Record(CudaError code) {
    if (code == CudaError::kSuccess || code == CudaError::kNotReady) return code;
    last_ = code;
    if (remote::IsStickyCudaError(code)) {
      uint32_t expected = 0;
      sticky_.compare_exchange_strong(expected, static_cast<uint32_t>(code));
    }
    return code;
  }

  // The sticky error, or kSuccess.
  CudaError Sticky() const { return static_cast<CudaError>(sticky_.load()); }

  CudaError GetLast() {
    CudaError sticky = Sticky();
    CudaError last = last_;
    last_ = CudaError::kSuccess;
    return sticky != CudaError::kSuccess ? sticky : last;
  }
  CudaError PeekLast() const {
    CudaError sticky = Sticky();
    return sticky != CudaError::kSuccess ? sticky : last_;
  }

  // cudaDeviceReset: the context is new, the sticky error gone.
  void ClearSticky() {
    sticky_.store(0);
    last_ = CudaError::kSuccess;
  }

 private:
  static inline thread_local CudaError last_ = CudaError::kSuccess;
  std::atomic<uint32_t> sticky_{0};
};

}  // namespace flyt::runtime
