// Field access that never throws, for the renderers of JSON answers (render.cc, render_cuda.cc):
// the node and cluster managers are other programs, possibly of another version, so a missing key,
// a null or a value of the wrong type reads as "absent", never as an exception. Strings come back
// printable (render.h's Printable). Pure functions; thread-safe. Internal to flytctl's renderers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace flyt::ctl::render_fields {

// The value at `key` of an object, or nullptr when `j` is not an object, the key is absent or null.
const nlohmann::json* Find(const nlohmann::json& j, const char* key);
std::optional<std::string> Text(const nlohmann::json& j, const char* key);
// The text at `key`, or `fallback` when absent or empty.
std::string TextOr(const nlohmann::json& j, const char* key, const char* fallback = "-");
// A finite number.
std::optional<double> Number(const nlohmann::json& j, const char* key);
// A number within ±9e15, rounded.
std::optional<int64_t> Integer(const nlohmann::json& j, const char* key);
bool Flag(const nlohmann::json& j, const char* key);
// The array at `key`, or an empty one.
const nlohmann::json& Array(const nlohmann::json& j, const char* key);
// At most `max` code points, the last one "…" when cut (a column must not swallow a line).
std::string Clip(const std::string& s, size_t max);
// "3 running, 1 starting": the count of each state, in the map's order (a list's summary line).
std::string StateCounts(const std::map<std::string, int>& counts);

}  // namespace flyt::ctl::render_fields
