// From a program's CUDA device ordinal to the node's physical GPU, the way the CUDA runtime does
// it: CUDA_DEVICE_ORDER decides the enumeration order (PCI_BUS_ID → NVML's order; FASTEST_FIRST,
// the default, → most cores first, PCI order on ties), CUDA_VISIBLE_DEVICES picks and reorders
// (indices into that order, "GPU-<uuid>" full or a unique prefix, "MIG-<uuid>"; the first invalid
// entry ends the list; an empty value hides every device). Also reads the environment variables
// that matter from /proc/<pid>/environ and applies setenv/putenv records to them.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trace/service.h"

namespace flyt::trace {

// The environment of one process, as far as the tracer cares.
struct CudaEnv {
  std::optional<std::string> visible_devices;  // CUDA_VISIBLE_DEVICES (absent: every GPU)
  std::optional<std::string> device_order;     // CUDA_DEVICE_ORDER
  std::optional<std::string> flyt_server;      // FLYT_SERVER (flyt's remote runtime)
};

// What one device ordinal of a program is on this node.
struct VisibleGpu {
  std::string uuid;      // the physical GPU
  std::string mig_uuid;  // "MIG-..." when the entry named a MIG instance
  std::optional<uint32_t> cores;
};

// The GPUs in CUDA's enumeration order for `device_order` (indices into `gpus`).
std::vector<size_t> EnumerationOrder(const std::vector<GpuIdentity>& gpus,
                                     const std::optional<std::string>& device_order);

// Device ordinal i of a program with `env` is element i (fewer elements: the ordinal is invalid).
std::vector<VisibleGpu> VisibleGpus(const CudaEnv& env, const std::vector<GpuIdentity>& gpus);

// /proc/<pid>/environ's bytes (NUL-separated "NAME=value"). `truncated`: the bytes were cut, so
// what follows their last NUL is left out (a value cut short is no value).
CudaEnv ParseEnviron(std::string_view environ, bool truncated = false);

// A SETENV record's text ("NAME=value"; putenv's "NAME" alone unsets). `truncated`: the text was
// cut to fit, so its last list entry may be partial and is left out. True when it changed `env`.
bool ApplySetenv(CudaEnv* env, std::string_view text, bool truncated);

}  // namespace flyt::trace
