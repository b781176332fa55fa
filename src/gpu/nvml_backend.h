// NvmlBackend: reads GPUs through NVML (the real libnvidia-ml.so.1 or flyt's simulated library,
// loaded with dlopen; the code path is the same).
//
// At open it enumerates the devices, reads what does not change (identity, max clocks) and
// decides once per device and per reading whether the device supports it: a reading whose call is
// missing from the library or answers NOT_SUPPORTED is never asked for again and stays absent. A
// device that answers GPU_IS_LOST is marked lost and skipped; the others keep being read.
// Reinitialize() restarts NVML and looks devices up again by UUID.
//
// Thread-safety: Snapshot() and Reinitialize() are serialised by the caller (the Monitor's
// sampling thread); WaitEvents() runs on another thread and is safe against both.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "gpu/backend.h"

namespace flyt::gpu {

struct NvmlBackendOptions {
  std::string library_path;  // empty = nvml::DefaultLibraryPath()
  std::string proc_root = "/proc";
};

Result<std::unique_ptr<Backend>> OpenNvmlBackend(const NvmlBackendOptions& options);

}  // namespace flyt::gpu
