// ModelSpec: the dimensions of a transformer model that GPU requirements follow from, from
// flyt's catalog (public config.json numbers of common models) or from a HuggingFace
// config.json given by path. Immutable data; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flyt::sched {

struct ModelSpec {
  std::string name;
  double parameters = 0;  // total, all experts of a mixture-of-experts model included
  int layers = 0;
  int hidden_size = 0;
  int attention_heads = 0;
  int kv_heads = 0;  // grouped-query attention: fewer KV heads than attention heads
  int head_dim = 0;
  int max_position_embeddings = 0;
  std::string dtype = "bfloat16";  // the weights' own dtype (torch_dtype)
};

const std::vector<ModelSpec>& Catalog();

// The catalog entry for a model id or path ("meta-llama/Llama-3.1-8B-Instruct",
// "/models/Qwen2.5-72B"): the last path component, case-insensitive, with a known variant suffix
// (-Instruct, -Chat, -hf, -v0.1 ...) allowed after the catalog name. nullptr when unknown.
const ModelSpec* FindInCatalog(std::string_view id_or_path);

// Reads a HuggingFace config.json (a file, or a directory holding one). Parameters are counted
// from the dimensions (embeddings, attention, MLP or experts), as they are not in the file.
Result<ModelSpec> LoadHfConfig(const std::string& path);
// The same from a parsed config.json; `file` names it in errors.
Result<ModelSpec> ModelFromHfConfig(const nlohmann::json& config, const std::string& name,
                                    const std::string& file);

}  // namespace flyt::sched
