#include "gpu/backend.h"

#include "common/subprocess.h"
#include "gpu/nvml_backend.h"
#include "gpu/smi_backend.h"

namespace flyt::gpu {
namespace {

class EmptyBackend final : public Backend {
 public:
  explicit EmptyBackend(std::string reason) : reason_(std::move(reason)) {}
  Source source() const override { return Source::kNone; }
  Result<GpuSnapshot> Snapshot() override {
    GpuSnapshot snap;
    snap.taken_at = std::chrono::system_clock::now();
    snap.source = Source::kNone;
    snap.reason = reason_;
    return snap;
  }

 private:
  std::string reason_;
};

}  // namespace

std::unique_ptr<Backend> MakeEmptyBackend(std::string reason) {
  return std::make_unique<EmptyBackend>(std::move(reason));
}

std::unique_ptr<Backend> OpenBackend(const BackendOptions& options) {
  std::string why;
  if (options.allow_nvml) {
    auto nvml = OpenNvmlBackend({options.nvml_library, options.proc_root});
    if (nvml.ok()) return std::move(nvml).value();
    why = "NVML unavailable (" + nvml.status().message() + ")";
  } else {
    why = "NVML disabled";
  }
  if (options.allow_nvidia_smi) {
    std::string program = options.nvidia_smi.empty() ? "nvidia-smi" : options.nvidia_smi;
    if (FindOnPath(program).empty()) {
      why += "; nvidia-smi not found on PATH";
    } else {
      SmiOptions smi;
      smi.program = program;
      smi.timeout = options.nvidia_smi_timeout;
      smi.proc_root = options.proc_root;
      auto backend = MakeSmiBackend(smi);
      auto probe = backend->Snapshot();
      if (probe.ok()) return backend;
      why += "; nvidia-smi failed (" + probe.status().message() + ")";
    }
  } else {
    why += "; nvidia-smi disabled";
  }
  return MakeEmptyBackend("no GPUs readable: " + why);
}

}  // namespace flyt::gpu
