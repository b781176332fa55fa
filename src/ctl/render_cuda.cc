// flytctl's tables of the CUDA tracer's figures: `processes --cuda` and `processes --cuda PID`.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

#include "ctl/render.h"
#include "ctl/render_fields.h"

namespace flyt::ctl {

using nlohmann::json;
using namespace render_fields;  // NOLINT: the never-throwing field readers

std::string HumanBytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

namespace {

std::string BytesOr(const json& j, const char* key) {
  auto v = Number(j, key);
  return v ? HumanBytes(*v) : "-";
}

std::string Rate(std::optional<double> v) {
  if (!v) return "-";
  return *v >= 100 ? fmt::format("{:.0f}", *v) : fmt::format("{:.1f}", *v);
}

std::string Triple(const json& j, const char* key) {
  const json& a = Array(j, key);
  std::string out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i > 0) out += "x";
    out += a[i].is_number() ? std::to_string(a[i].get<int64_t>()) : "?";
  }
  return out.empty() ? "-" : out;
}

const json& Object(const json& j, const char* key) {
  static const json kEmpty = json::object();
  const json* v = Find(j, key);
  return v != nullptr && v->is_object() ? *v : kEmpty;
}

}  // namespace

std::string RenderCudaProcesses(const json& processes, bool with_node) {
  std::string out;
  if (with_node) out += fmt::format("{:<16} ", "NODE");
  out += fmt::format("{:>7}  {:>6}  {:<15} {:>10} {:>7}  {:>19}  {:>9}  {:>9} {:>9} {:>9}  {:>8}  {}\n",
                     "PID", "GPU", "COMMAND", "LAUNCHES", "L/S", "MEM NOW / PEAK", "LEAKED", "H2D",
                     "D2H", "D2D", "BUSY s", "TOP KERNEL");
  size_t n = 0;
  if (processes.is_array()) {
    for (const json& p : processes) {
      if (!p.is_object() || !p.contains("cuda") || !p["cuda"].is_object()) continue;
      const json& c = p["cuda"];
      ++n;
      auto index = Integer(p, "gpu");
      std::string gpu = index ? std::to_string(*index) : Flag(c, "remote") ? "remote" : "-";
      std::string name = TextOr(p, "name", "");
      if (name.empty()) name = TextOr(c, "comm");
      const bool exited = Flag(c, "exited");
      std::string mem = (exited ? std::string("exited") : BytesOr(c, "device_memory_bytes")) +
                        " / " + BytesOr(c, "device_memory_peak_bytes");
      const json& copies = Object(c, "copies");
      auto busy = Number(c, "busy_seconds");
      auto launches = Integer(c, "launches");
      if (with_node) out += fmt::format("{:<16} ", Clip(TextOr(p, "node"), 16));
      out += fmt::format(
          "{:>7}  {:>6}  {:<15} {:>10} {:>7}  {:>19}  {:>9}  {:>9} {:>9} {:>9}  {:>8}  {}\n",
          Integer(p, "pid").value_or(0), gpu, Clip(name, 15),
          launches ? std::to_string(*launches) : "-", Rate(Number(c, "launches_per_second")), mem,
          exited ? BytesOr(c, "leaked_bytes") : "-", BytesOr(copies, "host_to_device"),
          BytesOr(copies, "device_to_host"), BytesOr(copies, "device_to_device"),
          busy ? fmt::format("{:.2f}", *busy) : "-", Clip(TextOr(c, "top_kernel"), 48));
    }
  }
  if (n == 0) out += "No traced CUDA processes.\n";
  return out;
}

