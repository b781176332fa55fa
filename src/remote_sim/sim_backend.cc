#include "remote_sim/sim_backend.h"

#include <spdlog/spdlog.h>

#include "remote_sim/sim_internal.h"
#include "cuda/image.h"

namespace flyt::remote {
namespace sim_internal {

SimSession::~SimSession() {
  for (auto& [ptr, block] : allocations_) backend_.Release(block->bytes());
}

CudaResult<DevicePtr> SimSession::Malloc(uint64_t bytes) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  if (bytes == 0) return DevicePtr{0};
  if (!backend_.Reserve(bytes)) {
    return Error(CudaError::kMemoryAllocation, "simulated device memory exhausted");
  }
  std::unique_ptr<Block> block;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (auto it = spare_.find(rounded); it != spare_.end()) {
    block = std::move(it->second);
    spare_.erase(it);
    spare_bytes_ -= rounded;
    block->Reuse(bytes);
  } else {
    block = std::make_unique<Block>(bytes, &backend_.address_space());
  }
  if (!block->ok()) {
    backend_.Release(bytes);
    return Error(CudaError::kMemoryAllocation, "host memory for the simulated device exhausted");
  }
  DevicePtr ptr = block->address();
  ranges_.Add(ptr, bytes, block.get());
  allocations_.emplace(ptr, std::move(block));
  return ptr;
}

CudaStatus SimSession::Free(DevicePtr ptr) {
  auto it = allocations_.find(ptr);
  if (it == allocations_.end()) return Error(CudaError::kInvalidValue, "not an allocation");
  backend_.Release(it->second->bytes());
  ranges_.Remove(ptr);
  size_t mapped = it->second->mapped();
  if (mapped != 0 && mapped <= kSpareBlockMaxBytes && spare_bytes_ + mapped <= kSpareTotalBytes &&
      it->second->shared_fd() < 0) {  // shared memory may still be open in another process
    spare_.emplace(mapped, std::move(it->second));
    spare_bytes_ += mapped;
  }
  allocations_.erase(it);
  return CudaStatus::Ok();
}

CudaResult<MemoryInfo> SimSession::MemGetInfo() {
  uint64_t total = backend_.options().memory_bytes;
  return MemoryInfo{total - std::min(total, backend_.used()), total};
}

CudaResult<StreamHandle> SimSession::StreamCreate(uint32_t flags, int32_t) {
  uint64_t id = next_handle_++;
  streams_.emplace(id, flags);
  return StreamHandle{id};
}

CudaStatus SimSession::StreamDestroy(StreamHandle stream) {
  if (streams_.erase(static_cast<uint64_t>(stream)) == 0) {
    return Error(CudaError::kInvalidResourceHandle, "unknown stream");
  }
  return CudaStatus::Ok();
}

CudaStatus SimSession::StreamWaitEvent(StreamHandle stream, EventHandle event, uint32_t flags) {
  FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
  FLYT_CUDA_RETURN_IF_ERROR(FindEvent(event).status());
  if (flags != 0 && flags != 1) return Error(CudaError::kInvalidValue, "unknown wait flags");
  return CudaStatus::Ok();
}

CudaResult<EventHandle> SimSession::EventCreate(uint32_t flags) {
  if ((flags & 0x4) != 0 && (flags & kEventDisableTiming) == 0) {
    return Error(CudaError::kInvalidValue, "an interprocess event must disable timing");
  }
  uint64_t id = next_handle_++;
  events_.emplace(id, Event{flags, std::nullopt});
  return EventHandle{id};
}

CudaStatus SimSession::EventDestroy(EventHandle event) {
  if (events_.erase(static_cast<uint64_t>(event)) == 0) {
    return Error(CudaError::kInvalidResourceHandle, "unknown event");
  }
  return CudaStatus::Ok();
}

CudaStatus SimSession::EventRecord(EventHandle event, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
  FLYT_CUDA_ASSIGN_OR_RETURN(Event * e, FindEvent(event));
  e->recorded = std::chrono::steady_clock::now();
  return CudaStatus::Ok();
}

CudaResult<float> SimSession::EventElapsedMs(EventHandle start, EventHandle end) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Event * s, FindEvent(start));
  FLYT_CUDA_ASSIGN_OR_RETURN(Event * e, FindEvent(end));
  if ((s->flags & kEventDisableTiming) || (e->flags & kEventDisableTiming)) {
    return Error(CudaError::kInvalidResourceHandle, "event created with cudaEventDisableTiming");
  }
  if (!s->recorded || !e->recorded) {
    return Error(CudaError::kInvalidResourceHandle, "event not recorded");
  }
  return std::chrono::duration<float, std::milli>(*e->recorded - *s->recorded).count();
}

