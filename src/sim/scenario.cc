#include "sim/scenario.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "common/strings.h"
#include "common/toml_reader.h"

namespace flyt::sim {
namespace {

constexpr std::pair<Field, const char*> kFieldNames[] = {
    {Field::kMemory, "memory"},
    {Field::kUtilization, "utilization"},
    {Field::kTemperature, "temperature"},
    {Field::kMemoryTemperature, "memory_temperature"},
    {Field::kPower, "power"},
    {Field::kPowerLimit, "power_limit"},
    {Field::kEnergy, "energy"},
    {Field::kClocks, "clocks"},
    {Field::kMaxClocks, "max_clocks"},
    {Field::kCores, "cores"},
    {Field::kPcie, "pcie"},
    {Field::kCodec, "codec"},
    {Field::kFan, "fan"},
    {Field::kPerformanceState, "pstate"},
    {Field::kComputeMode, "compute_mode"},
    {Field::kMig, "mig"},
    {Field::kEcc, "ecc"},
    {Field::kClockReasons, "clock_reasons"},
    {Field::kProcesses, "processes"},
    {Field::kProcessUtilization, "process_utilization"},
    {Field::kSerial, "serial"},
    {Field::kEvents, "events"},
};

constexpr std::pair<const char*, int> kErrorNames[] = {
    {"timeout", 10},     {"unknown", 999},          {"not_supported", 3}, {"no_permission", 4},
    {"gpu_is_lost", 15}, {"insufficient_power", 8}, {"irq_issue", 11},    {"no_data", 21},
};

constexpr double kMib = 1024.0 * 1024.0;

// Bounds that keep every value a scenario can give realistic and every
// computation on it finite and quick (see EnergyAt). A file beyond them is
// refused with the field named.
constexpr double kMaxTimeS = 1e7;  // ~116 days: any time or period in a scenario
constexpr double kMinPeriodS = 1e-3;
constexpr double kMaxMemoryMib = 16777216;  // 16 TiB
constexpr double kMaxWatts = 100000;
constexpr double kMaxMhz = 100000;
constexpr size_t kMaxGpus = 64;
constexpr size_t kMaxProcesses = 100000;
constexpr size_t kMaxFaults = 10000;
constexpr size_t kMaxScenarioBytes = 1u << 20;
constexpr size_t kMaxLineBytes = 16384;  // also bounds dotted-key depth, which toml++ recurses on
constexpr size_t kMaxReplayBytes = 16u << 20;

// TomlReader plus the typed getters scenarios need; messages "<file>:<line>: <field>: <problem>".
class Parser : public TomlReader {
 public:
  using TomlReader::TomlReader;

  Result<double> Number(const toml::table& t, const char* key, const std::string& field,
                        std::optional<double> fallback, double min = -1e300,
                        double max = 1e300) const {
    const toml::node* node = t.get(key);
    if (node == nullptr) {
      if (fallback) return *fallback;
      return Error(&t, field + "." + key, "required number is missing");
    }
    std::optional<double> v;
    if (auto i = node->value<int64_t>(); i && node->is_integer()) v = static_cast<double>(*i);
    if (auto d = node->value<double>(); d && node->is_floating_point()) v = *d;
    if (!v || !std::isfinite(*v)) return Error(node, field + "." + key, "expected a finite number");
    if (!(*v >= min && *v <= max)) {
      return Error(node, field + "." + key,
                   "value " + Fmt(*v) + " is out of range [" + Fmt(min) + ", " + Fmt(max) + "]");
    }
    return *v;
  }

  Result<std::string> String(const toml::table& t, const char* key, const std::string& field,
                             std::optional<std::string> fallback) const {
    const toml::node* node = t.get(key);
    if (node == nullptr) {
      if (fallback) return *fallback;
      return Error(&t, field + "." + key, "required string is missing");
    }
    auto v = node->value<std::string>();
    if (!v || !node->is_string()) return Error(node, field + "." + key, "expected a string");
    return *v;
  }

  Result<bool> Bool(const toml::table& t, const char* key, const std::string& field,
                    bool fallback) const {
    const toml::node* node = t.get(key);
    if (node == nullptr) return fallback;
    if (!node->is_boolean()) return Error(node, field + "." + key, "expected true or false");
    return *node->value<bool>();
  }

  Result<Load> ParseLoad(const toml::node& node, const std::string& field,
                         const std::filesystem::path& dir, double min, double max) const;

