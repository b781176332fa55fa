#include "sched/estimate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>

#include "common/json_fields.h"
#include "common/strings.h"

namespace flyt::sched {
namespace {

using nlohmann::json;

constexpr double kMib = 1024.0 * 1024.0;
constexpr double kMibPerGib = 1024.0;
// vLLM's documented default gpu_memory_utilization; SGLang's mem_fraction_static when it does not
// know the GPU's size.
constexpr double kVllmDefaultUtilization = 0.9;
constexpr double kSglangFallbackFraction = 0.88;

// What SGLang keeps outside mem_fraction_static for activations and CUDA graphs when it picks the
// fraction itself (server_args.py, by GPU size in MiB; tp·pp ranks capture more graphs).
double SglangReservedMib(double gpu_memory_mib, int parallel) {
  if (gpu_memory_mib < 35 * kMibPerGib)
    return (2.8 + parallel / 10.0) * kMibPerGib;  // A10, L40, 4090
  if (gpu_memory_mib < 90 * kMibPerGib) return (9.5 + parallel / 2.0) * kMibPerGib;  // H100, A100
  if (gpu_memory_mib < 160 * kMibPerGib) return (12 + parallel / 2.0) * kMibPerGib;  // H20, H200
  return 32 * kMibPerGib;                                                            // B200, MI300
}

// The smallest GPU on which SGLang's default fraction leaves `static_mib` (weights + KV for one
// sequence): GPU − reserved(GPU) ≥ static_mib, tier by tier. The 0.9995 covers the fraction's
// rounding to 3 places.
double SglangSmallestGpuMib(double static_mib, int parallel) {
  const double bounds[] = {0, 35 * kMibPerGib, 90 * kMibPerGib, 160 * kMibPerGib, 1e300};
  for (size_t i = 0; i + 1 < std::size(bounds); ++i) {
    const double lo = bounds[i], hi = bounds[i + 1];
    const double gpu = std::max(lo, (static_mib + SglangReservedMib(lo, parallel)) / 0.9995);
    if (gpu < hi) return gpu;
  }
  return bounds[std::size(bounds) - 1];
}

std::string MibText(double mib) { return std::to_string(std::llround(mib)) + " MiB"; }

std::string PercentText(double fraction) {
  const double percent = fraction * 100;
  if (std::fabs(percent - std::round(percent)) < 1e-6) {
    return std::to_string(std::llround(percent)) + "%";
  }
  std::string text = std::to_string(std::round(percent * 10) / 10);
  return text.substr(0, text.find('.') + 2) + "%";
}

// Every spelling the autotuner's tasks use, normalised (lower case, '_' → '-'), to one name.
const std::map<std::string, std::string>& Canonical() {
  static const std::map<std::string, std::string> kNames = [] {
    std::map<std::string, std::string> m;
    const std::pair<const char*, std::vector<const char*>> groups[] = {
        {"tp", {"tensor-parallel-size", "tp-size", "tp"}},
        {"pp", {"pipeline-parallel-size", "pp-size", "pp"}},
        {"dp", {"data-parallel-size", "dp-size", "dp"}},
        {"cp", {"context-parallel-size", "cp-size", "cp"}},
        {"dcp", {"decode-context-parallel-size", "dcp-size", "dcp"}},
        {"dtype", {"dtype"}},
        {"kv-cache-dtype", {"kv-cache-dtype"}},
        {"max-model-len", {"max-model-len", "context-length"}},
        {"concurrency", {"concurrency", "max-num-seqs", "max-running-requests"}},
        {"gpu-memory-utilization", {"gpu-memory-utilization"}},
        {"mem-fraction-static", {"mem-fraction-static"}},
    };
    for (const auto& [canonical, spellings] : groups) {
      for (const char* s : spellings) m[s] = canonical;
    }
    return m;
  }();
  return kNames;
}

std::string Normalise(std::string_view key) {
  std::string k = ToLower(key);
  std::replace(k.begin(), k.end(), '_', '-');
  return k;
}

struct Dimension {
  std::string section;    // "parameters" or "parallel_config"
  std::string key;        // as written in the task
  std::string canonical;  // empty for parameters that do not change the estimate
  std::vector<json> values;
};

Status AddDimensions(const JsonFields& task, const char* where, std::vector<Dimension>& dims) {
  const json* found = nullptr;
  FLYT_RETURN_IF_ERROR(task.OptionalObject(where, found));
  if (found == nullptr) return Status::Ok();
  const json& obj = *found;
  for (const auto& [key, value] : obj.items()) {
    Dimension d;
    d.section = where;
    d.key = key;
    auto it = Canonical().find(Normalise(key));
    if (it != Canonical().end()) d.canonical = it->second;
    if (value.is_array()) {
      if (value.empty())
        return InvalidArgument(std::string(where) + "." + key + " is an empty list");
      d.values.assign(value.begin(), value.end());
    } else {
      d.values.push_back(value);
    }
    for (const Dimension& other : dims) {
      if (!d.canonical.empty() && other.canonical == d.canonical) {
        return InvalidArgument(std::string(where) + "." + key + ": " + d.canonical +
                               " is already given as '" + other.key + "'");
      }
    }
    dims.push_back(std::move(d));
  }
  return Status::Ok();
}

// A fraction in (0, 1]: gpu-memory-utilization, mem-fraction-static.
Status Fraction(const JsonFields& f, std::string_view key, double& out) {
  const Status s = f.OptionalNumber(key, 0, 1, out);
  if (!s.ok() || !(out > 0)) return InvalidArgument(f.Name(key) + " must be a number in (0, 1]");
  return Status::Ok();
}

// The scheduling section is the cluster manager's (Cluster::Submit reads it, with these limits);
// the estimator checks it too so that `flytctl estimate` refuses what a submission would.
Status CheckScheduling(const JsonFields& task) {
  FLYT_ASSIGN_OR_RETURN(const JsonFields s, task.OptionalFields("scheduling"));
  FLYT_RETURN_IF_ERROR(s.Only({"priority", "timeout_seconds", "gpu_model", "policy",
                               "lease_ttl_seconds", "max_utilization", "owner"}));
  constexpr int64_t kMaxTtlSeconds = 30 * 86400;
  int64_t priority = 0, timeout = 1, lease_ttl = 1, max_util = 0;
  std::string text;
  FLYT_RETURN_IF_ERROR(s.OptionalInt<int64_t>("priority", -1000, 1000, priority));
  FLYT_RETURN_IF_ERROR(s.OptionalInt<int64_t>("timeout_seconds", 1, kMaxTtlSeconds, timeout));
  FLYT_RETURN_IF_ERROR(s.OptionalInt<int64_t>("lease_ttl_seconds", 1, kMaxTtlSeconds, lease_ttl));
  FLYT_RETURN_IF_ERROR(s.OptionalInt<int64_t>("max_utilization", 0, 100, max_util));
  FLYT_RETURN_IF_ERROR(s.OptionalString("gpu_model", 64, text));
  FLYT_RETURN_IF_ERROR(s.OptionalString("owner", 128, text));
  // An empty policy leaves the default, as the manager reads it.
  if (!(s.Has("policy") && s.OptionalString("policy", 0, text).ok())) {
    FLYT_RETURN_IF_ERROR(s.OptionalEnum("policy", {"score", "binpack", "spread"}, text));
  }
  return Status::Ok();
}

std::string Describe(const json& params) {
  std::string out;
  for (const auto& [k, v] : params.items()) out += (out.empty() ? "" : " ") + k + "=" + v.dump();
  return out.empty() ? "defaults" : out;
}

}  // namespace

std::optional<double> BytesPerElement(std::string_view dtype, std::string_view model_dtype) {
  std::string d = ToLower(dtype);
  if (d == "auto" || d.empty()) d = ToLower(model_dtype);
  if (d == "float32" || d == "fp32" || d == "float") return 4.0;
  if (d == "bfloat16" || d == "bf16" || d == "float16" || d == "fp16" || d == "half") return 2.0;
  if (d == "fp8" || d == "fp8_e4m3" || d == "fp8_e5m2" || d == "int8" || d == "float8_e4m3fn") {
    return 1.0;
  }
  if (d == "int4" || d == "awq" || d == "gptq" || d == "fp4" || d == "nvfp4") return 0.5;
  return std::nullopt;
}

Result<TaskEstimate> EstimateTask(const json& task, const EstimateOptions& options) {
  if (!task.is_object()) return InvalidArgument("the task must be a JSON object");
  const JsonFields t(task);
  TaskEstimate out;
  out.gpu_memory_mib = options.gpu_memory_mib > 0 ? options.gpu_memory_mib : 0;
  FLYT_RETURN_IF_ERROR(t.OptionalString("task_name", 1024, out.task_name));
  // A model that is not an object reads as one without id_or_path, which is what is missing.
  const json no_model;
  const JsonFields model_fields(task.contains("model") ? task["model"] : no_model, "model.");
  FLYT_ASSIGN_OR_RETURN(out.model, model_fields.RequiredString("id_or_path", 4096));
  std::string runtime = "vllm";
  FLYT_RETURN_IF_ERROR(t.OptionalString("base_runtime", 64, runtime));
  out.runtime = ToLower(runtime);
  if (out.runtime != "vllm" && out.runtime != "sglang") {
    return InvalidArgument("base_runtime '" + out.runtime + "' is not supported (vllm or sglang)");
  }
  std::optional<double> explicit_mib;
  if (t.Has("min_free_memory_mb")) {
    double mib = 0;
    const Status s = t.OptionalNumber("min_free_memory_mb", 0, 1e8, mib);
    if (!s.ok() || !(mib > 0)) {
      return InvalidArgument("min_free_memory_mb must be a positive number of MiB (at most 1e8)");
    }
    explicit_mib = mib;
  }
  FLYT_RETURN_IF_ERROR(CheckScheduling(t));
  std::string config_json;
  FLYT_RETURN_IF_ERROR(model_fields.OptionalString("config_json", 4096, config_json));

  // The model: a config.json given with the task, else the catalog, else only an explicit size.
  std::optional<ModelSpec> model;
  if (model_fields.Has("config")) {
    const std::string name = out.model.substr(out.model.find_last_of('/') + 1);
    FLYT_ASSIGN_OR_RETURN(ModelSpec spec,
                          ModelFromHfConfig(task["model"]["config"], name, "model.config"));
    model = spec;
    out.model_source = "config.json: inline";
  } else if (model_fields.Has("config_json") && !options.allow_local_files) {
    return InvalidArgument(
        "model.config_json names a file on the manager's machine, which it does not read; give "
        "the config.json's content inline as model.config");
  } else if (model_fields.Has("config_json")) {
    FLYT_ASSIGN_OR_RETURN(ModelSpec spec, LoadHfConfig(config_json));
    model = spec;
    out.model_source = "config.json: " + config_json;
  } else if (const ModelSpec* found = FindInCatalog(out.model)) {
    model = *found;
    out.model_source = "catalog: " + found->name;
  } else if (options.allow_local_files && std::filesystem::exists(out.model + "/config.json")) {
    FLYT_ASSIGN_OR_RETURN(ModelSpec loaded, LoadHfConfig(out.model));
    model = loaded;
    out.model_source = "config.json: " + out.model + "/config.json";
  } else if (explicit_mib) {
    out.model_source = "explicit";
  } else {
    return InvalidArgument("model '" + out.model +
                           "' is not in flyt's catalog and no config.json was given "
                           "(model.config_json); give min_free_memory_mb to run it anyway");
  }

  std::vector<Dimension> dims;
  FLYT_RETURN_IF_ERROR(AddDimensions(t, "parameters", dims));
  FLYT_RETURN_IF_ERROR(AddDimensions(t, "parallel_config", dims));
  size_t total = 1;
  for (const Dimension& d : dims) {
    total *= d.values.size();
    if (total > options.max_experiments) {
      return InvalidArgument("the search space has more than " +
                             std::to_string(options.max_experiments) + " experiments");
    }
  }

  for (const Dimension& d : dims) {
    if (d.values.size() == 1) out.shared_parameters[d.key] = d.values.front();
  }
  for (size_t n = 0; n < total; ++n) {
    Experiment e;
    e.index = n;
    e.parameters = json::object();
    size_t rest = n;
    // Each canonical parameter of this experiment: its dimension (where it was written) and value.
    std::map<std::string, std::pair<const Dimension*, const json*>> canon;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) {  // last dimension varies fastest
      const json& v = it->values[rest % it->values.size()];
      rest /= it->values.size();
      if (options.experiments_hold_shared || it->values.size() > 1) e.parameters[it->key] = v;
      if (!it->canonical.empty()) canon[it->canonical] = {&*it, &v};
    }
    const std::string where =
        "experiment " + std::to_string(n) + " (" + Describe(e.parameters) + ")";
    // Reads a canonical parameter with JsonFields, named "<where>: <section>.<key as written>";
    // an absent one leaves the caller's default.
    auto read = [&](const char* canonical, const auto& get) -> Status {
      auto it = canon.find(canonical);
      if (it == canon.end()) return Status::Ok();
      const Dimension& d = *it->second.first;
      const json one = {{d.key, *it->second.second}};
      return get(JsonFields(one, where + ": " + d.section + "."), std::string_view(d.key));
    };
    auto size_of = [&](const char* key, int& out_value) {
      return read(key, [&](const JsonFields& f, std::string_view k) {
        return f.OptionalInt<int>(k, 1, 4096, out_value);
      });
    };
    FLYT_RETURN_IF_ERROR(size_of("tp", e.tp));
    FLYT_RETURN_IF_ERROR(size_of("pp", e.pp));
    FLYT_RETURN_IF_ERROR(size_of("dp", e.dp));
    FLYT_RETURN_IF_ERROR(size_of("cp", e.cp));
    FLYT_RETURN_IF_ERROR(size_of("dcp", e.dcp));
    if (e.tp % e.dcp != 0) {
      return InvalidArgument(where + ": decode context parallel (" + std::to_string(e.dcp) +
                             ") must divide tp (" + std::to_string(e.tp) + ")");
    }
    e.gpus = e.tp * e.pp * e.dp * e.cp;
    // Checked whether or not there is a model to estimate with: a wrong type is never ignored.
    std::string dtype = "auto", kv_dtype = "auto";
    FLYT_RETURN_IF_ERROR(read("dtype", [&](const JsonFields& f, std::string_view k) {
      return f.OptionalString(k, 64, dtype);
    }));
    FLYT_RETURN_IF_ERROR(read("kv-cache-dtype", [&](const JsonFields& f, std::string_view k) {
      return f.OptionalString(k, 64, kv_dtype);
    }));
    std::optional<int> max_model_len;
    FLYT_RETURN_IF_ERROR(read("max-model-len", [&](const JsonFields& f, std::string_view k) {
      if (!f.Has(k)) return Status::Ok();
      int v = 0;
      FLYT_RETURN_IF_ERROR(f.OptionalInt<int>(k, 1, 1 << 24, v));
      max_model_len = v;
      return Status::Ok();
    }));
    std::optional<int64_t> concurrency;
    FLYT_RETURN_IF_ERROR(read("concurrency", [&](const JsonFields& f, std::string_view k) {
      if (!f.Has(k)) return Status::Ok();
      int64_t v = 0;
      FLYT_RETURN_IF_ERROR(f.OptionalInt<int64_t>(k, 1, 100000, v));
      concurrency = v;
      return Status::Ok();
    }));
    auto fraction = [&](const char* key) -> Status {
      return read(key, [&](const JsonFields& f, std::string_view k) {
        if (!f.Has(k)) return Status::Ok();
        FLYT_RETURN_IF_ERROR(Fraction(f, k, e.free_fraction));
        e.fraction_given = true;
        return Status::Ok();
      });
    };

    e.runtime = out.runtime;
    if (out.runtime == "vllm") {
      e.free_fraction = kVllmDefaultUtilization;
      FLYT_RETURN_IF_ERROR(fraction("gpu-memory-utilization"));
      e.engine_rule =
          "vllm: " + std::to_string(static_cast<int>(std::lround(e.free_fraction * 100))) +
          "% of each GPU's memory free (gpu_memory_utilization)";
    } else {
      FLYT_RETURN_IF_ERROR(fraction("mem-fraction-static"));
      if (!e.fraction_given) {
        // SGLang's own default depends on the GPU; without one it falls back to 0.88 as well.
        e.free_fraction = options.gpu_memory_mib > 0
                              ? SglangDefaultFraction(options.gpu_memory_mib, e.tp * e.pp)
                              : kSglangFallbackFraction;
      }
      e.engine_rule = "sglang: every rank's free memory within 10% of the others";
    }

    if (model) {
      const ModelSpec& m = *model;
      if (m.attention_heads % e.tp != 0) {
        return InvalidArgument(where + ": tp=" + std::to_string(e.tp) + " does not divide the " +
                               std::to_string(m.attention_heads) + " attention heads of " + m.name);
      }
      if (e.pp > m.layers) {
        return InvalidArgument(where + ": pp=" + std::to_string(e.pp) + " exceeds the " +
                               std::to_string(m.layers) + " layers of " + m.name);
      }
      auto weight_bytes = BytesPerElement(dtype, m.dtype);
      if (!weight_bytes) return InvalidArgument(where + ": unknown dtype '" + dtype + "'");
      auto kv_bytes = BytesPerElement(kv_dtype, dtype == "auto" ? m.dtype : dtype);
      if (!kv_bytes) return InvalidArgument(where + ": unknown kv-cache-dtype '" + kv_dtype + "'");
      e.max_model_len = max_model_len.value_or(m.max_position_embeddings);
      if (concurrency) e.concurrency = *concurrency;
      MemoryEstimate mem;
      mem.weights_mib = m.parameters * *weight_bytes / (e.tp * e.pp) / kMib;
      const double layers_per_rank = std::ceil(static_cast<double>(m.layers) / e.pp);
      // Fewer KV heads than tp: each rank still holds one whole head (replicated).
      const double kv_heads_per_rank = std::max(1.0, static_cast<double>(m.kv_heads) / e.tp);
      mem.kv_bytes_per_token =
          2 * layers_per_rank * kv_heads_per_rank * m.head_dim * *kv_bytes / (e.cp * e.dcp);
      mem.kv_cache_mib = mem.kv_bytes_per_token * e.max_model_len / kMib;
      mem.reserve_mib = out.runtime == "vllm" ? options.reserve_mib : 0;
      mem.total_mib = mem.weights_mib + mem.kv_cache_mib + mem.reserve_mib;
      e.memory = mem;
      e.min_free_memory_mib = out.runtime == "sglang" && !e.fraction_given
                                  ? SglangSmallestGpuMib(mem.total_mib, e.tp * e.pp)
                                  : mem.total_mib / e.free_fraction;
      e.capacity = CapacityOn(e, options.gpu_memory_mib);
    }
    if (explicit_mib) e.min_free_memory_mib = *explicit_mib;
    out.experiments.push_back(std::move(e));
  }
  return out;
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kFits:
      return "fits";
    case Verdict::kConcurrencyCapped:
      return "capped";
    case Verdict::kCannotRun:
      return "cannot_run";
  }
  return "fits";
}

