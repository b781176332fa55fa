// Requirement estimation for the LLM autotuner's tasks: every combination of a task's search
// space is one experiment, with its own GPU count and memory per GPU, computed from the model's
// dimensions (not guessed from its name).
//
//   GPUs   = tp × pp × dp × cp          (decode context parallel reuses the TP ranks: no GPUs)
//   weights per GPU = parameters × bytes(dtype) ÷ (tp · pp)
//   KV per GPU      = 2 · ⌈layers / pp⌉ · max(1, kv_heads / tp) · head_dim · bytes(kv dtype)
//                     × tokens ÷ (cp · dcp),  tokens = max_model_len × concurrency (default 1:
//                     one sequence of the full length, what vLLM checks at start-up)
//   + a runtime reserve (CUDA context, activations, graphs)
// and the engine's own rule on top: vLLM wants gpu_memory_utilization × total free on each GPU;
// SGLang wants every rank's free memory within 10% of the others. A model neither in the catalog
// nor given as config.json, without an explicit min_free_memory_mb, is refused (fail closed).
// Pure functions; thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/model.h"

namespace flyt::sched {

struct EstimateOptions {
  double reserve_mib = 1536;  // per GPU: CUDA context (~500 MiB), activations, CUDA graphs
  size_t max_experiments = 10000;
  // Whether model.config_json and a model directory may be read from this machine's files. The
  // cluster manager turns it off: a remote caller must not make it read its files; such a caller
  // gives the config.json inline as model.config.
  bool allow_local_files = true;
};

struct MemoryEstimate {
  double weights_mib = 0;
  double kv_cache_mib = 0;
  double reserve_mib = 0;
  double total_mib = 0;  // per GPU
};

struct Experiment {
  size_t index = 0;
  nlohmann::json parameters;  // this combination: {"tensor-parallel-size": 2, ...}
  int tp = 1, pp = 1, dp = 1, cp = 1, dcp = 1;
  int gpus = 1;
  std::optional<MemoryEstimate>
      memory;  // absent when the task gave min_free_memory_mb for an unknown model
  double min_free_memory_mib = 0;  // what each GPU must have free
  std::string engine_rule;         // "vllm: 90% of each GPU's memory free", ...
  double free_fraction = 0;        // vLLM: gpu_memory_utilization; SGLang: mem_fraction_static
};

struct TaskEstimate {
  std::string task_name;
  std::string model;         // as given
  std::string model_source;  // "catalog: Llama-3.1-8B", "config.json: <path>", "explicit"
  std::string runtime;       // vllm | sglang
  std::vector<Experiment> experiments;
};

// `task` is the autotuner's task JSON. Errors name the field and the experiment.
Result<TaskEstimate> EstimateTask(const nlohmann::json& task, const EstimateOptions& options = {});

nlohmann::json ToJson(const TaskEstimate& estimate);

// Bytes per element for a dtype name ("bfloat16", "fp8", "int4", "auto" → the model's own).
std::optional<double> BytesPerElement(std::string_view dtype, std::string_view model_dtype);

}  // namespace flyt::sched