  static std::string Fmt(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.15g", v);
    return buf;
  }

};

Result<std::vector<std::pair<double, double>>> ReadReplayCsv(const Parser& p,
                                                             const toml::node* node,
                                                             const std::string& field,
                                                             const std::string& path,
                                                             const std::string& column) {
  auto text = ReadFile(path, kMaxReplayBytes);
  if (!text.ok()) return p.Error(node, field + ".file", text.status().message());
  std::vector<std::pair<double, double>> points;
  int col = -1;
  int line_no = 0;
  for (std::string_view line : Split(*text, '\n')) {
    ++line_no;
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    auto cells = Split(line, ',');
    if (col < 0) {
      // Header row: "t_s,<column>,...". The column is found by name, else by
      // 1-based number.
      for (size_t i = 0; i < cells.size(); ++i) {
        if (Trim(cells[i]) == column) col = static_cast<int>(i);
      }
      if (col < 0) {
        if (auto n = ParseInt(column); n && *n >= 1 && static_cast<size_t>(*n) < cells.size()) {
          col = static_cast<int>(*n);
        }
      }
      if (col <= 0) {
        return p.Error(node, field + ".column",
                       path + ":" + std::to_string(line_no) + ": no column '" + column +
                           "' in the header (the first column is time in seconds)");
      }
      continue;
    }
    if (static_cast<int>(cells.size()) <= col) {
      return p.Error(node, field + ".file",
                     path + ":" + std::to_string(line_no) + ": row has " +
                         std::to_string(cells.size()) + " columns, expected at least " +
                         std::to_string(col + 1));
    }
    auto t = ParseDouble(cells[0]);
    auto v = ParseDouble(cells[static_cast<size_t>(col)]);
    if (!t || !v) {
      return p.Error(node, field + ".file",
                     path + ":" + std::to_string(line_no) + ": not a number");
    }
    if (!points.empty() && *t <= points.back().first) {
      return p.Error(node, field + ".file",
                     path + ":" + std::to_string(line_no) + ": time must increase");
    }
    points.emplace_back(*t, *v);
  }
  if (points.empty()) return p.Error(node, field + ".file", path + ": no data rows");
  return points;
}

Result<Load> Parser::ParseLoad(const toml::node& node, const std::string& field,
                               const std::filesystem::path& dir, double min, double max) const {
  Load load;
  if (node.is_number()) {
    double v =
        node.is_integer() ? static_cast<double>(*node.value<int64_t>()) : *node.value<double>();
    if (!(v >= min && v <= max)) {
      return Error(&node, field,
                   "value " + Fmt(v) + " is out of range [" + Fmt(min) + ", " + Fmt(max) + "]");
    }
    load.value = v;
    return load;
  }
  const toml::table* t = node.as_table();
  if (t == nullptr) return Error(&node, field, "expected a number or a table with `kind`");
  FLYT_ASSIGN_OR_RETURN(std::string kind, String(*t, "kind", field, std::nullopt));
  if (kind == "constant") {
    FLYT_RETURN_IF_ERROR(CheckKeys(*t, field, {"kind", "value"}));
    FLYT_ASSIGN_OR_RETURN(load.value, Number(*t, "value", field, std::nullopt, min, max));
  } else if (kind == "ramp") {
    load.kind = LoadKind::kRamp;
    FLYT_RETURN_IF_ERROR(CheckKeys(*t, field, {"kind", "from", "to", "start_s", "duration_s"}));
    FLYT_ASSIGN_OR_RETURN(load.from, Number(*t, "from", field, std::nullopt, min, max));
    FLYT_ASSIGN_OR_RETURN(load.to, Number(*t, "to", field, std::nullopt, min, max));
    FLYT_ASSIGN_OR_RETURN(load.start_s, Number(*t, "start_s", field, 0.0, 0, kMaxTimeS));
    FLYT_ASSIGN_OR_RETURN(load.duration_s,
                          Number(*t, "duration_s", field, std::nullopt, 0, kMaxTimeS));
  } else if (kind == "sine") {
    load.kind = LoadKind::kSine;
    FLYT_RETURN_IF_ERROR(
        CheckKeys(*t, field, {"kind", "mean", "amplitude", "period_s", "phase_s"}));
    FLYT_ASSIGN_OR_RETURN(load.mean, Number(*t, "mean", field, std::nullopt, min, max));
    FLYT_ASSIGN_OR_RETURN(load.amplitude,
                          Number(*t, "amplitude", field, std::nullopt, 0, max - min));
    FLYT_ASSIGN_OR_RETURN(load.period_s,
                          Number(*t, "period_s", field, std::nullopt, kMinPeriodS, kMaxTimeS));
    FLYT_ASSIGN_OR_RETURN(load.phase_s, Number(*t, "phase_s", field, 0.0, -kMaxTimeS, kMaxTimeS));
  } else if (kind == "square") {
    load.kind = LoadKind::kSquare;
    FLYT_RETURN_IF_ERROR(
        CheckKeys(*t, field, {"kind", "low", "high", "period_s", "duty", "phase_s"}));
    FLYT_ASSIGN_OR_RETURN(load.low, Number(*t, "low", field, std::nullopt, min, max));
    FLYT_ASSIGN_OR_RETURN(load.high, Number(*t, "high", field, std::nullopt, min, max));
    FLYT_ASSIGN_OR_RETURN(load.period_s,
                          Number(*t, "period_s", field, std::nullopt, kMinPeriodS, kMaxTimeS));
    FLYT_ASSIGN_OR_RETURN(load.duty, Number(*t, "duty", field, 0.5, 0, 1));
    FLYT_ASSIGN_OR_RETURN(load.phase_s, Number(*t, "phase_s", field, 0.0, -kMaxTimeS, kMaxTimeS));
  } else if (kind == "step") {
    load.kind = LoadKind::kStep;
    FLYT_RETURN_IF_ERROR(CheckKeys(*t, field, {"kind", "points", "loop"}));
    const toml::array* pts = t->get_as<toml::array>("points");
    if (pts == nullptr || pts->empty()) {
      return Error(t, field + ".points", "expected a non-empty array of [t_s, value] pairs");
    }
    for (size_t i = 0; i < pts->size(); ++i) {
      const toml::array* pair = pts->get(i)->as_array();
      std::string f = field + ".points[" + std::to_string(i) + "]";
      if (pair == nullptr || pair->size() != 2 || !pair->get(0)->is_number() ||
          !pair->get(1)->is_number()) {
        return Error(pts->get(i), f, "expected [t_s, value]");
      }
      auto num = [](const toml::node* n) {
        return n->is_integer() ? static_cast<double>(*n->value<int64_t>()) : *n->value<double>();
      };
      double pt = num(pair->get(0)), pv = num(pair->get(1));
      if (!(pt >= 0 && pt <= kMaxTimeS)) {
        return Error(pts->get(i), f,
                     "time " + Fmt(pt) + " is out of range [0, " + Fmt(kMaxTimeS) + "]");
      }
      if (!(pv >= min && pv <= max)) {
        return Error(pts->get(i), f,
                     "value " + Fmt(pv) + " is out of range [" + Fmt(min) + ", " + Fmt(max) + "]");
      }
      if (!load.points.empty() && pt <= load.points.back().first) {
        return Error(pts->get(i), f, "times must increase");
      }
      load.points.emplace_back(pt, pv);
    }
    FLYT_ASSIGN_OR_RETURN(load.loop, Bool(*t, "loop", field, false));
  } else if (kind == "replay") {
    load.kind = LoadKind::kReplay;
    FLYT_RETURN_IF_ERROR(CheckKeys(*t, field, {"kind", "file", "column", "interpolate", "loop"}));
    FLYT_ASSIGN_OR_RETURN(std::string file, String(*t, "file", field, std::nullopt));
    FLYT_ASSIGN_OR_RETURN(std::string column, String(*t, "column", field, std::string("1")));
    std::filesystem::path path(file);
    if (path.is_relative()) path = dir / path;
    FLYT_ASSIGN_OR_RETURN(load.points, ReadReplayCsv(*this, t, field, path.string(), column));
    for (const auto& [pt, pv] : load.points) {
      if (!(pt >= 0 && pt <= kMaxTimeS)) {
        return Error(
            t, field + ".file",
            path.string() + ": time " + Fmt(pt) + " is out of range [0, " + Fmt(kMaxTimeS) + "]");
      }
      if (!(pv >= min && pv <= max)) {
        return Error(t, field + ".file",
                     path.string() + ": value " + Fmt(pv) + " at t=" + Fmt(pt) +
                         " is out of range [" + Fmt(min) + ", " + Fmt(max) + "]");
      }
    }
    FLYT_ASSIGN_OR_RETURN(load.interpolate, Bool(*t, "interpolate", field, true));
    FLYT_ASSIGN_OR_RETURN(load.loop, Bool(*t, "loop", field, false));
  } else {
    return Error(
        t->get("kind"), field + ".kind",
        "unknown kind '" + kind + "' (expected constant, ramp, sine, square, step, replay)");
  }
  return load;
}

// Calls `fn(table, field)` for each table of the [[key]] array ("gpu[2]" as the
// field name).
template <typename Fn>
Status ForEachTable(const Parser& p, const toml::table& root, const char* key, Fn fn) {
  const toml::node* node = root.get(key);
  if (node == nullptr) return Status::Ok();
  const toml::array* arr = node->as_array();
  if (arr == nullptr) return p.Error(node, key, std::string("expected [[") + key + "]] tables");
  for (size_t k = 0; k < arr->size(); ++k) {
    std::string field = std::string(key) + "[" + std::to_string(k) + "]";
    const toml::table* t = arr->get(k)->as_table();
    if (t == nullptr) return p.Error(arr->get(k), field, "expected a table");
    FLYT_RETURN_IF_ERROR(fn(t, field));
  }
  return Status::Ok();
}

std::string DeriveUuid(const std::string& scenario, uint32_t index) {
  // FNV-1a over the scenario name and index: stable across runs, distinct per
  // GPU.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint8_t b) {
    h ^= b;
    h *= 1099511628211ULL;
  };
  for (char c : scenario) mix(static_cast<uint8_t>(c));
  for (int i = 0; i < 4; ++i) mix(static_cast<uint8_t>(index >> (8 * i)));
  uint64_t h2 = h * 0x9E3779B97F4A7C15ULL + index;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h >> 32),
                static_cast<unsigned>((h >> 16) & 0xffff), static_cast<unsigned>(h & 0xffff),
                static_cast<unsigned>(h2 >> 48),
                static_cast<unsigned long long>(h2 & 0xffffffffffffULL));
  return buf;
}

