// The commands that read only files on this machine: `flytctl estimate` (a task's GPU needs, a
// dry run), `sim check` (scenario files) and `cuda inspect` (the kernels of a CUDA binary).
#include <cstdio>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/strings.h"
#include "ctl/commands.h"
#include "ctl/cuda_inspect.h"
#include "ctl/render.h"
#include "gpu/json.h"
#include "sched/estimate.h"
#include "sim/scenario.h"

namespace flyt::ctl {

int RunEstimate(const std::string& file, bool json, double reserve_mib) {
  auto text = ReadFile(file, 16 << 20);
  if (!text.ok()) return Fail(text.status());
  nlohmann::json task = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (task.is_discarded()) return Fail(file + " is not valid JSON", kExitUsage);
  sched::EstimateOptions options;
  options.reserve_mib = reserve_mib;
  auto estimate = sched::EstimateTask(task, options);
  if (!estimate.ok()) return Fail(file + ": " + estimate.status().message());
  if (json) {
    std::printf("%s\n", gpu::DumpJson(sched::ToJson(*estimate), 2).c_str());
  } else {
    std::fputs(RenderEstimate(*estimate).c_str(), stdout);
  }
  return kExitOk;
}

int RunSimCheck(const std::vector<std::string>& files) {
  int failures = 0;
  for (const std::string& file : files) {
    auto s = sim::LoadScenario(file);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().message().c_str());
      ++failures;
      continue;
    }
    std::printf("%s: ok — \"%s\": %zu GPU(s), %zu process(es), %zu fault(s)\n", file.c_str(),
                s->name.c_str(), s->gpus.size(), s->processes.size(), s->faults.size());
  }
  return failures == 0 ? kExitOk : kExitError;
}

int RunCudaInspect(const std::string& file, bool json) {
  auto inspection = InspectCudaFile(file);
  if (!inspection.ok()) return Fail(inspection.status().message());
  const std::string text =
      json ? CudaInspectionToJson(*inspection).dump(2) + "\n" : RenderCudaInspection(*inspection);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

}  // namespace flyt::ctl
