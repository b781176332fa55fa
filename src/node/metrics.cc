#include "node/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include <map>
#include <vector>

#include "common/strings.h"
#include "node/profiling.h"

namespace flyt::node {
namespace {


using Getter = std::function<std::optional<double>(const gpu::GpuInfo&)>;

struct DcgmFamily {
  const char* name;
  const char* type;
  const char* help;
  Getter value;
};

template <typename T>
std::optional<double> D(const std::optional<T>& v) {
  return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
}

// dcgm-exporter's default counters (etc/default-counters.csv): name, type, help, and the unit
// it exports (MiB for framebuffer, W for power, mJ for energy, MHz for clocks, % for utilisation).
const std::vector<DcgmFamily>& DcgmFamilies() {
  static const std::vector<DcgmFamily> kFamilies = {
      {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
       [](const gpu::GpuInfo& g) { return D(g.sm_clock_mhz); }},
      {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
       [](const gpu::GpuInfo& g) { return D(g.memory_clock_mhz); }},
      {"DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
       [](const gpu::GpuInfo& g) { return D(g.memory_temperature_c); }},
      {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
       [](const gpu::GpuInfo& g) { return D(g.temperature_c); }},
      {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
       [](const gpu::GpuInfo& g) -> std::optional<double> {
         if (!g.power_draw_mw) return std::nullopt;
         return *g.power_draw_mw / 1000.0;
       }},
      {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
       "Total energy consumption since boot (in mJ).",
       [](const gpu::GpuInfo& g) { return D(g.energy_mj); }},
      {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
       [](const gpu::GpuInfo& g) { return D(g.pcie_replay_count); }},
      {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
       [](const gpu::GpuInfo& g) { return D(g.gpu_util_percent); }},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
       [](const gpu::GpuInfo& g) { return D(g.memory_util_percent); }},
      {"DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
       [](const gpu::GpuInfo& g) { return D(g.encoder_util_percent); }},
      {"DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
       [](const gpu::GpuInfo& g) { return D(g.decoder_util_percent); }},
      {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
       [](const gpu::GpuInfo& g) -> std::optional<double> {
         if (!g.memory_free_bytes) return std::nullopt;
         return static_cast<double>(*g.memory_free_bytes / (1024 * 1024));
       }},
      {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
       [](const gpu::GpuInfo& g) -> std::optional<double> {
         if (!g.memory_used_bytes) return std::nullopt;
         return static_cast<double>(*g.memory_used_bytes / (1024 * 1024));
       }},
      {"DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
       [](const gpu::GpuInfo& g) -> std::optional<double> {
         if (!g.memory_reserved_bytes) return std::nullopt;
         return static_cast<double>(*g.memory_reserved_bytes / (1024 * 1024));
       }},
  };
  return kFamilies;
}

std::string Num(double v) {
  if (std::isfinite(v) && std::fabs(v) < 9e15 && v == std::trunc(v)) {
    return std::to_string(static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);
}

class Writer {
 public:
  void Family(const std::string& name, const char* type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    out_ += Num(value);
    out_ += '\n';
  }
  std::string Take() { return std::move(out_); }
  void Reserve(size_t n) { out_.reserve(n); }

 private:
  std::string out_;
};

// NVIDIA's descriptions of the XIDs operators meet most (the Xid catalogue in NVIDIA's GPU
// debug guidelines); others are "Unknown Error", as in dcgm-exporter.
std::string XidText(uint64_t xid) {
  switch (xid) {
    case 0: return "No Error";
    case 13: return "Graphics Engine Exception";
    case 31: return "GPU memory page fault";
    case 43: return "GPU stopped processing";
    case 45: return "Preemptive cleanup, due to previous errors";
    case 48: return "Double Bit ECC Error";
    case 61: return "Internal micro-controller breakpoint/warning";
    case 62: return "Internal micro-controller halt";
    case 63: return "ECC page retirement or row remapping recording event";
    case 64: return "ECC page retirement or row remapper recording failure";
    case 74: return "NVLINK Error";
    case 79: return "GPU has fallen off the bus";
    case 92: return "High single-bit ECC error rate";
    case 94: return "Contained ECC error";
    case 95: return "Uncontained ECC error";
    case 119: return "GSP RPC Timeout";
    case 120: return "GSP Error";
    default: return "Unknown Error";
  }
}

std::string Label(const char* name, std::string_view value) {
  return std::string(name) + "=\"" + EscapeLabelValue(value) + "\"";
}

// dcgm-exporter's label set, in its order (released versions up to 4.5.x spell it "Hostname").
std::string GpuLabels(const gpu::GpuInfo& g, const MetricsInput& in) {
  std::string l = Label("gpu", std::to_string(g.index));
  l += "," + Label("UUID", g.uuid);
  l += "," + Label("pci_bus_id", g.pci_bus_id);
  l += "," + Label("device", "nvidia" + std::to_string(g.index));
  l += "," + Label("modelName", g.name);
  l += "," + Label("Hostname", in.hostname);
  // dcgm-exporter turns the DCGM_FI_DRIVER_VERSION row of its default counters into a label on
  // every GPU series.
  if (in.snapshot->driver_version) {
    l += "," + Label("DCGM_FI_DRIVER_VERSION", *in.snapshot->driver_version);
  }
  return l;
}

// flyt's own per-GPU label set (Prometheus style, lower case).
std::string FlytGpuLabels(const gpu::GpuInfo& g) {
  return Label("gpu", std::to_string(g.index)) + "," + Label("UUID", g.uuid);
}

// The CUDA tracer's families.
void RenderCuda(Writer& w, const MetricsInput& in) {
  const trace::TracerHealth& h = *in.cuda_health;
  w.Family("flyt_cuda_tracer_enabled", "gauge",
           "1 when CUDA call tracing (eBPF uprobes) runs, else 0 (the reason is in the log and "
           "GET /api/v1/trace).");
  w.Sample("flyt_cuda_tracer_enabled", "", h.enabled ? 1 : 0);
  w.Family("flyt_cuda_tracer_events_received_total", "counter",
           "Records drained from the tracer's ring buffer.");
  w.Sample("flyt_cuda_tracer_events_received_total", "", static_cast<double>(h.events_received));
  w.Family("flyt_cuda_tracer_events_lost_total", "counter",
           "Records lost because the ring buffer was full (counted in BPF).");
  w.Sample("flyt_cuda_tracer_events_lost_total", "", static_cast<double>(h.events_lost));
  w.Family("flyt_cuda_tracer_attach_failures_total", "counter",
           "Uprobe attachments that failed, by reason.");
  for (const auto& [reason, n] : h.attach_failures) {
    w.Sample("flyt_cuda_tracer_attach_failures_total", Label("reason", reason),
             static_cast<double>(n));
  }
  w.Family("flyt_cuda_tracer_libraries_probed", "gauge",
           "Library files (inodes) with the tracer's probes on them.");
  w.Sample("flyt_cuda_tracer_libraries_probed", "", static_cast<double>(h.libraries_probed));
  w.Family("flyt_cuda_tracer_processes_traced_total", "counter",
           "Processes with at least one traced CUDA call since start.");
  w.Sample("flyt_cuda_tracer_processes_traced_total", "", static_cast<double>(h.processes_traced));
  w.Family("flyt_cuda_tracer_processes_tracked", "gauge",
           "Processes tracked now (live, and exited ones still listed).");
  w.Sample("flyt_cuda_tracer_processes_tracked", "", static_cast<double>(h.processes_tracked));
  w.Family("flyt_cuda_tracer_dropped_total", "counter",
           "What the tracer dropped because a [trace] max_* limit was reached.");
  w.Sample("flyt_cuda_tracer_dropped_total", Label("what", "processes"),
           static_cast<double>(h.dropped_processes));
  w.Sample("flyt_cuda_tracer_dropped_total", Label("what", "streams"),
           static_cast<double>(h.dropped_streams));
  w.Sample("flyt_cuda_tracer_dropped_total", Label("what", "allocations"),
           static_cast<double>(h.dropped_allocations));
  w.Family("flyt_cuda_tracer_unprobeable_processes", "gauge",
           "Processes that run CUDA but cannot be probed (e.g. stripped static binaries).");
  w.Sample("flyt_cuda_tracer_unprobeable_processes", "", static_cast<double>(h.unprobeable.size()));

  if (in.cuda_processes == nullptr || in.cuda_processes->empty()) return;
  const std::vector<trace::ProcessCuda>& procs = *in.cuda_processes;
  std::vector<std::string> labels;
  labels.reserve(procs.size());
  for (const trace::ProcessCuda& p : procs) {
    std::string index;
    if (in.snapshot != nullptr && !p.gpu_uuid.empty()) {
      for (const gpu::GpuInfo& g : in.snapshot->gpus) {
        if (g.uuid == p.gpu_uuid) index = std::to_string(g.index);
      }
    }
    labels.push_back(Label("gpu", index) + "," + Label("UUID", p.gpu_uuid) + "," +
                     Label("cuda_device", std::to_string(p.device)) + "," +
                     Label("pid", std::to_string(p.pid)) + "," + Label("comm", p.comm) + "," +
                     Label("container", p.container_id));
  }
  auto family = [&](const char* name, const char* type, const char* help,
                    const std::function<std::optional<double>(const trace::ProcessCuda&)>& value) {
    bool header = false;
    for (size_t i = 0; i < procs.size(); ++i) {
      std::optional<double> v = value(procs[i]);
      if (!v) continue;
      if (!header) w.Family(name, type, help);
      header = true;
      w.Sample(name, labels[i], *v);
    }
  };
  auto u = [](uint64_t v) { return std::optional<double>(static_cast<double>(v)); };
  family("flyt_cuda_kernel_launches_total", "counter",
         "Kernel and graph launches a process made (runtime and driver API, counted once).",
         [&](const trace::ProcessCuda& p) { return u(p.launches); });
  family("flyt_cuda_launches_per_second", "gauge",
         "Launches per second over the tracer's rate window ([trace] rate_window_seconds).",
         [](const trace::ProcessCuda& p) { return std::optional<double>(p.launches_per_second); });
  family("flyt_cuda_busy_seconds_total", "counter",
         "Kernel-busy time as enqueue->sync spans, host-side (no GPU timestamps): the sum over "
         "streams of the time from the first work enqueued after a sync to the next sync.",
         [](const trace::ProcessCuda& p) { return std::optional<double>(p.busy_seconds); });
  family("flyt_cuda_core_usage", "gauge",
         "Cores the process kept busy on average over the rate window: thread-seconds "
         "(min(grid x block threads, the GPU's cores) x enqueue->sync span) per second.",
         [](const trace::ProcessCuda& p) { return std::optional<double>(p.core_usage); });
  family("flyt_cuda_device_memory_bytes", "gauge",
         "Device memory the process holds now (successful cudaMalloc*/cuMemAlloc minus frees).",
         [&](const trace::ProcessCuda& p) {
           return p.exited ? std::nullopt : u(p.device_memory_bytes);
         });
  family("flyt_cuda_device_memory_peak_bytes", "gauge",
         "The most device memory the process held at once.",
         [&](const trace::ProcessCuda& p) { return u(p.device_memory_peak_bytes); });
  family("flyt_cuda_managed_memory_bytes", "gauge",
         "Managed (unified) memory the process holds now (cudaMallocManaged).",
         [&](const trace::ProcessCuda& p) {
           return p.exited ? std::nullopt : u(p.managed_memory_bytes);
         });
  family("flyt_cuda_pinned_host_memory_bytes", "gauge",
         "Pinned host memory the process holds now (cudaMallocHost, cudaHostAlloc).",
         [&](const trace::ProcessCuda& p) {
           return p.exited ? std::nullopt : u(p.pinned_host_bytes);
         });
  family("flyt_cuda_leaked_bytes", "gauge",
         "Device and managed memory an exited process never freed (listed for [trace] "
         "exited_keep_seconds after it exits).",
         [&](const trace::ProcessCuda& p) {
           return p.exited ? u(p.leaked_bytes) : std::nullopt;
         });
  family("flyt_cuda_syncs_total", "counter",
         "Synchronising calls (stream, event, device, context syncs; blocking host<->device copies).",
         [&](const trace::ProcessCuda& p) { return u(p.syncs); });

  w.Family("flyt_cuda_copy_bytes_total", "counter",
           "Bytes copied by cudaMemcpy*, by direction (memset: bytes set by cudaMemset*).");
  for (size_t i = 0; i < procs.size(); ++i) {
    const trace::CopyBytes& c = procs[i].copies;
    const std::pair<const char*, uint64_t> dirs[] = {{"h2d", c.host_to_device},
                                                     {"d2h", c.device_to_host},
                                                     {"d2d", c.device_to_device},
                                                     {"h2h", c.host_to_host},
                                                     {"memset", c.memset}};
    for (const auto& [dir, bytes] : dirs) {
      w.Sample("flyt_cuda_copy_bytes_total", labels[i] + "," + Label("direction", dir),
               static_cast<double>(bytes));
    }
  }
  bool header = false;
  for (size_t i = 0; i < procs.size(); ++i) {
    for (const auto& [error, n] : procs[i].failures) {
      if (!header) {
        w.Family("flyt_cuda_failed_calls_total", "counter",
                 "CUDA calls that returned an error, by error name (never counted as memory).");
        header = true;
      }
      w.Sample("flyt_cuda_failed_calls_total", labels[i] + "," + Label("error", error),
               static_cast<double>(n));
    }
  }
  header = false;
  for (size_t i = 0; i < procs.size(); ++i) {
    // The tracer keeps the top [trace] top_kernels by name and "other"; names are summed here
    // too, so that two kernels whose names demangle alike never make a duplicate series.
    std::map<std::string, uint64_t> by_name;
    for (const trace::KernelStats& k : procs[i].top_kernels) by_name[k.name] += k.launches;
    for (const auto& [name, n] : by_name) {
      if (!header) {
        w.Family("flyt_cuda_kernel_launches_by_kernel_total", "counter",
                 "Launches per kernel (demangled name): the top [trace] top_kernels of each "
                 "process by launches, the rest under kernel=\"other\".");
        header = true;
      }
      w.Sample("flyt_cuda_kernel_launches_by_kernel_total", labels[i] + "," + Label("kernel", name),
               static_cast<double>(n));
    }
  }
}

// The usage profiles' families (profile/profile.h), per GPU of the snapshot that has a profile.
void RenderProfiles(Writer& w, const MetricsInput& in, const std::vector<std::string>& labels) {
  const auto& gpus = in.snapshot->gpus;
  struct Row {
    const profile::GpuProfile* p;
    const std::string* labels;
    const gpu::GpuInfo* g;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (const profile::GpuProfile& p : *in.profiles) {
      if (p.uuid == ProfileKey(gpus[i]) && p.index == gpus[i].index) {
        rows.push_back({&p, &labels[i], &gpus[i]});
        break;
      }
    }
  }
  w.Family("flyt_gpu_state", "gauge",
           "The GPU's usage state (unknown, idle, allocated-idle, steady, cyclic, bursty, lost): "
           "1 for the current one, 0 for the others.");
  for (const Row& r : rows) {
    for (profile::State st : profile::AllStates()) {
      w.Sample("flyt_gpu_state", *r.labels + "," + Label("state", profile::StateName(st)),
               st == r.p->state ? 1 : 0);
    }
  }
  w.Family("flyt_gpu_state_seconds", "gauge", "How long the GPU has been in its current state.");
  for (const Row& r : rows) w.Sample("flyt_gpu_state_seconds", *r.labels, r.p->state_seconds);
  bool header = false;
  for (const Row& r : rows) {
    if (r.p->state != profile::State::kCyclic || !r.p->cycle) continue;
    if (!header) {
      w.Family("flyt_gpu_cycle_period_seconds", "gauge",
               "The period of a cyclic load (e.g. a training iteration); only while cyclic.");
      header = true;
    }
    w.Sample("flyt_gpu_cycle_period_seconds", *r.labels, r.p->cycle->period_s);
  }
  header = false;
  for (const Row& r : rows) {
    if (r.p->state != profile::State::kCyclic || !r.p->cycle) continue;
    if (!header) {
      w.Family("flyt_gpu_cycle_confidence", "gauge",
               "How sure the cycle test is of the period, 0 to 1; only while cyclic.");
      header = true;
    }
    w.Sample("flyt_gpu_cycle_confidence", *r.labels, r.p->cycle->confidence);
  }
  using Pick = std::optional<profile::Quantiles> profile::Window::*;
  auto quantiles = [&](const char* name, const char* help, Pick pick) {
    bool head = false;
    for (const Row& r : rows) {
      for (const profile::Window& win : r.p->windows) {
        const std::optional<profile::Quantiles>& q = win.*pick;
        if (!q) continue;
        if (!head) {
          w.Family(name, "gauge", help);
          head = true;
        }
        const std::string base = *r.labels + "," + Label("window", win.name) + ",";
        w.Sample(name, base + Label("quantile", "0.5"), q->p50);
        w.Sample(name, base + Label("quantile", "0.95"), q->p95);
        w.Sample(name, base + Label("quantile", "0.99"), q->p99);
      }
    }
  };
  quantiles("flyt_gpu_util_quantile",
            "Quantiles of GPU utilization (in %) over the window (1m, 15m, 1h).",
            &profile::Window::util_percent);
  quantiles("flyt_gpu_memory_used_quantile_bytes",
            "Quantiles of framebuffer memory used (bytes) over the window.",
            &profile::Window::memory_used_bytes);
  quantiles("flyt_gpu_power_quantile_watts", "Quantiles of power draw (W) over the window.",
            &profile::Window::power_w);
  w.Family("flyt_gpu_allocated_idle_seconds", "gauge",
           "How long memory has been held on the GPU with ~0% utilization (0 unless the state is "
           "allocated-idle).");
  for (const Row& r : rows) {
    const bool held = r.p->state == profile::State::kAllocatedIdle && r.p->allocated_idle;
    w.Sample("flyt_gpu_allocated_idle_seconds", *r.labels, held ? r.p->allocated_idle->seconds : 0);
  }
  header = false;
  for (const Row& r : rows) {
    if (!r.p->memory.headroom_bytes) continue;
    if (!header) {
      w.Family("flyt_gpu_memory_headroom_bytes", "gauge",
               "Framebuffer memory free at the recent peak of use (over the last cycles when "
               "cyclic, else the last minute).");
      header = true;
    }
    w.Sample("flyt_gpu_memory_headroom_bytes", *r.labels,
             static_cast<double>(*r.p->memory.headroom_bytes));
  }
  w.Family("flyt_profile_phase_changes_total", "counter",
           "Phase changes (state changes and level shifts) of the GPU's usage profile.");
  for (const Row& r : rows) {
    uint64_t n = 0;
    if (in.phase_changes != nullptr) {
      if (auto it = in.phase_changes->find(r.p->uuid); it != in.phase_changes->end()) {
        n = it->second;
      }
    }
    w.Sample("flyt_profile_phase_changes_total", FlytGpuLabels(*r.g), static_cast<double>(n));
  }
}

}  // namespace

std::string EscapeLabelValue(std::string_view raw) {
  // Prometheus refuses a whole scrape over one label value that is not UTF-8 (a process title
  // is whatever bytes its owner chose), so invalid sequences become U+FFFD first.
  const std::string value = SanitizeUtf8(raw);
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderMetrics(const MetricsInput& in) {
  Writer w;
  w.Reserve(128 * 1024);
  if (in.snapshot != nullptr) {
    const auto& gpus = in.snapshot->gpus;
    // Each GPU's label set is built once and reused by every family.
    std::vector<std::string> labels;
    labels.reserve(gpus.size());
    for (const gpu::GpuInfo& g : gpus) labels.push_back(GpuLabels(g, in));
    for (const DcgmFamily& f : DcgmFamilies()) {
      bool header = false;
      for (size_t i = 0; i < gpus.size(); ++i) {
        const gpu::GpuInfo& g = gpus[i];
        if (g.lost) continue;
        std::optional<double> v = f.value(g);
        if (!v) continue;
        if (!header) w.Family(f.name, f.type, f.help);
        header = true;
        w.Sample(f.name, labels[i], *v);
      }
    }
    // The last XID, as dcgm-exporter reports it: 0 until one happens. Only where events are read.
    if (in.events_supported) {
      w.Family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.");
      for (size_t i = 0; i < gpus.size(); ++i) {
        const gpu::GpuInfo& g = gpus[i];
        if (g.lost) continue;
        auto it = in.events.find(g.index);
        uint64_t last = it != in.events.end() && it->second.last_xid ? *it->second.last_xid : 0;
        // As dcgm-exporter (3.3.5 and later) does: the code and its text as labels too.
        w.Sample("DCGM_FI_DEV_XID_ERRORS",
                 labels[i] + "," + Label("err_code", std::to_string(last)) + "," +
                     Label("err_msg", XidText(last)),
                 static_cast<double>(last));
      }
    }

    w.Family("flyt_gpu_lost", "gauge",
             "1 when the GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST), else 0.");
    for (const gpu::GpuInfo& g : gpus) {
      w.Sample("flyt_gpu_lost", FlytGpuLabels(g), g.lost ? 1 : 0);
    }
    bool xid_header = false;
    for (const auto& [index, counts] : in.events) {
      for (const auto& [xid, n] : counts.by_xid) {
        if (!xid_header) {
          w.Family("flyt_gpu_xid_events_total", "counter", "XID events seen, by GPU and XID.");
          xid_header = true;
        }
        std::string uuid;
        for (const gpu::GpuInfo& g : gpus) {
          if (g.index == index) uuid = g.uuid;
        }
        w.Sample("flyt_gpu_xid_events_total",
                 Label("gpu", std::to_string(index)) + "," + Label("UUID", uuid) + "," +
                     Label("xid", std::to_string(xid)),
                 static_cast<double>(n));
      }
    }

    // Per process: memory in bytes, SM utilisation as a ratio (0-1), as Prometheus conventions ask.
    bool mem_header = false, sm_header = false;
    struct Proc {
      const gpu::ProcessInfo* p;
      std::string labels;
    };
    std::vector<Proc> procs;
    for (const gpu::GpuInfo& g : gpus) {
      for (const gpu::ProcessInfo& p : g.processes) {
        procs.push_back({&p, FlytGpuLabels(g) + "," + Label("pid", std::to_string(p.pid)) + "," +
                                 Label("process_name", p.name.value_or("")) + "," +
                                 Label("user", p.user.value_or("")) + "," +
                                 Label("container", p.container_id.value_or(""))});
      }
    }
    for (const Proc& q : procs) {
      if (!q.p->used_memory_bytes) continue;
      if (!mem_header) {
        w.Family("flyt_gpu_process_memory_used_bytes", "gauge",
                 "GPU memory used by a process, in bytes.");
        mem_header = true;
      }
      w.Sample("flyt_gpu_process_memory_used_bytes", q.labels,
               static_cast<double>(*q.p->used_memory_bytes));
    }
    for (const Proc& q : procs) {
      if (!q.p->sm_util_percent) continue;
      if (!sm_header) {
        w.Family("flyt_gpu_process_sm_utilization_ratio", "gauge",
                 "Share of the GPU's SMs a process kept busy over the last sample, 0 to 1.");
        sm_header = true;
      }
      w.Sample("flyt_gpu_process_sm_utilization_ratio", q.labels, *q.p->sm_util_percent / 100.0);
    }
    if (in.profiles != nullptr) RenderProfiles(w, in, labels);
    w.Family("flyt_node_simulated", "gauge",
             "1 when the GPUs are flyt's simulated NVML (not real hardware), else 0.");
    w.Sample("flyt_node_simulated", "", in.snapshot->simulated_scenario ? 1 : 0);
  }

  if (in.cuda_health != nullptr) RenderCuda(w, in);

  w.Family("flyt_monitor_samples_total", "counter", "Samples the monitor has taken.");
  w.Sample("flyt_monitor_samples_total", "", static_cast<double>(in.stats.samples));
  w.Family("flyt_monitor_sample_failures_total", "counter",
           "Samples that could not read the GPUs at all.");
  w.Sample("flyt_monitor_sample_failures_total", "", static_cast<double>(in.stats.sample_failures));
  w.Family("flyt_monitor_degraded_samples_total", "counter",
           "Samples in which at least one reading failed (timeouts, errors).");
  w.Sample("flyt_monitor_degraded_samples_total", "",
           static_cast<double>(in.stats.failed_readings));
  w.Family("flyt_monitor_last_sample_duration_seconds", "gauge", "How long the last sample took.");
  w.Sample("flyt_monitor_last_sample_duration_seconds", "",
           static_cast<double>(in.stats.last_sample_duration.count()) / 1e6);
  w.Family("flyt_monitor_sample_duration_seconds_total", "counter",
           "Time spent sampling, in total.");
  w.Sample("flyt_monitor_sample_duration_seconds_total", "",
           static_cast<double>(in.stats.total_sample_duration.count()) / 1e6);
  w.Family("flyt_monitor_history_bytes", "gauge", "Memory reserved for GPU history.");
  w.Sample("flyt_monitor_history_bytes", "", static_cast<double>(in.stats.history_bytes));
  w.Family("flyt_monitor_sessions", "gauge", "Monitoring sessions open.");
  w.Sample("flyt_monitor_sessions", "", static_cast<double>(in.stats.sessions));
  w.Family("flyt_node_scrapes_total", "counter", "Scrapes of this endpoint.");
  w.Sample("flyt_node_scrapes_total", "", static_cast<double>(in.scrapes));
  w.Family("flyt_build_info", "gauge", "Always 1; labels say which flyt this is.");
  w.Sample("flyt_build_info", Label("version", in.version) + "," + Label("node", in.node_name), 1);
  return w.Take();
}

}  // namespace flyt::node
