#include "sched/estimate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

namespace flyt::sched {
namespace {

using nlohmann::json;

json Task(const std::string& model, json parameters, std::string runtime = "vllm") {
  return {{"task_name", "t"},
          {"model", {{"id_or_path", model}}},
          {"base_runtime", runtime},
          {"parameters", parameters}};
}

constexpr double kMib = 1048576;

TEST(EstimateTest, Llama31_8BReferenceFigures) {
  auto e = EstimateTask(Task("meta-llama/Llama-3.1-8B-Instruct",
                             {{"tensor-parallel-size", {1, 2}}, {"max-model-len", 8192}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->model_source, "catalog: Llama-3.1-8B");
  ASSERT_EQ(e->experiments.size(), 2u);
  const Experiment& tp1 = e->experiments[0];
  EXPECT_EQ(tp1.gpus, 1);
  // 8.03e9 parameters × 2 bytes (bf16) = 15,316 MiB (14.96 GiB).
  EXPECT_NEAR(tp1.memory->weights_mib, 8.03e9 * 2 / kMib, 1e-6);
  // KV: 2 · 32 layers · 8 KV heads · 128 · 2 bytes = 128 KiB per token; one 8192-token sequence
  // = 1 GiB.
  EXPECT_DOUBLE_EQ(tp1.memory->kv_bytes_per_token, 2.0 * 32 * 8 * 128 * 2);
  EXPECT_DOUBLE_EQ(tp1.memory->kv_bytes_per_token, 131072);
  EXPECT_DOUBLE_EQ(tp1.memory->kv_cache_mib, 1024);
  EXPECT_DOUBLE_EQ(tp1.memory->reserve_mib, 1536);
  EXPECT_NEAR(tp1.memory->total_mib, 8.03e9 * 2 / kMib + 1024 + 1536, 1e-6);  // 17,876 MiB
  // The smallest GPU vLLM starts on: 17,876 MiB must fit in 90% of it → 19,862 MiB.
  EXPECT_NEAR(tp1.min_free_memory_mib, (8.03e9 * 2 / kMib + 1024 + 1536) / 0.9, 1e-6);
  EXPECT_EQ(tp1.engine_rule, "vllm: 90% of each GPU's memory free (gpu_memory_utilization)");
  EXPECT_DOUBLE_EQ(tp1.free_fraction, 0.9);  // vLLM's documented default
  EXPECT_FALSE(tp1.fraction_given);
  const Experiment& tp2 = e->experiments[1];
  EXPECT_EQ(tp2.gpus, 2);
  EXPECT_NEAR(tp2.memory->weights_mib, 8.03e9 / kMib, 1e-6);  // split over 2 ranks
  EXPECT_DOUBLE_EQ(tp2.memory->kv_cache_mib, 512);            // 4 KV heads per rank
}

// The reported problem: max-num-seqs=128 was taken as 128 × 8192 tokens of KV reserved up front
// (147,924 MiB per GPU). vLLM gives the KV cache what 90% of the GPU leaves and caps concurrency.
TEST(EstimateTest, Llama31_8BOnAn80GiBH100CapsConcurrencyInsteadOfRefusing) {
  EstimateOptions options;
  options.gpu_memory_mib = 80 * 1024;
  auto e = EstimateTask(Task("meta-llama/Llama-3.1-8B-Instruct",
                             {{"max-model-len", 8192}, {"max-num-seqs", {32, 128}}}),
                        options);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_DOUBLE_EQ(e->gpu_memory_mib, 81920);
  ASSERT_EQ(e->experiments.size(), 2u);
  const double weights_mib = 8.03e9 * 2 / kMib;              // ≈ 15.0 GiB
  const double kv_per_token = 2.0 * 32 * 8 * 128 * 2;        // 128 KiB
  const double pool_mib = 0.9 * 81920 - weights_mib - 1536;  // 56,876 MiB
  const auto tokens = static_cast<int64_t>(std::floor(pool_mib * kMib / kv_per_token));
  EXPECT_EQ(tokens, 455007);
  const int64_t reachable = tokens / 8192;
  EXPECT_EQ(reachable, 55);
  for (const Experiment& x : e->experiments) {
    // max-num-seqs no longer changes what the experiment needs.
    EXPECT_NEAR(x.min_free_memory_mib, (weights_mib + 1024 + 1536) / 0.9, 1e-6);
    EXPECT_LT(x.min_free_memory_mib, 20000);
    EXPECT_EQ(x.max_model_len, 8192);
    ASSERT_TRUE(x.capacity);
    EXPECT_DOUBLE_EQ(x.capacity->fraction, 0.9);
    EXPECT_NEAR(x.capacity->kv_pool_mib, pool_mib, 1e-6);
    EXPECT_EQ(x.capacity->kv_tokens, tokens);
    EXPECT_EQ(x.capacity->max_concurrency, reachable);
  }
  const Experiment& few = e->experiments[0];
  EXPECT_EQ(few.concurrency, 32);
  EXPECT_EQ(few.capacity->verdict, Verdict::kFits);
  EXPECT_EQ(few.capacity->message, "fits");
  const Experiment& many = e->experiments[1];
  EXPECT_EQ(many.concurrency, 128);
  EXPECT_EQ(many.capacity->verdict, Verdict::kConcurrencyCapped);
  EXPECT_EQ(many.capacity->message, "will run, concurrency capped at 55");

  const json j = ToJson(*e);
  EXPECT_EQ(j["gpu_memory_mib"], 81920.0);
  EXPECT_EQ(j["experiments"][1]["concurrency"], 128);
  EXPECT_EQ(j["experiments"][1]["max_model_len"], 8192);
  EXPECT_EQ(j["experiments"][1]["capacity"]["verdict"], "capped");
  EXPECT_EQ(j["experiments"][1]["capacity"]["kv_tokens"], tokens);
  EXPECT_EQ(j["experiments"][1]["capacity"]["max_concurrency"], 55);
  EXPECT_EQ(j["experiments"][1]["capacity"]["message"], "will run, concurrency capped at 55");
  EXPECT_EQ(j["experiments"][1]["memory_per_gpu"]["kv_bytes_per_token"], 131072.0);
  EXPECT_EQ(j["experiments"][1]["min_free_memory_mb"], std::round((weights_mib + 2560) / 0.9));
}

TEST(EstimateTest, OnlyAnExperimentThatCannotHoldOneSequenceCannotRun) {
  EstimateOptions options;
  options.gpu_memory_mib = 24 * 1024;  // an L4/A10-class 24 GiB GPU
  // max-model-len defaults to the model's 131,072 tokens: one sequence needs 131,072 × 128 KiB =
  // 16 GiB of KV, but 90% of 24 GiB leaves 22,118 − 15,316 − 1,536 = 5,266 MiB for it.
  auto e = EstimateTask(
      Task("Llama-3.1-8B", {{"max-model-len", {131072, 8192}}, {"max-num-seqs", 8}}), options);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->experiments.size(), 2u);
  const double weights_mib = 8.03e9 * 2 / kMib;
  const double pool_mib = 0.9 * 24576 - weights_mib - 1536;
  const auto tokens = static_cast<int64_t>(std::floor(pool_mib * kMib / 131072));
  EXPECT_EQ(tokens, 42131);
  const Experiment& long_seq = e->experiments[0];
  EXPECT_EQ(long_seq.max_model_len, 131072);
  EXPECT_DOUBLE_EQ(long_seq.memory->kv_cache_mib, 16384);
  EXPECT_EQ(long_seq.capacity->kv_tokens, tokens);
  EXPECT_EQ(long_seq.capacity->max_concurrency, 0);
  EXPECT_EQ(long_seq.capacity->verdict, Verdict::kCannotRun);
  EXPECT_EQ(long_seq.capacity->message,
            "cannot run: 90% of a 24576 MiB GPU leaves KV cache for 42131 tokens, less than one "
            "131072-token sequence");
  // It needs a GPU of (15,316 + 16,384 + 1,536) ÷ 0.9 = 36,929 MiB: just above that it starts.
  EXPECT_NEAR(long_seq.min_free_memory_mib, (weights_mib + 16384 + 1536) / 0.9, 1e-6);
  EXPECT_EQ(CapacityOn(long_seq, long_seq.min_free_memory_mib + 1)->max_concurrency, 1);
  EXPECT_EQ(CapacityOn(long_seq, long_seq.min_free_memory_mib - 16)->verdict, Verdict::kCannotRun);
  // 8192-token sequences on the same GPU: 42,131 ÷ 8192 = 5 at once, fewer than the 8 asked for.
  const Experiment& short_seq = e->experiments[1];
  EXPECT_EQ(short_seq.capacity->max_concurrency, 42131 / 8192);
  EXPECT_EQ(short_seq.capacity->verdict, Verdict::kConcurrencyCapped);
  EXPECT_EQ(short_seq.capacity->message, "will run, concurrency capped at 5");
  // A 16 GiB GPU: 90% of it does not even hold the weights and the reserve.
  auto small = CapacityOn(short_seq, 16 * 1024);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->kv_tokens, 0);
  EXPECT_EQ(small->verdict, Verdict::kCannotRun);
  EXPECT_EQ(small->message,
            "cannot run: weights + reserve (16852 MiB) exceed 90% of a 16384 MiB GPU");
  EXPECT_EQ(ToJson(*e)["experiments"][0]["capacity"]["verdict"], "cannot_run");
}

TEST(EstimateTest, SglangKeepsWeightsAndKvInsideMemFractionStatic) {
  // examples/tasks/llama-3.1-70b-sglang.json on an H100 (81,559 MiB as NVML reports it).
  auto e = EstimateTask(Task("meta-llama/Llama-3.1-70B-Instruct",
                             {{"tp_size", {4, 8}},
                              {"context_length", 32768},
                              {"max_running_requests", 16},
                              {"mem_fraction_static", 0.85}},
                             "sglang"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_DOUBLE_EQ(e->gpu_memory_mib, kH100MemoryMib);
  const Experiment& tp4 = e->experiments[0];
  EXPECT_TRUE(tp4.fraction_given);
  const double weights_mib = 70.6e9 * 2 / 4 / kMib;  // 33,664 MiB
  // 2 · 80 layers · (8 KV heads ÷ 4) · 128 · 2 bytes = 80 KiB per token.
  EXPECT_DOUBLE_EQ(tp4.memory->kv_bytes_per_token, 2.0 * 80 * 2 * 128 * 2);
  EXPECT_DOUBLE_EQ(tp4.memory->kv_cache_mib, 81920.0 * 32768 / kMib);  // 2,560 MiB
  EXPECT_DOUBLE_EQ(tp4.memory->reserve_mib, 0);  // activations live outside the fraction
  EXPECT_NEAR(tp4.min_free_memory_mib, (weights_mib + 2560) / 0.85, 1e-6);
  // KV pool = 0.85 × 81,559 − 33,664 = 35,660 MiB = 456,453 tokens of 80 KiB: 13 sequences of
  // 32,768 tokens, fewer than the 16 max_running_requests asked for.
  const double pool_mib = 0.85 * 81559 - weights_mib;
  EXPECT_NEAR(tp4.capacity->kv_pool_mib, pool_mib, 1e-6);
  EXPECT_EQ(tp4.capacity->kv_tokens, static_cast<int64_t>(std::floor(pool_mib * kMib / 81920)));
  EXPECT_EQ(tp4.capacity->max_concurrency, 13);
  EXPECT_EQ(tp4.capacity->message, "will run, concurrency capped at 13");
  const Experiment& tp8 = e->experiments[1];
  // 0.85 × 81,559 − 16,832 = 52,493 MiB of 40 KiB tokens: 1,343,820 tokens, 41 sequences.
  EXPECT_EQ(tp8.capacity->max_concurrency, 41);
  EXPECT_EQ(tp8.capacity->verdict, Verdict::kFits);
}

TEST(EstimateTest, SglangDefaultFractionFollowsTheGpu) {
  // SGLang's server_args: (GPU − reserved) ÷ GPU, reserved (9.5 + tp·pp/2) GiB on an 80 GB GPU.
  EXPECT_DOUBLE_EQ(SglangDefaultFraction(81559, 4),
                   std::round((81559.0 - 11.5 * 1024) / 81559 * 1000) / 1000);
  EXPECT_DOUBLE_EQ(SglangDefaultFraction(81559, 4), 0.856);
  EXPECT_DOUBLE_EQ(SglangDefaultFraction(81559, 1),
                   std::round((81559.0 - 10 * 1024) / 81559 * 1000) / 1000);
  EXPECT_DOUBLE_EQ(SglangDefaultFraction(24 * 1024, 1),
                   std::round((24576.0 - 2.9 * 1024) / 24576 * 1000) / 1000);
  EXPECT_DOUBLE_EQ(SglangDefaultFraction(0, 1), 0.88);  // no GPU known: SGLang's fallback
  auto e =
      EstimateTask(Task("Llama-3.1-70B", {{"tp_size", 4}, {"context_length", 32768}}, "sglang"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Experiment& x = e->experiments[0];
  EXPECT_FALSE(x.fraction_given);
  EXPECT_DOUBLE_EQ(x.free_fraction, 0.856);
  EXPECT_DOUBLE_EQ(x.capacity->fraction, 0.856);
  // The smallest GPU it starts on: GPU − (9.5 + 2) GiB ≥ weights + one sequence, i.e. about
  // 33,664 + 2,560 + 11,776 = 48,000 MiB; on exactly that GPU one sequence fits, below it none.
  const double static_mib = 70.6e9 * 2 / 4 / kMib + 2560;
  EXPECT_NEAR(x.min_free_memory_mib, (static_mib + 11776) / 0.9995, 1e-6);
  EXPECT_NE(CapacityOn(x, x.min_free_memory_mib)->verdict, Verdict::kCannotRun);
  EXPECT_EQ(CapacityOn(x, static_mib + 11776 - 100)->verdict, Verdict::kCannotRun);
}

TEST(EstimateTest, KvHeadsAreReplicatedWhenTpExceedsThem) {
  // 70B at tp=16: 8 KV heads over 16 ranks, each rank still holds one whole head.
  auto e = EstimateTask(Task("Llama-3.1-70B", {{"tp", 16}, {"max_model_len", 8192}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_DOUBLE_EQ(e->experiments[0].memory->kv_cache_mib, 2.0 * 80 * 1 * 128 * 2 * 8192 / 1048576);
}

TEST(EstimateTest, EverySpellingOfTheParallelKeysIsUnderstood) {
  for (const char* key :
       {"tensor-parallel-size", "tensor_parallel_size", "tp-size", "tp_size", "tp"}) {
    auto e = EstimateTask(Task("Qwen2.5-7B", {{key, 2}}));
    ASSERT_TRUE(e.ok()) << key << ": " << e.status().ToString();
    EXPECT_EQ(e->experiments[0].tp, 2) << key;
  }
  for (const char* key : {"pipeline-parallel-size", "pp_size", "pp"}) {
    EXPECT_EQ(EstimateTask(Task("Qwen2.5-7B", {{key, 2}}))->experiments[0].pp, 2) << key;
  }
  for (const char* key : {"data-parallel-size", "dp-size", "dp"}) {
    EXPECT_EQ(EstimateTask(Task("Qwen2.5-7B", {{key, 3}}))->experiments[0].gpus, 3) << key;
  }
  for (const char* key : {"context-parallel-size", "cp_size", "cp"}) {
    EXPECT_EQ(EstimateTask(Task("Qwen2.5-7B", {{key, 2}}))->experiments[0].gpus, 2) << key;
  }
}

TEST(EstimateTest, EachCombinationIsItsOwnExperiment) {
  json task =
      Task("Mistral-7B-Instruct-v0.3", {{"max-num-seqs", {16, 64}}, {"max-model-len", 4096}});
  task["parallel_config"] = {{"tp", {1, 2}}, {"dp", {1, 2}}};
  auto e = EstimateTask(task);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->experiments.size(), 8u);  // 2 × 2 × 2
  std::set<int> gpus;
  for (const Experiment& x : e->experiments) gpus.insert(x.gpus);
  EXPECT_EQ(gpus, (std::set<int>{1, 2, 4}));
  // Not the maximum over the space: the smallest experiment asks for less than the largest.
  auto [lo, hi] = std::minmax_element(e->experiments.begin(), e->experiments.end(),
                                      [](const Experiment& a, const Experiment& b) {
                                        return a.min_free_memory_mib < b.min_free_memory_mib;
                                      });
  EXPECT_LT(lo->min_free_memory_mib, hi->min_free_memory_mib);
  EXPECT_EQ(lo->tp, 2);
  // max-num-seqs changes the reachable-concurrency verdict, not what the engine needs to start.
  for (const Experiment& x : e->experiments) {
    const int64_t seqs = x.parameters["max-num-seqs"].get<int64_t>();
    EXPECT_EQ(x.concurrency, seqs);
    for (const Experiment& y : e->experiments) {
      if (y.tp == x.tp) {
        EXPECT_DOUBLE_EQ(y.min_free_memory_mib, x.min_free_memory_mib);
      }
    }
  }
}

TEST(EstimateTest, DecodeContextParallelAddsNoGpusAndShardsTheKvCache) {
  auto plain = EstimateTask(Task("Llama-3.1-70B", {{"tp", 8}, {"max-model-len", 32768}}));
  auto dcp = EstimateTask(Task("Llama-3.1-70B", {{"tp", 8}, {"dcp", 4}, {"max-model-len", 32768}}));
  ASSERT_TRUE(plain.ok() && dcp.ok()) << dcp.status().ToString();
  EXPECT_EQ(dcp->experiments[0].gpus, 8);
  EXPECT_DOUBLE_EQ(dcp->experiments[0].memory->kv_cache_mib,
                   plain->experiments[0].memory->kv_cache_mib / 4);
  auto bad = EstimateTask(Task("Llama-3.1-70B", {{"tp", 8}, {"dcp", 3}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("must divide tp"), std::string::npos);
}

TEST(EstimateTest, DtypesAndEngineRules) {
  auto fp8 = EstimateTask(
      Task("Llama-3.1-8B", {{"dtype", "fp8"}, {"kv-cache-dtype", "fp8"}, {"max-model-len", 8192}}));
  ASSERT_TRUE(fp8.ok());
  EXPECT_NEAR(fp8->experiments[0].memory->weights_mib, 8.03e9 / 1048576, 1e-6);
  EXPECT_DOUBLE_EQ(fp8->experiments[0].memory->kv_cache_mib, 512);
  auto sglang =
      EstimateTask(Task("Llama-3.1-8B", {{"tp_size", 2}, {"mem_fraction_static", 0.8}}, "sglang"));
  ASSERT_TRUE(sglang.ok());
  EXPECT_EQ(sglang->experiments[0].engine_rule,
            "sglang: every rank's free memory within 10% of the others");
  EXPECT_DOUBLE_EQ(sglang->experiments[0].free_fraction, 0.8);
  auto util = EstimateTask(Task("Llama-3.1-8B", {{"gpu_memory_utilization", 0.5}}));
  EXPECT_DOUBLE_EQ(util->experiments[0].free_fraction, 0.5);
}

TEST(EstimateTest, UnknownModelFailsClosedUnlessMemoryIsGiven) {
  auto unknown = EstimateTask(Task("acme/secret-model-13b", json::object()));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("not in flyt's catalog"), std::string::npos);
  json task = Task("acme/secret-model-13b", {{"tp", 2}});
  task["min_free_memory_mb"] = 30000;
  auto given = EstimateTask(task);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->model_source, "explicit");
  EXPECT_FALSE(given->experiments[0].memory);
  EXPECT_DOUBLE_EQ(given->experiments[0].min_free_memory_mib, 30000);
  EXPECT_EQ(given->experiments[0].gpus, 2);
}

TEST(EstimateTest, BadTasksNameTheFieldAndTheExperiment) {
  const std::pair<json, const char*> cases[] = {
      {json::array(), "must be a JSON object"},
      {json{{"model", "x"}}, "model.id_or_path is missing"},
      {Task("Llama-3.1-8B", {{"tp", 0}}), "tp must be an integer from 1 to 4096"},
      {Task("Llama-3.1-8B", {{"tp", {1, 3}}}),
       "experiment 1 (tp=3): tp=3 does not divide the 32 attention heads"},
      {Task("Llama-3.1-8B", {{"tp", 1}, {"tp_size", 2}}), "tp is already given"},
      {Task("Llama-3.1-8B", {{"dtype", "int3"}}), "unknown dtype 'int3'"},
      {Task("Llama-3.1-8B", {{"tp", json::array()}}), "parameters.tp is an empty list"},
      {Task("Llama-3.1-8B", {{"gpu-memory-utilization", 1.5}}), "must be a number in (0, 1]"},
      {Task("Llama-3.1-8B", {{"pp", 40}}), "pp=40 exceeds the 32 layers"},
      {Task("Llama-3.1-8B", json::object(), "tgi"), "base_runtime 'tgi' is not supported"},
  };
  for (const auto& [task, expected] : cases) {
    auto e = EstimateTask(task);
    ASSERT_FALSE(e.ok()) << task.dump();
    EXPECT_NE(e.status().message().find(expected), std::string::npos)
        << e.status().message() << "\nexpected: " << expected;
  }
  json huge = Task("Llama-3.1-8B", json::object());
  for (int i = 0; i < 5; ++i) huge["parameters"]["p" + std::to_string(i)] = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_NE(EstimateTask(huge).status().message().find("more than 10000 experiments"),
            std::string::npos);
}

// Every field of a wrong type or out of range is an InvalidArgument naming the field, never
// silently the default (JsonFields reads them).
TEST(EstimateTest, FieldsOfTheWrongTypeOrRangeAreRefusedByName) {
  auto with = [](const char* key, json value) {
    json task = Task("Llama-3.1-8B", json::object());
    task[key] = std::move(value);
    return task;
  };
  json scheduled = Task("Llama-3.1-8B", json::object());
  scheduled["scheduling"] = {{"priority", json(18446744073709551615ull)}};
  json model_not_string = Task("Llama-3.1-8B", json::object());
  model_not_string["model"]["id_or_path"] = 8;
  json config_json_not_string = Task("Llama-3.1-8B", json::object());
  config_json_not_string["model"]["config_json"] = 1;
  const std::pair<json, const char*> cases[] = {
      {with("task_name", 7), "task_name must be a string"},
      {with("base_runtime", true), "base_runtime must be a string"},
      {with("min_free_memory_mb", "lots"), "min_free_memory_mb must be a positive number"},
      {with("parameters", json::array({1})), "parameters must be an object"},
      {with("parallel_config", "tp=2"), "parallel_config must be an object"},
      {with("scheduling", 5), "scheduling must be an object"},
      {scheduled, "scheduling.priority must be an integer from -1000 to 1000"},
      {with("scheduling", {{"timeout_seconds", 1.5}}), "scheduling.timeout_seconds must be"},
      {with("scheduling", {{"policy", "random"}}), "scheduling.policy must be"},
      {with("scheduling", {{"gpu_model", 80}}), "scheduling.gpu_model must be a string"},
      {with("scheduling", {{"prio", 1}}), "unknown field 'scheduling.prio'"},
      {model_not_string, "model.id_or_path must be a string"},
      {config_json_not_string, "model.config_json must be a string"},
      {Task("Llama-3.1-8B", {{"dtype", 16}}), "parameters.dtype must be a string"},
      {Task("Llama-3.1-8B", {{"kv_cache_dtype", false}}), "parameters.kv_cache_dtype must be"},
      {Task("Llama-3.1-8B", {{"tp_size", "2"}}), "parameters.tp_size must be an integer"},
      {Task("Llama-3.1-8B", {{"tp", 2.5}}), "parameters.tp must be an integer"},
      {Task("Llama-3.1-8B", {{"max-num-seqs", json(18446744073709551615ull)}}),
       "parameters.max-num-seqs must be an integer from 1 to 100000"},
      {Task("Llama-3.1-8B", {{"max-model-len", "8k"}}), "parameters.max-model-len must be"},
      {Task("Llama-3.1-8B", {{"gpu-memory-utilization", "0.9"}}), "must be a number in (0, 1]"},
      {Task("Llama-3.1-8B", {{"mem_fraction_static", 0}}, "sglang"),
       "parameters.mem_fraction_static must be a number in (0, 1]"},
  };
  for (const auto& [task, expected] : cases) {
    auto e = EstimateTask(task);
    ASSERT_FALSE(e.ok()) << task.dump();
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << task.dump();
    EXPECT_NE(e.status().message().find(expected), std::string::npos)
        << e.status().message() << "\nexpected: " << expected;
  }
  // A parallel_config key is named in its own section, and a wrong type is refused even when the
  // size is explicit and no model is known to estimate with.
  json parallel = Task("Llama-3.1-8B", json::object());
  parallel["parallel_config"] = {{"pp", -1}};
  EXPECT_NE(EstimateTask(parallel).status().message().find("parallel_config.pp must be"),
            std::string::npos);
  json explicit_size = Task("acme/secret-model-13b", {{"dtype", json::array({json::array()})}});
  explicit_size["min_free_memory_mb"] = 30000;
  EXPECT_NE(EstimateTask(explicit_size).status().message().find("parameters.dtype must be"),
            std::string::npos);
}

TEST(EstimateTest, ValidSchedulingAndNullFieldsAreAccepted) {
  json task = Task("Llama-3.1-8B", {{"dtype", "bf16"}});
  task["scheduling"] = {{"priority", -5},      {"timeout_seconds", 3600}, {"policy", ""},
                        {"gpu_model", "H100"}, {"owner", "alice"},        {"max_utilization", 0}};
  task["min_free_memory_mb"] = nullptr;
  auto e = EstimateTask(task);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->task_name, "t");
  EXPECT_EQ(e->runtime, "vllm");
}

TEST(ModelTest, CatalogMatchesIdsAndPaths) {
  EXPECT_EQ(FindInCatalog("meta-llama/Llama-3.2-1B-Instruct")->name, "Llama-3.2-1B");
  EXPECT_EQ(FindInCatalog("/models/qwen2.5-72b/")->name, "Qwen2.5-72B");
  EXPECT_EQ(FindInCatalog("mistralai/Mixtral-8x7B-v0.1")->name, "Mixtral-8x7B");
  EXPECT_EQ(FindInCatalog("meta-llama/Llama-3.1-8B0"), nullptr);
  EXPECT_EQ(FindInCatalog("gpt2"), nullptr);
}

// Parameter counts from a real config.json's dimensions reproduce the published ones.
TEST(ModelTest, HfConfigParameterCountMatchesThePublishedSize) {
  auto dir = std::filesystem::temp_directory_path() / ("flyt-hf-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "tie_word_embeddings": false})";
  auto llama = LoadHfConfig(dir.string());
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_NEAR(llama->parameters, 8.03e9, 0.01e9);
  EXPECT_EQ(llama->head_dim, 128);
  std::ofstream(dir / "config.json", std::ios::trunc) << R"({"hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8})";
  auto mixtral = LoadHfConfig(dir.string());
  ASSERT_TRUE(mixtral.ok());
  EXPECT_NEAR(mixtral->parameters, 46.7e9, 0.1e9);
  std::ofstream(dir / "config.json", std::ios::trunc) << R"({"hidden_size": "big"})";
  EXPECT_FALSE(LoadHfConfig(dir.string()).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flyt::sched
