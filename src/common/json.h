// JSON helpers shared by every daemon and flytctl: text out that never throws on odd strings, and
// text in that is bounded before it is parsed. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace flyt {

// Serialises; invalid UTF-8 in strings (a process title, a hostile label) becomes U+FFFD instead
// of an exception.
std::string DumpJson(const nlohmann::json& value, int indent = -1);

// Parses untrusted text: at most `max_bytes`, nesting at most `max_depth` (nlohmann parses
// iteratively, but copying or printing a value recurses). `what` names the input in errors.
Result<nlohmann::json> ParseJson(const std::string& text, const std::string& what,
                                 size_t max_bytes = 64u << 20, int max_depth = 64);

}  // namespace flyt
