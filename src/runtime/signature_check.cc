// Compile-time check that every prototype in exports.h is NVIDIA's: the toolkit's
// cuda_runtime_api.h is included with its function names renamed (flyt_toolkit_<name>, by a
// header CMake generates from cudart_exports.def), then each flyt declaration is compared with
// the toolkit's, noexcept aside. Emits no code.
#include <type_traits>

#include "flyt_cudart_rename.h"  // generated
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include "flyt_cudart_unrename.h"  // generated
#include "runtime/exports.h"

// Comparing types of deprecated functions is not using them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

template <typename T>
struct WithoutNoexcept;
template <typename R, typename... Args>
struct WithoutNoexcept<R (*)(Args...) noexcept> {
  using type = R (*)(Args...);
};

#define FLYT_CHECK_SIGNATURE(name)                                                     \
  static_assert(std::is_same_v<decltype(&flyt_toolkit_##name),                        \
                               WithoutNoexcept<decltype(&name)>::type>,                \
                #name " in runtime/exports.h differs from the toolkit's cuda_runtime_api.h");
#include "flyt_cudart_checks.inc"  // generated: FLYT_CHECK_SIGNATURE(name) per entry point
#undef FLYT_CHECK_SIGNATURE

}  // namespace
