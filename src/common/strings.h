// Small string helpers shared by the parsers (nvidia-smi CSV, /proc, scenarios). Pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flyt {

std::string_view Trim(std::string_view s);
std::vector<std::string_view> Split(std::string_view s, char sep);
bool StartsWith(std::string_view s, std::string_view prefix);
std::string ToLower(std::string_view s);
// The last component of a path ("/usr/lib/libcuda.so.1" -> "libcuda.so.1"; a name alone as it is).
std::string Basename(std::string_view path);

// `s` with every byte sequence that is not valid UTF-8 replaced by U+FFFD. Text from outside
// (process titles) must be valid UTF-8 before it goes into Prometheus labels or JSON.
std::string SanitizeUtf8(std::string_view s);

// Whole-string numeric parses: leading/trailing blanks are allowed, anything else is not.
// ParseDouble refuses NaN and infinities: no reading or setting flyt takes is infinite.
std::optional<int64_t> ParseInt(std::string_view s);
std::optional<uint64_t> ParseUint(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);

// Reads a whole regular file of at most `max_bytes`; errors name the path. Devices, FIFOs and
// oversized files are refused rather than read (a scenario path of /dev/zero must not hang).
class Status;
template <typename T>
class Result;
// "HOST:PORT" (IPv6 as "[::1]:12401"), port 0-65535; errors say what is wrong.
Result<std::pair<std::string, int>> ParseHostPort(std::string_view host_port);
// The other way: "HOST:PORT", an IPv6 host in brackets ("[::1]:12401").
std::string FormatHostPort(std::string_view host, int port);

// trace, debug, info, warn, error or off: the log levels flyt's daemons accept.
bool ValidLogLevel(std::string_view level);

// A label name as Prometheus allows it: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
bool ValidLabelName(std::string_view s);

// "0x1f00": a device address or a handle in a message.
std::string HexAddress(uint64_t value);

// Whether `given` is `expected`, in time that depends on the length of `expected` only (not on
// where the two differ), so that a peer cannot find a secret or token byte by byte by timing.
bool SecretMatches(std::string_view expected, std::string_view given);

Result<std::string> ReadFile(const std::string& path, size_t max_bytes = 64u << 20);

// A duration as flyt's config files write it: a whole number and ms, s, m or h ("500ms", "30s",
// "5m", "1h"; a bare number is seconds), at most 100 days. Trailing spaces are allowed.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace flyt