// Picks element `i` of an array-valued key, or the scalar for a single GPU, or
// nullopt.
Result<std::optional<std::string>> PerGpuString(const Parser& p, const toml::table& t,
                                                const char* scalar_key, const char* array_key,
                                                const std::string& field, uint32_t i,
                                                uint32_t count) {
  if (const toml::node* n = t.get(array_key)) {
    const toml::array* arr = n->as_array();
    if (arr == nullptr || arr->size() != count) {
      return p.Error(n, field + "." + array_key,
                     "expected an array of " + std::to_string(count) + " strings (one per GPU)");
    }
    auto v = arr->get(i)->value<std::string>();
    if (!v) return p.Error(arr->get(i), field + "." + array_key, "expected a string");
    return std::optional<std::string>(*v);
  }
  if (const toml::node* n = t.get(scalar_key)) {
    if (count != 1) {
      return p.Error(n, field + "." + scalar_key,
                     std::string("with count > 1 use `") + array_key + "` (one per GPU)");
    }
    auto v = n->value<std::string>();
    if (!v) return p.Error(n, field + "." + scalar_key, "expected a string");
    return std::optional<std::string>(*v);
  }
  return std::optional<std::string>();
}

Status ParseGpus(const Parser& p, const toml::table& root, const std::filesystem::path& dir,
                 Scenario& s) {
  const toml::node* node = root.get("gpu");
  if (node == nullptr) return p.Error(&root, "gpu", "a scenario needs at least one [[gpu]]");
  // Typical HGX bus numbers, used when a scenario does not give its own.
  static const int kBuses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
  FLYT_RETURN_IF_ERROR(
      ForEachTable(p, root, "gpu", [&](const toml::table* t, const std::string& field) -> Status {
        FLYT_RETURN_IF_ERROR(p.CheckKeys(*t, field,
                                         {"count",
                                          "name",
                                          "uuid",
                                          "uuids",
                                          "pci_bus_id",
                                          "pci_bus_ids",
                                          "serial",
                                          "serials",
                                          "pci_device_id",
                                          "memory_total_mib",
                                          "memory_reserved_mib",
                                          "memory_base_used_mib",
                                          "power_limit_w",
                                          "idle_power_w",
                                          "max_power_w",
                                          "max_sm_clock_mhz",
                                          "idle_sm_clock_mhz",
                                          "max_mem_clock_mhz",
                                          "cores",
                                          "idle_temperature_c",
                                          "max_temperature_c",
                                          "fan",
                                          "mig",
                                          "compute_mode",
                                          "utilization",
                                          "memory_utilization",
                                          "memory_used_mib",
                                          "encoder_utilization",
                                          "decoder_utilization",
                                          "unsupported"}));
        FLYT_ASSIGN_OR_RETURN(double count_d, p.Number(*t, "count", field, 1.0, 1, kMaxGpus));
        auto count = static_cast<uint32_t>(count_d);
        if (s.gpus.size() + count > kMaxGpus) {
          return p.Error(t, field + ".count",
                         "a scenario has at most " + std::to_string(kMaxGpus) + " GPUs");
        }
        GpuSpec base;
        FLYT_ASSIGN_OR_RETURN(base.name, p.String(*t, "name", field, std::nullopt));
        FLYT_ASSIGN_OR_RETURN(
            double mem, p.Number(*t, "memory_total_mib", field, std::nullopt, 1, kMaxMemoryMib));
        FLYT_ASSIGN_OR_RETURN(double reserved,
                              p.Number(*t, "memory_reserved_mib", field, 0.0, 0, mem));
        FLYT_ASSIGN_OR_RETURN(double base_used,
                              p.Number(*t, "memory_base_used_mib", field, 0.0, 0, mem - reserved));
        base.memory_total_bytes = static_cast<uint64_t>(mem * kMib);
        base.memory_reserved_bytes = static_cast<uint64_t>(reserved * kMib);
        base.memory_base_used_bytes = static_cast<uint64_t>(base_used * kMib);
        FLYT_ASSIGN_OR_RETURN(double limit,
                              p.Number(*t, "power_limit_w", field, std::nullopt, 1, kMaxWatts));
        FLYT_ASSIGN_OR_RETURN(double idle_w,
                              p.Number(*t, "idle_power_w", field, limit * 0.1, 0, limit));
        FLYT_ASSIGN_OR_RETURN(
            double max_w, p.Number(*t, "max_power_w", field, limit * 0.95, idle_w, limit * 1.1));
        base.power_limit_mw = static_cast<uint32_t>(limit * 1000);
        base.idle_power_mw = static_cast<uint32_t>(idle_w * 1000);
        base.max_power_mw = static_cast<uint32_t>(max_w * 1000);
        FLYT_ASSIGN_OR_RETURN(double sm,
                              p.Number(*t, "max_sm_clock_mhz", field, std::nullopt, 1, kMaxMhz));
        FLYT_ASSIGN_OR_RETURN(double idle_sm,
                              p.Number(*t, "idle_sm_clock_mhz", field, 210.0, 0, sm));
        FLYT_ASSIGN_OR_RETURN(double memclk,
                              p.Number(*t, "max_mem_clock_mhz", field, std::nullopt, 1, kMaxMhz));
        base.max_sm_clock_mhz = static_cast<uint32_t>(sm);
        base.idle_sm_clock_mhz = static_cast<uint32_t>(idle_sm);
        base.max_mem_clock_mhz = static_cast<uint32_t>(memclk);
        FLYT_ASSIGN_OR_RETURN(double cores, p.Number(*t, "cores", field, 0.0, 0, 1 << 20));
        base.cores = static_cast<uint32_t>(cores);
        FLYT_ASSIGN_OR_RETURN(double idle_t,
                              p.Number(*t, "idle_temperature_c", field, 30.0, 0, 120));
        FLYT_ASSIGN_OR_RETURN(double max_t,
                              p.Number(*t, "max_temperature_c", field, 75.0, idle_t, 120));
        base.idle_temperature_c = static_cast<uint32_t>(idle_t);
        base.max_temperature_c = static_cast<uint32_t>(max_t);
        FLYT_ASSIGN_OR_RETURN(base.has_fan, p.Bool(*t, "fan", field, false));
        FLYT_ASSIGN_OR_RETURN(base.mig_enabled, p.Bool(*t, "mig", field, false));
        FLYT_ASSIGN_OR_RETURN(base.compute_mode,
                              p.String(*t, "compute_mode", field, std::string("default")));
        if (base.compute_mode != "default" && base.compute_mode != "exclusive_process" &&
            base.compute_mode != "prohibited") {
          return p.Error(t->get("compute_mode"), field + ".compute_mode",
                         "unknown mode '" + base.compute_mode +
                             "' (expected default, exclusive_process, prohibited)");
        }
        FLYT_ASSIGN_OR_RETURN(double dev_id,
                              p.Number(*t, "pci_device_id", field, 0.0, 0, 4294967295.0));
        base.pci_device_id = static_cast<uint32_t>(dev_id);
        if (const toml::node* u = t->get("utilization")) {
          FLYT_ASSIGN_OR_RETURN(base.utilization,
                                p.ParseLoad(*u, field + ".utilization", dir, 0, 100));
        }
        if (const toml::node* u = t->get("memory_utilization")) {
          FLYT_ASSIGN_OR_RETURN(Load l,
                                p.ParseLoad(*u, field + ".memory_utilization", dir, 0, 100));
          base.memory_utilization = l;
        }
        for (const char* key : {"encoder_utilization", "decoder_utilization"}) {
      if (const toml::node* u = t->get(key)) {
        FLYT_ASSIGN_OR_RETURN(Load l, p.ParseLoad(*u, field + "." + key, dir, 0, 100));
        (std::string_view(key) == "encoder_utilization" ? base.encoder_utilization
                                                        : base.decoder_utilization) = l;
      }
    }
    if (const toml::node* u = t->get("memory_used_mib")) {
          FLYT_ASSIGN_OR_RETURN(
              Load l, p.ParseLoad(*u, field + ".memory_used_mib", dir, 0, mem - reserved));
          base.memory_used_mib = l;
        }
        if (const toml::node* u = t->get("unsupported")) {
          const toml::array* list = u->as_array();
          if (list == nullptr)
            return p.Error(u, field + ".unsupported", "expected an array of field names");
          for (size_t i = 0; i < list->size(); ++i) {
            auto name = list->get(i)->value<std::string>();
            std::optional<Field> f = name ? FieldFromName(*name) : std::nullopt;
            if (!f) {
              return p.Error(list->get(i), field + ".unsupported[" + std::to_string(i) + "]",
                             "unknown field (expected one of: " + AllFieldNames() + ")");
            }
            base.unsupported.insert(*f);
          }
        }
        for (uint32_t i = 0; i < count; ++i) {
          GpuSpec g = base;
          g.index = static_cast<uint32_t>(s.gpus.size());
          FLYT_ASSIGN_OR_RETURN(auto uuid, PerGpuString(p, *t, "uuid", "uuids", field, i, count));
          g.uuid = uuid ? *uuid : DeriveUuid(s.name, g.index);
          FLYT_ASSIGN_OR_RETURN(auto bus,
                                PerGpuString(p, *t, "pci_bus_id", "pci_bus_ids", field, i, count));
          if (bus) {
            g.pci_bus_id = *bus;
          } else {
            char buf[32];
            std::snprintf(buf, sizeof(buf), "00000000:%02X:00.0",
                          kBuses[g.index % 8] + 0x100 * 0 + static_cast<int>(g.index / 8));
            g.pci_bus_id = buf;
          }
          FLYT_ASSIGN_OR_RETURN(auto serial,
                                PerGpuString(p, *t, "serial", "serials", field, i, count));
          g.serial = serial ? *serial : std::to_string(1654922000000ULL + g.index * 7919ULL);
          s.gpus.push_back(std::move(g));
        }
        return Status::Ok();
      }));
  // Every UUID and bus id must be unique: NVML never reports two devices with
  // the same identity.
  for (size_t a = 0; a < s.gpus.size(); ++a) {
    for (size_t b = a + 1; b < s.gpus.size(); ++b) {
      if (s.gpus[a].uuid == s.gpus[b].uuid) {
        return p.Error(node, "gpu",
                       "GPUs " + std::to_string(a) + " and " + std::to_string(b) +
                           " have the same uuid " + s.gpus[a].uuid);
      }
      if (s.gpus[a].pci_bus_id == s.gpus[b].pci_bus_id) {
        return p.Error(node, "gpu",
                       "GPUs " + std::to_string(a) + " and " + std::to_string(b) +
                           " have the same pci_bus_id " + s.gpus[a].pci_bus_id);
      }
    }
  }
  return Status::Ok();
}

