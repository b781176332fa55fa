// ClientConnection's handlers of the pools calls (see connection.h); the runtime's side of the
// same calls: runtime/api_pools.cc.
//
// Pools are built on the Session's Malloc/Free and events, so they work the same on every
// backend: a block is one device allocation; FreeAsync records an event on the freeing stream
// and caches the block in its pool; a later MallocAsync of the same size reuses a cached block
// whose event has completed (or that was freed on the same stream: stream order), else makes a
// new one. Everything a pool holds is counted against the server's memory limit (TryReserve);
// at that limit, cached blocks of every pool whose frees completed are released first, as CUDA
// does before it reports cudaErrorMemoryAllocation.
#include <algorithm>
#include <string>

#include "remote_server/connection.h"

namespace flyt::remote {
namespace {

// cudaMemPoolAttr numbers.
constexpr uint32_t kReuseFollowEventDependencies = 1;
constexpr uint32_t kReuseAllowInternalDependencies = 3;
constexpr uint32_t kReleaseThreshold = 4;
constexpr uint32_t kReservedMemCurrent = 5;
constexpr uint32_t kReservedMemHigh = 6;
constexpr uint32_t kUsedMemCurrent = 7;
constexpr uint32_t kUsedMemHigh = 8;

}  // namespace

int32_t ClientConnection::ClientAttribute(uint32_t attr, int32_t value) {
  constexpr uint32_t kCanMapHostMemory = 19;
  return attr == kCanMapHostMemory ? 0 : value;
}

CudaResult<ClientConnection::Pool*> ClientConnection::FindPool(uint64_t pool) {
  if (pool == 0) return &pools_[0];  // the default pool
  auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.destroyed) {
    return Error(CudaError::kInvalidValue, "no memory pool " + std::to_string(pool));
  }
  return &it->second;
}

void ClientConnection::ReleaseCached(Pool& pool, uint64_t keep_bytes) {
  for (auto it = pool.cached.begin(); it != pool.cached.end() && pool.reserved > keep_bytes;) {
    if (it->freed && !session_->EventQuery(*it->freed).ok()) {
      ++it;  // its free has not happened yet on the device
      continue;
    }
    if (it->freed) (void)session_->EventDestroy(*it->freed);
    (void)session_->Free(it->ptr);
    memory_.Release(it->bytes);
    counters_->allocations -= 1;
    counters_->allocated_bytes -= it->bytes;
    pool.reserved -= it->bytes;
    it = pool.cached.erase(it);
  }
}

void ClientConnection::ReleasePools() {
  for (auto& [base, live] : pool_allocations_) {
    allocations_.Remove(base);
    (void)session_->Free(base);
    memory_.Release(live.bytes);
    counters_->allocations -= 1;
    counters_->allocated_bytes -= live.bytes;
  }
  pool_allocations_.clear();
  for (auto& [id, pool] : pools_) {
    for (PoolBlock& b : pool.cached) {  // the device is synchronised: every free has happened
      if (b.freed) (void)session_->EventDestroy(*b.freed);
      b.freed.reset();
    }
    ReleaseCached(pool, 0);
  }
  pools_.clear();
}

CudaResult<MemPoolCreateReply> ClientConnection::Handle(const MemPoolCreateRequest& r, Io&) {
  if (r.pool == 0) return Error(CudaError::kInvalidValue, "memory pool handle 0 is reserved");
  if (pools_.contains(r.pool)) {
    return Error(CudaError::kInvalidValue,
                 "memory pool handle " + std::to_string(r.pool) + " is already in use");
  }
  if (pools_.size() >= kMaxPools) return Error(CudaError::kMemoryAllocation, "too many pools");
  pools_[r.pool].max_bytes = r.max_bytes;
  return MemPoolCreateReply{};
}

CudaResult<MemPoolDestroyReply> ClientConnection::Handle(const MemPoolDestroyRequest& r, Io&) {
  if (r.pool == 0) {
    return Error(CudaError::kInvalidValue, "the default memory pool cannot be destroyed");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Pool * pool, FindPool(r.pool));
  // As CUDA: what is still allocated from it stays valid; the pool goes when that is freed.
  pool->destroyed = true;
  pool->release_threshold = 0;
  ReleaseCached(*pool, 0);
  bool live = std::any_of(pool_allocations_.begin(), pool_allocations_.end(),
                          [&](const auto& kv) { return kv.second.pool == r.pool; });
  if (!live && pool->cached.empty()) pools_.erase(r.pool);
  return MemPoolDestroyReply{};
}

