#include "runtime/runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

// Exported (libcudart.map) so that flyt's CUDA tracer tells this runtime from NVIDIA's: the GPU
// of a process traced here is behind a flyt-gpu-server.
extern "C" __attribute__((visibility("default"), used)) const int flyt_runtime_version = 1;

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

spdlog::level::level_enum LevelFromEnv() {
  const char* text = std::getenv("FLYT_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return spdlog::level::warn;
  spdlog::level::level_enum level = spdlog::level::from_str(text);
  return level;
}

std::string Hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Device properties that answer attribute queries without a round trip.
struct PropAttr {
  uint32_t attr;
  const char* name;
};
constexpr PropAttr kPropAttrs[] = {
#define FLYT_DEVICE_PROP(field, attr, name) {attr, #field},
#include "remote/device_props.def"
#undef FLYT_DEVICE_PROP
};

}  // namespace

Runtime& Runtime::Get() {
  // Never destroyed: atexit handlers (the program's __cudaUnregisterFatBinary, static
  // destructors that free device memory) may still call in while the process ends.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

Runtime::Runtime() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  log_ = std::make_shared<spdlog::logger>("flyt-cudart", sink);
  log_->set_pattern("[flyt-cudart %l] %v");
  log_->set_level(LevelFromEnv());
  const char* strict = std::getenv("FLYT_STRICT_ERRORS");
  strict_errors_ = strict != nullptr && std::strcmp(strict, "1") == 0;
}

void Runtime::WarnOnce(const std::string& key, const std::string& message) {
  {
    MutexLock lock(mu_);
    if (!warned_.insert(key).second) return;
  }
  log_->warn("{}", message);
}

cudaError_t Runtime::Unsupported(const char* name) {
  WarnOnce(std::string("unsupported:") + name,
           std::string(name) + " is not supported by flyt's remote CUDA runtime; it returns "
                               "cudaErrorNotSupported");
  return ToCuda(errors_.Record(CudaError::kNotSupported));
}

CudaStatus Runtime::StickyStatus() const {
  CudaError sticky = errors_.Sticky();
  if (sticky == CudaError::kSuccess) return CudaStatus::Ok();
  return Error(sticky, "a previous error corrupted the CUDA context");
}

void Runtime::ReportFailure(const CudaStatus& status) {
  // Losing the server is the one failure a program's own error check cannot explain (it prints
  // only "device(s) busy or unavailable"): the core says once, whatever the log level, what was
  // lost.
  remote::ClientCore::Process().ReportFailure(status);
}

cudaError_t Runtime::Finish(const CudaStatus& status) {
  if (remote::Connection* conn = remote::ClientCore::Process().connected()) {
    if (std::optional<remote::AsyncError> async = conn->TakeAsyncError()) {
      log_->debug("posted {} failed: {}", remote::CallName(async->call),
                  async->status.ToString());
      errors_.Record(async->status.code());
    }
  }
  if (!status.ok() && status.code() != CudaError::kNotReady) ReportFailure(status);
  return ToCuda(errors_.Record(status.code()));
}

cudaError_t Runtime::FinishSync(const CudaStatus& status) {
  std::optional<remote::AsyncError> async;
  if (remote::Connection* conn = remote::ClientCore::Process().connected()) async = conn->TakeAsyncError();
  if (async) {
    log_->debug("posted {} failed: {}", remote::CallName(async->call), async->status.ToString());
    errors_.Record(async->status.code());
    if (status.ok() || status.code() == CudaError::kNotReady) {
      return ToCuda(async->status.code());
    }
  }
  if (!status.ok() && status.code() != CudaError::kNotReady) ReportFailure(status);
  return ToCuda(errors_.Record(status.code()));
}

CudaResult<remote::Connection*> Runtime::Connection() {
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, remote::ClientCore::Process().Connect());
  if (!arena_adopted_.load(std::memory_order_acquire)) {
    // The connection's shared arena backs cudaMallocHost (the core may have been opened by
    // libcuda.so.1 first: the arena is taken over here, once).
    MutexLock arena_lock(arena_mu_);
    if (!arena_adopted_.load()) {
      if (remote::SharedArena arena = conn->arena(); arena.bytes > 0) {
        arena_ = arena;
        arena_blocks_.emplace(arena.bytes);
      }
      // NVIDIA's libraries in this process call the driver API as under NVIDIA's runtime.
      remote::ClientCore::Process().SetRuntimeActive();
      arena_adopted_.store(true, std::memory_order_release);
    }
  }
  return conn;
}