Status ParseProcesses(const Parser& p, const toml::table& root, const std::filesystem::path& dir,
                      Scenario& s) {
  return ForEachTable(
      p, root, "process", [&](const toml::table* t, const std::string& field) -> Status {
        FLYT_RETURN_IF_ERROR(p.CheckKeys(*t, field,
                                         {"gpu", "gpus", "pid", "kind", "start_s", "stop_s",
                                          "memory_mib", "sm_util", "mem_util"}));
        std::vector<uint32_t> gpus;
        if (const toml::node* g = t->get("gpus")) {
          const toml::array* list = g->as_array();
          if (list == nullptr || list->empty())
            return p.Error(g, field + ".gpus", "expected a non-empty array of GPU indexes");
          for (size_t i = 0; i < list->size(); ++i) {
            auto v = list->get(i)->value<int64_t>();
            if (!v || *v < 0 || static_cast<size_t>(*v) >= s.gpus.size()) {
              return p.Error(
                  list->get(i), field + ".gpus[" + std::to_string(i) + "]",
                  "no such GPU (the scenario has " + std::to_string(s.gpus.size()) + ")");
            }
            gpus.push_back(static_cast<uint32_t>(*v));
          }
        } else {
          FLYT_ASSIGN_OR_RETURN(double gpu_index, p.Number(*t, "gpu", field, std::nullopt, 0,
                                                           static_cast<double>(s.gpus.size()) - 1));
          gpus.push_back(static_cast<uint32_t>(gpu_index));
        }
        ProcessSpec base;
        FLYT_ASSIGN_OR_RETURN(double pid, p.Number(*t, "pid", field, std::nullopt, 1, 4194304));
        FLYT_ASSIGN_OR_RETURN(std::string kind,
                              p.String(*t, "kind", field, std::string("compute")));
        if (kind == "graphics") {
          base.kind = ProcessKind::kGraphics;
        } else if (kind != "compute") {
          return p.Error(t->get("kind"), field + ".kind", "expected compute or graphics");
        }
        FLYT_ASSIGN_OR_RETURN(base.start_s, p.Number(*t, "start_s", field, 0.0, 0, kMaxTimeS));
        if (t->get("stop_s") != nullptr) {
          FLYT_ASSIGN_OR_RETURN(
              base.stop_s, p.Number(*t, "stop_s", field, std::nullopt, base.start_s, kMaxTimeS));
        }
        FLYT_ASSIGN_OR_RETURN(double mem,
                              p.Number(*t, "memory_mib", field, std::nullopt, 0, kMaxMemoryMib));
        base.memory_bytes = static_cast<uint64_t>(mem * kMib);
        if (const toml::node* u = t->get("sm_util")) {
          FLYT_ASSIGN_OR_RETURN(Load l, p.ParseLoad(*u, field + ".sm_util", dir, 0, 100));
          base.sm_util = l;
        }
        if (const toml::node* u = t->get("mem_util")) {
          FLYT_ASSIGN_OR_RETURN(Load l, p.ParseLoad(*u, field + ".mem_util", dir, 0, 100));
          base.mem_util = l;
        }
        if (s.processes.size() + gpus.size() > kMaxProcesses) {
          return p.Error(t, field,
                         "a scenario has at most " + std::to_string(kMaxProcesses) + " processes");
        }
        for (size_t i = 0; i < gpus.size(); ++i) {
          ProcessSpec proc = base;
          proc.gpu = gpus[i];
          proc.pid = static_cast<uint32_t>(pid) + static_cast<uint32_t>(i);
          const GpuSpec& g = s.gpus[proc.gpu];
          uint64_t room = g.memory_total_bytes - g.memory_reserved_bytes - g.memory_base_used_bytes;
          if (proc.memory_bytes > room) {
            return p.Error(
                t->get("memory_mib"), field + ".memory_mib",
                "process needs more memory than GPU " + std::to_string(proc.gpu) + " has free");
          }
          s.processes.push_back(proc);
        }
        return Status::Ok();
      });
}

