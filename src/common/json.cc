#include "common/json.h"

#include <algorithm>

namespace flyt {

std::string DumpJson(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<nlohmann::json> ParseJson(const std::string& text, const std::string& what,
                                 size_t max_bytes, int max_depth) {
  if (text.size() > max_bytes) {
    return InvalidArgument(what + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  if (deepest > max_depth) {
    return InvalidArgument(what + " is nested deeper than " + std::to_string(max_depth) +
                           " levels");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse errors, numbers beyond double's range
    return InvalidArgument(what + " is not valid JSON: " + e.what());
  }
}

}  // namespace flyt
