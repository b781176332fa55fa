// Small string helpers shared by the parsers (nvidia-smi CSV, /proc, scenarios). Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flyt {

std::string_view Trim(std::string_view s);
std::vector<std::string_view> Split(std::string_view s, char sep);
bool StartsWith(std::string_view s, std::string_view prefix);
std::string ToLower(std::string_view s);

// Whole-string numeric parses: leading/trailing blanks are allowed, anything else is not.
std::optional<int64_t> ParseInt(std::string_view s);
std::optional<uint64_t> ParseUint(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);

// Reads a whole (small) file; errors name the path.
class Status;
template <typename T>
class Result;
Result<std::string> ReadFile(const std::string& path);

}  // namespace flyt
