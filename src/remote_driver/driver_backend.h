// The driver backend: runs clients' CUDA work on a real GPU through libcuda.so.1, loaded at run
// time by cuda_driver::Library (cuda_driver/library.h), so flyt-gpu-server builds and starts on
// machines without the CUDA toolkit or a driver. flyt declares the slice of the driver API it uses
// itself (cuda_driver/cuda_driver_types.h) and never includes cuda.h.
//
// MakeDriverBackend is the factory flyt-gpu-server's main calls for `--backend driver`; the
// backend implements Backend from remote_server/backend.h, whose contract (thread safety, what the
// server validates, error codes) applies in full.
//
// Isolation: every Session owns a CUDA context of its own (with the SM limit as execution affinity
// when one is set), which keeps each client's objects and handles apart. It does not isolate one
// client's sticky fault (an illegal address, a device-side assert) from the others: on the H100
// with driver 580 such a fault poisons every context of the process and every new one
// (docs/hardware-verification.md). What isolates clients is a process per client, each making its
// own backend (Isolation::kProcess in remote_server/server.h, flyt-gpu-server's default; see
// remote_server/backend.h). Session::Reset releases what the client left and creates a new context,
// which after such a fault the driver may refuse.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "cuda_driver/library.h"
#include "remote_server/backend.h"

namespace flyt::remote {

struct DriverOptions {
  int device = 0;               // CUDA device ordinal (--device)
  std::optional<int> sm_count;  // limit the SMs clients may use (--sm-count); absent: all
  // The same limit as a percentage of the device's SMs (--sm-percent, 1..100): turned into
  // sm_count = ceil(percent × SMs / 100) once the device is known. Exclusive with sm_count.
  std::optional<int> sm_percent;
  std::string library = cuda_driver::kDefaultLibraryPath;  // path or soname passed to dlopen
  // Set in this process's environment before the driver is loaded and initialised: the MPS
  // client limits (MpsEnvironment) that the MPS server then enforces for this process.
  std::vector<std::pair<std::string, std::string>> environment;
  // The SMs a context of `sm_count` was granted in the server's probe. Should a client process's
  // context report more (it reported all 132 under CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, which flyt
  // no longer sets), clients are told this count. Absent: what the context reports.
  std::optional<int> probed_granted_sm_count;
  // Measure the step in which the device grants SMs (a context with a 1-SM execution affinity),
  // where it can (under MPS); else Identity().sm_granularity is default_sm_granularity.
  bool measure_sm_granularity = false;
  int default_sm_granularity = 8;
};

// The MPS client limits for a process serving a share of device `ordinal`:
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "<ordinal>=<N>M" when memory_limit_mb is not 0. The SM share
// is the contexts' execution affinity alone: with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set as well,
// two clients of 32 and 96 SMs ran at the same speed on an H100 (driver 580, per-context
// partitioning), or with their limits swapped, where affinity alone gave them 1 : 3.
std::vector<std::pair<std::string, std::string>> MpsEnvironment(int ordinal,
                                                                uint64_t memory_limit_mb);

// Opens the driver, initialises it and selects the device. Fails with a clear Status when the
// library is missing or lacks a required entry point (kUnavailable; also for NVIDIA's link-time
// stub libcuda.so), no device is present or the ordinal is out of range (kInvalidArgument), or
// --sm-count is given where the driver cannot limit a context's SMs (kFailedPrecondition: that
// needs the MPS control daemon with per-context SM partitioning). It creates and destroys one probe
// context, so a device that cannot host a context for clients is reported at start-up rather than
// to the first client.
//
// The backend is thread-safe (Backend's contract).
[[nodiscard]] Result<std::unique_ptr<Backend>> MakeDriverBackend(const DriverOptions& options);

// The cudaError_t the CUDA runtime reports for a driver CUresult. The numbers agree for every
// code both APIs have (checked against cuda.h and driver_types.h by driver_backend_test); codes
// the runtime has no number for become kUnknown. Call sites that the runtime reports differently
// (a missing kernel is cudaErrorInvalidDeviceFunction, not cudaErrorSymbolNotFound) translate
// further themselves.
CudaError CudaErrorFromDriver(int cu_result);

}  // namespace flyt::remote