int Runtime::driver_version() { return remote::ClientCore::Process().driver_version(); }

bool Runtime::DeviceFactsCurrent() const {
  const remote::Connection* conn = remote::ClientCore::Process().connected();
  return conn == nullptr || device_generation_ == std::make_pair(conn, conn->device_generation());
}

CudaResult<const remote::GetDevicePropertiesReply*> Runtime::Properties() {
  MutexLock lock(device_mu_);
  if (properties_ != nullptr && DeviceFactsCurrent()) return properties_;
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  // Read before the call: a resize noticed during it makes the next query fetch again.
  const uint64_t generation = conn->device_generation();
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::GetDevicePropertiesReply reply,
                             conn->GetDeviceProperties({0}));
  fetched_properties_.push_back(std::move(reply));
  ManagedAdjustProperties(fetched_properties_.back());  // [issue 17: managed]
  properties_ = &fetched_properties_.back();
  attributes_.clear();  // answered from the properties before; now perhaps stale
  device_generation_ = {conn, generation};
  return properties_;
}

CudaResult<int32_t> Runtime::Attribute(uint32_t attr) {
  {
    MutexLock lock(device_mu_);
    if (DeviceFactsCurrent()) {
      if (auto it = attributes_.find(attr); it != attributes_.end()) return it->second;
    }
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(const remote::GetDevicePropertiesReply* props, Properties());
  std::optional<int32_t> value;
  for (const PropAttr& pa : kPropAttrs) {
    if (pa.attr != attr) continue;
    for (const remote::NamedValue& v : props->values) {
      if (v.name == pa.name) value = static_cast<int32_t>(v.value);
    }
  }
  if (!value) {
    FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
    FLYT_CUDA_ASSIGN_OR_RETURN(remote::DeviceGetAttributeReply reply,
                               conn->DeviceGetAttribute({0, attr}));
    value = reply.value;
  }
  MutexLock lock(device_mu_);
  attributes_[attr] = *value;
  return *value;
}

CudaResult<Runtime::LaunchLimits> Runtime::Limits() {
  {
    MutexLock lock(device_mu_);
    if (limits_) return *limits_;
  }
  LaunchLimits found;
  for (int i = 0; i < 3; ++i) {
    FLYT_CUDA_ASSIGN_OR_RETURN(found.block[i], Attribute(2 + i));
    FLYT_CUDA_ASSIGN_OR_RETURN(found.grid[i], Attribute(5 + i));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(found.threads, Attribute(1));
  FLYT_CUDA_ASSIGN_OR_RETURN(found.shared_optin, Attribute(97));
  MutexLock lock(device_mu_);
  limits_ = found;
  return found;
}

CudaStatus Runtime::Reset() {
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  CudaResult<remote::DeviceResetReply> reply = conn->DeviceReset({});
  if (!reply.ok()) return reply.status();
  MutexLock lock(mu_);
  generation_.fetch_add(1);
  streams_.clear();
  events_.clear();
  remote::ClientCore::Process().ClearDeviceRanges();
  remote::ClientCore::Process().ClearHandles();
  ManagedForgetAll();  // [issue 17: managed]
  IpcForgetAll();
  errors_.ClearSticky();
  return CudaStatus::Ok();
}

// ---- registration ------------------------------------------------------------------------------

void** Runtime::RegisterFatbin(const void* wrapper) {
  auto record = std::make_unique<FatbinRecord>();
  record->wrapper = wrapper;
  record->slot = record.get();
  Result<std::vector<std::span<const std::byte>>> containers = cuda::FatbinsOfWrapper(wrapper);
  if (containers.ok() && !containers->empty()) {
    record->containers = std::move(containers).value();
  } else {
    record->error = containers.ok() ? "no fatbin container" : containers.status().message();
    log_->error("cannot read a fatbin the program registered: {}", record->error);
  }
  MutexLock lock(mu_);
  fatbins_.push_back(std::move(record));
  return &fatbins_.back()->slot;
}

namespace {
FatbinRecord* FatbinOf(void** handle, std::vector<std::unique_ptr<FatbinRecord>>& fatbins) {
  for (auto& f : fatbins) {
    if (&f->slot == handle) return f.get();
  }
  return nullptr;
}
}  // namespace

void Runtime::RegisterFunction(void** handle, const void* host_fun, const char* name) {
  MutexLock lock(mu_);
  FatbinRecord* fatbin = FatbinOf(handle, fatbins_);
  if (fatbin == nullptr || host_fun == nullptr || name == nullptr) {
    log_->error("__cudaRegisterFunction with an unknown fatbin handle or no name");
    return;
  }
  auto record = std::make_unique<FunctionRecord>();
  record->fatbin = fatbin;
  record->host_fun = host_fun;
  record->name = name;
  kernel_handles_.insert(record.get());
  auto& slot = functions_[host_fun];
  if (slot) kernel_handles_.erase(slot.get());
  slot = std::move(record);
}

void Runtime::RegisterVar(void** handle, const void* host_var, const char* name, size_t size,
                          bool constant) {
  MutexLock lock(mu_);
  FatbinRecord* fatbin = FatbinOf(handle, fatbins_);
  if (fatbin == nullptr || host_var == nullptr || name == nullptr) {
    log_->error("__cudaRegisterVar with an unknown fatbin handle or no name");
    return;
  }
  auto record = std::make_unique<VarRecord>();
  record->fatbin = fatbin;
  record->host_var = host_var;
  record->name = name;
  record->size = size;
  record->constant = constant;
  vars_[host_var] = std::move(record);
}

void Runtime::UnregisterFatbin(void** handle) {
  // A forked child's exit unregisters too: it must not unload its parent's modules.
  remote::Connection* conn = remote::ClientCore::Process().connected();
  MutexLock lock(mu_);
  FatbinRecord* fatbin = FatbinOf(handle, fatbins_);
  if (fatbin == nullptr) return;
  // Its kernels and variables can no longer be named (the code may be unmapped after this, as
  // when a shared library is closed); the records stay so that stale pointers stay harmless.
  for (auto it = functions_.begin(); it != functions_.end();) {
    if (it->second->fatbin == fatbin) {
      it->second->fatbin = nullptr;
      it = functions_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(vars_, [&](const auto& v) { return v.second->fatbin == fatbin; });
  fatbin->containers.clear();
  fatbin->error = "the fatbin was unregistered";
  if (conn != nullptr && fatbin->module_id != 0 && fatbin->module_generation == generation_) {
    (void)conn->ModuleUnload({fatbin->module_id});
    fatbin->module_id = 0;
  }
  if (conn != nullptr) (void)conn->Flush();
}

FunctionRecord* Runtime::FindFunction(const void* host_fun) {
  MutexLock lock(mu_);
  auto it = functions_.find(host_fun);
  return it == functions_.end() ? nullptr : it->second.get();
}

FunctionRecord* Runtime::FromKernelHandle(const void* kernel) {
  MutexLock lock(mu_);
  if (!kernel_handles_.contains(kernel)) return nullptr;
  auto* record = static_cast<FunctionRecord*>(const_cast<void*>(kernel));
  return record->fatbin == nullptr ? nullptr : record;
}

void Runtime::ParseLocked(FatbinRecord& fatbin) {
  fatbin.parsed = true;
  for (size_t i = 0; i < fatbin.containers.size(); ++i) {
    Result<cuda::Fatbin> parsed = cuda::ParseFatbin(fatbin.containers[i]);
    Result<std::vector<cuda::KernelInfo>> kernels =
        parsed.ok() ? cuda::KernelsOf(*parsed)
                    : Result<std::vector<cuda::KernelInfo>>(parsed.status());
    if (!kernels.ok()) {
      log_->warn("cannot read kernel layouts from fatbin container {}: {}", i,
                 kernels.status().message());
      continue;
    }
    for (cuda::KernelInfo& k : *kernels) {
      auto it = fatbin.kernels.find(k.name);
      if (it == fatbin.kernels.end() || (it->second.from_ptx && !k.from_ptx)) {
        fatbin.kernels[k.name] = std::move(k);
      }
    }
  }
}

CudaStatus Runtime::EnsureModuleLocked(FatbinRecord& fatbin) {
  uint64_t gen = generation_.load();
  if (fatbin.module_id != 0 && fatbin.module_generation == gen) return CudaStatus::Ok();
  if (fatbin.containers.empty()) {
    return Error(CudaError::kInvalidKernelImage, "no device code: " + fatbin.error);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  uint64_t id = NewId();
  std::span<const std::byte> image = fatbin.containers.front();
  FLYT_CUDA_RETURN_IF_ERROR(
      conn->ModuleLoad({id, image.size(), "fatbin at " + Hex(fatbin.wrapper)}, image));
  fatbin.module_id = id;
  fatbin.module_generation = gen;
  return CudaStatus::Ok();
}

CudaResult<LaunchTarget> Runtime::PrepareLaunch(FunctionRecord& function) {
  MutexLock lock(mu_);
  if (function.fatbin == nullptr) {
    return Error(CudaError::kInvalidDeviceFunction, "the kernel's fatbin was unregistered");
  }
  FatbinRecord& fatbin = *function.fatbin;
  if (!fatbin.parsed) ParseLocked(fatbin);
  auto it = fatbin.kernels.find(function.name);
  if (it == fatbin.kernels.end()) {
    return Error(CudaError::kInvalidDeviceFunction,
                 "no parameter layout for kernel " + function.name + " in its fatbin");
  }
  FLYT_CUDA_RETURN_IF_ERROR(EnsureModuleLocked(fatbin));
  uint64_t gen = generation_.load();
  if (function.function_id == 0 || function.generation != gen) {
    FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
    uint64_t id = NewId();
    FLYT_CUDA_RETURN_IF_ERROR(conn->ModuleGetFunction({fatbin.module_id, id, function.name}));
    function.function_id = id;
    function.generation = gen;
  }
  return LaunchTarget{function.function_id, &it->second, function.name};
}

CudaResult<std::pair<uint64_t, size_t>> Runtime::Symbol(const void* host_var) {
  MutexLock lock(mu_);
  auto it = vars_.find(host_var);
  if (it == vars_.end()) {
    return Error(CudaError::kInvalidSymbol, "not a registered __device__ or __constant__ variable");
  }
  VarRecord& var = *it->second;
  uint64_t gen = generation_.load();
  if (var.ptr != 0 && var.generation == gen) return std::make_pair(var.ptr, var.size);
  FLYT_CUDA_RETURN_IF_ERROR(EnsureModuleLocked(*var.fatbin));
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::ModuleGetGlobalReply reply,
                             conn->ModuleGetGlobal({var.fatbin->module_id, var.name, var.size}));
  var.ptr = reply.ptr;
  var.size = reply.bytes != 0 ? reply.bytes : var.size;
  var.generation = gen;
  remote::ClientCore::Process().AddDeviceRange(var.ptr, var.size, /*global=*/true);
  return std::make_pair(var.ptr, var.size);
}

CudaResult<std::map<uint32_t, int32_t>> Runtime::FunctionAttributes(FunctionRecord& function) {
  FLYT_CUDA_ASSIGN_OR_RETURN(LaunchTarget target, PrepareLaunch(function));
  {
    MutexLock lock(mu_);
    if (function.attributes_generation == generation_.load() && !function.attributes.empty()) {
      return function.attributes;
    }
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::FuncGetAttributesReply reply,
                             conn->FuncGetAttributes({target.function_id}));
  std::map<uint32_t, int32_t> values;
  for (const remote::AttributeValue& v : reply.values) values[v.attr] = v.value;
  MutexLock lock(mu_);
  function.attributes = values;
  function.attributes_generation = generation_.load();
  return values;
}

void Runtime::ForgetFunctionAttributes(FunctionRecord& function) {
  MutexLock lock(mu_);
  function.attributes.clear();
  function.attributes_generation = 0;
}

// ---- streams and events ------------------------------------------------------------------------

uint64_t Runtime::PerThreadStream(CudaStatus& status) {
  struct PerThread {
    uint64_t generation = 0;
    uint64_t id = 0;
  };
  static thread_local PerThread mine;
  uint64_t gen = generation_.load();
  if (mine.id != 0 && mine.generation == gen) return mine.id;
  CudaResult<remote::Connection*> conn = Connection();
  if (!conn.ok()) {
    status = conn.status();
    return 0;
  }
  uint64_t id = NewId();
  // A blocking stream: the per-thread default stream synchronises with the legacy one.
  status = (*conn)->StreamCreate({id, 0, 0});
  if (!status.ok()) return 0;
  mine = {gen, id};
  return id;
}

CudaResult<uint64_t> Runtime::ResolveStream(cudaStream_t stream, bool per_thread) {
  auto value = reinterpret_cast<uintptr_t>(stream);
  if (value == 0 && !per_thread) return uint64_t{0};
  if (value == 1) return uint64_t{0};  // cudaStreamLegacy
  if (value == 0 || value == 2) {      // cudaStreamPerThread
    CudaStatus status;
    uint64_t id = PerThreadStream(status);
    if (!status.ok()) return status;
    return id;
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamRecord record, FindStream(stream));
  return record.id;
}

CudaResult<StreamRecord> Runtime::FindStream(cudaStream_t stream) {
  MutexLock lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end() || it->second->generation != generation_.load()) {
    return Error(CudaError::kInvalidResourceHandle, "not a stream of this process");
  }
  return *it->second;
}

cudaStream_t Runtime::AddStream(StreamRecord record) {
  auto owned = std::make_unique<StreamRecord>(record);
  auto handle = reinterpret_cast<cudaStream_t>(owned.get());
  // Known to flyt's libcuda.so.1 too (NVIDIA's libraries pass the program's streams to it).
  remote::ClientCore::Process().AddHandle(handle, record.id);
  MutexLock lock(mu_);
  streams_.emplace(handle, std::move(owned));
  return handle;
}

std::optional<StreamRecord> Runtime::RemoveStream(cudaStream_t stream) {
  MutexLock lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return std::nullopt;
  StreamRecord record = *it->second;
  streams_.erase(it);
  remote::ClientCore::Process().RemoveHandle(stream);
  if (record.generation != generation_.load()) return std::nullopt;
  return record;
}

CudaResult<EventRecord> Runtime::FindEvent(cudaEvent_t event) {
  MutexLock lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end() || it->second->generation != generation_.load()) {
    return Error(CudaError::kInvalidResourceHandle, "not an event of this process");
  }
  return *it->second;
}

cudaEvent_t Runtime::AddEvent(EventRecord record) {
  auto owned = std::make_unique<EventRecord>(record);
  auto handle = reinterpret_cast<cudaEvent_t>(owned.get());
  remote::ClientCore::Process().AddHandle(handle, record.id);
  MutexLock lock(mu_);
  events_.emplace(handle, std::move(owned));
  return handle;
}

std::optional<EventRecord> Runtime::RemoveEvent(cudaEvent_t event) {
  MutexLock lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) return std::nullopt;
  EventRecord record = *it->second;
  events_.erase(it);
  remote::ClientCore::Process().RemoveHandle(event);
  if (record.generation != generation_.load()) return std::nullopt;
  return record;
}

// ---- memory ------------------------------------------------------------------------------------

// Device memory is the client core's, shared with flyt's libcuda.so.1.
void Runtime::AddDeviceAllocation(uint64_t ptr, uint64_t bytes) {
  remote::ClientCore::Process().AddDeviceRange(ptr, bytes);
}

bool Runtime::RemoveDeviceAllocation(uint64_t ptr) {
  return remote::ClientCore::Process().RemoveDeviceAllocation(ptr);
}

bool Runtime::IsDeviceRange(const void* ptr, size_t bytes) {
  return remote::ClientCore::Process().IsDeviceRange(reinterpret_cast<uint64_t>(ptr), bytes);
}

bool Runtime::IsDevicePointer(const void* ptr) {
  return remote::ClientCore::Process().FindDeviceRange(reinterpret_cast<uint64_t>(ptr)).has_value();
}

void* Runtime::AllocateHost(size_t bytes, unsigned flags) {
  constexpr size_t kPage = 4096;
  size_t rounded = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  // Pinned memory is the server's to copy from by DMA: in the shared arena when the connection
  // has one (cudaMallocHost initialises the device, as CUDA's does; without a server it is plain
  // page-aligned heap memory, and the first call that needs the device reports why).
  (void)Connection();
  void* p = nullptr;
  {
    MutexLock lock(arena_mu_);
    if (arena_blocks_) {
      if (std::optional<uint64_t> offset = arena_blocks_->Allocate(rounded)) {
        p = arena_.base + *offset;
      }
    }
  }
  if (p == nullptr) p = std::aligned_alloc(kPage, rounded);
  if (p == nullptr) return nullptr;
  MutexLock lock(mu_);
  host_memory_.Add(reinterpret_cast<uint64_t>(p), rounded, flags);
  host_allocations_.insert(p);
  return p;
}

bool Runtime::FreeHost(void* ptr) {
  {
    MutexLock lock(mu_);
    if (host_allocations_.erase(ptr) == 0) return false;
    host_memory_.Remove(reinterpret_cast<uint64_t>(ptr));
  }
  {
    MutexLock lock(arena_mu_);
    if (arena_blocks_ && arena_.Contains(ptr, 1)) {
      arena_blocks_->Free(arena_.OffsetOf(ptr));
      return true;
    }
  }
  std::free(ptr);
  return true;
}

std::optional<uint64_t> Runtime::ArenaOffset(const void* ptr, size_t bytes) {
  MutexLock lock(arena_mu_);
  if (!arena_.Contains(ptr, bytes)) return std::nullopt;
  return arena_.OffsetOf(ptr);
}

bool Runtime::RegisterHost(void* ptr, size_t bytes, unsigned flags) {
  // As with CUDA, registering initialises the device (here: the connection and its arena).
  (void)Connection();
  const auto address = reinterpret_cast<uint64_t>(ptr);
  {
    MutexLock lock(mu_);
    if (!host_memory_.Add(address, bytes, flags)) return false;
  }
  MutexLock lock(arena_mu_);
  if (arena_blocks_ && !arena_.Contains(ptr, 1)) {
    if (std::optional<uint64_t> offset = arena_blocks_->Allocate(bytes)) {
      staging_[address] = StagingCopy{address, bytes, *offset, false};
    }
  }
  return true;
}

bool Runtime::UnregisterHost(void* ptr) {
  const auto address = reinterpret_cast<uint64_t>(ptr);
  {
    MutexLock lock(mu_);
    if (host_allocations_.contains(ptr)) return false;
    if (!host_memory_.Remove(address).has_value()) return false;
  }
  std::optional<StagingCopy> copy;
  {
    MutexLock lock(arena_mu_);
    if (auto it = staging_.find(address); it != staging_.end()) {
      copy = it->second;
      staging_.erase(it);
    }
  }
  if (!copy) return true;
  // Async copies may still read or write the arena copy: its block is handed out again only
  // once the device is done with them (and what was landing has landed).
  if (remote::Connection* conn = remote::ClientCore::Process().connected(); conn != nullptr && copy->async) {
    // Not knowing that the device is done with it (the connection broke), the block stays out.
    if (!conn->DeviceSynchronize({}).ok()) return true;
  }
  MutexLock lock(arena_mu_);
  if (arena_blocks_) arena_blocks_->Free(copy->offset);
  return true;
}

Runtime::StagingCopy* Runtime::FindStagingLocked(uint64_t address, size_t bytes) {
  auto it = staging_.upper_bound(address);
  if (it == staging_.begin()) return nullptr;
  --it;
  const uint64_t into = address - it->first;
  if (into > it->second.bytes || bytes > it->second.bytes - into) return nullptr;
  return &it->second;
}

std::optional<Runtime::Staged> Runtime::StageIn(remote::Connection& conn, const void* src,
                                                size_t bytes, bool async) {
  if (conn.arena_detached()) return std::nullopt;  // moved: ordinary copies are as good
  const auto address = reinterpret_cast<uint64_t>(src);
  std::optional<Staged> staged;
  {
    MutexLock lock(arena_mu_);
    StagingCopy* copy = FindStagingLocked(address, bytes);
    if (copy == nullptr) return std::nullopt;
    copy->async = copy->async || async;
    const uint64_t offset = copy->offset + (address - copy->base);
    staged = Staged{offset, arena_.base + offset};
  }
  // A device-to-host copy into this part of the range, ordered before this one, may still land
  // in the arena copy: CUDA's copy would read what it brought, so it lands first (its stream
  // done, whose reply brings the word), then the caller copies the bytes in.
  if (std::optional<uint64_t> stream = conn.StagedLandingStream(staged->arena, bytes)) {
    bool landed = conn.StreamSynchronize({*stream}).ok();
    // Another stream's copy into the same part, or a stream gone meanwhile: the whole device.
    if (!landed || conn.StagedLandingStream(staged->arena, bytes)) {
      landed = conn.DeviceSynchronize({}).ok();
    }
    if (!landed) return std::nullopt;  // over the rings instead; the error shows there
  }
  return staged;
}

std::optional<Runtime::Staged> Runtime::StageOut(remote::Connection& conn, void* dst,
                                                 size_t bytes, bool async) {
  if (conn.arena_detached()) return std::nullopt;
  const auto address = reinterpret_cast<uint64_t>(dst);
  MutexLock lock(arena_mu_);
  StagingCopy* copy = FindStagingLocked(address, bytes);
  if (copy == nullptr) return std::nullopt;
  copy->async = copy->async || async;
  const uint64_t offset = copy->offset + (address - copy->base);
  return Staged{offset, arena_.base + offset};
}

std::optional<unsigned> Runtime::HostFlags(const void* ptr) {
  MutexLock lock(mu_);
  auto range = host_memory_.Find(reinterpret_cast<uint64_t>(ptr));
  if (!range) return std::nullopt;
  return range->value;
}

}  // namespace flyt::runtime
