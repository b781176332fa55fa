// TomlReader: the one place that turns TOML problems into messages a person can act on —
// "<file>:<line>: <key>: <problem>" — for every TOML file flyt reads (node-manager config,
// simulated-GPU scenarios).
//
// Parse() catches toml++'s parse exception at the boundary (no exception leaves it) and also
// refuses files whose lines are longer than a limit, which bounds the depth of dotted keys that
// toml++ recurses on. CheckKeys() refuses unknown keys, so a typo never silently becomes a
// default. Stateless apart from the source name; thread-safe.
#pragma once

#include <chrono>
#include <initializer_list>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "common/status.h"

namespace flyt {

class TomlReader {
 public:
  explicit TomlReader(std::string source) : source_(std::move(source)) {}

  Result<toml::table> Parse(std::string_view text, size_t max_line_bytes = 16384) const;

  // "<source>:<line of node>: <key>: <problem>" (without the line when the node has none).
  Status Error(const toml::node* node, const std::string& key, const std::string& problem) const;

  // Refuses keys of `table` not in `allowed`, naming the key as "<section>.<key>".
  Status CheckKeys(const toml::table& table, const std::string& section,
                   std::initializer_list<const char*> allowed) const;

  // Typed getters: leave `out` unchanged when the key is absent; a wrong type or a value out of
  // range is an Error naming "<section>.<key>".
  Status GetString(const toml::table& t, const std::string& section, const char* key,
                   std::string& out) const;
  Status GetInt(const toml::table& t, const std::string& section, const char* key, int64_t min,
                int64_t max, int64_t& out) const;
  Status GetDouble(const toml::table& t, const std::string& section, const char* key, double min,
                   double max, double& out) const;
  Status GetBool(const toml::table& t, const std::string& section, const char* key,
                 bool& out) const;
  // A duration: a string ParseDuration (common/strings.h) reads, or an integer of seconds, in
  // [min, max].
  Status GetDuration(const toml::table& t, const std::string& section, const char* key,
                     std::chrono::milliseconds min, std::chrono::milliseconds max,
                     std::chrono::milliseconds& out) const;
  // The [log] section every daemon's config has: `level` (trace, debug, info, warn, error, off).
  Status LogSection(const toml::table& root, std::string& level) const;
  // A [section] table of the root: nullptr when absent, an error when not a table.
  Result<const toml::table*> Section(const toml::table& root, const char* name) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace flyt
