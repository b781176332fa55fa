#include "gpu/smi_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "common/strings.h"

namespace flyt::gpu {
namespace {

constexpr std::string_view kSeparator = ", ";
constexpr std::string_view kFormat = "--format=csv,noheader,nounits";
constexpr uint64_t kBytesPerMiB = 1048576;

// What one CSV cell says.
enum class CellKind {
  kValue,   // a reading
  kAbsent,  // nvidia-smi could not give it: "[N/A]", "[Not Supported]", "", ...
  kLost,    // "[GPU is lost]": the GPU fell off the bus
};

CellKind Classify(std::string_view cell) {
  if (cell.empty()) return CellKind::kAbsent;
  const std::string lower = ToLower(cell);
  if (lower.find("gpu is lost") != std::string::npos) return CellKind::kLost;
  // nvidia-smi writes every "no value" answer in brackets ("[N/A]", "[Not Supported]",
  // "[Unknown Error]", "[GPU requires reset]", "[Insufficient Permissions]", ...), so any
  // bracketed cell is absent, including wordings this code has not seen yet.
  if (cell.front() == '[' && cell.back() == ']') return CellKind::kAbsent;
  static const std::string_view kBareAbsent[] = {
      "n/a",     "not supported",      "unknown error", "insufficient permissions",
      "unknown", "gpu requires reset", "not available", "not found",
  };
  for (std::string_view word : kBareAbsent) {
    if (lower == word) return CellKind::kAbsent;
  }
  return CellKind::kValue;
}

// Splits one nvidia-smi CSV line into trimmed cells. nvidia-smi neither quotes nor escapes; it
// separates values with ", ".
std::vector<std::string_view> SplitCells(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  while (true) {
    size_t pos = line.find(kSeparator, start);
    if (pos == std::string_view::npos) {
      cells.push_back(Trim(line.substr(start)));
      return cells;
    }
    cells.push_back(Trim(line.substr(start, pos - start)));
    start = pos + kSeparator.size();
  }
}

// Lines of `text` without their terminators; a final line without '\n' (a truncated output)
// is still a line.
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines = Split(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (std::string_view& line : lines) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  }
  return lines;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& part : parts) {
    if (!out.empty()) out += sep;
    out += part;
  }
  return out;
}

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// The first non-blank line of stderr, else of stdout: what nvidia-smi says when it fails
// (it prints most of its errors on stdout).
std::string FirstLine(const CommandOutput& output) {
  for (const std::string* text : {&output.stderr_text, &output.stdout_text}) {
    for (std::string_view line : Lines(*text)) {
      line = Trim(line);
      if (!line.empty()) return std::string(line);
    }
  }
  return "(no output)";
}

// Value parsers. Each returns an empty string on success, else why `value` is not acceptable.
template <typename T>
std::string SetUnsigned(std::string_view value, std::optional<T>& out, uint64_t scale = 1) {
  std::optional<uint64_t> v = ParseUint(value);
  if (!v) return Quoted(value) + " is not a number";
  if (*v > std::numeric_limits<T>::max() / scale) return Quoted(value) + " is out of range";
  out = static_cast<T>(*v * scale);
  return {};
}

// Watts with decimals ("69.88") into whole milliwatts.
std::string SetWattsAsMilliwatts(std::string_view value, std::optional<uint32_t>& out) {
  std::optional<double> watts = ParseDouble(value);
  if (!watts || !std::isfinite(*watts)) return Quoted(value) + " is not a number";
  const double milliwatts = std::round(*watts * 1000.0);
  if (milliwatts < 0 || milliwatts > std::numeric_limits<uint32_t>::max()) {
    return Quoted(value) + " is out of range";
  }
  out = static_cast<uint32_t>(milliwatts);
  return {};
}

// "P0".."P15".
std::string SetPerformanceState(std::string_view value, std::optional<uint32_t>& out) {
  std::optional<uint64_t> n;
  if (value.size() >= 2 && (value[0] == 'P' || value[0] == 'p')) n = ParseUint(value.substr(1));
  if (!n || *n > 15) return Quoted(value) + " is not a performance state (P0..P15)";
  out = static_cast<uint32_t>(*n);
  return {};
}