std::string RenderCudaDetail(const json& detail) {
  std::string out;
  for (const json& c : Array(detail, "processes")) {
    std::string gpu = TextOr(c, "gpu_uuid", "");
    if (Flag(c, "remote")) {
      gpu = "remote GPU via " + TextOr(c, "remote_server");
    } else if (gpu.empty()) {
      gpu = "unknown GPU";
    }
    out += fmt::format("pid {} ({}) on {} (CUDA device {}){}\n", Integer(c, "pid").value_or(0),
                       TextOr(c, "comm"), gpu, Integer(c, "device").value_or(0),
                       TextOr(c, "container_id", "").empty()
                           ? ""
                           : ", container " + Clip(TextOr(c, "container_id"), 12));
    out += fmt::format("  library      {}{}\n", TextOr(c, "library"),
                       Flag(c, "attached_late") ? " (probed after its first calls)" : "");
    auto busy = Number(c, "busy_seconds");
    auto cores = Number(c, "core_usage");
    out += fmt::format("  launches     {} ({}/s), syncs {}, busy {} s (enqueue→sync spans), "
                       "core usage {}\n",
                       Integer(c, "launches").value_or(0), Rate(Number(c, "launches_per_second")),
                       Integer(c, "syncs").value_or(0),
                       busy ? fmt::format("{:.2f}", *busy) : "-",
                       cores ? fmt::format("{:.1f}", *cores) : "-");
    out += fmt::format("  memory       device {} now, {} peak; managed {}; pinned host {} ({} "
                       "peak); {} allocations, {} frees\n",
                       BytesOr(c, "device_memory_bytes"), BytesOr(c, "device_memory_peak_bytes"),
                       BytesOr(c, "managed_memory_bytes"), BytesOr(c, "pinned_host_bytes"),
                       BytesOr(c, "pinned_host_peak_bytes"), Integer(c, "allocations").value_or(0),
                       Integer(c, "frees").value_or(0));
    const json& copies = Object(c, "copies");
    out += fmt::format("  copies       H2D {}, D2H {}, D2D {}, H2H {}, memset {} ({} copies, {} "
                       "memsets)\n",
                       BytesOr(copies, "host_to_device"), BytesOr(copies, "device_to_host"),
                       BytesOr(copies, "device_to_device"), BytesOr(copies, "host_to_host"),
                       BytesOr(copies, "memset"), Integer(copies, "copies").value_or(0),
                       Integer(copies, "memsets").value_or(0));
    if (Flag(c, "exited")) {
      auto code = Integer(c, "exit_code");
      out += fmt::format("  exited       {}: leaked {} in {} allocation(s), pinned host {}\n",
                         code ? "with code " + std::to_string(*code) : "exit code unknown",
                         BytesOr(c, "leaked_bytes"), Integer(c, "leaked_allocations").value_or(0),
                         BytesOr(c, "leaked_pinned_host_bytes"));
    }
    const json& kernels = Array(c, "top_kernels");
    if (!kernels.empty()) {
      out += fmt::format("  {:>10}  {}\n", "LAUNCHES", "KERNEL (launch shapes: grid block shared)");
      for (const json& k : kernels) {
        out += fmt::format("  {:>10}  {}\n", Integer(k, "launches").value_or(0),
                           Clip(TextOr(k, "name"), 100));
        for (const json& s : Array(k, "shapes")) {
          out += fmt::format("  {:>10}    grid {} block {} shared {}\n",
                             Integer(s, "launches").value_or(0), Triple(s, "grid"),
                             Triple(s, "block"), BytesOr(s, "shared_bytes"));
        }
        if (auto other = Integer(k, "other_shapes"); other && *other > 0) {
          out += fmt::format("  {:>10}    other shapes\n", *other);
        }
      }
    }
    const json& streams = Array(c, "streams");
    if (!streams.empty()) {
      out += fmt::format("  {:<18} {:<12} {:>10} {:>7} {:>8}  {:>9} {:>9} {:>9}\n", "STREAM",
                         "KIND", "LAUNCHES", "SYNCS", "BUSY s", "H2D", "D2H", "D2D");
      for (const json& st : streams) {
        const json* h = Find(st, "handle");
        const uint64_t handle = h != nullptr && h->is_number_unsigned() ? h->get<uint64_t>() : 0;
        std::string kind = Flag(st, "per_thread")
                               ? "per-thread " + std::to_string(Integer(st, "thread").value_or(0))
                           : handle == 0             ? "legacy"
                           : Flag(st, "non_blocking") ? "non-blocking"
                                                      : "blocking";
        auto sbusy = Number(st, "busy_seconds");
        const json& sc = Object(st, "copies");
        out += fmt::format("  {:<18} {:<12} {:>10} {:>7} {:>8}  {:>9} {:>9} {:>9}\n",
                           fmt::format("{:#x}", handle), kind,
                           Integer(st, "launches").value_or(0), Integer(st, "syncs").value_or(0),
                           sbusy ? fmt::format("{:.2f}", *sbusy) : "-",
                           BytesOr(sc, "host_to_device"), BytesOr(sc, "device_to_host"),
                           BytesOr(sc, "device_to_device"));
      }
    }
    const json& failures = Object(c, "failures");
    if (!failures.empty()) {
      out += "  failed calls\n";
      for (const auto& [name, n] : failures.items()) {
        out += fmt::format("  {:>10}  {}\n", n.is_number() ? n.get<int64_t>() : 0,
                           Printable(name));
      }
    }
  }
  if (out.empty()) out = "No traced CUDA process.\n";
  return out;
}

}  // namespace flyt::ctl
