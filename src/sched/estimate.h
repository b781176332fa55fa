// Requirement estimation for the LLM autotuner's tasks: every combination of a task's search
// space is one experiment, with its own GPU count and memory per GPU, computed from the model's
// dimensions (not guessed from its name).
//
// The requirement is the engine's own start-up condition. Neither vLLM nor SGLang reserves KV
// cache for max-num-seqs × max-model-len: each gives the KV cache whatever its fraction of the
// GPU leaves after the weights (and, for vLLM, the profiled activations and CUDA graphs), admits
// sequences while cache blocks are free, and refuses to start only when the cache cannot hold
// ONE sequence of max-model-len tokens. So, per GPU:
//
//   GPUs            = tp × pp × dp × cp   (decode context parallel reuses the TP ranks: no GPUs)
//   weights         = parameters × bytes(dtype) ÷ (tp · pp)
//   KV per token    = 2 (K and V) · ⌈layers / pp⌉ · max(1, kv_heads / tp) · head_dim
//                     · bytes(kv dtype) ÷ (cp · dcp)      (GQA: KV heads, not attention heads)
//   KV, one sequence = KV per token × max_model_len
//   vLLM:   weights + reserve + KV(one sequence) ≤ gpu_memory_utilization (0.9) × GPU
//   SGLang: weights + KV(one sequence) ≤ mem_fraction_static × GPU (activations and CUDA graphs
//           live outside the fraction; its default fraction is (GPU − reserved) ÷ GPU with
//           reserved by GPU size and tp·pp, as SGLang's server_args computes it)
//   smallest GPU the engine starts on = (weights + reserve + KV one sequence) ÷ fraction
//
// and beside it, on a given GPU: the KV capacity in tokens, (fraction × GPU − weights − reserve)
// ÷ KV per token, and the concurrency the engine reaches, ⌊tokens ÷ max_model_len⌋ per engine
// replica (max-num-seqs applies per data-parallel replica, as each has its own cache). An
// experiment asking for more (max-num-seqs) runs with its concurrency capped; only one that
// cannot hold a single max-length sequence cannot run. A model neither in the catalog nor given
// as config.json, without an explicit min_free_memory_mb, is refused (fail closed).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/model.h"

namespace flyt::sched {

// An H100 80GB HBM3's total memory as NVML reports it: the GPU a capacity is shown for by default.
inline constexpr double kH100MemoryMib = 81559;

struct EstimateOptions {
  // Per GPU, inside vLLM's gpu_memory_utilization: non-torch memory (CUDA context, cuBLAS, NCCL),
  // the profiled activation peak and CUDA graphs. SGLang keeps these outside mem_fraction_static.
  double reserve_mib = 1536;
  // The GPU whose KV capacity and reachable concurrency each experiment reports (total MiB, as
  // NVML reports it). 0: report none.
  double gpu_memory_mib = kH100MemoryMib;
  size_t max_experiments = 10000;
  // Whether model.config_json and a model directory may be read from this machine's files. The
  // cluster manager turns it off: a remote caller must not make it read its files; such a caller
  // gives the config.json inline as model.config.
  bool allow_local_files = true;
  // Whether each experiment's parameters also hold the task's single-valued ones. The cluster
  // manager turns it off: those are the task's shared parts (TaskEstimate::shared_parameters),
  // kept once rather than copied into every experiment.
  bool experiments_hold_shared = true;
};

struct MemoryEstimate {
  double weights_mib = 0;
  double kv_cache_mib = 0;  // KV for ONE max_model_len sequence: what the engine checks at start
  double reserve_mib = 0;   // inside the engine's fraction (vLLM); 0 for SGLang
  double total_mib = 0;     // weights + kv_cache + reserve: must fit in the fraction, per GPU
  double kv_bytes_per_token = 0;  // per GPU
};

enum class Verdict {
  kFits,               // holds the requested concurrency (or none was asked for)
  kConcurrencyCapped,  // starts, but holds fewer max-length sequences than max-num-seqs
  kCannotRun,          // the KV cache cannot hold one max-length sequence: the engine refuses
};

// "fits", "capped", "cannot_run": the JSON spelling.
const char* VerdictName(Verdict v);

// What the engine does with one experiment on a GPU of a given size.
struct KvCapacity {
  double gpu_memory_mib = 0;  // the GPU's total
  double fraction = 0;        // the engine's fraction on this GPU
  double kv_pool_mib = 0;  // fraction × GPU − weights − reserve; negative: not even the weights
  int64_t kv_tokens = 0;   // ⌊pool ÷ KV per token⌋, 0 when the pool is negative
  int64_t max_concurrency = 0;  // ⌊kv_tokens ÷ max_model_len⌋, per engine replica
  Verdict verdict = Verdict::kFits;
  std::string message;  // "fits", "will run, concurrency capped at 55", "cannot run: ..."
};

struct Experiment {
  size_t index = 0;
  nlohmann::json parameters;  // this combination: {"tensor-parallel-size": 2, ...}
  std::string runtime;        // vllm | sglang
  int tp = 1, pp = 1, dp = 1, cp = 1, dcp = 1;
  int gpus = 1;
  std::optional<MemoryEstimate>
      memory;  // absent when the task gave min_free_memory_mb for an unknown model
  // What each GPU must have free: the smallest GPU the engine starts on, (weights + reserve + KV
  // for one sequence) ÷ fraction, or the task's min_free_memory_mb. Placing on GPUs with this much
  // free (and, for vLLM, free_fraction of their total free) never starts an engine that refuses.
  double min_free_memory_mib = 0;
  std::string engine_rule;             // "vllm: 90% of each GPU's memory free", ...
  double free_fraction = 0;            // vLLM: gpu_memory_utilization; SGLang: mem_fraction_static
  bool fraction_given = false;         // false: the engine's default (SGLang's depends on the GPU)
  int max_model_len = 0;               // 0 when there is no memory estimate
  std::optional<int64_t> concurrency;  // requested max-num-seqs / max-running-requests
  std::optional<KvCapacity> capacity;  // on EstimateOptions::gpu_memory_mib
};

struct TaskEstimate {
  std::string task_name;
  std::string model;          // as given
  std::string model_source;   // "catalog: Llama-3.1-8B", "config.json: <path>", "explicit"
  std::string runtime;        // vllm | sglang
  double gpu_memory_mib = 0;  // the GPU the experiments' capacities are for (0: none)
  std::vector<Experiment> experiments;
  // The parameters with one value (parameters and parallel_config alike, keyed as written): the
  // same in every experiment.
  nlohmann::json shared_parameters = nlohmann::json::object();
};

// `task` is the autotuner's task JSON. Errors name the field and the experiment.
Result<TaskEstimate> EstimateTask(const nlohmann::json& task, const EstimateOptions& options = {});

// The KV capacity, reachable concurrency and verdict of `e` on a GPU with `gpu_memory_mib` total
// (a placement's actual GPU, say). nullopt without a memory estimate or a GPU size.
std::optional<KvCapacity> CapacityOn(const Experiment& e, double gpu_memory_mib);

// SGLang's default mem_fraction_static on a GPU: (GPU − reserved) ÷ GPU, rounded to 3 places,
// reserved by the GPU's size and tp × pp (sglang/srt/server_args.py).
double SglangDefaultFraction(double gpu_memory_mib, int tp_times_pp);

nlohmann::json ToJson(const TaskEstimate& estimate);

// Bytes per element for a dtype name ("bfloat16", "fp8", "int4", "auto" → the model's own).
std::optional<double> BytesPerElement(std::string_view dtype, std::string_view model_dtype);

}  // namespace flyt::sched
