// The simulated device's graphs family (see sim_internal.h and sim_backend.h).
#include "remote/sim_internal.h"

namespace flyt::remote::sim_internal {}  // namespace flyt::remote::sim_internal
