// The driver backend's managed family (see driver_internal.h): DriverSession's managed memory
// calls (driver_session.h).
#include <cstdint>
#include <string>

#include "remote_driver/driver_internal.h"
#include "remote_driver/driver_session.h"

namespace flyt::remote::driver_impl {

// Managed memory is plain device memory here (the client keeps the host mirror and moves it
// to the address returned); a __managed__ variable is the module's global where it is.
CudaResult<DevicePtr> DriverSession::MallocManaged(uint64_t bytes, uint64_t) {
  return Malloc(bytes);
}
CudaResult<GlobalSymbol> DriverSession::ModuleGetManagedGlobal(ModuleHandle module,
                                                               const std::string& name,
                                                               uint64_t registered_bytes,
                                                               uint64_t) {
  return ModuleGetGlobal(module, name, registered_bytes);
}

}  // namespace flyt::remote::driver_impl