Status ParseFaults(const Parser& p, const toml::table& root, Scenario& s) {
  return ForEachTable(
      p, root, "fault", [&](const toml::table* t, const std::string& field) -> Status {
        FLYT_RETURN_IF_ERROR(
            p.CheckKeys(*t, field, {"kind", "gpu", "at_s", "until_s", "xid", "field", "error"}));
        Fault f;
        FLYT_ASSIGN_OR_RETURN(std::string kind, p.String(*t, "kind", field, std::nullopt));
        FLYT_ASSIGN_OR_RETURN(double gpu, p.Number(*t, "gpu", field, std::nullopt, 0,
                                                   static_cast<double>(s.gpus.size()) - 1));
        f.gpu = static_cast<uint32_t>(gpu);
        if (s.faults.size() >= kMaxFaults) {
          return p.Error(t, field,
                         "a scenario has at most " + std::to_string(kMaxFaults) + " faults");
        }
        FLYT_ASSIGN_OR_RETURN(f.at_s, p.Number(*t, "at_s", field, 0.0, 0, kMaxTimeS));
        if (kind == "lost") {
          f.kind = FaultKind::kLost;
          FLYT_RETURN_IF_ERROR(p.CheckKeys(*t, field, {"kind", "gpu", "at_s"}));
        } else if (kind == "xid") {
          f.kind = FaultKind::kXid;
          FLYT_RETURN_IF_ERROR(p.CheckKeys(*t, field, {"kind", "gpu", "at_s", "xid"}));
          FLYT_ASSIGN_OR_RETURN(double xid, p.Number(*t, "xid", field, std::nullopt, 1, 65535));
          f.xid = static_cast<uint64_t>(xid);
        } else if (kind == "error" || kind == "not_supported") {
          f.kind = kind == "error" ? FaultKind::kError : FaultKind::kNotSupported;
          if (t->get("until_s") != nullptr) {
            FLYT_ASSIGN_OR_RETURN(f.until_s,
                                  p.Number(*t, "until_s", field, std::nullopt, f.at_s, kMaxTimeS));
          }
          FLYT_ASSIGN_OR_RETURN(std::string name, p.String(*t, "field", field, std::nullopt));
          std::optional<Field> which = FieldFromName(name);
          if (!which) {
            return p.Error(
                t->get("field"), field + ".field",
                "unknown field '" + name + "' (expected one of: " + AllFieldNames() + ")");
          }
          f.field = *which;
          if (f.kind == FaultKind::kError) {
            FLYT_ASSIGN_OR_RETURN(std::string err,
                                  p.String(*t, "error", field, std::string("unknown")));
            auto it = std::find_if(std::begin(kErrorNames), std::end(kErrorNames),
                                   [&](const auto& e) { return err == e.first; });
            if (it == std::end(kErrorNames)) {
              return p.Error(t->get("error"), field + ".error",
                             "unknown error '" + err +
                                 "' (expected timeout, unknown, not_supported, "
                                 "no_permission, "
                                 "gpu_is_lost, insufficient_power, irq_issue, no_data)");
            }
            f.error_code = it->second;
          } else {
            FLYT_RETURN_IF_ERROR(
                p.CheckKeys(*t, field, {"kind", "gpu", "at_s", "until_s", "field"}));
          }
        } else {
          return p.Error(t->get("kind"), field + ".kind",
                         "unknown fault '" + kind + "' (expected lost, xid, error, not_supported)");
        }
        s.faults.push_back(f);
        return Status::Ok();
      });
}

}  // namespace