// "Default", "Exclusive_Process", "Prohibited", "Exclusive_Thread" → "default", ... A mode this
// code does not know is kept, in the same lower-case form, rather than dropped.
std::string SetComputeMode(std::string_view value, std::optional<std::string>& out) {
  std::string mode = ToLower(value);
  std::replace(mode.begin(), mode.end(), ' ', '_');
  std::replace(mode.begin(), mode.end(), '-', '_');
  out = std::move(mode);
  return {};
}

struct ParsedRow {
  GpuInfo gpu;
  bool has_index = false;
  bool has_uuid = false;
  std::optional<std::string> driver_version;
};

using CellSetter = std::string (*)(std::string_view value, ParsedRow& row);

// What each --query-gpu field fills. A column whose field is not listed here is skipped.
const std::unordered_map<std::string_view, CellSetter>& GpuFieldSetters() {
  static const auto* const kSetters = new std::unordered_map<std::string_view, CellSetter>{
      {"index",
       [](std::string_view v, ParsedRow& r) {
         std::optional<uint32_t> index;
         std::string error = SetUnsigned(v, index);
         if (index) {
           r.gpu.index = *index;
           r.has_index = true;
         }
         return error;
       }},
      {"uuid",
       [](std::string_view v, ParsedRow& r) {
         r.gpu.uuid = std::string(v);
         r.has_uuid = true;
         return std::string();
       }},
      {"name",
       [](std::string_view v, ParsedRow& r) {
         r.gpu.name = std::string(v);
         return std::string();
       }},
      {"pci.bus_id",
       [](std::string_view v, ParsedRow& r) {
         r.gpu.pci_bus_id = std::string(v);
         return std::string();
       }},
      {"serial",
       [](std::string_view v, ParsedRow& r) {
         r.gpu.serial = std::string(v);
         return std::string();
       }},
      {"memory.total",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.memory_total_bytes, kBytesPerMiB);
       }},
      {"memory.used",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.memory_used_bytes, kBytesPerMiB);
       }},
      {"memory.free",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.memory_free_bytes, kBytesPerMiB);
       }},
      {"memory.reserved",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.memory_reserved_bytes, kBytesPerMiB);
       }},
      {"utilization.gpu",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.gpu_util_percent); }},
      {"utilization.memory",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.memory_util_percent); }},
      {"temperature.gpu",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.temperature_c); }},
      {"power.draw", [](std::string_view v,
                        ParsedRow& r) { return SetWattsAsMilliwatts(v, r.gpu.power_draw_mw); }},
      {"power.limit", [](std::string_view v,
                         ParsedRow& r) { return SetWattsAsMilliwatts(v, r.gpu.power_limit_mw); }},
      {"clocks.sm",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.sm_clock_mhz); }},
      {"clocks.mem",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.memory_clock_mhz); }},
      {"clocks.max.sm",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.max_sm_clock_mhz); }},
      {"clocks.max.mem",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.max_memory_clock_mhz); }},
      {"fan.speed",
       [](std::string_view v, ParsedRow& r) { return SetUnsigned(v, r.gpu.fan_speed_percent); }},
      {"pstate", [](std::string_view v,
                    ParsedRow& r) { return SetPerformanceState(v, r.gpu.performance_state); }},
      {"compute_mode",
       [](std::string_view v, ParsedRow& r) { return SetComputeMode(v, r.gpu.compute_mode); }},
      {"ecc.errors.corrected.volatile.total",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.ecc.volatile_corrected);
       }},
      {"ecc.errors.uncorrected.volatile.total",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.ecc.volatile_uncorrected);
       }},
      {"ecc.errors.corrected.aggregate.total",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.ecc.aggregate_corrected);
       }},
      {"ecc.errors.uncorrected.aggregate.total",
       [](std::string_view v, ParsedRow& r) {
         return SetUnsigned(v, r.gpu.ecc.aggregate_uncorrected);
       }},
      {"driver_version",
       [](std::string_view v, ParsedRow& r) {
         r.driver_version = std::string(v);
         return std::string();
       }},
  };
  return *kSetters;
}

