// The entry points flyt does not provide (kUnsupported in cudart_exports.def): each is exported so
// that no program fails to load or dies on an unresolved symbol, and answers
// cudaErrorNotSupported, logging its name the first time it is called.
//
// Every such function of the CUDA runtime returns cudaError_t (an int in the x86-64 ABI, returned
// in eax) and these stubs never read their arguments, so one parameterless definition serves
// whatever each one's C prototype is.
#include "runtime/runtime.h"

namespace {

int Stub(const char* name) noexcept {
  try {
    return static_cast<int>(flyt::runtime::Runtime::Get().Unsupported(name));
  } catch (...) {
    return static_cast<int>(cudaErrorNotSupported);
  }
}

}  // namespace

// NOLINTBEGIN(readability-identifier-naming): the names are CUDA's
extern "C" {
#define FLYT_STUB_kRemoted(name)
#define FLYT_STUB_kLocal(name)
#define FLYT_STUB_kUnsupported(name) \
  int name() noexcept { return Stub(#name); }
#define FLYT_CUDART_EXPORT(name, kind) FLYT_STUB_##kind(name)
#include "runtime/cudart_exports.def"
#undef FLYT_CUDART_EXPORT
#undef FLYT_STUB_kUnsupported
#undef FLYT_STUB_kLocal
#undef FLYT_STUB_kRemoted
}
// NOLINTEND(readability-identifier-naming)