std::optional<Field> FieldFromName(std::string_view name) {
  for (const auto& [f, n] : kFieldNames) {
    if (name == n) return f;
  }
  return std::nullopt;
}

std::string AllFieldNames() {
  std::string out;
  for (const auto& [f, n] : kFieldNames) out += std::string(out.empty() ? "" : ", ") + n;
  return out;
}

double Load::At(double t) const {
  constexpr double kPi = 3.14159265358979323846;
  if (!std::isfinite(t)) t = 0;  // never reached through the simulator, which bounds time
  switch (kind) {
    case LoadKind::kConstant:
      return value;
    case LoadKind::kRamp:
      if (t <= start_s) return from;
      if (duration_s <= 0 || t >= start_s + duration_s) return to;
      return from + (to - from) * (t - start_s) / duration_s;
    case LoadKind::kSine:
      return mean + amplitude * std::sin(2 * kPi * (t + phase_s) / period_s);
    case LoadKind::kSquare: {
      double pos = std::fmod(t + phase_s, period_s);
      if (pos < 0) pos += period_s;
      return pos < duty * period_s ? high : low;
    }
    case LoadKind::kStep:
    case LoadKind::kReplay: {
      if (points.empty()) return 0;
      double span = points.back().first - points.front().first;
      if (loop && span > 0 && t > points.back().first) {
        t = points.front().first + std::fmod(t - points.front().first, span);
      }
      if (t <= points.front().first) return points.front().second;
      if (t >= points.back().first) return points.back().second;
      auto it = std::upper_bound(points.begin(), points.end(), t,
                                 [](double x, const auto& pt) { return x < pt.first; });
      const auto& hi = *it;
      const auto& lo = *(it - 1);
      if (kind == LoadKind::kStep || !interpolate) return lo.second;
      return lo.second + (hi.second - lo.second) * (t - lo.first) / (hi.first - lo.first);
    }
  }
  return 0;
}