// A lost GPU's readings are not valid (types.h): keep only who it is.
GpuInfo IdentityOnly(const GpuInfo& gpu) {
  GpuInfo lost;
  lost.index = gpu.index;
  lost.uuid = gpu.uuid;
  lost.name = gpu.name;
  lost.pci_bus_id = gpu.pci_bus_id;
  lost.serial = gpu.serial;
  lost.lost = true;
  return lost;
}

void AddProblem(std::string* problems, const std::string& problem) {
  if (problems == nullptr) return;
  if (!problems->empty()) *problems += "; ";
  *problems += problem;
}

std::string LinePrefix(size_t line_number) { return "line " + std::to_string(line_number); }

// "a/b/c" → "c". nvidia-smi's process name is the executable's path; a name with no '/' is kept.
std::string Basename(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  if (slash != std::string_view::npos && slash + 1 < path.size()) path.remove_prefix(slash + 1);
  return std::string(path);
}

}  // namespace

const std::vector<std::string>& SmiGpuFields() {
  // PCIe throughput is left out: nvidia-smi has no query field for it.
  static const auto* const kFields = new std::vector<std::string>{
      "index",
      "uuid",
      "name",
      "pci.bus_id",
      "serial",
      "memory.total",
      "memory.used",
      "memory.free",
      "memory.reserved",
      "utilization.gpu",
      "utilization.memory",
      "temperature.gpu",
      "power.draw",
      "power.limit",
      "clocks.sm",
      "clocks.mem",
      "clocks.max.sm",
      "clocks.max.mem",
      "fan.speed",
      "pstate",
      "compute_mode",
      "ecc.errors.corrected.volatile.total",
      "ecc.errors.uncorrected.volatile.total",
      "ecc.errors.corrected.aggregate.total",
      "ecc.errors.uncorrected.aggregate.total",
      "driver_version",
  };
  return *kFields;
}

const std::vector<std::string>& SmiAppsFields() {
  static const auto* const kFields =
      new std::vector<std::string>{"gpu_uuid", "pid", "process_name", "used_memory"};
  return *kFields;
}

std::optional<std::string> SmiRejectedField(std::string_view output) {
  // nvidia-smi prints `Field "memory.reserved" is not a valid field to query.` (on Windows the
  // quotes may be typographic ones, which are matched too).
  constexpr std::string_view kTail = " is not a valid field to query";
  size_t tail = output.find(kTail);
  if (tail == std::string_view::npos) return std::nullopt;
  std::string_view before = output.substr(0, tail);
  size_t field_word = before.rfind("Field ");
  if (field_word == std::string_view::npos) return std::nullopt;
  std::string_view name = Trim(before.substr(field_word + 6));
  for (std::string_view quote : {"\"", "\xE2\x80\x9C", "\xE2\x80\x9D", "'"}) {
    if (StartsWith(name, quote)) name.remove_prefix(quote.size());
    if (name.size() >= quote.size() && name.substr(name.size() - quote.size()) == quote) {
      name.remove_suffix(quote.size());
    }
  }
  if (name.empty()) return std::nullopt;
  return std::string(name);
}