CudaResult<MallocAsyncReply> ClientConnection::Handle(const MallocAsyncRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_ASSIGN_OR_RETURN(Pool * pool, FindPool(r.pool));
  if (r.bytes == 0) return MallocAsyncReply{0};
  uint64_t bytes = (r.bytes + 255) / 256 * 256;  // a block's size: what reuse matches on
  // A cached block of this size whose free is done (or ordered before, on the same stream).
  for (auto it = pool->cached.begin(); it != pool->cached.end(); ++it) {
    if (it->bytes != bytes) continue;
    if (it->freed && it->stream != stream && !session_->EventQuery(*it->freed).ok()) continue;
    DevicePtr ptr = it->ptr;
    if (it->freed) (void)session_->EventDestroy(*it->freed);
    pool->cached.erase(it);
    (void)allocations_.Add(ptr, bytes);
    pool_allocations_[ptr] = LiveBlock{r.pool, bytes};
    pool->used += bytes;
    pool->used_high = std::max(pool->used_high, pool->used);
    return MallocAsyncReply{ptr};
  }
  if (pool->max_bytes != 0 && pool->reserved + bytes > pool->max_bytes) {
    if (bytes <= pool->max_bytes) ReleaseCached(*pool, pool->max_bytes - bytes);
    if (pool->reserved + bytes > pool->max_bytes) {
      return Error(CudaError::kMemoryAllocation, "the memory pool's maximum size of " +
                                                     std::to_string(pool->max_bytes) +
                                                     " bytes is reached");
    }
  }
  if (!memory_.TryReserve(bytes)) {
    for (auto& [id, p] : pools_) ReleaseCached(p, 0);
    if (!memory_.TryReserve(bytes)) {
      return Error(CudaError::kMemoryAllocation,
                   "the server's memory limit of " + std::to_string(memory_.limit_bytes() >> 20) +
                       " MiB is reached (" + std::to_string(memory_.used_bytes() >> 20) +
                       " MiB in use)");
    }
  }
  CudaResult<DevicePtr> ptr = session_->Malloc(bytes);
  if (!ptr.ok()) {
    memory_.Release(bytes);
    return ptr.status();
  }
  if (!allocations_.Add(*ptr, bytes)) {
    (void)session_->Free(*ptr);
    memory_.Release(bytes);
    return Error(CudaError::kUnknown, "backend returned an address that overlaps another");
  }
  pool_allocations_[*ptr] = LiveBlock{r.pool, bytes};
  counters_->allocations += 1;
  counters_->allocated_bytes += bytes;
  pool->reserved += bytes;
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  pool->used += bytes;
  pool->used_high = std::max(pool->used_high, pool->used);
  return MallocAsyncReply{*ptr};
}

CudaResult<FreeAsyncReply> ClientConnection::Handle(const FreeAsyncRequest& r, Io& io) {
  if (r.ptr == 0) return FreeAsyncReply{};
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  auto live = pool_allocations_.find(r.ptr);
  if (live == pool_allocations_.end()) {
    // cudaFreeAsync of cudaMalloc memory is allowed: it is freed after the stream's work.
    std::optional<AddressRanges<uint8_t>::Range> range = allocations_.Find(r.ptr);
    if (!range || range->base != r.ptr) {
      return Error(CudaError::kInvalidValue, Hex(r.ptr) + " is not an allocation of this client");
    }
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
    FLYT_CUDA_RETURN_IF_ERROR(Handle(FreeRequest{r.ptr}, io).status());
    return FreeAsyncReply{};
  }
  LiveBlock block = live->second;
  pool_allocations_.erase(live);
  allocations_.Remove(r.ptr);
  auto pit = pools_.find(block.pool);
  Pool& pool = pit->second;
  pool.used -= block.bytes;
  PoolBlock cached{r.ptr, block.bytes, stream, std::nullopt};
  CudaResult<EventHandle> event = session_->EventCreate(kEventDisableTiming);
  if (event.ok() && session_->EventRecord(*event, stream).ok()) {
    cached.freed = *event;
  } else {
    if (event.ok()) (void)session_->EventDestroy(*event);
    (void)session_->StreamSynchronize(stream);  // no event: the free happens now
  }
  pool.cached.push_back(cached);
  ReleaseCached(pool, pool.release_threshold);
  if (pool.destroyed && pool.cached.empty() &&
      std::none_of(pool_allocations_.begin(), pool_allocations_.end(),
                   [&](const auto& kv) { return kv.second.pool == block.pool; })) {
    pools_.erase(pit);
  }
  return FreeAsyncReply{};
}

