// ClientConnection's handlers of the pools calls (see connection.h); the runtime's side of the
// same calls: runtime/api_pools.cc.
#include "remote/connection.h"

namespace flyt::remote {}  // namespace flyt::remote
