#include "ctl/render_fields.h"

#include <cmath>

#include "ctl/render.h"

namespace flyt::ctl::render_fields {

using nlohmann::json;

const json* Find(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> Text(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return Printable(v->get<std::string>());
}

std::string TextOr(const json& j, const char* key, const char* fallback) {
  auto t = Text(j, key);
  return t && !t->empty() ? *t : std::string(fallback);
}

std::optional<double> Number(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  double d = v->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<int64_t> Integer(const json& j, const char* key) {
  auto d = Number(j, key);
  if (!d || *d < -9e15 || *d > 9e15) return std::nullopt;
  return static_cast<int64_t>(std::llround(*d));
}

bool Flag(const json& j, const char* key) {
  const json* v = Find(j, key);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

const json& Array(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json* v = Find(j, key);
  return v != nullptr && v->is_array() ? *v : kEmpty;
}

std::string Clip(const std::string& s, size_t max) {
  size_t points = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) continue;
    if (++points == max) {
      size_t end = i + 1;
      while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) ++end;
      if (end == s.size()) return s;
      return s.substr(0, i) + "…";
    }
  }
  return s;
}

std::string StateCounts(const std::map<std::string, int>& counts) {
  std::string out;
  for (const auto& [state, n] : counts) {
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + state;
  }
  return out;
}

}  // namespace flyt::ctl::render_fields
