// The driver backend's arrays family (see driver_internal.h).
#include "remote/driver_internal.h"

namespace flyt::remote::driver_impl {}  // namespace flyt::remote::driver_impl
