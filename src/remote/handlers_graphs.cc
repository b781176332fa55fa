// ClientConnection's handlers of the graphs calls (see connection.h); the runtime's side of the
// same calls: runtime/api_graphs.cc.
#include "remote/connection.h"

namespace flyt::remote {}  // namespace flyt::remote