Result<std::vector<GpuInfo>> ParseSmiGpuCsv(std::string_view text,
                                            const std::vector<std::string>& fields,
                                            std::string* problems,
                                            std::optional<std::string>* driver_version) {
  for (std::string_view required : {"index", "uuid"}) {
    if (std::find(fields.begin(), fields.end(), required) == fields.end()) {
      return InvalidArgument("nvidia-smi GPU query fields must include \"" + std::string(required) +
                             "\"");
    }
  }
  const auto& setters = GpuFieldSetters();
  std::vector<CellSetter> column_setters;
  for (const std::string& field : fields) {
    auto it = setters.find(field);
    column_setters.push_back(it == setters.end() ? nullptr : it->second);
  }

  std::vector<GpuInfo> gpus;
  std::string local_problems;
  size_t rows = 0;
  std::vector<std::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t line_number = i + 1;
    if (Trim(lines[i]).empty()) continue;
    ++rows;
    std::vector<std::string_view> cells = SplitCells(lines[i]);
    if (cells.size() != fields.size()) {
      if (cells.size() == 1 && fields.size() > 1) {
        // Not a row but something nvidia-smi said in between, e.g. "Unable to determine the
        // device handle for GPU 0000:3B:00.0: GPU is lost. Reboot the system to recover this
        // GPU". It names no index or uuid to hang a lost GpuInfo on, so it is reported as is.
        AddProblem(&local_problems,
                   LinePrefix(line_number) + ": not a GPU row: " + std::string(Trim(lines[i])));
      } else {
        AddProblem(&local_problems, LinePrefix(line_number) + ": expected " +
                                        std::to_string(fields.size()) + " columns, found " +
                                        std::to_string(cells.size()));
      }
      continue;
    }

    ParsedRow row;
    std::string row_error;
    std::string index_text;
    std::string uuid_text;
    for (size_t c = 0; c < cells.size() && row_error.empty(); ++c) {
      if (fields[c] == "index") index_text = std::string(cells[c]);
      if (fields[c] == "uuid") uuid_text = std::string(cells[c]);
      switch (Classify(cells[c])) {
        case CellKind::kLost:
          row.gpu.lost = true;
          continue;
        case CellKind::kAbsent:
          continue;
        case CellKind::kValue:
          break;
      }
      if (column_setters[c] == nullptr) continue;
      std::string error = column_setters[c](cells[c], row);
      if (!error.empty()) {
        row_error = LinePrefix(line_number) + ", column " + std::to_string(c + 1) + " (" +
                    fields[c] + "): " + error;
      }
    }
    if (!row_error.empty()) {
      AddProblem(&local_problems, row_error);
      continue;
    }
    if (!row.has_index) {
      AddProblem(&local_problems, LinePrefix(line_number) + ": GPU index unreadable (" +
                                      (index_text.empty() ? "empty" : index_text) +
                                      "); row left out");
      continue;
    }
    if (!row.has_uuid && !row.gpu.lost) {
      AddProblem(&local_problems, LinePrefix(line_number) + ": GPU " +
                                      std::to_string(row.gpu.index) + " uuid unreadable (" +
                                      (uuid_text.empty() ? "empty" : uuid_text) +
                                      "); its processes cannot be attached");
    }
    if (driver_version != nullptr && !*driver_version && row.driver_version) {
      *driver_version = row.driver_version;
    }
    gpus.push_back(row.gpu.lost ? IdentityOnly(row.gpu) : std::move(row.gpu));
  }

  if (problems != nullptr) AddProblem(problems, local_problems);
  if (rows > 0 && gpus.empty()) {
    return InvalidArgument("no usable GPU row: " + local_problems);
  }
  return gpus;
}

