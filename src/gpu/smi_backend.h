// SmiBackend: GPU readings from the `nvidia-smi` tool, for machines where NVML cannot be loaded.
//
// Each Snapshot() runs nvidia-smi exactly twice, whatever the number of GPUs: once with
// `--query-gpu=<fields> --format=csv,noheader,nounits` and once with `--query-compute-apps=...`.
// The CSV is parsed by the pure functions below (exposed so tests can feed captured outputs).
// Older drivers reject query fields they do not know ("Field "memory.reserved" is not a valid
// field to query."); the backend drops such a field, retries, and keeps the reduced list for
// every later snapshot. Every value nvidia-smi cannot give ("[N/A]", "[Not Supported]", ...)
// becomes an absent reading, never 0. One bad CSV row never hides the other GPUs: it is named
// (line and column) in the snapshot's `reason`.
//
// Ownership: the backend owns its options, its command runner and one ProcReader. Thread-safety:
// thread-compatible, like every Backend — Snapshot() updates the remembered field list, so calls
// must be serialised (the Monitor does so on its sampling thread). The parse functions are pure.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"
#include "gpu/backend.h"
#include "gpu/proc.h"
#include "gpu/types.h"

namespace flyt::gpu {

// Runs one command (argv[0] is the program) and returns what it printed and its exit status. A
// non-zero exit is not an error here; an error means the program could not be run at all (not
// found, timed out). Tests substitute a lambda; the default is flyt::RunCommand.
using CommandRunner = std::function<Result<CommandOutput>(const std::vector<std::string>& argv)>;

struct SmiOptions {
  // Program to run: a name looked up on PATH, or a path.
  std::string program = "nvidia-smi";
  // Limit for each invocation; nvidia-smi can hang for seconds when the driver is wedged.
  std::chrono::milliseconds timeout{10000};
  // Where process name, user and container are read from.
  std::string proc_root = "/proc";
};

// The fields asked of `--query-gpu`, in order, before any were found unknown to the driver.
const std::vector<std::string>& SmiGpuFields();

// The fields asked of `--query-compute-apps`, in order.
const std::vector<std::string>& SmiAppsFields();

// The field nvidia-smi named in a `Field "<name>" is not a valid field to query.` answer, or
// nullopt when `output` is not such an answer.
std::optional<std::string> SmiRejectedField(std::string_view output);

// Parses the output of `--query-gpu=<fields joined by ','> --format=csv,noheader,nounits`.
// `fields` says which column holds what (unknown names are ignored columns); it must include
// "index" and "uuid". Rows that cannot be used — wrong column count, an unparsable number, an
// unreadable index — are left out and described, with their line number and column, in
// `*problems` ("; "-separated; may be null). Fails only when `fields` lacks index/uuid or when
// the text has rows and none of them could be used. Empty text yields no GPUs. The driver_version
// column, which is per row in nvidia-smi's output but per machine in flyt's model, goes to
// `*driver_version` (first row that has it; may be null).
//
// Identity and loss: a row whose index is unreadable cannot be told apart from GPU 0 and is left
// out (described in `*problems`). A row with any "[GPU is lost]" value is kept with lost = true
// and only its identity (index, uuid, name, bus id, serial); its other readings are not valid.
// A row whose uuid is unreadable but whose index is known is kept — a GPU that cannot be read is
// still listed — and noted in `*problems`, since processes cannot be attached to it.
Result<std::vector<GpuInfo>> ParseSmiGpuCsv(std::string_view text,
                                            const std::vector<std::string>& fields,
                                            std::string* problems,
                                            std::optional<std::string>* driver_version = nullptr);

// Parses the output of `--query-compute-apps=gpu_uuid,pid,process_name,used_memory
// --format=csv,noheader,nounits` into (gpu uuid, process) pairs, in output order. nvidia-smi does
// not quote, and a process name may itself contain ", ": uuid and pid are taken from the left,
// used memory from the right, and everything between is the name. The name goes into `command`,
// its basename into `name` (ProcReader replaces both when /proc has them). A MIG device uuid of
// the old "MIG-GPU-<uuid>/<gi>/<ci>" form is mapped to its GPU's uuid, with the instance ids set.
// Bad rows are left out and described in `*problems`; fails only when no row could be used.
Result<std::vector<std::pair<std::string, ProcessInfo>>> ParseSmiAppsCsv(std::string_view text,
                                                                         std::string* problems);

class SmiBackend : public Backend {
 public:
  // An empty `runner` means flyt::RunCommand with `options.timeout`.
  SmiBackend(SmiOptions options, CommandRunner runner);

  Source source() const override { return Source::kNvidiaSmi; }

  // Fails when the GPU query cannot be run, or nvidia-smi fails and lists no GPU (the message
  // carries nvidia-smi's own first line, e.g. "NVIDIA-SMI has failed because it couldn't
  // communicate with the NVIDIA driver..."). A failed process query, unusable rows and a partial
  // failure are reported in the snapshot's `reason` with the GPUs that could be read.
  Result<GpuSnapshot> Snapshot() override;

  // The `--query-gpu` fields this backend currently asks for (fewer than SmiGpuFields() once the
  // driver has rejected some).
  const std::vector<std::string>& gpu_fields() const { return gpu_fields_; }

 private:
  struct GpuQuery {
    std::vector<GpuInfo> gpus;
    std::optional<std::string> driver_version;
    std::vector<std::string> problems;  // what was degraded, for the snapshot's reason
  };
  Result<GpuQuery> QueryGpus();
  // Runs the apps query and attaches processes; returns what went wrong, empty when nothing did.
  std::vector<std::string> QueryProcesses(std::vector<GpuInfo>& gpus);

  SmiOptions options_;
  CommandRunner runner_;
  ProcReader proc_reader_;
  std::vector<std::string> gpu_fields_;
};

// The nvidia-smi backend; `runner` as for SmiBackend.
std::unique_ptr<Backend> MakeSmiBackend(SmiOptions options, CommandRunner runner = {});

}  // namespace flyt::gpu
