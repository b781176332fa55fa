#include "trace/tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// The generated skeleton embeds the BPF object as one long string literal.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#if defined(__clang__)
#pragma clang diagnostic ignored "-Woverlength-strings"
#endif
#include "cuda_trace.skel.h"
#pragma GCC diagnostic pop
#include "trace/attacher.h"
#include "trace/discovery.h"

namespace flyt::trace {
namespace {

// libbpf's messages: to spdlog (debug), and the last few kept for a load failure's Status.
Mutex log_mu;
std::string last_libbpf_lines FLYT_GUARDED_BY(log_mu);

// libbpf hands over its own printf format.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  char buf[1024];
  int n = std::vsnprintf(buf, sizeof(buf), format, args);
  if (n <= 0) return n;
  std::string line(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
  while (!line.empty() && line.back() == '\n') line.pop_back();
  spdlog::debug("libbpf: {}", line);
  if (level != LIBBPF_DEBUG) {
    MutexLock lock(log_mu);
    last_libbpf_lines += line + "; ";
    if (last_libbpf_lines.size() > 2048) last_libbpf_lines.erase(0, last_libbpf_lines.size() - 2048);
  }
  return n;
}
#pragma GCC diagnostic pop

bool HasCapability(int cap) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

// Syscall tracepoints are looked up in tracefs: mount it where the system did not.
void EnsureTracefs() {
  if (::access("/sys/kernel/tracing/events", F_OK) == 0 ||
      ::access("/sys/kernel/debug/tracing/events", F_OK) == 0) {
    return;
  }
  if (::mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0) {
    spdlog::info("trace: mounted tracefs on /sys/kernel/tracing (for the openat tracepoints)");
  }
}

bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

Status Tracer::CheckSupport() {
  constexpr int kCapPerfmon = 38;  // CAP_PERFMON, CAP_BPF: Linux 5.8
  constexpr int kCapBpf = 39;
  if (!HasCapability(CAP_SYS_ADMIN) &&
      !(HasCapability(kCapBpf) && HasCapability(kCapPerfmon))) {
    return PermissionDenied(
               "CUDA tracing needs root, or CAP_BPF and CAP_PERFMON (this process has neither)")
        .WithReason("permission_denied");
  }
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    return Unavailable("CUDA tracing needs the kernel's BTF (/sys/kernel/btf/vmlinux is missing: "
                       "a kernel built without CONFIG_DEBUG_INFO_BTF)")
        .WithReason("no_btf");
  }
  utsname u{};
  if (::uname(&u) != 0) return ErrnoError("uname", errno);
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2 || major < 6 ||
      (major == 6 && minor < 6)) {
    return NotSupported(std::string("CUDA tracing needs Linux 6.6 or later (multi-uprobe links "
                                    "with attach cookies); this kernel is ") +
                        u.release)
        .WithReason("kernel_too_old");
  }
  return Status::Ok();
}

Tracer::Tracer(const TraceOptions& options, RecordSink* sink) : options_(options), sink_(sink) {}

Result<std::unique_ptr<Tracer>> Tracer::Start(const TraceOptions& options, RecordSink* sink) {
  FLYT_RETURN_IF_ERROR(CheckSupport());
  long page = ::sysconf(_SC_PAGESIZE);
  if (!PowerOfTwo(options.ring_buffer_bytes) ||
      options.ring_buffer_bytes < static_cast<uint64_t>(page) ||
      options.ring_buffer_bytes > (1ull << 30)) {
    return InvalidArgument("trace ring buffer size " + std::to_string(options.ring_buffer_bytes) +
                           " must be a power of two between the page size (" +
                           std::to_string(page) + ") and 1 GiB")
        .WithReason("invalid_argument");
  }
  if (options.drain_interval_ms == 0 || options.high_water_percent == 0 ||
      options.high_water_percent > 100) {
    return InvalidArgument("trace drain interval must be > 0 and high-water percent in 1..100")
        .WithReason("invalid_argument");
  }
  std::unique_ptr<Tracer> tracer(new Tracer(options, sink));
  FLYT_RETURN_IF_ERROR(tracer->Load());
  tracer->drain_ = std::thread([t = tracer.get()] { t->DrainLoop(); });
  return tracer;
}

