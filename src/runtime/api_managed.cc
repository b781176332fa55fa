// flyt's libcudart.so.13: the CUDA runtime's managed family (issue 17). See runtime.h.
#include "runtime/runtime.h"

namespace flyt::runtime {}  // namespace flyt::runtime
