#include "common/strings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/status.h"
#include "common/unique_fd.h"

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

std::string Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3F);
    }
    // Overlong forms, surrogates and values beyond U+10FFFF are not valid UTF-8 either.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) {
      ok = false;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
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
  if (v && !std::isfinite(*v)) return std::nullopt;  // NaN and inf are not readings
  return v;
}

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  // open + fstat + read on the one descriptor: no window between the check and the read.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return ErrnoError("cannot open " + path, errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read " + path, errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return InvalidArgument(path + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string FormatHostPort(std::string_view host, int port) {
  std::string out = host.find(':') != std::string_view::npos ? "[" + std::string(host) + "]"
                                                              : std::string(host);
  return out + ":" + std::to_string(port);
}

Result<std::pair<std::string, int>> ParseHostPort(std::string_view host_port) {
  const std::string text(host_port);
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return InvalidArgument("listen address '" + text + "' is not HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto port = ParseInt(text.substr(colon + 1));
  if (!port || *port < 0 || *port > 65535) {
    return InvalidArgument("listen address '" + text + "': port must be 0-65535");
  }
  return std::make_pair(host, static_cast<int>(*port));
}

bool ValidLogLevel(std::string_view l) {
  return l == "trace" || l == "debug" || l == "info" || l == "warn" || l == "error" || l == "off";
}

bool ValidLabelName(std::string_view s) {
  if (s.empty() || (s.size() >= 2 && s.substr(0, 2) == "__")) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  const std::string original(text);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  uint64_t number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  const std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  const uint64_t kMax = uint64_t{100} * 86400 * 1000;
  uint64_t scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s" || unit.empty()) {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60 * 1000;
  } else if (unit == "h") {
    scale = 3600 * 1000;
  }
  if (ec != std::errc() || end == text.data() || scale == 0 || number > kMax / scale) {
    return InvalidArgument("'" + original + "' is not a duration (e.g. 500ms, 30s, 5m, 1h)");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(number * scale));
}

std::string HexAddress(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

bool SecretMatches(std::string_view expected, std::string_view given) {
  volatile unsigned char diff = expected.size() != given.size() ? 1 : 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char other = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (static_cast<unsigned char>(expected[i]) ^ other);
  }
  return diff == 0;
}

}  // namespace flyt