Result<Scenario> ParseScenario(std::string_view text, const std::string& source) {
  Parser p(source);
  if (text.size() > kMaxScenarioBytes) {
    return InvalidArgument(source + ": larger than " + std::to_string(kMaxScenarioBytes) + " bytes");
  }
  FLYT_ASSIGN_OR_RETURN(toml::table root, p.Parse(text, kMaxLineBytes));
  Scenario s;
  s.path = source;
  std::filesystem::path dir = std::filesystem::path(source).parent_path();
  FLYT_RETURN_IF_ERROR(p.CheckKeys(root, "(top level)", {"scenario", "gpu", "process", "fault"}));
  const toml::table* meta = root.get_as<toml::table>("scenario");
  if (meta == nullptr) return p.Error(&root, "scenario", "the [scenario] table is missing");
  FLYT_RETURN_IF_ERROR(p.CheckKeys(*meta, "scenario",
                                   {"name", "description", "driver_version", "cuda_driver_version",
                                    "nvml_version", "epoch_s", "quirks"}));
  FLYT_ASSIGN_OR_RETURN(s.name, p.String(*meta, "name", "scenario", std::nullopt));
  FLYT_ASSIGN_OR_RETURN(s.description, p.String(*meta, "description", "scenario", std::string()));
  FLYT_ASSIGN_OR_RETURN(s.driver_version,
                        p.String(*meta, "driver_version", "scenario", s.driver_version));
  FLYT_ASSIGN_OR_RETURN(double cuda,
                        p.Number(*meta, "cuda_driver_version", "scenario", 13000.0, 1000, 99999));
  s.cuda_driver_version = static_cast<int>(cuda);
  FLYT_ASSIGN_OR_RETURN(s.nvml_version,
                        p.String(*meta, "nvml_version", "scenario", s.nvml_version));
  FLYT_ASSIGN_OR_RETURN(double epoch, p.Number(*meta, "epoch_s", "scenario",
                                               static_cast<double>(s.epoch_s), 0, 1e10));
  s.epoch_s = static_cast<int64_t>(epoch);
  if (const toml::node* q = meta->get("quirks")) {
    const toml::array* list = q->as_array();
    if (list == nullptr) return p.Error(q, "scenario.quirks", "expected an array of names");
    for (size_t i = 0; i < list->size(); ++i) {
      auto name = list->get(i)->value<std::string>();
      if (name && *name == "process_info_v3_stride_32") {
        s.quirk_process_v3_stride_32 = true;
      } else {
        return p.Error(list->get(i), "scenario.quirks[" + std::to_string(i) + "]",
                       "unknown quirk (expected process_info_v3_stride_32)");
      }
    }
  }
  FLYT_RETURN_IF_ERROR(ParseGpus(p, root, dir, s));
  FLYT_RETURN_IF_ERROR(ParseProcesses(p, root, dir, s));
  FLYT_RETURN_IF_ERROR(ParseFaults(p, root, s));
  s.processes_by_gpu.resize(s.gpus.size());
  for (size_t i = 0; i < s.processes.size(); ++i)
    s.processes_by_gpu[s.processes[i].gpu].push_back(i);
  return s;
}

Result<Scenario> LoadScenario(const std::string& path) {
  auto text = ReadFile(path, kMaxScenarioBytes);
  if (!text.ok()) return InvalidArgument("scenario " + text.status().message());
  return ParseScenario(*text, path);
}

