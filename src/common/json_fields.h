// JsonFields: reads the fields of a JSON request body, each checked, with the field named in
// every error.
//
// A server that takes JSON from the network must turn every wrong value into a clear 400 that
// names the field, never an exception from nlohmann's get<T>() and never a silent wrap-around
// (18446744073709551615 read as int64_t is -1). JsonFields does that once for every handler:
// typed getters for strings, booleans, integers and numbers with ranges, arrays, objects, enums
// from a list and string maps (labels), each in a required form (absent or null is an error) and
// an optional one (absent or null leaves the caller's default). Every error is InvalidArgument
// and its message begins with the field's path ("scheduling.priority must be ...").
//
// A JsonFields refers to the JSON value it reads (the caller keeps it alive) and owns nothing
// else. It is immutable after construction and may be read from any thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace flyt {

class JsonFields {
 public:
  // Reads `object`; fields are named `<prefix><key>` in errors. A value that is not an object
  // reads as one with no fields (use Of() to refuse it instead).
  explicit JsonFields(const nlohmann::json& object, std::string prefix = "");

  // The fields of `value`, which must be a JSON object; `name` names it in the error.
  static Result<JsonFields> Of(const nlohmann::json& value, std::string_view name);

  // Refuses any field not in `allowed`: "unknown field 'x' (expected a, b)".
  Status Only(std::initializer_list<std::string_view> allowed) const;
  // Whether `key` is present and not null.
  bool Has(std::string_view key) const;
  // The path of `key` as errors name it.
  std::string Name(std::string_view key) const { return prefix_ + std::string(key); }

  // Strings of at most `max_len` bytes.
  Status OptionalString(std::string_view key, size_t max_len, std::string& out) const;
  Result<std::string> RequiredString(std::string_view key, size_t max_len) const;

  Status OptionalBool(std::string_view key, bool& out) const;
  Result<bool> RequiredBool(std::string_view key) const;

  // Integers in [min, max]. A fraction (1.5), a string, or a value outside the target type
  // (a negative for an unsigned field, 2^64-1 for a signed one) is an error.
  template <typename Int>
  Status OptionalInt(std::string_view key, Int min, Int max, Int& out) const;
  template <typename Int>
  Result<Int> RequiredInt(std::string_view key, Int min, Int max) const;

  // Any JSON number (integer or not) in [min, max]; NaN never passes.
  Status OptionalNumber(std::string_view key, double min, double max, double& out) const;
  Result<double> RequiredNumber(std::string_view key, double min, double max) const;

  // An array (of at most `max_items`) or an object; `out` points into the JSON read (it stays
  // null when absent).
  Status OptionalArray(std::string_view key, size_t max_items, const nlohmann::json*& out) const;
  Result<const nlohmann::json*> RequiredArray(std::string_view key, size_t max_items) const;
  Status OptionalObject(std::string_view key, const nlohmann::json*& out) const;
  Result<const nlohmann::json*> RequiredObject(std::string_view key) const;
  // The fields of a nested object, named "<key>.<field>" in errors; empty when absent.
  Result<JsonFields> OptionalFields(std::string_view key) const;

  // A string that must be one of `values`: "policy must be score, binpack or spread".
  Status OptionalEnum(std::string_view key, std::initializer_list<std::string_view> values,
                      std::string& out) const;
  Result<std::string> RequiredEnum(std::string_view key,
                                   std::initializer_list<std::string_view> values) const;

  // An object of at most `max_entries` string values (labels): keys 1..max_key_len bytes, values
  // at most max_value_len. Entries are added to `out`.
  Status OptionalStringMap(std::string_view key, size_t max_entries, size_t max_key_len,
                           size_t max_value_len, std::map<std::string, std::string>& out) const;

 private:
  // The value of a present, non-null field, or null.
  const nlohmann::json* Find(std::string_view key) const;
  Status Missing(std::string_view key) const;
  Status SignedIn(std::string_view key, int64_t min, int64_t max, int64_t& out) const;
  Status UnsignedIn(std::string_view key, uint64_t min, uint64_t max, uint64_t& out) const;

  const nlohmann::json* object_;
  std::string prefix_;
};

template <typename Int>
Status JsonFields::OptionalInt(std::string_view key, Int min, Int max, Int& out) const {
  static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>, "an integer type");
  if constexpr (std::is_signed_v<Int>) {
    int64_t v = out;
    FLYT_RETURN_IF_ERROR(SignedIn(key, min, max, v));
    out = static_cast<Int>(v);
  } else {
    uint64_t v = out;
    FLYT_RETURN_IF_ERROR(UnsignedIn(key, min, max, v));
    out = static_cast<Int>(v);
  }
  return Status::Ok();
}

template <typename Int>
Result<Int> JsonFields::RequiredInt(std::string_view key, Int min, Int max) const {
  if (!Has(key)) return Missing(key);
  Int out{};
  FLYT_RETURN_IF_ERROR(OptionalInt(key, min, max, out));
  return out;
}

}  // namespace flyt
