#include "trace/devices.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "common/strings.h"

namespace flyt::trace {
namespace {

bool AllHave(const std::vector<GpuIdentity>& gpus, std::optional<uint32_t> GpuIdentity::*field) {
  return std::all_of(gpus.begin(), gpus.end(),
                     [&](const GpuIdentity& g) { return (g.*field).has_value(); });
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The GPU (index into `gpus`) whose uuid is `entry` or starts with it, when exactly one does.
std::optional<size_t> MatchGpuUuid(const std::vector<GpuIdentity>& gpus, std::string_view entry) {
  std::optional<size_t> found;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const std::string& uuid = gpus[i].uuid;
    if (uuid == entry) return i;
    if (StartsWith(uuid, entry)) {
      if (found.has_value()) return std::nullopt;  // ambiguous prefix
      found = i;
    }
  }
  return found;
}

struct MigMatch {
  size_t gpu;
  std::string mig_uuid;
};

std::optional<MigMatch> MatchMigUuid(const std::vector<GpuIdentity>& gpus,
                                     std::string_view entry) {
  std::optional<MigMatch> found;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (const std::string& mig : gpus[i].mig_uuids) {
      if (mig == entry) return MigMatch{i, mig};
      if (StartsWith(mig, entry)) {
        if (found.has_value()) return std::nullopt;
        found = MigMatch{i, mig};
      }
    }
  }
  return found;
}

}  // namespace

std::vector<size_t> EnumerationOrder(const std::vector<GpuIdentity>& gpus,
                                     const std::optional<std::string>& device_order) {
  std::vector<size_t> order(gpus.size());
  std::iota(order.begin(), order.end(), 0);
  // PCI order: NVML's index.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return gpus[a].index < gpus[b].index; });
  if (device_order.has_value() && Trim(*device_order) == "PCI_BUS_ID") return order;
  // FASTEST_FIRST (CUDA's default): most cores first; multiprocessors when cores are not known
  // for every GPU; PCI order when neither is.
  std::optional<uint32_t> GpuIdentity::*key = nullptr;
  if (AllHave(gpus, &GpuIdentity::cores)) {
    key = &GpuIdentity::cores;
  } else if (AllHave(gpus, &GpuIdentity::multiprocessors)) {
    key = &GpuIdentity::multiprocessors;
  }
  if (key != nullptr) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return *(gpus[a].*key) > *(gpus[b].*key); });
  }
  return order;
}

std::vector<VisibleGpu> VisibleGpus(const CudaEnv& env, const std::vector<GpuIdentity>& gpus) {
  std::vector<size_t> order = EnumerationOrder(gpus, env.device_order);
  auto make = [&](size_t gpu, std::string mig) {
    return VisibleGpu{gpus[gpu].uuid, std::move(mig), gpus[gpu].cores};
  };
  std::vector<VisibleGpu> out;
  if (!env.visible_devices.has_value()) {
    for (size_t i : order) out.push_back(make(i, ""));
    return out;
  }
  std::set<std::string> seen;  // a repeated device is an invalid entry, as in CUDA
  for (std::string_view raw : Split(*env.visible_devices, ',')) {
    std::string_view entry = Trim(raw);
    std::optional<VisibleGpu> gpu;
    if (IsDigits(entry)) {
      std::optional<uint64_t> n = ParseUint(entry);
      if (n.has_value() && *n < order.size()) gpu = make(order[*n], "");
    } else if (StartsWith(entry, "GPU-")) {
      if (std::optional<size_t> i = MatchGpuUuid(gpus, entry); i.has_value()) gpu = make(*i, "");
    } else if (StartsWith(entry, "MIG-")) {
      if (std::optional<MigMatch> m = MatchMigUuid(gpus, entry); m.has_value()) {
        gpu = make(m->gpu, m->mig_uuid);
      }
    }
    if (!gpu.has_value()) break;
    std::string key = gpu->mig_uuid.empty() ? gpu->uuid : gpu->mig_uuid;
    if (!seen.insert(key).second) break;
    out.push_back(std::move(*gpu));
  }
  return out;
}

namespace {

// Sets one variable of `env` from "NAME=value"; nullopt value unsets. False if NAME is not ours.
bool SetVariable(CudaEnv* env, std::string_view name, std::optional<std::string> value) {
  if (name == "CUDA_VISIBLE_DEVICES") {
    env->visible_devices = std::move(value);
  } else if (name == "CUDA_DEVICE_ORDER") {
    env->device_order = std::move(value);
  } else if (name == "FLYT_SERVER") {
    env->flyt_server = std::move(value);
  } else {
    return false;
  }
  return true;
}

}  // namespace

CudaEnv ParseEnviron(std::string_view environ, bool truncated) {
  CudaEnv env;
  if (truncated) {
    const size_t last = environ.rfind('\0');
    environ = last == std::string_view::npos ? std::string_view() : environ.substr(0, last + 1);
  }
  for (std::string_view entry : Split(environ, '\0')) {
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    SetVariable(&env, entry.substr(0, eq), SanitizeUtf8(entry.substr(eq + 1)));
  }
  return env;
}

bool ApplySetenv(CudaEnv* env, std::string_view text, bool truncated) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    if (truncated) return false;  // a name cut short names nothing for sure
    return SetVariable(env, text, std::nullopt);
  }
  std::string_view value = text.substr(eq + 1);
  if (truncated) {
    size_t comma = value.rfind(',');
    if (comma == std::string_view::npos) return false;  // the one entry is partial
    value = value.substr(0, comma);
  }
  return SetVariable(env, text.substr(0, eq), SanitizeUtf8(value));
}

}  // namespace flyt::trace
