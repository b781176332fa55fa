// The simulated device's managed family (see sim_internal.h and sim_backend.h): managed memory is
// an ordinary block placed at the client's host mirror's address (a host address is never a sim
// device address: those start at kDeviceBase), so that the one pointer means the same bytes on
// both sides, as with CUDA's unified addressing. A __managed__ variable is its module's global,
// reachable also at its mirror's address (an alias range, removed with the module).
#include "remote_sim/sim_internal.h"

namespace flyt::remote::sim_internal {

bool SimSession::ManagedAddressFree(uint64_t address, uint64_t bytes) const {
  if (address == 0 || address % 4096 != 0 || bytes == 0 || address >= kDeviceBase ||
      bytes > kDeviceBase - address) {
    return false;
  }
  // Whether any range starts in [address, address + bytes) or contains its start.
  if (ranges_.Find(address) || ranges_.Find(address + bytes - 1)) return false;
  bool clear = true;
  ranges_.ForEach([&](uint64_t base, uint64_t, Block*) {
    if (base >= address && base < address + bytes) clear = false;
  });
  return clear;
}

CudaResult<DevicePtr> SimSession::MallocManaged(uint64_t bytes, uint64_t address_hint) {
  if (!ManagedAddressFree(address_hint, bytes)) {
    return Error(CudaError::kInvalidValue, "managed memory cannot be placed at the address asked");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(DevicePtr ptr, Malloc(bytes));
  // Moves the block to the mirror's address.
  auto node = allocations_.extract(ptr);
  ranges_.Remove(ptr);
  ranges_.Add(address_hint, bytes, node.mapped().get());
  node.key() = address_hint;
  allocations_.insert(std::move(node));
  return DevicePtr{address_hint};
}

CudaResult<GlobalSymbol> SimSession::ModuleGetManagedGlobal(ModuleHandle module,
                                                            const std::string& name,
                                                            uint64_t registered_bytes,
                                                            uint64_t address_hint) {
  FLYT_CUDA_ASSIGN_OR_RETURN(GlobalSymbol global,
                             ModuleGetGlobal(module, name, registered_bytes));
  if (address_hint == 0) return global;
  std::optional<AddressRanges<Block*>::Range> range = ranges_.Find(global.ptr);
  if (!range) return Error(CudaError::kInvalidSymbol, "symbol " + name + " has no storage");
  if (!ManagedAddressFree(address_hint, global.bytes)) {
    return Error(CudaError::kInvalidValue,
                 "managed variable cannot be placed at the address asked");
  }
  ranges_.Add(address_hint, global.bytes, range->value);
  managed_aliases_.emplace(static_cast<uint64_t>(module), address_hint);
  return GlobalSymbol{address_hint, global.bytes};
}

void SimSession::ForgetManagedAliases(uint64_t module) {
  auto [first, last] = managed_aliases_.equal_range(module);
  for (auto it = first; it != last; ++it) ranges_.Remove(it->second);
  managed_aliases_.erase(first, last);
}

}  // namespace flyt::remote::sim_internal
