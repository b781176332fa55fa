// The driver functions libcuda.so.1 exports: every symbol of proc_table.def (the toolkit's whole
// driver API). Those flyt implements are defined in the api_*.cc files; every other one is a weak
// definition in stubs.cc that logs once and returns CUDA_ERROR_NOT_SUPPORTED, so that a program
// or library linked against the driver loads, and learns at the call what it cannot have.
#pragma once

#include <string_view>

namespace flyt::libcuda {

// This library's function exported as `symbol` (cuMemAlloc_v2), or null for a name it does not
// export. The address is this library's own definition (the library is linked with
// -Bsymbolic-functions), whatever else the process has loaded.
void* ExportedFunction(std::string_view symbol);

}  // namespace flyt::libcuda
