// The answer of cuGetProcAddress: which exported driver function a program gets for a name, the
// CUDA version it was built for and its flags (proc_table.def, from the toolkit's typedef
// headers). flyt's libcuda.so.1 answers with its own function of that symbol; the CUDA runtimes
// (NVIDIA's static and shared ones) and the libraries built on them find every driver function
// this way rather than by dlsym, so each name must resolve to the ABI the caller was built for:
// CUDA 13 changed cuCtxGetDevice and cuCtxSynchronize, 12.2 cuMemPrefetchAsync and
// cuMemAdvise, and a program built against 12.x must still get the old ones.
//
// Semantics (cuda.h, "Driver Entry Point Access"): the newest ABI whose version is at most the
// caller's; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM its per-thread form where one
// exists for that ABI, else the legacy form; a name with no ABI that old is
// "version not sufficient", an unknown one (graphics interop included) "symbol not found".
// Thread-safe: the table is constant.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace flyt::libcuda {

struct ProcEntry {
  std::string_view name;     // as programs ask for it: cuMemAlloc
  int version;               // the first CUDA version with this ABI (1000 * major + 10 * minor)
  std::string_view variant;  // "", "ptsz" or "ptds"
  std::string_view symbol;   // the exported function: cuMemAlloc_v2
};

// The values of CUdriverProcAddressQueryResult.
enum class ProcStatus : int { kFound = 0, kSymbolNotFound = 1, kVersionNotSufficient = 2 };

// The values of CUdriverProcAddress_flags (DEFAULT means legacy to a driver: the per-thread
// choice is made where the program was compiled, by the flag it passes).
inline constexpr uint64_t kProcLegacyStream = 1;
inline constexpr uint64_t kProcPerThreadDefaultStream = 2;

struct ProcLookup {
  ProcStatus status = ProcStatus::kSymbolNotFound;
  const ProcEntry* entry = nullptr;  // set when found
};

ProcLookup ResolveProc(std::string_view name, int cuda_version, uint64_t flags);

// Every entry, sorted by name, then plain before per-thread forms, then version.
std::span<const ProcEntry> ProcTable();

}  // namespace flyt::libcuda
