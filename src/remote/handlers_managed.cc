// ClientConnection's handlers of the managed calls (see connection.h); the runtime's side of the
// same calls: runtime/api_managed.cc.
#include "remote/connection.h"

namespace flyt::remote {}  // namespace flyt::remote
