// The simulated device's part of live migration (backend.h, issue 18): memory and module globals
// placed at the device addresses they had on another server. A sim device address is a number of
// the backend's own address space (sim_address_space.h), not a host address, so any backend can
// take any free range of it: MallocAt reserves exactly the range asked, and the block made there
// gives it back when freed, like Malloc's.

#include "common/strings.h"
#include "remote_sim/sim_internal.h"

namespace flyt::remote::sim_internal {
namespace {

// Why [address, address + bytes) cannot be placed: outside the space, misaligned, or taken.
CudaStatus NotPlaceable(const SimAddressSpace& space, uint64_t address, uint64_t bytes) {
  std::string range = HexAddress(address) + " (" + std::to_string(bytes) + " bytes)";
  if (address < space.base() || address >= space.end() || bytes > space.end() - address) {
    return Error(CudaError::kInvalidValue, "device range " + range +
                                               " is not a simulated device address (" +
                                               HexAddress(space.base()) + ".." + HexAddress(space.end()) + ")");
  }
  if (address % SimAddressSpace::kSmallAlignment != 0) {
    return Error(CudaError::kInvalidValue, "device address " + HexAddress(address) +
                                               " is not 256-byte aligned");
  }
  return Error(CudaError::kInvalidValue, "device range " + range + " is taken on this server");
}

bool Overlap(uint64_t a, uint64_t a_bytes, uint64_t b, uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

}  // namespace

bool SimSession::DropSpares(uint64_t address, uint64_t bytes) {
  const uint64_t extent = SimAddressSpace::Extent(bytes);
  bool dropped = false;
  for (auto it = spare_.begin(); it != spare_.end();) {
    const Block& block = *it->second;
    if (Overlap(block.address(), block.space_bytes(), address, extent)) {
      spare_bytes_ -= it->first;
      it = spare_.erase(it);  // the block gives its range back
      dropped = true;
    } else {
      ++it;
    }
  }
  return dropped;
}

CudaResult<DevicePtr> SimSession::MallocAt(DevicePtr address, uint64_t bytes) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  if (bytes == 0) return Error(CudaError::kInvalidValue, "MallocAt of 0 bytes");
  SimAddressSpace& space = backend_.address_space();
  // The session's own freed blocks, kept for reuse, may hold the range: they go first.
  if (!space.Reserve(address, bytes) &&
      !(DropSpares(address, bytes) && space.Reserve(address, bytes))) {
    return NotPlaceable(space, address, bytes);
  }
  if (!backend_.Reserve(bytes)) {
    space.Release(address, bytes);
    return Error(CudaError::kMemoryAllocation, "simulated device memory exhausted");
  }
  auto block = std::make_unique<Block>(bytes, &space, address);  // owns the range from here
  if (!block->ok() || !ranges_.Add(address, bytes, block.get())) {
    backend_.Release(bytes);
    return Error(CudaError::kMemoryAllocation, "host memory for the simulated device exhausted");
  }
  allocations_.emplace(address, std::move(block));
  return address;
}

CudaResult<GlobalSymbol> SimSession::ModuleGetGlobalAt(ModuleHandle module,
                                                       const std::string& name,
                                                       uint64_t registered_bytes,
                                                       DevicePtr address) {
  auto it = modules_.find(static_cast<uint64_t>(module));
  if (it == modules_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown module");
  if (registered_bytes == 0 || registered_bytes > (1ull << 32)) {
    return Error(CudaError::kInvalidSymbol, "symbol " + name + " has no usable size");
  }
  auto& globals = it->second.globals;
  if (auto g = globals.find(name); g != globals.end()) {
    if (g->second->address() != address) {
      return Error(CudaError::kInvalidValue, "global " + name + " is at " +
                                                 HexAddress(g->second->address()) + " already, not " +
                                                 HexAddress(address));
    }
    return GlobalSymbol{g->second->address(), g->second->bytes()};
  }
  SimAddressSpace& space = backend_.address_space();
  if (!space.Reserve(address, registered_bytes) &&
      !(DropSpares(address, registered_bytes) && space.Reserve(address, registered_bytes))) {
    return NotPlaceable(space, address, registered_bytes);
  }
  auto block = std::make_unique<Block>(registered_bytes, &space, address);
  if (!block->ok() || !ranges_.Add(address, registered_bytes, block.get())) {
    return Error(CudaError::kMemoryAllocation, "no memory for a global");
  }
  globals.emplace(name, std::move(block));
  return GlobalSymbol{address, registered_bytes};
}

}  // namespace flyt::remote::sim_internal