std::byte* SimSession::HostView(DevicePtr ptr, uint64_t bytes) {
  if (!backend_.options().host_view) return nullptr;
  CudaResult<std::byte*> p = Translate(ptr, bytes);
  return p.ok() ? *p : nullptr;
}

CudaStatus SimSession::Sticky() const {
  if (!sticky_.ok()) return sticky_;
  return backend_.Poisoned();
}

CudaStatus SimSession::Reset() {
  sticky_ = CudaStatus::Ok();
  for (auto& [ptr, block] : allocations_) backend_.Release(block->bytes());
  allocations_.clear();
  ipc_imports_.clear();
  spare_.clear();
  spare_bytes_ = 0;
  ranges_.Clear();
  managed_aliases_.clear();  // [issue 17: managed]
  streams_.clear();
  events_.clear();
  modules_.clear();
  functions_.clear();
  // As on the H100: a poisoned process makes no new context; only a new process recovers.
  if (CudaStatus poison = backend_.Poisoned(); !poison.ok()) {
    sticky_ = poison;
    return Error(poison.code(), "cannot reset the device in this process after a fault (" +
                                    poison.message() + ")");
  }
  return CudaStatus::Ok();
}

CudaResult<ModuleHandle> SimSession::ModuleLoad(std::span<const std::byte> image) {
  // A fatbin, a cubin or PTX text (which a GPU's driver compiles: here its .entry layouts).
  Result<std::vector<cuda::KernelInfo>> kernels = cuda::KernelsOfImage(image);
  if (!kernels.ok()) {
    return Error(CudaError::kInvalidKernelImage, kernels.status().message());
  }
  Module module;
  for (cuda::KernelInfo& k : *kernels) {
    // One entry per name: the highest architecture the simulated sm_90 could run.
    auto it = module.kernels.find(k.name);
    bool better = it == module.kernels.end() ||
                  (k.sm_arch <= 90 && (it->second.sm_arch > 90 || k.sm_arch > it->second.sm_arch)) ||
                  (it->second.from_ptx && !k.from_ptx);
    if (better) module.kernels[k.name] = std::move(k);
  }
  uint64_t id = next_handle_++;
  modules_.emplace(id, std::move(module));
  return ModuleHandle{id};
}