Result<std::vector<std::pair<std::string, ProcessInfo>>> ParseSmiAppsCsv(std::string_view text,
                                                                         std::string* problems) {
  std::vector<std::pair<std::string, ProcessInfo>> processes;
  std::string local_problems;
  size_t rows = 0;
  std::vector<std::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string prefix = LinePrefix(i + 1);
    std::string_view line = lines[i];
    if (Trim(line).empty()) continue;
    ++rows;
    // gpu_uuid and pid from the left, used_memory from the right, the name is what is between.
    size_t first = line.find(kSeparator);
    size_t second = first == std::string_view::npos ? first : line.find(kSeparator, first + 2);
    size_t last = line.rfind(kSeparator);
    if (second == std::string_view::npos || last == std::string_view::npos || last <= second) {
      AddProblem(&local_problems, prefix +
                                      ": expected 4 columns (gpu_uuid, pid, process_name, "
                                      "used_memory): " +
                                      std::string(Trim(line)));
      continue;
    }
    std::string_view uuid = Trim(line.substr(0, first));
    std::string_view pid_text = Trim(line.substr(first + 2, second - first - 2));
    std::string_view name = Trim(line.substr(second + 2, last - second - 2));
    std::string_view memory = Trim(line.substr(last + 2));

    ProcessInfo process;
    process.type = ProcessType::kCompute;
    std::optional<uint32_t> pid;
    std::string error;
    if (Classify(pid_text) != CellKind::kValue) {
      error = prefix + ", column 2 (pid): no pid (" + std::string(pid_text) + ")";
    } else if (std::string why = SetUnsigned(pid_text, pid); !why.empty()) {
      error = prefix + ", column 2 (pid): " + why;
    } else if (Classify(memory) == CellKind::kValue) {
      if (std::string mem_why = SetUnsigned(memory, process.used_memory_bytes, kBytesPerMiB);
          !mem_why.empty()) {
        error = prefix + ", column 4 (used_memory): " + mem_why;
      }
    }
    if (error.empty() && Classify(uuid) != CellKind::kValue) {
      error = prefix + ": process " + std::string(pid_text) + " has no GPU uuid (" +
              std::string(uuid) + ")";
    }
    if (!error.empty()) {
      AddProblem(&local_problems, error);
      continue;
    }
    process.pid = *pid;

    std::string gpu_uuid(uuid);
    // Drivers of the R450 era name MIG devices "MIG-GPU-<gpu uuid>/<gi>/<ci>".
    if (StartsWith(gpu_uuid, "MIG-GPU-")) {
      std::vector<std::string_view> parts = Split(std::string_view(gpu_uuid).substr(4), '/');
      if (parts.size() == 3) {
        std::optional<uint64_t> gi = ParseUint(parts[1]);
        std::optional<uint64_t> ci = ParseUint(parts[2]);
        if (gi && ci && *gi <= UINT32_MAX && *ci <= UINT32_MAX) {
          process.gpu_instance_id = static_cast<uint32_t>(*gi);
          process.compute_instance_id = static_cast<uint32_t>(*ci);
          gpu_uuid = std::string(parts[0]);
        }
      }
    }
    if (Classify(name) == CellKind::kValue) {
      process.command = std::string(name);
      process.name = Basename(name);
    }
    processes.emplace_back(std::move(gpu_uuid), std::move(process));
  }

  if (problems != nullptr) AddProblem(problems, local_problems);
  if (rows > 0 && processes.empty()) {
    return InvalidArgument("no usable process row: " + local_problems);
  }
  return processes;
}

SmiBackend::SmiBackend(SmiOptions options, CommandRunner runner)
    : options_(std::move(options)),
      runner_(std::move(runner)),
      proc_reader_(options_.proc_root),
      gpu_fields_(SmiGpuFields()) {
  if (!runner_) {
    runner_ = [timeout = options_.timeout](const std::vector<std::string>& argv) {
      CommandOptions command_options;
      command_options.timeout = timeout;
      return RunCommand(argv, command_options);
    };
  }
}

Result<SmiBackend::GpuQuery> SmiBackend::QueryGpus() {
  // Each rejection removes a field (a rejected field that is not in the list, or that flyt needs,
  // ends the query), so this ends anyway; the bound makes that explicit.
  const size_t max_attempts = gpu_fields_.size() + 1;
  for (size_t attempt = 0; attempt < max_attempts; ++attempt) {
    std::string field_list = Join(gpu_fields_, ",");
    Result<CommandOutput> output =
        runner_({options_.program, "--query-gpu=" + field_list, std::string(kFormat)});
    if (!output.ok()) return output.status().WithContext("nvidia-smi --query-gpu");

    if (output->exit_code != 0) {
      std::optional<std::string> rejected = SmiRejectedField(output->stdout_text);
      if (!rejected) rejected = SmiRejectedField(output->stderr_text);
      if (rejected) {
        auto it = std::find(gpu_fields_.begin(), gpu_fields_.end(), *rejected);
        if (it == gpu_fields_.end() || *rejected == "index" || *rejected == "uuid") {
          return Unavailable("nvidia-smi --query-gpu rejected field \"" + *rejected +
                             "\", which flyt cannot do without: " + FirstLine(*output));
        }
        // An older driver: ask without it from now on; those readings stay absent.
        gpu_fields_.erase(it);
        continue;
      }
    }

    GpuQuery query;
    std::string problems;
    Result<std::vector<GpuInfo>> gpus =
        ParseSmiGpuCsv(output->stdout_text, gpu_fields_, &problems, &query.driver_version);
    if (output->exit_code != 0) {
      // nvidia-smi fails as a whole when one GPU is lost (exit 15) yet still prints the rows
      // of the others: keep those and say what happened.
      if (!gpus.ok() || gpus->empty()) {
        return Unavailable("nvidia-smi --query-gpu failed (exit status " +
                           std::to_string(output->exit_code) + "): " + FirstLine(*output));
      }
      std::string note =
          "nvidia-smi --query-gpu exited with status " + std::to_string(output->exit_code);
      if (!Trim(output->stderr_text).empty()) note += ": " + FirstLine(*output);
      query.problems.push_back(std::move(note));
    }
    if (!gpus.ok()) return gpus.status().WithContext("nvidia-smi --query-gpu");
    if (gpus->empty()) return Unavailable("nvidia-smi --query-gpu listed no GPUs");
    if (!problems.empty()) query.problems.push_back("nvidia-smi --query-gpu: " + problems);
    query.gpus = std::move(gpus).value();
    return query;
  }
  return Unavailable("nvidia-smi --query-gpu kept rejecting fields; gave up after " +
                     std::to_string(max_attempts) + " attempts");
}

