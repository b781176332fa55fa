#include "common/strings.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/status.h"

namespace flyt {

std::string_view Trim(std::string_view s) {
  const char* blanks = " \t\r\n";
  size_t begin = s.find_first_not_of(blanks);
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(blanks);
  return s.substr(begin, end - begin + 1);
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

template <typename T>
static std::optional<T> ParseWhole(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  if constexpr (std::is_unsigned_v<T>) {
    if (s.front() == '-') return std::nullopt;
    if (s.front() == '+') s.remove_prefix(1);
  } else {
    if (s.front() == '+') s.remove_prefix(1);
  }
  T value{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> ParseInt(std::string_view s) { return ParseWhole<int64_t>(s); }
std::optional<uint64_t> ParseUint(std::string_view s) { return ParseWhole<uint64_t>(s); }
std::optional<double> ParseDouble(std::string_view s) {
  auto v = ParseWhole<double>(s);
  if (v && (*v != *v)) return std::nullopt;  // NaN is not a reading
  return v;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open " + path, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read " + path, errno);
  return ss.str();
}

}  // namespace flyt
