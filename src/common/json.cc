#include "common/json.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

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

std::string FormatTimeRfc3339(std::chrono::system_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  int64_t secs = ms / 1000;
  int64_t rem = ms % 1000;
  if (rem < 0) {
    rem += 1000;
    secs -= 1;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(rem));
  return buf;
}

Result<std::chrono::system_clock::time_point> ParseTimeRfc3339(const std::string& text) {
  auto bad = [&]() -> Status {
    return InvalidArgument("'" + text.substr(0, 64) +
                           "' is not an RFC 3339 time (2026-01-01T00:00:00.000Z)");
  };
  int year, mon, day, hour, min, sec, consumed = 0;
  if (text.size() > 64 ||
      std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &mon, &day, &hour, &min, &sec,
                  &consumed) != 6 ||
      consumed != 19 || mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 ||
      sec > 60) {
    return bad();
  }
  size_t pos = 19;
  int64_t nanos = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 9) {
        nanos = nanos * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0) return bad();
    for (; digits < 9; ++digits) nanos *= 10;
  }
  int64_t offset_s = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int oh, om, n = 0;
    if (std::sscanf(text.c_str() + pos + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 ||
        om > 59) {
      return bad();
    }
    offset_s = (oh * 3600 + om * 60) * (text[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  int64_t secs = static_cast<int64_t>(timegm(&tm)) - offset_s;
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(secs) + std::chrono::nanoseconds(nanos)));
}

}  // namespace flyt
