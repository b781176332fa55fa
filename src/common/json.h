// JSON helpers shared by every daemon and flytctl: text out that never throws on odd strings, and
// text in that is bounded before it is parsed. Pure functions; thread-safe.
#pragma once

#include <chrono>
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

// RFC 3339 UTC with milliseconds: "2026-01-01T00:00:00.000Z" — the one timestamp form of
// flyt's JSON.
std::string FormatTimeRfc3339(std::chrono::system_clock::time_point t);
// The inverse; also takes a second fraction of 0–9 digits and a "+hh:mm"/"-hh:mm" offset.
Result<std::chrono::system_clock::time_point> ParseTimeRfc3339(const std::string& text);

}  // namespace flyt
