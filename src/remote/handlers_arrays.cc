// ClientConnection's handlers of the arrays calls (see connection.h); the runtime's side of the
// same calls: runtime/api_arrays.cc.
#include "remote/connection.h"

namespace flyt::remote {}  // namespace flyt::remote
