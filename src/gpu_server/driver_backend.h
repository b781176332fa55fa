// The driver backend: runs clients' CUDA work on a real GPU through libcuda.so.1 (loaded at run
// time with dlopen, so flyt-gpu-server builds and starts on machines without a driver).
//
// This header is the factory hook flyt-gpu-server's main calls for `--backend driver`; the
// backend implements remote::Backend from remote/backend.h, whose contract — thread safety, what
// the server validates, error codes — applies in full. flyt declares the slice of the driver API
// it uses itself (driver_backend.cc, from NVIDIA's CUDA Driver API reference) and never includes
// cuda.h, so flyt-gpu-server builds and starts on machines without the CUDA toolkit or a driver.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "remote/backend.h"

namespace flyt::gpu_server {

struct DriverOptions {
  int device = 0;                        // CUDA device ordinal (--device)
  std::optional<int> sm_count;           // limit the SMs clients may use (--sm-count); absent: all
  std::string library = "libcuda.so.1";  // path or soname passed to dlopen
};

// Opens the driver, initialises it and selects the device. Fails with a clear Status when the
// library is missing (kUnavailable; also for NVIDIA's link-time stub libcuda.so), no device is
// present or the ordinal is out of range (kInvalidArgument), or --sm-count is given where the
// driver cannot limit a context's SMs (kFailedPrecondition: that needs the MPS control daemon with
// per-context SM partitioning). It creates and destroys one probe context, so a device that cannot
// host a context for clients is reported at start-up rather than to the first client.
//
// The backend is thread-safe (remote::Backend's contract). Every Session owns its own CUDA
// context (with the SM limit as execution affinity when one is set), so a sticky fault in one
// client's kernel does not poison another client's; Session::Reset replaces the context.
[[nodiscard]] Result<std::unique_ptr<remote::Backend>> MakeDriverBackend(
    const DriverOptions& options);

// What the loader bound for one libcuda entry point (diagnostics and tests).
struct DriverBinding {
  std::string member;  // e.g. "MemAlloc"
  bool required = false;
  std::vector<std::string> candidates;  // exported names tried, newest first ("cuMemAlloc_v2")
  std::string bound;                    // the name bound; empty when the library has none
};

// Loads `library` and binds flyt's entry points without initialising the driver (no cuInit), so
// it is safe on NVIDIA's stub library. Fails like MakeDriverBackend when the file cannot be loaded
// or lacks a required entry point (naming which).
[[nodiscard]] Result<std::vector<DriverBinding>> ProbeDriverLibrary(const std::string& library);

// The cudaError_t the CUDA runtime reports for a driver CUresult. The numbers agree for every
// code both APIs have (checked against cuda.h and driver_types.h by driver_backend_test); codes
// the runtime has no number for become kUnknown. Call sites that the runtime reports differently
// (a missing kernel is cudaErrorInvalidDeviceFunction, not cudaErrorSymbolNotFound) translate
// further themselves.
remote::CudaError CudaErrorFromDriver(int cu_result);

}  // namespace flyt::gpu_server