std::vector<std::string> SmiBackend::QueryProcesses(std::vector<GpuInfo>& gpus) {
  constexpr std::string_view kFailed = "process query failed, processes are not listed: ";
  Result<CommandOutput> output =
      runner_({options_.program, "--query-compute-apps=" + Join(SmiAppsFields(), ","),
               std::string(kFormat)});
  if (!output.ok()) {
    return {std::string(kFailed) + "nvidia-smi --query-compute-apps: " + output.status().message()};
  }
  if (output->exit_code != 0) {
    return {std::string(kFailed) + "nvidia-smi --query-compute-apps exited with status " +
            std::to_string(output->exit_code) + ": " + FirstLine(*output)};
  }
  std::string parse_problems;
  auto processes = ParseSmiAppsCsv(output->stdout_text, &parse_problems);
  if (!processes.ok()) {
    return {std::string(kFailed) +
            "nvidia-smi --query-compute-apps: " + processes.status().message()};
  }

  std::vector<std::string> problems;
  if (!parse_problems.empty()) {
    problems.push_back("nvidia-smi --query-compute-apps: " + parse_problems);
  }
  std::unordered_map<std::string, size_t> by_uuid;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!gpus[i].uuid.empty()) by_uuid.emplace(gpus[i].uuid, i);
  }
  for (auto& [uuid, process] : *processes) {
    auto it = by_uuid.find(uuid);
    if (it == by_uuid.end()) {
      problems.push_back("process " + std::to_string(process.pid) + " is on " + uuid +
                         ", which the GPU query did not list");
      continue;
    }
    // /proc knows better than nvidia-smi's truncated name; Fill leaves nvidia-smi's name and
    // command in place when the process is gone or in another PID namespace.
    proc_reader_.Fill(process);
    gpus[it->second].processes.push_back(std::move(process));
  }
  return problems;
}

Result<GpuSnapshot> SmiBackend::Snapshot() {
  proc_reader_.BeginSample();
  GpuSnapshot snapshot;
  snapshot.source = Source::kNvidiaSmi;
  snapshot.taken_at = std::chrono::system_clock::now();

  FLYT_ASSIGN_OR_RETURN(GpuQuery query, QueryGpus());
  std::vector<std::string> reasons = std::move(query.problems);
  std::vector<std::string> process_problems = QueryProcesses(query.gpus);
  reasons.insert(reasons.end(), process_problems.begin(), process_problems.end());

  snapshot.gpus = std::move(query.gpus);
  snapshot.driver_version = std::move(query.driver_version);
  snapshot.reason = Join(reasons, "; ");
  return snapshot;
}

std::unique_ptr<Backend> MakeSmiBackend(SmiOptions options, CommandRunner runner) {
  return std::make_unique<SmiBackend>(std::move(options), std::move(runner));
}

}  // namespace flyt::gpu