CudaResult<MemPoolSetAttributeReply> ClientConnection::Handle(const MemPoolSetAttributeRequest& r,
                                                              Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Pool * pool, FindPool(r.pool));
  switch (r.attr) {
    case kReuseFollowEventDependencies:
    case kReuseFollowEventDependencies + 1:
    case kReuseAllowInternalDependencies:
      pool->reuse[r.attr - 1] = r.value != 0 ? 1 : 0;
      return MemPoolSetAttributeReply{};
    case kReleaseThreshold:
      pool->release_threshold = r.value;
      ReleaseCached(*pool, pool->release_threshold);
      return MemPoolSetAttributeReply{};
    case kReservedMemHigh:
    case kUsedMemHigh:
      if (r.value != 0) {
        return Error(CudaError::kInvalidValue, "a high-water mark can only be reset to 0");
      }
      if (r.attr == kReservedMemHigh) {
        pool->reserved_high = pool->reserved;
      } else {
        pool->used_high = pool->used;
      }
      return MemPoolSetAttributeReply{};
    case kReservedMemCurrent:
    case kUsedMemCurrent:
      return Error(CudaError::kInvalidValue,
                   "memory pool attribute " + std::to_string(r.attr) + " is read-only");
    default:
      return Error(CudaError::kInvalidValue,
                   "unknown memory pool attribute " + std::to_string(r.attr));
  }
}

CudaResult<MemPoolGetAttributeReply> ClientConnection::Handle(const MemPoolGetAttributeRequest& r,
                                                              Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Pool * pool, FindPool(r.pool));
  switch (r.attr) {
    case kReuseFollowEventDependencies:
    case kReuseFollowEventDependencies + 1:
    case kReuseAllowInternalDependencies:
      return MemPoolGetAttributeReply{pool->reuse[r.attr - 1]};
    case kReleaseThreshold:
      return MemPoolGetAttributeReply{pool->release_threshold};
    case kReservedMemCurrent:
      return MemPoolGetAttributeReply{pool->reserved};
    case kReservedMemHigh:
      return MemPoolGetAttributeReply{pool->reserved_high};
    case kUsedMemCurrent:
      return MemPoolGetAttributeReply{pool->used};
    case kUsedMemHigh:
      return MemPoolGetAttributeReply{pool->used_high};
    default:
      return Error(CudaError::kInvalidValue,
                   "unknown memory pool attribute " + std::to_string(r.attr));
  }
}

CudaResult<LaunchKernelExReply> ClientConnection::Handle(const LaunchKernelExRequest& r, Io& io) {
  Session::LaunchAttributes attributes;
  attributes.cooperative = r.cooperative != 0;
  attributes.cluster = r.cluster;
  attributes.priority = r.priority;
  if (!attributes.cooperative && r.cluster == Dim3{}) {
    // Nothing the plain launch cannot do (a priority is the stream's business on this path).
    FLYT_CUDA_RETURN_IF_ERROR(
        Handle(LaunchKernelRequest{r.function, r.grid, r.block, r.shared_bytes, r.stream, r.params},
               io)
            .status());
    return LaunchKernelExReply{};
  }
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.grid.x == 0 || r.grid.y == 0 || r.grid.z == 0 || r.block.x == 0 || r.block.y == 0 ||
      r.block.z == 0) {
    return Error(CudaError::kInvalidConfiguration, "zero grid or block dimension");
  }
  LaunchConfig config{r.grid, r.block, r.shared_bytes, stream};
  FLYT_CUDA_RETURN_IF_ERROR(
      session_->LaunchKernelEx(function->handle, config, attributes, r.params));
  counters_->launches += 1;
  return LaunchKernelExReply{};
}

CudaResult<MemPoolTrimToReply> ClientConnection::Handle(const MemPoolTrimToRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(Pool * pool, FindPool(r.pool));
  ReleaseCached(*pool, r.min_bytes);
  return MemPoolTrimToReply{};
}

}  // namespace flyt::remote
