#include "common/json_fields.h"

namespace flyt {

using nlohmann::json;

namespace {

// "a, b or c"
std::string OneOf(std::initializer_list<std::string_view> values) {
  std::string list;
  size_t i = 0;
  for (std::string_view v : values) {
    if (i > 0) list += i + 1 == values.size() ? " or " : ", ";
    list += v;
    ++i;
  }
  return list;
}

// 1e8 as "100000000", 0.5 as "0.5": the bounds as a person writes them.
std::string FormatNumber(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

JsonFields::JsonFields(const json& object, std::string prefix)
    : object_(&object), prefix_(std::move(prefix)) {}

Result<JsonFields> JsonFields::Of(const json& value, std::string_view name) {
  if (!value.is_object()) return InvalidArgument(std::string(name) + " must be an object");
  return JsonFields(value);
}

const json* JsonFields::Find(std::string_view key) const {
  if (!object_->is_object()) return nullptr;
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::Has(std::string_view key) const { return Find(key) != nullptr; }

Status JsonFields::Missing(std::string_view key) const {
  return InvalidArgument(Name(key) + " is missing");
}

Status JsonFields::Only(std::initializer_list<std::string_view> allowed) const {
  if (!object_->is_object()) return Status::Ok();
  for (const auto& [key, value] : object_->items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known) {
      std::string list;
      for (std::string_view a : allowed) {
        list += std::string(list.empty() ? "" : ", ") + std::string(a);
      }
      return InvalidArgument("unknown field '" + prefix_ + key + "' (expected " + list + ")");
    }
  }
  return Status::Ok();
}

Status JsonFields::OptionalString(std::string_view key, size_t max_len, std::string& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_string() || v->get_ref<const std::string&>().size() > max_len) {
    return InvalidArgument(Name(key) + " must be a string of at most " + std::to_string(max_len) +
                           " characters");
  }
  out = v->get<std::string>();
  return Status::Ok();
}

Result<std::string> JsonFields::RequiredString(std::string_view key, size_t max_len) const {
  if (!Has(key)) return Missing(key);
  std::string out;
  FLYT_RETURN_IF_ERROR(OptionalString(key, max_len, out));
  return out;
}

Status JsonFields::OptionalBool(std::string_view key, bool& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return InvalidArgument(Name(key) + " must be true or false");
  out = v->get<bool>();
  return Status::Ok();
}

Result<bool> JsonFields::RequiredBool(std::string_view key) const {
  if (!Has(key)) return Missing(key);
  bool out = false;
  FLYT_RETURN_IF_ERROR(OptionalBool(key, out));
  return out;
}

Status JsonFields::SignedIn(std::string_view key, int64_t min, int64_t max, int64_t& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  // nlohmann keeps integers above INT64_MAX as unsigned; get<int64_t>() would wrap them.
  const bool fits =
      v->is_number_integer() &&
      (!v->is_number_unsigned() ||
       v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  if (!fits || v->get<int64_t>() < min || v->get<int64_t>() > max) {
    return InvalidArgument(Name(key) + " must be an integer from " + std::to_string(min) + " to " +
                           std::to_string(max));
  }
  out = v->get<int64_t>();
  return Status::Ok();
}

Status JsonFields::UnsignedIn(std::string_view key, uint64_t min, uint64_t max,
                              uint64_t& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  const bool fits = v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0);
  if (!fits || v->get<uint64_t>() < min || v->get<uint64_t>() > max) {
    return InvalidArgument(Name(key) + " must be an integer from " + std::to_string(min) + " to " +
                           std::to_string(max));
  }
  out = v->get<uint64_t>();
  return Status::Ok();
}

Status JsonFields::OptionalNumber(std::string_view key, double min, double max, double& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  // The negated test turns NaN away too.
  if (!v->is_number() || !(v->get<double>() >= min && v->get<double>() <= max)) {
    return InvalidArgument(Name(key) + " must be a number from " + FormatNumber(min) + " to " +
                           FormatNumber(max));
  }
  out = v->get<double>();
  return Status::Ok();
}

Result<double> JsonFields::RequiredNumber(std::string_view key, double min, double max) const {
  if (!Has(key)) return Missing(key);
  double out = 0;
  FLYT_RETURN_IF_ERROR(OptionalNumber(key, min, max, out));
  return out;
}

Status JsonFields::OptionalArray(std::string_view key, size_t max_items, const json*& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_array()) return InvalidArgument(Name(key) + " must be an array");
  if (v->size() > max_items) {
    return InvalidArgument(Name(key) + " must be an array of at most " + std::to_string(max_items) +
                           " items");
  }
  out = v;
  return Status::Ok();
}

Result<const json*> JsonFields::RequiredArray(std::string_view key, size_t max_items) const {
  if (!Has(key)) return Missing(key);
  const json* out = nullptr;
  FLYT_RETURN_IF_ERROR(OptionalArray(key, max_items, out));
  return out;
}

Status JsonFields::OptionalObject(std::string_view key, const json*& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_object()) return InvalidArgument(Name(key) + " must be an object");
  out = v;
  return Status::Ok();
}

Result<const json*> JsonFields::RequiredObject(std::string_view key) const {
  if (!Has(key)) return Missing(key);
  const json* out = nullptr;
  FLYT_RETURN_IF_ERROR(OptionalObject(key, out));
  return out;
}

Result<JsonFields> JsonFields::OptionalFields(std::string_view key) const {
  static const json kEmpty = json::object();
  const json* v = &kEmpty;
  FLYT_RETURN_IF_ERROR(OptionalObject(key, v));
  return JsonFields(*v, Name(key) + ".");
}

Status JsonFields::OptionalEnum(std::string_view key,
                                std::initializer_list<std::string_view> values,
                                std::string& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  if (v->is_string()) {
    for (std::string_view allowed : values) {
      if (v->get_ref<const std::string&>() == allowed) {
        out = std::string(allowed);
        return Status::Ok();
      }
    }
  }
  return InvalidArgument(Name(key) + " must be " + OneOf(values));
}

Result<std::string> JsonFields::RequiredEnum(std::string_view key,
                                             std::initializer_list<std::string_view> values) const {
  if (!Has(key)) return Missing(key);
  std::string out;
  FLYT_RETURN_IF_ERROR(OptionalEnum(key, values, out));
  return out;
}

Status JsonFields::OptionalStringMap(std::string_view key, size_t max_entries, size_t max_key_len,
                                     size_t max_value_len,
                                     std::map<std::string, std::string>& out) const {
  const json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_object() || v->size() > max_entries) {
    return InvalidArgument(Name(key) + " must be an object of at most " +
                           std::to_string(max_entries) + " string labels");
  }
  for (const auto& [k, val] : v->items()) {
    if (k.empty() || k.size() > max_key_len || !val.is_string() ||
        val.get_ref<const std::string&>().size() > max_value_len) {
      return InvalidArgument(Name(key) + "." + k + " must be a string (names up to " +
                             std::to_string(max_key_len) + ", values up to " +
                             std::to_string(max_value_len) + " characters)");
    }
  }
  for (const auto& [k, val] : v->items()) out[k] = val.get<std::string>();
  return Status::Ok();
}

}  // namespace flyt
