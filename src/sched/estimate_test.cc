#include "sched/estimate.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

TEST(EstimateTest, Llama31_8BReferenceFigures) {
  auto e = EstimateTask(Task("meta-llama/Llama-3.1-8B-Instruct",
                             {{"tensor-parallel-size", {1, 2}}, {"max-model-len", 8192}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->model_source, "catalog: Llama-3.1-8B");
  ASSERT_EQ(e->experiments.size(), 2u);
  const Experiment& tp1 = e->experiments[0];
  EXPECT_EQ(tp1.gpus, 1);
  // 8.03e9 parameters × 2 bytes (bf16) = 15,316 MiB.
  EXPECT_NEAR(tp1.memory->weights_mib, 8.03e9 * 2 / 1048576, 1e-6);
  // KV: 2 · 32 layers · 8 KV heads · 128 · 2 bytes = 128 KiB per token; × 8192 tokens = 1 GiB.
  EXPECT_DOUBLE_EQ(tp1.memory->kv_cache_mib, 1024);
  EXPECT_DOUBLE_EQ(tp1.memory->reserve_mib, 1536);
  EXPECT_NEAR(tp1.min_free_memory_mib, 8.03e9 * 2 / 1048576 + 1024 + 1536, 1e-6);  // 17,876 MiB
  EXPECT_EQ(tp1.engine_rule, "vllm: 90% of each GPU's memory free (gpu_memory_utilization)");
  const Experiment& tp2 = e->experiments[1];
  EXPECT_EQ(tp2.gpus, 2);
  EXPECT_NEAR(tp2.memory->weights_mib, 8.03e9 / 1048576, 1e-6);  // split over 2 ranks
  EXPECT_DOUBLE_EQ(tp2.memory->kv_cache_mib, 512);               // 4 KV heads per rank
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
  EXPECT_EQ(lo->parameters["max-num-seqs"], 16);
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
