#include "trace/process.h"

#include <algorithm>
#include <cstring>

#include "trace/error_names.h"

namespace flyt::trace {
namespace {

constexpr uint64_t kLegacyStreamHandle = 0x1;     // cudaStreamLegacy / CU_STREAM_LEGACY
constexpr uint64_t kPerThreadStreamHandle = 0x2;  // cudaStreamPerThread / CU_STREAM_PER_THREAD
constexpr uint32_t kStreamNonBlocking = 0x1;
constexpr int32_t kCudaErrorNotReady = 600;
constexpr size_t kMaxThreads = 65536;
constexpr size_t kMaxEvents = 65536;
constexpr size_t kMaxFailureNames = 64;
constexpr size_t kMaxDevices = 64;

bool IsDriverFunc(uint16_t func) {
  switch (func) {
    case FLYT_FN_cuLaunchKernel:
    case FLYT_FN_cuLaunchKernel_ptsz:
    case FLYT_FN_cuLaunchKernelEx:
    case FLYT_FN_cuLaunchKernelEx_ptsz:
    case FLYT_FN_cuGraphLaunch:
    case FLYT_FN_cuGraphLaunch_ptsz:
    case FLYT_FN_cuMemAlloc_v2:
    case FLYT_FN_cuMemFree_v2:
    case FLYT_FN_cuStreamSynchronize:
    case FLYT_FN_cuStreamSynchronize_ptsz:
    case FLYT_FN_cuCtxSynchronize:
    case FLYT_FN_cuModuleGetFunction:
    case FLYT_FN_cuStreamCreate:
    case FLYT_FN_cuStreamCreateWithPriority:
    case FLYT_FN_cuStreamDestroy_v2:
      return true;
    default:
      return false;
  }
}

bool IsGraphLaunch(uint16_t func) {
  return func == FLYT_FN_cudaGraphLaunch || func == FLYT_FN_cudaGraphLaunch_ptsz ||
         func == FLYT_FN_cuGraphLaunch || func == FLYT_FN_cuGraphLaunch_ptsz;
}

// grid × block threads, saturating.
uint64_t Threads(const uint32_t grid[3], const uint32_t block[3]) {
  long double t = 1;
  for (int i = 0; i < 3; ++i) t *= static_cast<long double>(grid[i]) * block[i];
  constexpr long double kMax = static_cast<long double>(1ull << 62);
  return static_cast<uint64_t>(std::min(t, kMax));
}

}  // namespace

TracedProcess::DeviceState::DeviceState(const TraceOptions& o)
    : kernels(o.max_kernel_names_per_process), rates(o.rate_window_seconds) {}

TracedProcess::TracedProcess(uint32_t pid, std::string comm, CudaEnv env, uint64_t cgroup_id,
                             std::string container_id, const TraceOptions& options,
                             uint64_t first_seen_ns)
    : options_(options),
      pid_(pid),
      comm_(std::move(comm)),
      env_(std::move(env)),
      cgroup_id_(cgroup_id),
      container_id_(std::move(container_id)),
      first_seen_ns_(first_seen_ns),
      last_seen_ns_(first_seen_ns),
      names_(options.max_kernel_names_per_process) {}

TracedProcess::DeviceState& TracedProcess::Device(int32_t device) {
  auto it = devices_.find(device);
  if (it == devices_.end()) {
    // A bound against a corrupt ordinal: CUDA accepted it (rc 0), so this is a real device.
    if (devices_.size() >= kMaxDevices) return devices_.begin()->second;
    it = devices_.emplace(device, DeviceState(options_)).first;
  }
  return it->second;
}

int32_t TracedProcess::ThreadDevice(uint32_t tid) const {
  auto it = thread_devices_.find(tid);
  return it == thread_devices_.end() ? 0 : it->second;
}

TracedProcess::Target TracedProcess::ResolveStream(uint32_t tid, uint64_t stream,
                                                   uint16_t flags) const {
  Target t;
  t.device = ThreadDevice(tid);
  if ((stream == 0 && (flags & FLYT_F_PER_THREAD) != 0) || stream == kPerThreadStreamHandle) {
    t.key = StreamKey{kPerThreadStreamHandle, tid};
  } else if (stream == 0 || stream == kLegacyStreamHandle) {
    t.key = StreamKey{0, 0};
  } else {
    t.key = StreamKey{stream, 0};
    if (auto it = stream_devices_.find(stream); it != stream_devices_.end()) t.device = it->second;
  }
  return t;
}

StreamState* TracedProcess::Stream(const Target& t, DropCounters* drops) {
  DeviceState& dev = Device(t.device);
  auto it = dev.streams.find(t.key);
  if (it != dev.streams.end()) return &it->second;
  if (t.key.handle != 0 && t.key.handle != kPerThreadStreamHandle &&
      dropped_streams_.count(t.key.handle) > 0) {
    return nullptr;
  }
  // The legacy stream of a device is always kept: its syncs reach the blocking streams.
  if (t.key.handle != 0 && stream_count_ >= options_.max_streams_per_process) {
    ++drops->streams;
    if (t.key.handle != kPerThreadStreamHandle && dropped_streams_.size() < kMaxEvents) {
      dropped_streams_.insert(t.key.handle);
    }
    return nullptr;
  }
  bool per_thread = t.key.handle == kPerThreadStreamHandle;
  ++stream_count_;
  return &dev.streams
              .emplace(t.key, StreamState(per_thread ? 0 : t.key.handle, false, per_thread,
                                          per_thread ? t.key.thread : 0))
              .first->second;
}

std::optional<uint32_t> TracedProcess::Cores(int32_t device, const GpuTable& gpus) {
  if (remote_ || device < 0) return std::nullopt;
  if (visible_version_ != gpus.version) {
    visible_ = VisibleGpus(env_, gpus.gpus);
    visible_version_ = gpus.version;
  }
  if (static_cast<size_t>(device) >= visible_.size()) return std::nullopt;
  return visible_[static_cast<size_t>(device)].cores;
}

void TracedProcess::Failure(int32_t device, int32_t rc, uint16_t func) {
  DeviceState& dev = Device(device);
  std::string name = CudaErrorName(rc, IsDriverFunc(func));
  auto it = dev.failures.find(name);
  if (it == dev.failures.end() && dev.failures.size() >= kMaxFailureNames) {
    name = "error other";
  }
  ++dev.failures[name];
}

void TracedProcess::CloseSpans(DeviceState& dev) {
  for (auto& [key, s] : dev.streams) dev.busy_seconds += s.TakeClosedSeconds();
}

void TracedProcess::SyncStream(const Target& t, uint64_t end_ns, const GpuTable& gpus,
                               DropCounters* drops) {
  if (t.key.handle == 0) {
    SyncLegacy(t.device, end_ns, gpus, drops);
    return;
  }
  DeviceState& dev = Device(t.device);
  if (StreamState* s = Stream(t, drops); s != nullptr) {
    s->CountSync();
    s->SyncAll(end_ns, Cores(t.device, gpus), &dev.rates);
    dev.busy_seconds += s->TakeClosedSeconds();
  }
}

void TracedProcess::SyncLegacy(int32_t device, uint64_t end_ns, const GpuTable& gpus,
                               DropCounters* drops) {
  StreamState* legacy = Stream(Target{device, StreamKey{0, 0}}, drops);
  DeviceState& dev = Device(device);
  std::optional<uint32_t> cores = Cores(device, gpus);
  if (legacy != nullptr) {
    legacy->CountSync();
    legacy->SyncAll(end_ns, cores, &dev.rates);
  }
  // The legacy stream waits for every blocking stream (per-thread default streams included).
  for (auto& [key, s] : dev.streams) {
    if (key.handle != 0 && !s.non_blocking()) s.SyncAll(end_ns, cores, &dev.rates);
  }
  CloseSpans(dev);
}

void TracedProcess::SyncDevice(int32_t device, uint64_t end_ns, const GpuTable& gpus) {
  DeviceState& dev = Device(device);
  std::optional<uint32_t> cores = Cores(device, gpus);
  for (auto& [key, s] : dev.streams) s.SyncAll(end_ns, cores, &dev.rates);
  CloseSpans(dev);
}

void TracedProcess::RemoveAllocation(std::map<uint64_t, Allocation>::iterator it) {
  const Allocation& a = it->second;
  DeviceState& dev = Device(a.device);
  switch (a.memory) {
    case FLYT_MEM_HOST_PINNED:
      dev.pinned_bytes -= std::min(dev.pinned_bytes, a.bytes);
      break;
    case FLYT_MEM_MANAGED:
      dev.managed_bytes -= std::min(dev.managed_bytes, a.bytes);
      if (dev.live_allocations > 0) --dev.live_allocations;
      break;
    default:
      dev.device_bytes -= std::min(dev.device_bytes, a.bytes);
      if (dev.live_allocations > 0) --dev.live_allocations;
      break;
  }
  allocations_.erase(it);
}

bool TracedProcess::IsDevicePointer(uint64_t ptr) const {
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return false;
  --it;
  return it->second.memory != FLYT_MEM_HOST_PINNED && ptr - it->first < it->second.bytes;
}

void TracedProcess::Apply(const flyt_trace_header& h, const void* data, const GpuTable& gpus,
                          DropCounters* drops) {
  last_seen_ns_ = std::max(last_seen_ns_, h.ts_ns);
  if (h.library == FLYT_LIB_FLYT_RUNTIME) remote_ = true;
  bool cuda_call = true;
  switch (h.kind) {
    case FLYT_EV_LAUNCH:
      OnLaunch(*static_cast<const flyt_trace_launch*>(data), drops);
      break;
    case FLYT_EV_ALLOC:
      OnAlloc(*static_cast<const flyt_trace_alloc*>(data), drops);
      break;
    case FLYT_EV_FREE:
      OnFree(*static_cast<const flyt_trace_free*>(data));
      break;
    case FLYT_EV_COPY:
    case FLYT_EV_MEMSET:
      OnCopy(*static_cast<const flyt_trace_copy*>(data), h.kind == FLYT_EV_MEMSET, gpus, drops);
      break;
    case FLYT_EV_SYNC:
      OnSync(*static_cast<const flyt_trace_sync*>(data), gpus, drops);
      break;
    case FLYT_EV_EVENT_RECORD:
      OnEventRecord(*static_cast<const flyt_trace_event_record*>(data), drops);
      break;
    case FLYT_EV_STREAM_CREATE:
    case FLYT_EV_STREAM_DESTROY:
      OnStream(*static_cast<const flyt_trace_stream*>(data), h.kind == FLYT_EV_STREAM_CREATE,
               drops);
      break;
    case FLYT_EV_SET_DEVICE: {
      const auto& r = *static_cast<const flyt_trace_set_device*>(data);
      if (h.rc != 0) {
        Failure(ThreadDevice(h.tid), h.rc, h.func);
      } else if (thread_devices_.count(h.tid) > 0 || thread_devices_.size() < kMaxThreads) {
        thread_devices_[h.tid] = r.device;
      }
      break;
    }
    case FLYT_EV_REGISTER_FUNCTION: {
      // __cudaRegisterFunction returns nothing; it runs at load time, before the program's own
      // code, so it does not end the window in which setenv still counts.
      cuda_call = false;
      const auto& r = *static_cast<const flyt_trace_name*>(data);
      // An empty name is one the BPF side could not read: the aggregator names the stub from
      // its symbol instead (Aggregator::NameUnreadStub).
      if (r.name[0] != 0 &&
          !names_.RegisterFunction(r.address,
                                   std::string_view(r.name, strnlen(r.name, sizeof(r.name))))) {
        ++drops->kernel_names;
      }
      break;
    }
    case FLYT_EV_GET_KERNEL: {
      const auto& r = *static_cast<const flyt_trace_get_kernel*>(data);
      if (h.rc != 0) {
        // nvcc's stubs call __cudaGetKernel before each launch they make; when it fails, the
        // launch that follows fails too and is the failure counted (the program's own call).
        if (h.func != FLYT_FN___cudaGetKernel) Failure(ThreadDevice(h.tid), h.rc, h.func);
      } else if (!names_.GetKernel(r.handle, r.stub)) {
        ++drops->kernel_names;
      }
      break;
    }
    case FLYT_EV_MODULE_FUNCTION: {
      const auto& r = *static_cast<const flyt_trace_name*>(data);
      if (h.rc != 0) {
        Failure(ThreadDevice(h.tid), h.rc, h.func);
      } else if (!names_.ModuleFunction(
                     r.address, std::string_view(r.name, strnlen(r.name, sizeof(r.name))))) {
        ++drops->kernel_names;
      }
      break;
    }
    case FLYT_EV_SETENV: {
      cuda_call = false;
      const auto& r = *static_cast<const flyt_trace_env*>(data);
      if (h.rc == 0 && !cuda_started_) {
        ApplySetenv(&env_, std::string_view(r.text, strnlen(r.text, sizeof(r.text))),
                    (h.flags & FLYT_F_TRUNCATED) != 0);
        visible_version_ = ~0ull;
      }
      break;
    }
    case FLYT_EV_LIBRARY_OPEN: {
      cuda_call = false;
      const auto& r = *static_cast<const flyt_trace_path*>(data);
      NoteLibrary(std::string(r.path, strnlen(r.path, sizeof(r.path))));
      break;
    }
    default:
      cuda_call = false;
      break;
  }
  if (cuda_call) cuda_started_ = true;
}

void TracedProcess::SetAttachedLate(const std::string& library) {
  attached_late_ = true;
  NoteLibrary(library);
}

void TracedProcess::SetMappings(std::vector<FileMapping> mappings) {
  mappings_ = std::move(mappings);
}

std::optional<uint64_t> TracedProcess::StubToLookUp(const flyt_trace_launch& r) {
  if (mappings_.empty() || r.h.rc != 0 || r.function == 0 || IsGraphLaunch(r.h.func) ||
      IsDriverFunc(r.h.func) ||
      names_.Knows(r.function)) {
    return std::nullopt;
  }
  uint64_t stub = names_.StubOf(r.function);
  if (!ClaimStubLookUp(stub)) return std::nullopt;
  return stub;
}

bool TracedProcess::ClaimStubLookUp(uint64_t stub) {
  if (stubs_looked_up_.count(stub) > 0 ||
      stubs_looked_up_.size() >= options_.max_kernel_names_per_process) {
    return false;
  }
  stubs_looked_up_.insert(stub);
  return true;
}

void TracedProcess::NameStub(uint64_t stub, const std::optional<std::string>& mangled,
                             DropCounters* drops) {
  if (mangled.has_value() && !names_.RegisterFunction(stub, *mangled)) ++drops->kernel_names;
}

void TracedProcess::NoteLibrary(const std::string& library) {
  if (library_.empty() || library.find("cudart") != std::string::npos) library_ = library;
}

void TracedProcess::OnLaunch(const flyt_trace_launch& r, DropCounters* drops) {
  Target t = ResolveStream(r.h.tid, r.stream, r.h.flags);
  if (r.h.rc != 0) {
    Failure(t.device, r.h.rc, r.h.func);
    return;
  }
  DeviceState& dev = Device(t.device);
  ++dev.launches;
  dev.rates.AddLaunch(r.h.ts_ns);
  bool graph = IsGraphLaunch(r.h.func);
  static const std::string* const graph_name = new std::string(kGraphKernel);
  const std::string& name = graph ? *graph_name : names_.Resolve(r.function);
  dev.kernels.Add(name, r.grid, r.block, r.shared_bytes, !graph);
  uint64_t threads = graph ? 0 : Threads(r.grid, r.block);
  if (StreamState* s = Stream(t, drops); s != nullptr) {
    s->Enqueue(r.h.ts_ns, threads);
    ++s->stats().launches;
  }
}

void TracedProcess::OnAlloc(const flyt_trace_alloc& r, DropCounters* drops) {
  int32_t device = ThreadDevice(r.h.tid);
  if (r.h.rc != 0) {
    Failure(device, r.h.rc, r.h.func);
    return;
  }
  if (r.ptr == 0) return;
  DeviceState& dev = Device(device);
  ++dev.allocations;
  auto existing = allocations_.find(r.ptr);
  if (existing != allocations_.end()) {
    RemoveAllocation(existing);  // its free was missed: the address is live again
  } else if (allocations_.size() >= options_.max_allocations_per_process) {
    ++drops->allocations;
    return;
  }
  allocations_.emplace(r.ptr, Allocation{r.bytes, r.memory, device});
  DeviceState& d = Device(device);
  switch (r.memory) {
    case FLYT_MEM_HOST_PINNED:
      d.pinned_bytes += r.bytes;
      d.pinned_peak_bytes = std::max(d.pinned_peak_bytes, d.pinned_bytes);
      break;
    case FLYT_MEM_MANAGED:
      d.managed_bytes += r.bytes;
      ++d.live_allocations;
      break;
    default:
      d.device_bytes += r.bytes;
      d.device_peak_bytes = std::max(d.device_peak_bytes, d.device_bytes);
      ++d.live_allocations;
      break;
  }
}

void TracedProcess::OnFree(const flyt_trace_free& r) {
  int32_t device = ThreadDevice(r.h.tid);
  if (r.h.rc != 0) {
    Failure(device, r.h.rc, r.h.func);
    return;
  }
  if (r.ptr == 0) return;  // cudaFree(0): the classic way to create the context
  auto it = allocations_.find(r.ptr);
  if (it == allocations_.end()) {
    ++Device(device).unknown_frees;
    return;
  }
  ++Device(it->second.device).frees;
  RemoveAllocation(it);
}

void TracedProcess::OnCopy(const flyt_trace_copy& r, bool memset, const GpuTable& gpus,
                           DropCounters* drops) {
  Target t = ResolveStream(r.h.tid, r.stream, r.h.flags);
  if (r.h.rc != 0) {
    Failure(t.device, r.h.rc, r.h.func);
    return;
  }
  uint32_t kind = r.copy_kind;
  if (!memset && kind == FLYT_COPY_DEFAULT) {
    // cudaMemcpyDefault: the direction from what the pointers are (unified addressing).
    bool src_device = IsDevicePointer(r.src);
    bool dst_device = IsDevicePointer(r.dst);
    kind = src_device ? (dst_device ? FLYT_COPY_DEVICE_TO_DEVICE : FLYT_COPY_DEVICE_TO_HOST)
                      : (dst_device ? FLYT_COPY_HOST_TO_DEVICE : FLYT_COPY_HOST_TO_HOST);
  }
  auto add = [&](CopyBytes& c) {
    if (memset) {
      c.memset += r.bytes;
      ++c.memsets;
      return;
    }
    ++c.copies;
    switch (kind) {
      case FLYT_COPY_HOST_TO_DEVICE:
        c.host_to_device += r.bytes;
        break;
      case FLYT_COPY_DEVICE_TO_HOST:
        c.device_to_host += r.bytes;
        break;
      case FLYT_COPY_DEVICE_TO_DEVICE:
        c.device_to_device += r.bytes;
        break;
      default:
        c.host_to_host += r.bytes;
        break;
    }
  };
  DeviceState& dev = Device(t.device);
  add(dev.copies);
  StreamState* s = Stream(t, drops);
  if (s != nullptr) add(s->stats().copies);
  bool blocking_copy = !memset && r.async == 0 &&
                       (r.h.func == FLYT_FN_cudaMemcpy || r.h.func == FLYT_FN_cudaMemcpy_ptds);
  if (!blocking_copy) {
    if (s != nullptr) s->Enqueue(r.h.ts_ns, 0);
    return;
  }
  // A blocking cudaMemcpy synchronises its stream only when it moves data between the host and
  // the device (CUDA's "API synchronization behavior"): a device-to-device one returns at once
  // with the copy enqueued; a host-to-host one is a plain host copy, no stream waits for it.
  if (kind == FLYT_COPY_DEVICE_TO_DEVICE) {
    if (s != nullptr) s->Enqueue(r.h.ts_ns, 0);
    return;
  }
  if (kind != FLYT_COPY_HOST_TO_DEVICE && kind != FLYT_COPY_DEVICE_TO_HOST) return;
  // Host↔device: the copy is work on its stream from the call's entry, and the call returns once
  // that stream (the legacy one: with it, the blocking streams) is done.
  if (s != nullptr) s->Enqueue(r.h.entry_ns != 0 ? r.h.entry_ns : r.h.ts_ns, 0);
  ++dev.syncs;
  SyncStream(t, r.h.ts_ns, gpus, drops);
}

void TracedProcess::OnSync(const flyt_trace_sync& r, const GpuTable& gpus, DropCounters* drops) {
  int32_t device = ThreadDevice(r.h.tid);
  bool event = r.h.func == FLYT_FN_cudaEventSynchronize || r.h.func == FLYT_FN_cudaEventQuery;
  if (r.h.rc != 0) {
    // A query of an event not yet reached is an answer, not a failure.
    if (!(r.h.func == FLYT_FN_cudaEventQuery && r.h.rc == kCudaErrorNotReady)) {
      Failure(device, r.h.rc, r.h.func);
    }
    return;
  }
  if (event) {
    auto it = events_.find(r.object);
    if (it == events_.end()) {
      ++Device(device).syncs;
      return;
    }
    const EventMark& m = it->second;
    DeviceState& dev = Device(m.device);
    ++dev.syncs;
    auto s = dev.streams.find(m.stream);
    if (s != dev.streams.end()) {
      s->second.CountSync();
      s->second.SyncUpTo(m.record_ns, r.h.ts_ns, Cores(m.device, gpus), &dev.rates);
      dev.busy_seconds += s->second.TakeClosedSeconds();
    }
    return;
  }
  if (r.h.func == FLYT_FN_cudaDeviceSynchronize || r.h.func == FLYT_FN_cuCtxSynchronize) {
    ++Device(device).syncs;
    SyncDevice(device, r.h.ts_ns, gpus);
    return;
  }
  Target t = ResolveStream(r.h.tid, r.object, r.h.flags);
  ++Device(t.device).syncs;
  SyncStream(t, r.h.ts_ns, gpus, drops);
}

void TracedProcess::OnEventRecord(const flyt_trace_event_record& r, DropCounters* drops) {
  Target t = ResolveStream(r.h.tid, r.stream, r.h.flags);
  if (r.h.rc != 0) {
    Failure(t.device, r.h.rc, r.h.func);
    return;
  }
  if (StreamState* s = Stream(t, drops); s != nullptr) s->MarkEvent(r.h.ts_ns);
  if (events_.count(r.event) > 0 || events_.size() < kMaxEvents) {
    events_[r.event] = EventMark{t.device, t.key, r.h.ts_ns};
  }
}

void TracedProcess::OnStream(const flyt_trace_stream& r, bool create, DropCounters* drops) {
  int32_t device = ThreadDevice(r.h.tid);
  if (r.h.rc != 0) {
    Failure(device, r.h.rc, r.h.func);
    return;
  }
  if (r.stream == 0 || r.stream == kLegacyStreamHandle || r.stream == kPerThreadStreamHandle) {
    return;  // not a stream of the program's own
  }
  if (auto it = stream_devices_.find(r.stream); it != stream_devices_.end() && create) {
    // Created twice with nothing done in between: the runtime's cudaStreamCreate* calling the
    // driver's cuStreamCreate (both probed). One stream.
    DeviceState& dev = Device(it->second);
    if (auto s = dev.streams.find(StreamKey{r.stream, 0}); s != dev.streams.end()) {
      const StreamStats& st = s->second.stats();
      if (st.launches == 0 && st.syncs == 0 && st.copies.copies == 0 && st.copies.memsets == 0) {
        s->second = StreamState(r.stream, (r.flags & kStreamNonBlocking) != 0, false, 0);
        return;
      }
    }
  }
  if (auto it = stream_devices_.find(r.stream); it != stream_devices_.end()) {
    // Destroyed (or its destroy was missed and the handle is reused): the old stream is retired.
    Retire(Device(it->second), r.stream);
    stream_devices_.erase(it);
  } else if (!create) {
    Retire(Device(device), r.stream);
  }
  dropped_streams_.erase(r.stream);
  if (!create) return;
  if (stream_count_ >= options_.max_streams_per_process) {
    ++drops->streams;
    if (dropped_streams_.size() < kMaxEvents) dropped_streams_.insert(r.stream);
    return;
  }
  ++stream_count_;
  stream_devices_[r.stream] = device;
  Device(device).streams.emplace(
      StreamKey{r.stream, 0},
      StreamState(r.stream, (r.flags & kStreamNonBlocking) != 0, false, 0));
}

void TracedProcess::Retire(DeviceState& dev, uint64_t handle) {
  auto it = dev.streams.find(StreamKey{handle, 0});
  if (it == dev.streams.end()) return;
  // Its span, if one is open, is left open: nothing says when its work ended.
  StreamStats stats = it->second.stats();
  stats.destroyed = true;
  dev.streams.erase(it);
  if (stream_count_ > 0) --stream_count_;
  if (options_.max_streams_per_process == 0) return;
  if (dev.retired.size() >= options_.max_streams_per_process) dev.retired.pop_front();
  dev.retired.push_back(std::move(stats));
}

std::vector<ProcessCuda> TracedProcess::Snapshot(const SnapshotContext& ctx) const {
  std::vector<ProcessCuda> out;
  auto wall = [&](uint64_t ns) {
    auto ahead = std::chrono::nanoseconds(static_cast<int64_t>(ns - ctx.now_ns));  // may be < 0
    return ctx.wall_at_now +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(ahead);
  };
  std::vector<VisibleGpu> visible;
  if (!remote_ && ctx.gpus != nullptr) visible = VisibleGpus(env_, ctx.gpus->gpus);
  const std::set<std::string>* nvml = nullptr;
  if (ctx.nvml != nullptr) {
    if (auto it = ctx.nvml->find(pid_); it != ctx.nvml->end() && !it->second.empty()) {
      nvml = &it->second;
    }
  }
  auto fill = [&](ProcessCuda& p, int32_t device, const DeviceState* dev) {
    p.pid = pid_;
    p.comm = comm_;
    p.device = device;
    p.remote = remote_;
    if (remote_) p.remote_server = env_.flyt_server.value_or("");
    if (!remote_ && device >= 0 && static_cast<size_t>(device) < visible.size()) {
      p.gpu_uuid = visible[static_cast<size_t>(device)].uuid;
      p.mig_uuid = visible[static_cast<size_t>(device)].mig_uuid;
    }
    if (!remote_ && nvml != nullptr) {
      bool listed = (!p.gpu_uuid.empty() && nvml->count(p.gpu_uuid) > 0) ||
                    (!p.mig_uuid.empty() && nvml->count(p.mig_uuid) > 0);
      if (!listed) {
        p.nvml_mismatch = !p.gpu_uuid.empty();
        if (nvml->size() == 1 && ctx.gpus != nullptr) {
          const std::string& only = *nvml->begin();
          for (const GpuIdentity& g : ctx.gpus->gpus) {
            bool mig = std::find(g.mig_uuids.begin(), g.mig_uuids.end(), only) != g.mig_uuids.end();
            if (g.uuid == only || mig) {
              p.gpu_uuid = g.uuid;
              p.mig_uuid = mig ? only : "";
              p.gpu_from_nvml = true;
            }
          }
        }
      }
    }
    p.cgroup_id = cgroup_id_;
    p.container_id = container_id_;
    p.library = library_;
    p.attached_late = attached_late_;
    p.first_seen = wall(first_seen_ns_);
    p.last_seen = wall(last_seen_ns_);
    p.exited = ctx.exited;
    p.exit_code = ctx.exit_code;
    if (dev == nullptr) return;
    p.launches = dev->launches;
    if (!ctx.exited) {
      p.launches_per_second = dev->rates.LaunchesPerSecond(ctx.now_ns);
      p.core_usage = dev->rates.CoreUsage(ctx.now_ns);
    }
    p.busy_seconds = dev->busy_seconds;
    p.syncs = dev->syncs;
    p.device_memory_bytes = dev->device_bytes;
    p.device_memory_peak_bytes = dev->device_peak_bytes;
    p.managed_memory_bytes = dev->managed_bytes;
    p.pinned_host_bytes = dev->pinned_bytes;
    p.pinned_host_peak_bytes = dev->pinned_peak_bytes;
    p.allocations = dev->allocations;
    p.frees = dev->frees;
    p.unknown_frees = dev->unknown_frees;
    p.copies = dev->copies;
    p.failures = dev->failures;
    p.top_kernels = dev->kernels.Top(options_.top_kernels);
    for (const auto& [key, s] : dev->streams) p.streams.push_back(s.stats());
    p.streams.insert(p.streams.end(), dev->retired.begin(), dev->retired.end());
    if (ctx.exited) {
      p.leaked_bytes = dev->device_bytes + dev->managed_bytes;
      p.leaked_allocations = dev->live_allocations;
      p.leaked_pinned_host_bytes = dev->pinned_bytes;
    }
  };
  if (devices_.empty()) {
    out.emplace_back();
    fill(out.back(), 0, nullptr);
    return out;
  }
  for (const auto& [device, dev] : devices_) {
    out.emplace_back();
    fill(out.back(), device, &dev);
  }
  return out;
}

}  // namespace flyt::trace