GpuReading ReadingAt(const Scenario& scenario, const GpuSpec& gpu, double t) {
  GpuReading r;
  double util = std::clamp(gpu.utilization.At(t), 0.0, 100.0);
  r.gpu_util = static_cast<uint32_t>(std::lround(util));
  double mem_util = gpu.memory_utilization ? gpu.memory_utilization->At(t) : util * 0.6;
  r.mem_util = static_cast<uint32_t>(std::lround(std::clamp(mem_util, 0.0, 100.0)));

  const uint64_t room = gpu.memory_total_bytes - gpu.memory_reserved_bytes;
  uint64_t used = gpu.memory_base_used_bytes;
  if (gpu.memory_used_mib) {
    used = static_cast<uint64_t>(std::max(0.0, gpu.memory_used_mib->At(t)) * kMib);
  } else if (gpu.index < scenario.processes_by_gpu.size()) {
    for (size_t i : scenario.processes_by_gpu[gpu.index]) {
      const ProcessSpec& p = scenario.processes[i];
      if (p.Active(t)) used += p.memory_bytes;
    }
  }
  r.memory_used_bytes = std::min(used, room);

  double frac = util / 100.0;
  r.temperature_c = static_cast<uint32_t>(std::lround(
      gpu.idle_temperature_c + (gpu.max_temperature_c - gpu.idle_temperature_c) * frac));
  r.power_mw = PowerMwAt(gpu, t);
  r.sm_clock_mhz = r.gpu_util > 0 ? gpu.max_sm_clock_mhz : gpu.idle_sm_clock_mhz;
  r.mem_clock_mhz = gpu.max_mem_clock_mhz;
  r.pcie_rx_kb_per_s = static_cast<uint32_t>(std::lround(util * 2400.0));
  r.pcie_tx_kb_per_s = static_cast<uint32_t>(std::lround(util * 800.0));
  r.fan_percent = static_cast<uint32_t>(std::lround(30 + 0.7 * util));
  r.pstate = r.gpu_util > 0 ? 0 : 8;
  if (r.gpu_util == 0) r.clock_reasons |= 0x1;                          // GpuIdle
  if (r.power_mw >= gpu.power_limit_mw * 0.98) r.clock_reasons |= 0x4;  // SwPowerCap
  return r;
}

uint32_t PowerMwAt(const GpuSpec& gpu, double t) {
  double frac = std::clamp(gpu.utilization.At(t), 0.0, 100.0) / 100.0;
  return static_cast<uint32_t>(std::lround(
      gpu.idle_power_mw + (static_cast<double>(gpu.max_power_mw) - gpu.idle_power_mw) * frac));
}

Load::Shape Load::GetShape() const {
  switch (kind) {
    case LoadKind::kConstant:
      return {0, 1};
    case LoadKind::kRamp:
      return {start_s + duration_s, 1};
    case LoadKind::kSine:
    case LoadKind::kSquare:
      return {0, period_s};
    case LoadKind::kStep:
    case LoadKind::kReplay: {
      if (points.empty()) return {0, 1};
      double span = points.back().first - points.front().first;
      if (loop && span > 0) return {points.front().first, span};
      return {points.back().first, 1};
    }
  }
  return {0, 1};
}

namespace {

// Energy (mJ) from `from` to `from + len`, with power held for each whole
// second from `from`. `seg` (optional) remembers the whole seconds already
// summed for this start.
double IntegrateFrom(const GpuSpec& gpu, double from, double len, EnergyCache::Segment* seg) {
  const auto whole = static_cast<int64_t>(std::floor(len));
  EnergyCache::Segment local;
  EnergyCache::Segment& run = seg != nullptr ? *seg : local;
  if (run.start != from || run.whole_s > whole) run = EnergyCache::Segment{from, 0, 0};
  for (int64_t k = run.whole_s; k < whole; ++k) {
    run.mj += PowerMwAt(gpu, from + static_cast<double>(k));
  }
  run.whole_s = whole;
  return run.mj +
         PowerMwAt(gpu, from + static_cast<double>(whole)) * (len - static_cast<double>(whole));
}

}  // namespace

uint64_t EnergyAt(const GpuSpec& gpu, double t, EnergyCache* cache) {
  if (!(t > 0)) return 0;
  // Every load is periodic (or constant: period 1 s) after a settle time S. So
  //   E(t) = E(0..t)                        for t <= S
  //   E(t) = E(0..S) + k·E(one period) + E(period start..t)   otherwise, k =
  //   whole periods,
  // each piece integrated on a 1 s grid from its own start: a pure function of
  // t, whatever order times are asked in, and bounded work (scenario times and
  // periods are at most 1e7 s).
  EnergyCache local;
  EnergyCache& c = cache != nullptr ? *cache : local;
  const Load::Shape shape = gpu.utilization.GetShape();
  if (t <= shape.settle_s) {
    return static_cast<uint64_t>(IntegrateFrom(gpu, 0, t, &c.tail));
  }
  if (!c.have_fixed) {
    c.settle_mj = IntegrateFrom(gpu, 0, shape.settle_s, nullptr);
    c.period_mj = IntegrateFrom(gpu, shape.settle_s, shape.period_s, nullptr);
    c.have_fixed = true;
  }
  const double periods = std::floor((t - shape.settle_s) / shape.period_s);
  const double period_start = shape.settle_s + periods * shape.period_s;
  const double tail = IntegrateFrom(gpu, period_start, t - period_start, &c.tail);
  return static_cast<uint64_t>(c.settle_mj + periods * c.period_mj + tail);
}

ProcessReading ProcessReadingAt(const Scenario& scenario, const ProcessSpec& process, double t) {
  ProcessReading r;
  if (!process.Active(t)) return r;
  double sm;
  if (process.sm_util) {
    sm = process.sm_util->At(t);
  } else {
    int sharing = 0;
    if (process.gpu < scenario.processes_by_gpu.size()) {
      for (size_t i : scenario.processes_by_gpu[process.gpu]) {
        if (scenario.processes[i].Active(t)) ++sharing;
      }
    }
    sm = scenario.gpus[process.gpu].utilization.At(t) / std::max(1, sharing);
  }
  sm = std::clamp(sm, 0.0, 100.0);
  double mem = process.mem_util ? process.mem_util->At(t) : sm * 0.6;
  r.sm_util = static_cast<uint32_t>(std::lround(sm));
  r.mem_util = static_cast<uint32_t>(std::lround(std::clamp(mem, 0.0, 100.0)));
  return r;
}

}  // namespace flyt::sim
