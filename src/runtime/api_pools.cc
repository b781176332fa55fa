// flyt's libcudart.so.13: the CUDA runtime's pools family (issue 17). See runtime.h.
#include "runtime/runtime.h"

namespace flyt::runtime {

cudaError_t Runtime::MakeRoomForDownload(remote::Connection& conn, uint64_t bytes,
                                         bool& synchronous) {
  synchronous = false;
  uint64_t pending = conn.pending_download_bytes();
  if (pending + bytes <= remote::kMaxDownloadBytesInFlight) return cudaSuccess;
  if (pending > 0) {
    cudaError_t drained = FinishSync(conn.DeviceSynchronize({}).status());
    if (drained != cudaSuccess) return drained;
  }
  synchronous = bytes > remote::kMaxDownloadBytesInFlight;
  return cudaSuccess;
}

}  // namespace flyt::runtime
