#include "libcuda/driver.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "cuda/image.h"

namespace flyt::libcuda {
namespace {

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

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

// This thread's stack of current contexts (the top is current).
thread_local std::vector<ContextRecord*> context_stack;

}  // namespace

CUresult ToCu(CudaError code) {
  const auto value = static_cast<int>(code);
  switch (code) {
    case CudaError::kSuccess:
    case CudaError::kInvalidValue:
    case CudaError::kMemoryAllocation:
    case CudaError::kInitializationError:
      return static_cast<CUresult>(value);  // the same numbers in both enums
    case CudaError::kDevicesUnavailable:
      return CUDA_ERROR_DEVICE_UNAVAILABLE;
    case CudaError::kInvalidDeviceFunction:
      return CUDA_ERROR_NOT_FOUND;
    case CudaError::kInvalidDevice:
      return CUDA_ERROR_INVALID_DEVICE;
    default:
      break;
  }
  // From 100 on the runtime's codes are the driver's (cudaErrorNoDevice = CUDA_ERROR_NO_DEVICE,
  // cudaErrorIllegalAddress = CUDA_ERROR_ILLEGAL_ADDRESS...); below, the runtime's own checks.
  return value >= 100 ? static_cast<CUresult>(value) : CUDA_ERROR_INVALID_VALUE;
}

Driver& Driver::Get() {
  static Driver* driver = new Driver();  // never destroyed: see the file comment
  return *driver;
}

Driver::Driver() : log_(remote::ClientCore::Process().shared_log()) {}

spdlog::logger& Driver::log() { return *log_; }

void Driver::WarnOnce(const std::string& key, const std::string& message) {
  {
    MutexLock lock(mu_);
    if (!warned_.insert(key).second) return;
  }
  log_->warn("{}", message);
}

CUresult Driver::Unsupported(const char* symbol) {
  WarnOnce(
      std::string("unsupported:") + symbol,
      std::string(symbol) +
          " is not supported by flyt's remote CUDA driver; it returns CUDA_ERROR_NOT_SUPPORTED");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CudaStatus Driver::StickyStatus() const {
  const uint32_t sticky = sticky_.load();
  if (sticky == 0) return CudaStatus::Ok();
  return Error(static_cast<CudaError>(sticky), "a previous error corrupted the CUDA context");
}

CUresult Driver::Finish(const CudaStatus& status) {
  CudaStatus outcome = status;
  if (remote::Connection* conn = remote::ClientCore::Process().connected()) {
    if (std::optional<remote::AsyncError> async = conn->TakeAsyncError()) {
      log_->debug("posted {} failed: {}", remote::CallName(async->call), async->status.ToString());
      if (outcome.ok() || outcome.code() == CudaError::kNotReady) outcome = async->status;
    }
  }
  if (!outcome.ok() && remote::IsStickyCudaError(outcome.code())) {
    uint32_t expected = 0;
    sticky_.compare_exchange_strong(expected, static_cast<uint32_t>(outcome.code()));
  }
  if (!outcome.ok() && outcome.code() != CudaError::kNotReady) {
    remote::ClientCore::Process().ReportFailure(outcome);
  }
  if (outcome.ok() && sticky_.load() != 0) return ToCu(static_cast<CudaError>(sticky_.load()));
  return ToCu(outcome.code());
}

CUresult Driver::Local(CUresult code, const std::string& why) {
  log_->debug("{} ({})", why, static_cast<int>(code));
  return code;
}

CUresult Driver::CheckInit() const {
  // Under flyt's runtime the driver is initialised, as NVIDIA's runtime initialises it.
  return initialized_.load(std::memory_order_acquire) ||
                 remote::ClientCore::Process().runtime_active()
             ? CUDA_SUCCESS
             : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult Driver::CheckDevice(CUdevice device) {
  if (CUresult init = CheckInit(); init != CUDA_SUCCESS) return init;
  if (device < 0 || device >= device_count()) {
    return Local(CUDA_ERROR_INVALID_DEVICE, "device " + std::to_string(device));
  }
  return CUDA_SUCCESS;
}

CUresult Driver::Init(unsigned flags) {
  if (flags != 0) return Local(CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0");
  if (initialized_.load()) return CUDA_SUCCESS;
  CudaResult<remote::Connection*> conn = remote::ClientCore::Process().Connect();
  if (!conn.ok()) {
    // No server (or none reachable): to a program, a machine without a device.
    CudaError code = conn.status().code();
    return code == CudaError::kDevicesUnavailable ? CUDA_ERROR_DEVICE_UNAVAILABLE
           : code == CudaError::kNoDevice         ? CUDA_ERROR_NO_DEVICE
                                                  : CUDA_ERROR_NOT_INITIALIZED;
  }
  initialized_.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CudaResult<remote::Connection*> Driver::Connection() {
  FLYT_CUDA_RETURN_IF_ERROR(StickyStatus());
  return remote::ClientCore::Process().Connect();
}

int Driver::device_count() {
  if (CheckInit() != CUDA_SUCCESS) return 0;
  remote::Connection* conn = remote::ClientCore::Process().connected();
  // flyt serves one device per process: the server's first.
  return conn != nullptr && conn->server().device_count > 0 ? 1 : 0;
}

CudaResult<const remote::GetDevicePropertiesReply*> Driver::Properties() {
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, remote::ClientCore::Process().Connect());
  MutexLock lock(device_mu_);
  if (properties_ != nullptr && properties_generation_ == conn->device_generation() + 1) {
    return properties_;
  }
  // Read before the call: a resize noticed during it makes the next query fetch again.
  const uint64_t generation = conn->device_generation();
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::GetDevicePropertiesReply reply,
                             conn->GetDeviceProperties({0}));
  // Every reply is kept: a caller may still read the one it was handed.
  fetched_properties_.push_back(std::move(reply));
  properties_ = &fetched_properties_.back();
  properties_generation_ = generation + 1;
  attributes_.clear();
  return properties_;
}

CudaResult<int32_t> Driver::Attribute(uint32_t attr) {
  FLYT_CUDA_ASSIGN_OR_RETURN(const remote::GetDevicePropertiesReply* props, Properties());
  {
    MutexLock lock(device_mu_);
    if (auto it = attributes_.find(attr); it != attributes_.end()) return it->second;
  }
  std::optional<int32_t> value;
  for (const PropAttr& pa : kPropAttrs) {
    if (pa.attr != attr) continue;
    for (const remote::NamedValue& v : props->values) {
      if (v.name == pa.name) value = static_cast<int32_t>(v.value);
    }
  }
  if (attr == CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) value = 0;  // mapped memory: refused
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

// ---- contexts ----------------------------------------------------------------------------------

bool Driver::ReleasePrimary() {
  int refs = primary_refs_.load();
  while (refs > 0 && !primary_refs_.compare_exchange_weak(refs, refs - 1)) {
  }
  return refs > 0;
}

ContextRecord* Driver::NewContext(int device, unsigned flags) {
  auto owned = std::make_unique<ContextRecord>(ContextRecord{device, flags, false});
  ContextRecord* context = owned.get();
  MutexLock lock(mu_);
  contexts_.emplace(context, std::move(owned));
  return context;
}

bool Driver::DestroyContext(ContextRecord* context) {
  {
    MutexLock lock(mu_);
    if (contexts_.erase(context) == 0) return false;
  }
  std::erase(context_stack, context);
  return true;
}

bool Driver::IsContext(const ContextRecord* context) {
  if (context == &primary_) return true;
  MutexLock lock(mu_);
  return contexts_.contains(context);
}

ContextRecord* Driver::Current() {
  if (!context_stack.empty()) return context_stack.back();
  // Under flyt's runtime, as under NVIDIA's: the primary context, on every thread that set none.
  return remote::ClientCore::Process().runtime_active() ? &primary_ : nullptr;
}

void Driver::SetCurrent(ContextRecord* context) {
  if (context == nullptr) {
    if (!context_stack.empty()) context_stack.pop_back();
    return;
  }
  if (context_stack.empty()) {
    context_stack.push_back(context);
  } else {
    context_stack.back() = context;
  }
}

void Driver::Push(ContextRecord* context) { context_stack.push_back(context); }

ContextRecord* Driver::Pop() {
  if (context_stack.empty()) return nullptr;
  ContextRecord* top = context_stack.back();
  context_stack.pop_back();
  return top;
}

CUresult Driver::RequireContext() {
  if (CUresult init = CheckInit(); init != CUDA_SUCCESS) return init;
  ContextRecord* current = Current();
  if (current == nullptr) return Local(CUDA_ERROR_INVALID_CONTEXT, "no current context");
  if (!IsContext(current))
    return Local(CUDA_ERROR_CONTEXT_IS_DESTROYED, "current context destroyed");
  if (current->primary && !primary_active() && !remote::ClientCore::Process().runtime_active()) {
    return Local(CUDA_ERROR_INVALID_CONTEXT, "the primary context was released");
  }
  return CUDA_SUCCESS;
}

// ---- streams and events ------------------------------------------------------------------------

CudaResult<uint64_t> Driver::ResolveStream(CUstream stream, bool per_thread) {
  if (stream == CU_STREAM_LEGACY || (stream == nullptr && !per_thread)) return uint64_t{0};
  if (stream == nullptr || stream == CU_STREAM_PER_THREAD) {
    static thread_local uint64_t mine = 0;
    if (mine != 0) return mine;
    FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
    const uint64_t id = NewId();
    // A blocking stream: the per-thread default stream synchronises with the legacy one.
    FLYT_CUDA_RETURN_IF_ERROR(conn->StreamCreate({id, 0, 0}));
    mine = id;
    return id;
  }
  // A stream of this library, or of flyt's runtime in the same process.
  if (uint64_t id = remote::ClientCore::Process().HandleId(stream); id != 0) return id;
  return Error(CudaError::kInvalidResourceHandle, "not a stream of this process");
}

CUstream Driver::AddStream(StreamRecord record) {
  return static_cast<CUstream>(streams_.Add(record));
}

std::optional<StreamRecord> Driver::RemoveStream(CUstream stream) {
  return streams_.Remove(stream);
}

std::optional<StreamRecord> Driver::FindStream(CUstream stream) {
  if (std::optional<StreamRecord> mine = streams_.Find(stream)) return mine;
  // A stream of flyt's runtime in the same process.
  if (uint64_t id = remote::ClientCore::Process().HandleId(stream); id != 0) {
    return StreamRecord{id, 0, 0, nullptr};
  }
  return std::nullopt;
}

CUevent Driver::AddEvent(EventRecord record) { return static_cast<CUevent>(events_.Add(record)); }

std::optional<EventRecord> Driver::RemoveEvent(CUevent event) { return events_.Remove(event); }

std::optional<EventRecord> Driver::FindEvent(CUevent event) {
  if (std::optional<EventRecord> mine = events_.Find(event)) return mine;
  // An event of flyt's runtime in the same process.
  if (uint64_t id = remote::ClientCore::Process().HandleId(event); id != 0) {
    return EventRecord{id, 0};
  }
  return std::nullopt;
}

// ---- modules -----------------------------------------------------------------------------------

CudaResult<CUmodule> Driver::LoadModule(std::span<const std::byte> image, std::string label) {
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  auto record = std::make_unique<ModuleRecord>();
  record->id = NewId();
  record->label = std::move(label);
  Result<std::vector<cuda::KernelInfo>> kernels = cuda::KernelsOfImage(image);
  if (kernels.ok()) {
    record->parsed = true;
    for (cuda::KernelInfo& k : *kernels) {
      // Any entry's layout will do (an argument list does not depend on the architecture); a
      // cubin's is preferred to one read from PTX.
      auto it = record->kernels.find(k.name);
      if (it == record->kernels.end() || (it->second.from_ptx && !k.from_ptx)) {
        record->kernels[k.name] = std::move(k);
      }
    }
  } else {
    WarnOnce("unparsed:" + record->label,
             "flyt cannot read the kernels of module " + record->label + " (" +
                 kernels.status().message() +
                 "): it is loaded, but its kernels launch only with `extra` parameter buffers");
  }
  record->globals = cuda::GlobalsOfImage(image);
  FLYT_CUDA_RETURN_IF_ERROR(conn->ModuleLoad({record->id, image.size(), record->label}, image));
  auto handle = reinterpret_cast<CUmodule>(record.get());
  MutexLock lock(mu_);
  modules_.emplace(handle, std::move(record));
  return handle;
}

CudaStatus Driver::UnloadModule(CUmodule module) {
  std::unique_ptr<ModuleRecord> record;
  {
    MutexLock lock(mu_);
    auto it = modules_.find(module);
    if (it == modules_.end()) {
      return Error(CudaError::kInvalidResourceHandle, "not a module of this process");
    }
    record = std::move(it->second);
    modules_.erase(it);
    for (auto& [name, function] : record->functions) functions_.erase(function);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  return conn->ModuleUnload({record->id});
}

ModuleRecord* Driver::FindModule(CUmodule module) {
  MutexLock lock(mu_);
  auto it = modules_.find(module);
  return it == modules_.end() ? nullptr : it->second.get();
}

CudaResult<CUfunction> Driver::GetFunction(CUmodule module, const std::string& name) {
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  uint64_t module_id = 0;
  const cuda::KernelInfo* layout = nullptr;
  bool parsed = false;
  {
    MutexLock lock(mu_);
    auto it = modules_.find(module);
    if (it == modules_.end()) {
      return Error(CudaError::kInvalidResourceHandle, "not a module of this process");
    }
    ModuleRecord& record = *it->second;
    if (auto f = record.functions.find(name); f != record.functions.end()) {
      return reinterpret_cast<CUfunction>(f->second);
    }
    parsed = record.parsed;
    if (auto k = record.kernels.find(name); k != record.kernels.end()) layout = &k->second;
    if (parsed && layout == nullptr) {
      return Error(CudaError::kInvalidDeviceFunction,
                   "module " + record.label + " has no kernel " + name);
    }
    module_id = record.id;
  }
  const uint64_t id = NewId();
  FLYT_CUDA_RETURN_IF_ERROR(conn->ModuleGetFunction({module_id, id, name}));
  if (!parsed) {
    // Only the server knows whether the kernel exists: ask now, not at the first launch.
    FLYT_CUDA_RETURN_IF_ERROR(conn->Sync({}).status());
    if (std::optional<remote::AsyncError> async = conn->TakeAsyncError()) return async->status;
  }
  auto owned = std::make_unique<FunctionRecord>();
  owned->id = id;
  owned->name = name;
  owned->layout = layout;
  FunctionRecord* function = owned.get();
  MutexLock lock(mu_);
  auto it = modules_.find(module);
  if (it == modules_.end()) {
    return Error(CudaError::kInvalidResourceHandle, "the module was unloaded meanwhile");
  }
  owned->module = it->second.get();
  auto [existing, added] = it->second->functions.emplace(name, function);
  if (!added) return reinterpret_cast<CUfunction>(existing->second);  // another thread's
  functions_.emplace(function, std::move(owned));
  return reinterpret_cast<CUfunction>(function);
}

FunctionRecord* Driver::FindFunction(CUfunction function) {
  MutexLock lock(mu_);
  auto it = functions_.find(function);
  return it == functions_.end() ? nullptr : it->second.get();
}

CudaResult<std::map<uint32_t, int32_t>> Driver::FunctionAttributes(FunctionRecord& function) {
  {
    MutexLock lock(mu_);
    if (function.attributes_fetched) return function.attributes;
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Connection());
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::FuncGetAttributesReply reply,
                             conn->FuncGetAttributes({function.id}));
  std::map<uint32_t, int32_t> values;
  for (const remote::AttributeValue& v : reply.values) values[v.attr] = v.value;
  MutexLock lock(mu_);
  function.attributes = values;
  function.attributes_fetched = true;
  return values;
}

void Driver::ForgetFunctionAttributes(FunctionRecord& function) {
  MutexLock lock(mu_);
  function.attributes_fetched = false;
}

// ---- memory ------------------------------------------------------------------------------------

// Device memory is the client core's, shared with flyt's libcudart.so.13.
void Driver::AddDeviceAllocation(uint64_t ptr, uint64_t bytes, bool global) {
  remote::ClientCore::Process().AddDeviceRange(ptr, bytes == 0 ? 1 : bytes, global);
}

bool Driver::RemoveDeviceAllocation(uint64_t ptr) {
  return remote::ClientCore::Process().RemoveDeviceAllocation(ptr);
}

std::optional<std::pair<uint64_t, uint64_t>> Driver::DeviceAllocation(uint64_t ptr) {
  return remote::ClientCore::Process().FindDeviceRange(ptr);
}

bool Driver::IsDeviceRange(uint64_t ptr, uint64_t bytes) {
  return remote::ClientCore::Process().IsDeviceRange(ptr, bytes == 0 ? 1 : bytes);
}

void* Driver::AllocateHost(size_t bytes, unsigned flags) {
  // Page-aligned, as the driver's pinned memory is; plain host memory here (the server copies
  // from the bytes the connection carries).
  const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) return nullptr;
  MutexLock lock(mu_);
  host_memory_.Add(reinterpret_cast<uint64_t>(p), rounded, flags);
  host_allocations_.insert(p);
  return p;
}

bool Driver::FreeHost(void* ptr) {
  {
    MutexLock lock(mu_);
    if (host_allocations_.erase(ptr) == 0) return false;
    host_memory_.Remove(reinterpret_cast<uint64_t>(ptr));
  }
  std::free(ptr);
  return true;
}

bool Driver::RegisterHost(void* ptr, size_t bytes, unsigned flags) {
  MutexLock lock(mu_);
  return host_memory_.Add(reinterpret_cast<uint64_t>(ptr), bytes, flags);
}

bool Driver::UnregisterHost(void* ptr) {
  MutexLock lock(mu_);
  if (host_allocations_.contains(ptr)) return false;  // cuMemAllocHost's: not registered
  return host_memory_.Remove(reinterpret_cast<uint64_t>(ptr)).has_value();
}

std::optional<unsigned> Driver::HostFlags(const void* ptr) {
  MutexLock lock(mu_);
  auto range = host_memory_.Find(reinterpret_cast<uint64_t>(ptr));
  if (!range) return std::nullopt;
  return range->value;
}

CudaStatus Driver::MakeRoomForDownload(remote::Connection& conn, uint64_t bytes,
                                       bool& synchronous) {
  synchronous = false;
  const uint64_t pending = conn.pending_download_bytes();
  if (pending + bytes <= remote::kMaxDownloadBytesInFlight) return CudaStatus::Ok();
  if (pending > 0) FLYT_CUDA_RETURN_IF_ERROR(conn.DeviceSynchronize({}).status());
  synchronous = bytes > remote::kMaxDownloadBytesInFlight;
  return CudaStatus::Ok();
}

}  // namespace flyt::libcuda

// The process's client core lives here (client_core.h): flyt's libcudart.so.13 is linked against
// this library and reaches the same one.
namespace flyt::remote {
ClientCore& ClientCore::Process() {
  static ClientCore* core = new ClientCore();  // never destroyed
  return *core;
}
}  // namespace flyt::remote

namespace flyt::libcuda {
// The stubs of stubs.cc (driver entry points flyt does not implement).
int UnsupportedEntryPoint(const char* symbol) {
  return static_cast<int>(Driver::Get().Unsupported(symbol));
}
}  // namespace flyt::libcuda

// Tells flyt's libcuda.so.1 from NVIDIA's driver: flyt's GPU server refuses to drive a GPU
// through it (src/cuda_driver), and flyt's tracer knows a process behind a flyt GPU server.
extern "C" __attribute__((visibility("default"), used)) const int flyt_libcuda_version = 1;