CudaStatus SimSession::ModuleUnload(ModuleHandle module) {
  auto it = modules_.find(static_cast<uint64_t>(module));
  if (it == modules_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown module");
  for (auto& [name, block] : it->second.globals) ranges_.Remove(block->address());
  ForgetManagedAliases(it->first);  // [issue 17: managed]
  std::erase_if(functions_, [&](const auto& f) { return f.second.module == it->first; });
  modules_.erase(it);
  return CudaStatus::Ok();
}

CudaResult<FunctionHandle> SimSession::ModuleGetFunction(ModuleHandle module,
                                                         const std::string& name) {
  auto it = modules_.find(static_cast<uint64_t>(module));
  if (it == modules_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown module");
  auto k = it->second.kernels.find(name);
  if (k == it->second.kernels.end()) {
    return Error(CudaError::kInvalidDeviceFunction, "the module has no kernel " + name);
  }
  uint64_t id = next_handle_++;
  functions_.emplace(id, Function{it->first, k->second, DefaultMaxDynamicShared(k->second), -1});
  return FunctionHandle{id};
}

CudaResult<GlobalSymbol> SimSession::ModuleGetGlobal(ModuleHandle module, const std::string& name,
                                                     uint64_t registered_bytes) {
  auto it = modules_.find(static_cast<uint64_t>(module));
  if (it == modules_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown module");
  if (registered_bytes == 0 || registered_bytes > (1ull << 32)) {
    return Error(CudaError::kInvalidSymbol, "symbol " + name + " has no usable size");
  }
  auto& globals = it->second.globals;
  auto g = globals.find(name);
  if (g == globals.end()) {
    auto block = std::make_unique<Block>(registered_bytes, &backend_.address_space());
    if (!block->ok()) return Error(CudaError::kMemoryAllocation, "no memory for a global");
    ranges_.Add(block->address(), registered_bytes, block.get());
    g = globals.emplace(name, std::move(block)).first;
  }
  return GlobalSymbol{g->second->address(), g->second->bytes()};
}

CudaResult<int32_t> SimSession::FuncGetAttribute(FunctionHandle function, FunctionAttribute attr) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Function * f, FindFunction(function));
  const cuda::KernelInfo& k = f->info;
  switch (attr) {
    case FunctionAttribute::kMaxThreadsPerBlock:
      return static_cast<int32_t>(std::min<uint32_t>(k.max_threads_per_block.value_or(1024), 1024));
    case FunctionAttribute::kSharedSizeBytes:
      return static_cast<int32_t>(k.static_shared_bytes.value_or(0));
    case FunctionAttribute::kConstSizeBytes:
      return static_cast<int32_t>(k.const_bytes.value_or(0));
    case FunctionAttribute::kLocalSizeBytes:
      return static_cast<int32_t>(k.local_bytes.value_or(0));
    case FunctionAttribute::kNumRegs:
      return static_cast<int32_t>(k.registers.value_or(32));
    case FunctionAttribute::kPtxVersion:
    case FunctionAttribute::kBinaryVersion:
      return static_cast<int32_t>(k.sm_arch != 0 ? k.sm_arch : 90);
    case FunctionAttribute::kMaxDynamicSharedSizeBytes:
      return f->max_dynamic_shared;
    case FunctionAttribute::kPreferredSharedMemoryCarveout:
      return f->carveout;
    default:
      return 0;
  }
}

CudaStatus SimSession::FuncSetAttribute(FunctionHandle function, FunctionAttribute attr,
                                        int32_t value) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Function * f, FindFunction(function));
  if (attr == FunctionAttribute::kMaxDynamicSharedSizeBytes) {
    int32_t limit = backend_.Attr(97) - static_cast<int32_t>(f->info.static_shared_bytes.value_or(0));
    if (value < 0 || value > limit) {
      return Error(CudaError::kInvalidValue,
                   "dynamic shared memory above the device's " + std::to_string(limit));
    }
    f->max_dynamic_shared = value;
    return CudaStatus::Ok();
  }
  if (attr == FunctionAttribute::kPreferredSharedMemoryCarveout) {
    if (value < -1 || value > 100) return Error(CudaError::kInvalidValue, "carveout not in -1..100");
    f->carveout = value;
    return CudaStatus::Ok();
  }
  if (static_cast<uint32_t>(attr) >= 10 && static_cast<uint32_t>(attr) < kFunctionAttributeCount) {
    return CudaStatus::Ok();  // cluster attributes: accepted, nothing to simulate
  }
  return Error(CudaError::kInvalidValue, "function attribute is read-only");
}