double SglangDefaultFraction(double gpu_memory_mib, int tp_times_pp) {
  if (!(gpu_memory_mib > 0)) return kSglangFallbackFraction;
  const double f =
      (gpu_memory_mib - SglangReservedMib(gpu_memory_mib, tp_times_pp)) / gpu_memory_mib;
  return std::max(0.0, std::round(f * 1000) / 1000);
}

std::optional<KvCapacity> CapacityOn(const Experiment& e, double gpu_memory_mib) {
  if (!e.memory || !(gpu_memory_mib > 0) || !(e.memory->kv_bytes_per_token > 0) ||
      e.max_model_len <= 0) {
    return std::nullopt;
  }
  const MemoryEstimate& m = *e.memory;
  KvCapacity c;
  c.gpu_memory_mib = gpu_memory_mib;
  c.fraction = e.runtime == "sglang" && !e.fraction_given
                   ? SglangDefaultFraction(gpu_memory_mib, e.tp * e.pp)
                   : e.free_fraction;
  c.kv_pool_mib = c.fraction * gpu_memory_mib - m.weights_mib - m.reserve_mib;
  c.kv_tokens = c.kv_pool_mib > 0
                    ? static_cast<int64_t>(std::floor(c.kv_pool_mib * kMib / m.kv_bytes_per_token))
                    : 0;
  c.max_concurrency = c.kv_tokens / e.max_model_len;
  const std::string share = PercentText(c.fraction) + " of a " + MibText(gpu_memory_mib) + " GPU";
  if (c.kv_pool_mib <= 0) {
    c.verdict = Verdict::kCannotRun;
    c.message = "cannot run: weights" + std::string(m.reserve_mib > 0 ? " + reserve (" : " (") +
                MibText(m.weights_mib + m.reserve_mib) + ") exceed " + share;
  } else if (c.max_concurrency < 1) {
    c.verdict = Verdict::kCannotRun;
    c.message = "cannot run: " + share + " leaves KV cache for " + std::to_string(c.kv_tokens) +
                " tokens, less than one " + std::to_string(e.max_model_len) + "-token sequence";
  } else if (e.concurrency && *e.concurrency > c.max_concurrency) {
    c.verdict = Verdict::kConcurrencyCapped;
    c.message = "will run, concurrency capped at " + std::to_string(c.max_concurrency);
  } else {
    c.verdict = Verdict::kFits;
    c.message = "fits";
  }
  return c;
}