Status Tracer::Load() {
  libbpf_set_print(LibbpfPrint);
  {
    MutexLock lock(log_mu);
    last_libbpf_lines.clear();
  }
  auto libbpf_failure = [](const std::string& what, int err) {
    std::string lines;
    {
      MutexLock lock(log_mu);
      lines = last_libbpf_lines;
    }
    return Unavailable("CUDA tracing: " + what + " failed (" + std::strerror(err) + ")" +
                       (lines.empty() ? "" : ": libbpf: " + lines))
        .WithReason("bpf_load_failed");
  };
  // Opens and loads the BPF object; `with_register`: with the sleepable __cudaRegisterFunction
  // program, which a kernel without sleepable multi-uprobes refuses (the names then come from the
  // generic return probe, and from the stubs' symbols where that read fails).
  auto open_and_load = [&](bool with_register) -> Status {
    {
      MutexLock lock(log_mu);
      last_libbpf_lines.clear();  // a failure's message names only its own attempt's lines
    }
    if (skel_ != nullptr) cuda_trace__destroy(skel_);
    skel_ = cuda_trace__open();
    if (skel_ == nullptr) return libbpf_failure("opening the BPF object", errno);
    if (bpf_map__set_max_entries(skel_->maps.events,
                                 static_cast<uint32_t>(options_.ring_buffer_bytes)) != 0) {
      return libbpf_failure("sizing the ring buffer", errno);
    }
    skel_->rodata->high_water_bytes =
        options_.ring_buffer_bytes / 100 * options_.high_water_percent;
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0 ||
        bpf_map__set_max_entries(skel_->maps.environ_scratch, static_cast<uint32_t>(cpus)) != 0) {
      return libbpf_failure("sizing the environment scratch", cpus < 0 ? -cpus : errno);
    }
    // The uprobe programs are attached as multi-uprobe links (attacher.h).
    for (bpf_program* p : {skel_->progs.cuda_entry, skel_->progs.cuda_return,
                           skel_->progs.cuda_launch, skel_->progs.cuda_register,
                           skel_->progs.env_entry}) {
      bpf_program__set_expected_attach_type(p, static_cast<bpf_attach_type>(48));  // UPROBE_MULTI
    }
    // cuda_register is sleepable by its section name (uprobe.s).
    if (!with_register) bpf_program__set_autoload(skel_->progs.cuda_register, false);
    if (int err = cuda_trace__load(skel_); err != 0) {
      return libbpf_failure("loading the BPF program", -err);
    }
    return Status::Ok();
  };
  if (Status s = open_and_load(true); !s.ok()) {
    spdlog::warn("trace: {}; loading again without the sleepable name reader", s.message());
    FLYT_RETURN_IF_ERROR(open_and_load(false));
  }
  struct {
    bpf_program* program;
    bpf_link** link;
    bool required;
  } tracepoints[] = {
      {skel_->progs.on_exec, &skel_->links.on_exec, true},
      {skel_->progs.on_exit, &skel_->links.on_exit, true},
      // The returns before the entries: an entry's saved path waits for its return.
      {skel_->progs.on_openat_exit, &skel_->links.on_openat_exit, false},
      {skel_->progs.on_openat2_exit, &skel_->links.on_openat2_exit, false},
      {skel_->progs.on_openat, &skel_->links.on_openat, false},
      {skel_->progs.on_openat2, &skel_->links.on_openat2, false},
  };
  EnsureTracefs();
  for (auto& tp : tracepoints) {
    *tp.link = bpf_program__attach(tp.program);
    if (*tp.link == nullptr && tp.required) {
      return libbpf_failure(std::string("attaching ") + bpf_program__name(tp.program), errno);
    }
    if (*tp.link == nullptr) {
      open_watch_failed_ = true;
      spdlog::warn("trace: cannot watch library opens ({}: {}); libraries outside the configured "
                   "folders are found only at exec and by the start-up scan",
                   bpf_program__name(tp.program), std::strerror(errno));
    }
  }
  ring_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), &Tracer::OnRingRecord, this, nullptr);
  if (ring_ == nullptr) return libbpf_failure("creating the ring buffer reader", errno);
  // libbpf reads an epoll event's data as the index of its ring: 0, the only one, is harmless.
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = 0;
    if (::epoll_ctl(ring_buffer__epoll_fd(ring_), EPOLL_CTL_ADD, stop_fd_, &ev) != 0) {
      ::close(stop_fd_);
      stop_fd_ = -1;
    }
  }

  MutexLock lock(mu_);
  AttachPrograms programs;
  programs.entry = skel_->progs.cuda_entry;
  programs.ret = skel_->progs.cuda_return;
  programs.env = options_.watch_setenv ? skel_->progs.env_entry : nullptr;
  programs.launch = options_.launch_results ? nullptr : skel_->progs.cuda_launch;
  programs.register_ = bpf_program__fd(skel_->progs.cuda_register) >= 0
                           ? skel_->progs.cuda_register : nullptr;
  attacher_ = std::make_unique<Attacher>(programs);
  discovery_ = std::make_unique<Discovery>(options_, attacher_.get(), sink_);
  discovery_->InitialScan();
  const AttacherStats& stats = attacher_->stats();
  spdlog::debug("trace: CUDA tracing on: {} libraries probed, ring buffer {} bytes, drain every {} ms",
               stats.libraries_probed, options_.ring_buffer_bytes, options_.drain_interval_ms);
  return Status::Ok();
}