CudaResult<int32_t> SimSession::OccupancyMaxActiveBlocksPerSm(FunctionHandle function,
                                                              int32_t block_size,
                                                              uint64_t dynamic_shared_bytes,
                                                              uint32_t) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Function * f, FindFunction(function));
  if (block_size <= 0) return Error(CudaError::kInvalidValue, "block size must be positive");
  // A block the device cannot run has no occupancy (the runtime's calculator says 0 too).
  if (block_size > backend_.Attr(1)) return 0;
  if (dynamic_shared_bytes > static_cast<uint64_t>(backend_.Attr(97))) return 0;
  const cuda::KernelInfo& k = f->info;
  // 64-bit throughout: a hostile cubin's register count or a large block must not overflow
  // (or divide by zero).
  const int64_t warps = (int64_t{block_size} + 31) / 32;
  const int64_t by_threads = backend_.Attr(39) / (warps * 32);
  const int64_t regs = k.registers.value_or(32);
  const int64_t regs_per_block = ((regs * 32 + 255) / 256) * 256 * warps;
  const int64_t by_regs = regs_per_block <= 0 ? by_threads : backend_.Attr(82) / regs_per_block;
  const uint64_t smem = k.static_shared_bytes.value_or(0) + dynamic_shared_bytes;
  const int64_t by_smem =
      smem == 0 ? by_threads
                : static_cast<int64_t>(static_cast<uint64_t>(backend_.Attr(81)) /
                                       (smem + static_cast<uint64_t>(backend_.Attr(111))));
  return static_cast<int32_t>(std::max<int64_t>(
      0, std::min({int64_t{backend_.Attr(106)}, by_threads, by_regs, by_smem})));
}

CudaStatus SimSession::LaunchKernel(FunctionHandle function, const LaunchConfig& config,
                                    std::span<const std::byte> params) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Function * f, FindFunction(function));
  FLYT_CUDA_RETURN_IF_ERROR(CheckStream(config.stream));
  const Dim3& b = config.block;
  const Dim3& g = config.grid;
  uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0 || b.x > 1024 ||
      b.y > 1024 || b.z > 64 || threads > 1024 || g.x > 2147483647u || g.y > 65535 ||
      g.z > 65535) {
    return Error(CudaError::kInvalidConfiguration, "grid or block out of the device's limits");
  }
  if (threads > std::min<uint32_t>(f->info.max_threads_per_block.value_or(1024), 1024)) {
    return Error(CudaError::kLaunchOutOfResources, "more threads than the kernel allows");
  }
  if (config.dynamic_shared_bytes > static_cast<uint32_t>(f->max_dynamic_shared)) {
    return Error(CudaError::kInvalidValue,
                 "dynamic shared memory " + std::to_string(config.dynamic_shared_bytes) +
                     " above the kernel's limit " + std::to_string(f->max_dynamic_shared));
  }
  if (params.size() != f->info.param_bytes) {
    return Error(CudaError::kInvalidValue, "parameter buffer of " + std::to_string(params.size()) +
                                               " bytes for " + f->info.name + ", which takes " +
                                               std::to_string(f->info.param_bytes));
  }
  ++launches_;
  if (f->info.name.find(kFaultKernelMarker) != std::string::npos) {
    // Reported by the next synchronising call, as a real fault would be.
    sticky_ = Error(CudaError::kIllegalAddress,
                    "simulated fault: kernel " + f->info.name + " made an illegal memory access");
    backend_.Poison(sticky_);
  }
  return CudaStatus::Ok();
}

}  // namespace sim_internal

std::unique_ptr<Backend> MakeSimBackend(const SimOptions& options) {
  return std::make_unique<sim_internal::SimBackend>(options);
}

int GrantedSmCount(int asked, int total, int granularity) {
  if (granularity < 1) granularity = 1;
  int64_t rounded = (static_cast<int64_t>(std::max(asked, 1)) + granularity - 1) / granularity *
                    granularity;
  return static_cast<int>(std::min<int64_t>(rounded, std::max(total, 1)));
}

}  // namespace flyt::remote

namespace flyt::remote::sim_internal {

CudaStatus SimSession::ApplySmShare(int sm_count, int* granted) {
  const SimOptions& options = backend_.options();
  if (sm_count < 1 || sm_count > options.sm_count) {
    return Error(CudaError::kInvalidValue, "an SM share of " + std::to_string(sm_count) +
                                               " is outside 1.." +
                                               std::to_string(options.sm_count));
  }
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  *granted = GrantedSmCount(sm_count, options.sm_count, options.sm_granularity);
  backend_.NoteSmShare(sm_count, *granted);
  return CudaStatus::Ok();
}

}  // namespace flyt::remote::sim_internal