nlohmann::json ToJson(const TaskEstimate& t) {
  json experiments = json::array();
  for (const Experiment& e : t.experiments) {
    json mem = nullptr;
    if (e.memory) {
      mem = {{"weights_mib", std::round(e.memory->weights_mib)},
             {"kv_cache_mib", std::round(e.memory->kv_cache_mib)},
             {"reserve_mib", std::round(e.memory->reserve_mib)},
             {"total_mib", std::round(e.memory->total_mib)},
             {"kv_bytes_per_token", e.memory->kv_bytes_per_token}};
    }
    json capacity = nullptr;
    if (e.capacity) {
      const KvCapacity& c = *e.capacity;
      capacity = {{"gpu_memory_mib", std::round(c.gpu_memory_mib)},
                  {"fraction", c.fraction},
                  {"kv_pool_mib", std::round(c.kv_pool_mib)},
                  {"kv_tokens", c.kv_tokens},
                  {"max_concurrency", c.max_concurrency},
                  {"verdict", VerdictName(c.verdict)},
                  {"message", c.message}};
    }
    experiments.push_back({{"index", e.index},
                           {"parameters", e.parameters},
                           {"tp", e.tp},
                           {"pp", e.pp},
                           {"dp", e.dp},
                           {"cp", e.cp},
                           {"dcp", e.dcp},
                           {"gpus", e.gpus},
                           {"memory_per_gpu", mem},
                           {"min_free_memory_mb", std::round(e.min_free_memory_mib)},
                           {"engine_rule", e.engine_rule},
                           {"free_fraction", e.free_fraction},
                           {"fraction_given", e.fraction_given},
                           {"max_model_len", e.max_model_len > 0 ? json(e.max_model_len) : json()},
                           {"concurrency", e.concurrency ? json(*e.concurrency) : json()},
                           {"capacity", capacity}});
  }
  return {{"task_name", t.task_name},           {"model", t.model},
          {"model_source", t.model_source},     {"runtime", t.runtime},
          {"gpu_memory_mib", t.gpu_memory_mib}, {"experiments", experiments}};
}

}  // namespace flyt::sched
