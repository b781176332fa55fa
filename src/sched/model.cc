#include "sched/model.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace flyt::sched {

const std::vector<ModelSpec>& Catalog() {
  // From each model's published config.json (layers, hidden size, heads, KV heads, head dim,
  // context) and model card (parameter count).
  static const std::vector<ModelSpec> kCatalog = {
      {"Llama-3.2-1B", 1.24e9, 16, 2048, 32, 8, 64, 131072, "bfloat16"},
      {"Llama-3.2-3B", 3.21e9, 28, 3072, 24, 8, 128, 131072, "bfloat16"},
      {"Llama-3.1-8B", 8.03e9, 32, 4096, 32, 8, 128, 131072, "bfloat16"},
      {"Llama-3.1-70B", 70.6e9, 80, 8192, 64, 8, 128, 131072, "bfloat16"},
      {"Qwen2.5-7B", 7.62e9, 28, 3584, 28, 4, 128, 32768, "bfloat16"},
      {"Qwen2.5-72B", 72.7e9, 80, 8192, 64, 8, 128, 32768, "bfloat16"},
      {"Mistral-7B", 7.24e9, 32, 4096, 32, 8, 128, 32768, "bfloat16"},
      {"Mixtral-8x7B", 46.7e9, 32, 4096, 32, 8, 128, 32768, "bfloat16"},
  };
  return kCatalog;
}

const ModelSpec* FindInCatalog(std::string_view id_or_path) {
  std::string id = ToLower(id_or_path);
  while (!id.empty() && id.back() == '/') id.pop_back();
  size_t slash = id.rfind('/');
  if (slash != std::string::npos) id = id.substr(slash + 1);
  const ModelSpec* best = nullptr;
  for (const ModelSpec& m : Catalog()) {
    std::string name = ToLower(m.name);
    if (id.rfind(name, 0) != 0) continue;
    // "llama-3.1-8b" must not match "llama-3.1-8b0": what follows is a variant suffix or nothing.
    if (id.size() > name.size() && id[name.size()] != '-' && id[name.size()] != '_' &&
        id[name.size()] != '.') {
      continue;
    }
    if (best == nullptr || m.name.size() > best->name.size()) best = &m;
  }
  return best;
}

Result<ModelSpec> LoadHfConfig(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = path + "/config.json";
  FLYT_ASSIGN_OR_RETURN(std::string text, ReadFile(file, 1 << 20));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  return ModelFromHfConfig(j, std::filesystem::path(path).filename().string(), file);
}

Result<ModelSpec> ModelFromHfConfig(const nlohmann::json& j, const std::string& name,
                                    const std::string& file) {
  if (!j.is_object()) return InvalidArgument(file + ": not a JSON object");
  auto get_int = [&](const char* key, int fallback) -> Result<int> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (fallback >= 0) return fallback;
      return InvalidArgument(file + ": " + key + " is missing");
    }
    if (!it->is_number_unsigned() || it->get<uint64_t>() > (1u << 30)) {
      return InvalidArgument(file + ": " + key + " must be a non-negative integer");
    }
    return static_cast<int>(it->get<uint64_t>());
  };
  ModelSpec m;
  m.name = name;
  FLYT_ASSIGN_OR_RETURN(m.layers, get_int("num_hidden_layers", -1));
  FLYT_ASSIGN_OR_RETURN(m.hidden_size, get_int("hidden_size", -1));
  FLYT_ASSIGN_OR_RETURN(m.attention_heads, get_int("num_attention_heads", -1));
  FLYT_ASSIGN_OR_RETURN(m.kv_heads, get_int("num_key_value_heads", m.attention_heads));
  if (m.attention_heads == 0) return InvalidArgument(file + ": num_attention_heads is 0");
  FLYT_ASSIGN_OR_RETURN(m.head_dim, get_int("head_dim", m.hidden_size / m.attention_heads));
  FLYT_ASSIGN_OR_RETURN(m.max_position_embeddings, get_int("max_position_embeddings", 4096));
  FLYT_ASSIGN_OR_RETURN(int vocab, get_int("vocab_size", -1));
  FLYT_ASSIGN_OR_RETURN(int intermediate, get_int("intermediate_size", -1));
  FLYT_ASSIGN_OR_RETURN(int experts, get_int("num_local_experts", 1));
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) {
    m.dtype = j["torch_dtype"].get<std::string>();
  }
  const bool tied = j.value("tie_word_embeddings", false) == true;
  // Llama-style decoder: Q and O projections (hidden × heads·head_dim), K and V (hidden ×
  // kv_heads·head_dim), a gated MLP (3 × hidden × intermediate) per expert, embeddings in and out.
  const double h = m.hidden_size;
  const double attention = 2 * h * m.attention_heads * m.head_dim + 2 * h * m.kv_heads * m.head_dim;
  const double mlp =
      3.0 * h * intermediate * std::max(1, experts) + (experts > 1 ? h * experts : 0);
  const double embeddings = static_cast<double>(vocab) * h * (tied ? 1 : 2);
  m.parameters = m.layers * (attention + mlp + 2 * h) + embeddings;
  return m;
}

}  // namespace flyt::sched
