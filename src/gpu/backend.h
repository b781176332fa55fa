// Backend: one source of GPU readings (NVML, nvidia-smi, or nothing), behind one interface.
//
// OpenBackend picks the best source available on this machine: NVML (real or simulated, loaded
// with dlopen), else nvidia-smi on PATH, else a backend that reports zero GPUs and says why.
// Backends are thread-compatible: the Monitor serialises Snapshot() calls on its sampling thread;
// WaitEvents() may run concurrently with Snapshot() on the event thread (NVML is thread-safe).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/types.h"

namespace flyt::gpu {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Source source() const = 0;

  // A fresh reading of every GPU and the processes on it. A GPU that cannot be read is still
  // listed (lost, or with readings absent); the call fails only when nothing could be read.
  virtual Result<GpuSnapshot> Snapshot() = 0;

  // Whether WaitEvents can ever return events.
  virtual bool SupportsEvents() const { return false; }

  // Blocks up to `timeout` for device events (XID, ECC) and returns those that arrived, oldest
  // first; empty on timeout. Backends without events return at once.
  virtual std::vector<GpuEvent> WaitEvents(std::chrono::milliseconds timeout) {
    (void)timeout;
    return {};
  }

  // Re-initialises the source (NVML: shutdown + init, device handles looked up again by UUID) so
  // that a GPU which came back after a reset is read again. Default: nothing to do.
  virtual Status Reinitialize() { return Status::Ok(); }
};

struct BackendOptions {
  // NVML library to load; empty = nvml::DefaultLibraryPath() ($FLYT_NVML_LIBRARY or
  // libnvidia-ml.so.1).
  std::string nvml_library;
  // nvidia-smi program; empty = "nvidia-smi" on PATH.
  std::string nvidia_smi;
  bool allow_nvml = true;
  bool allow_nvidia_smi = true;
  // Read process name, user and container from /proc rooted here.
  std::string proc_root = "/proc";
  std::chrono::milliseconds nvidia_smi_timeout{10000};
};

// Always returns a backend: when neither NVML nor nvidia-smi is usable, one whose snapshots are
// empty with `reason` naming what was tried and why each failed.
std::unique_ptr<Backend> OpenBackend(const BackendOptions& options);

// A backend that has no GPUs, for machines without a driver; every snapshot carries `reason`.
std::unique_ptr<Backend> MakeEmptyBackend(std::string reason);

}  // namespace flyt::gpu
