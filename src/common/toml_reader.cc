#include "common/toml_reader.h"

#include "common/strings.h"

namespace flyt {

Result<toml::table> TomlReader::Parse(std::string_view text, size_t max_line_bytes) const {
  size_t line_no = 1;
  for (std::string_view line : Split(text, '\n')) {
    if (line.size() > max_line_bytes) {
      return InvalidArgument(source_ + ":" + std::to_string(line_no) + ": line longer than " +
                             std::to_string(max_line_bytes) + " characters");
    }
    ++line_no;
  }
  try {
    return toml::parse(text, source_);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(source_ + ":" + std::to_string(e.source().begin.line) + ": " +
                           std::string(e.description()));
  }
}

Status TomlReader::Error(const toml::node* node, const std::string& key,
                         const std::string& problem) const {
  std::string where = source_;
  if (node != nullptr && node->source().begin.line > 0) {
    where += ":" + std::to_string(node->source().begin.line);
  }
  return InvalidArgument(where + ": " + key + ": " + problem);
}

Status TomlReader::CheckKeys(const toml::table& table, const std::string& section,
                             std::initializer_list<const char*> allowed) const {
  for (const auto& [key, value] : table) {
    const std::string_view name = key.str();
    bool ok = false;
    for (const char* a : allowed) ok = ok || name == a;
    if (ok) continue;
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
    std::string full = section.empty() ? std::string(name) : section + "." + std::string(name);
    return Error(&value, full,
                 "unknown key (expected " + (list.empty() ? "none" : "one of: " + list) + ")");
  }
  return Status::Ok();
}

Status TomlReader::GetString(const toml::table& t, const std::string& section, const char* key,
                             std::string& out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  if (!n->is_string()) return Error(n, section + "." + key, "expected a string");
  out = *n->value<std::string>();
  return Status::Ok();
}

Status TomlReader::GetInt(const toml::table& t, const std::string& section, const char* key,
                          int64_t min, int64_t max, int64_t& out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  if (!n->is_integer()) return Error(n, section + "." + key, "expected an integer");
  int64_t v = *n->value<int64_t>();
  if (v < min || v > max) {
    return Error(n, section + "." + key,
                 "value " + std::to_string(v) + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  out = v;
  return Status::Ok();
}

Status TomlReader::GetDouble(const toml::table& t, const std::string& section, const char* key,
                             double min, double max, double& out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  if (!n->is_number()) return Error(n, section + "." + key, "expected a number");
  double v = n->is_integer() ? static_cast<double>(*n->value<int64_t>()) : *n->value<double>();
  if (!(v >= min && v <= max)) {
    return Error(n, section + "." + key,
                 "value " + std::to_string(v) + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  out = v;
  return Status::Ok();
}

Status TomlReader::GetBool(const toml::table& t, const std::string& section, const char* key,
                           bool& out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  if (!n->is_boolean()) return Error(n, section + "." + key, "expected true or false");
  out = *n->value<bool>();
  return Status::Ok();
}

Status TomlReader::LogSection(const toml::table& root, std::string& level) const {
  FLYT_ASSIGN_OR_RETURN(const toml::table* log, Section(root, "log"));
  if (log == nullptr) return Status::Ok();
  FLYT_RETURN_IF_ERROR(CheckKeys(*log, "log", {"level"}));
  FLYT_RETURN_IF_ERROR(GetString(*log, "log", "level", level));
  if (!ValidLogLevel(level)) {
    return Error(log->get("level"), "log.level",
                 "unknown level '" + level + "' (expected trace, debug, info, warn, error, off)");
  }
  return Status::Ok();
}

Result<const toml::table*> TomlReader::Section(const toml::table& root, const char* name) const {
  const toml::node* n = root.get(name);
  if (n == nullptr) return static_cast<const toml::table*>(nullptr);
  if (!n->is_table()) return Error(n, name, "expected a [" + std::string(name) + "] table");
  return n->as_table();
}

Status TomlReader::GetDuration(const toml::table& t, const std::string& section, const char* key,
                               std::chrono::milliseconds min, std::chrono::milliseconds max,
                               std::chrono::milliseconds& out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  const std::string name = section + "." + key;
  std::chrono::milliseconds value{0};
  if (n->is_integer()) {
    const int64_t seconds = *n->value<int64_t>();
    if (seconds < 0 || seconds > 100LL * 86400) {
      return Error(n, name, "value " + std::to_string(seconds) + " s is out of range");
    }
    value = std::chrono::milliseconds(seconds * 1000);
  } else if (n->is_string()) {
    auto parsed = ParseDuration(*n->value<std::string>());
    if (!parsed.ok()) return Error(n, name, parsed.status().message());
    value = *parsed;
  } else {
    return Error(n, name, "expected a duration such as \"30s\"");
  }
  if (value < min || value > max) {
    return Error(n, name,
                 std::to_string(value.count()) + " ms is out of range [" +
                     std::to_string(min.count()) + " ms, " + std::to_string(max.count()) +
                     " ms]");
  }
  out = value;
  return Status::Ok();
}

}  // namespace flyt
