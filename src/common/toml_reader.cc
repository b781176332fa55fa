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

}  // namespace flyt