int Tracer::OnRingRecord(void* ctx, void* data, size_t bytes) {
  auto* self = static_cast<Tracer*>(ctx);
  self->events_received_.fetch_add(1, std::memory_order_relaxed);
  self->sink_->OnRecord(data, bytes);
  if (bytes >= sizeof(flyt_trace_header)) {
    flyt_trace_header h;
    std::memcpy(&h, data, sizeof(h));
    if (h.kind == FLYT_EV_EXEC || h.kind == FLYT_EV_LIBRARY_OPEN) {
      MutexLock lock(self->mu_);
      if (self->discovery_) self->discovery_->OnControlRecord(data, bytes);
    }
  }
  return 0;
}

void Tracer::DrainLoop() {
  int timeout_ms = static_cast<int>(options_.drain_interval_ms);
  while (!stopping_.load(std::memory_order_acquire)) {
    int n = ring_buffer__poll(ring_, timeout_ms);
    if (n < 0 && n != -EINTR) {
      spdlog::warn("trace: polling the ring buffer failed: {}", std::strerror(-n));
    }
    // Records submitted without a wakeup are not seen by poll: read everything there is.
    if (stopping_.load(std::memory_order_acquire)) break;
    ring_buffer__consume(ring_);
    sink_->OnDrainEnd();
  }
}

uint64_t Tracer::LostEvents() const {
  if (skel_ == nullptr) return 0;
  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return 0;
  std::vector<uint64_t> values(static_cast<size_t>(cpus));
  uint32_t key = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.lost), &key, values.data()) != 0) return 0;
  uint64_t sum = 0;
  for (uint64_t v : values) sum += v;
  return sum;
}

void Tracer::FillProbeHealth(TracerHealth* h) const {
  if (!attacher_) {  // stopped: what they had when Stop let them go
    h->attach_failures = final_probe_health_.attach_failures;
    h->libraries_probed = final_probe_health_.libraries_probed;
    h->libraries = final_probe_health_.libraries;
    h->unprobeable = final_probe_health_.unprobeable;
    return;
  }
  if (attacher_) {
    const AttacherStats& s = attacher_->stats();
    h->attach_failures = s.attach_failures;
    h->libraries_probed = s.libraries_probed;
    h->libraries = s.libraries;
    if (open_watch_failed_) ++h->attach_failures["open_tracepoint"];
  }
  if (discovery_) {
    h->unprobeable.assign(discovery_->unprobeable().begin(), discovery_->unprobeable().end());
  }
}

TracerHealth Tracer::Health() const {
  TracerHealth h;
  h.events_received = events_received_.load(std::memory_order_relaxed);
  h.events_lost = LostEvents();
  MutexLock lock(mu_);
  h.enabled = !stopped_;
  if (stopped_) h.disabled_reason = "the tracer was stopped";
  FillProbeHealth(&h);
  return h;
}

void Tracer::Stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_.store(true, std::memory_order_release);
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));
  }
  if (drain_.joinable()) drain_.join();
  // Detach first (no new records), then hand over what is left.
  {
    MutexLock lock(mu_);
    FillProbeHealth(&final_probe_health_);  // what was probed stays reported after Stop
    discovery_.reset();
    attacher_.reset();
  }
  if (skel_ != nullptr) {
    bpf_link__destroy(skel_->links.on_exec);
    bpf_link__destroy(skel_->links.on_openat);
    bpf_link__destroy(skel_->links.on_openat2);
    bpf_link__destroy(skel_->links.on_openat_exit);
    bpf_link__destroy(skel_->links.on_openat2_exit);
    bpf_link__destroy(skel_->links.on_exit);
    skel_->links.on_exec = skel_->links.on_openat = skel_->links.on_openat2 =
        skel_->links.on_openat_exit = skel_->links.on_openat2_exit = skel_->links.on_exit =
            nullptr;
  }
  if (ring_ != nullptr) {
    ring_buffer__consume(ring_);
    sink_->OnDrainEnd();
  }
}

Tracer::~Tracer() {
  if (drain_.joinable() || ring_ != nullptr) Stop();
  if (ring_ != nullptr) ring_buffer__free(ring_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (skel_ != nullptr) cuda_trace__destroy(skel_);
}

}  // namespace flyt::trace
