// The probe table of the CUDA tracer: which symbols it puts uprobes on, the func id (events.h)
// each one reports as, and which kinds of file carry it (the runtime's names on libcudart* and
// on executables linked with cudart statically, the driver's on libcuda.so.1, setenv/putenv on
// libc). Also the names of funcs, kinds and library classes for logs and JSON. Constant data;
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "trace/bpf/events.h"

namespace flyt::trace {

enum class LibraryClass : uint8_t {
  kNvidiaRuntime = FLYT_LIB_NVIDIA_RUNTIME,
  kFlytRuntime = FLYT_LIB_FLYT_RUNTIME,
  kDriver = FLYT_LIB_DRIVER,
  kStaticRuntime = FLYT_LIB_STATIC_RUNTIME,
  kLibc = FLYT_LIB_LIBC,
};

// Which table a symbol belongs to.
enum class ProbeFamily : uint8_t {
  kRuntime,  // cuda*/__cuda*: libcudart* (NVIDIA's or flyt's) and static executables
  kDriver,   // cu*: libcuda.so.1
  kLibc,     // setenv/putenv
};

struct ProbeSpec {
  std::string_view symbol;
  uint16_t func = 0;  // enum flyt_trace_func
  ProbeFamily family = ProbeFamily::kRuntime;
};

// Every probed symbol, in func order.
std::span<const ProbeSpec> ProbeTable();

// The spec of `symbol`, or nullopt when it is not probed.
std::optional<ProbeSpec> FindProbe(std::string_view symbol);

// The family the probes of a file of class `library` come from.
ProbeFamily FamilyOf(LibraryClass library);

// Whether a file of class `library` carries the probe `spec`.
bool Carries(LibraryClass library, const ProbeSpec& spec);

// The attach cookie of a probe (events.h): func | library_class << 16, and the distances from the
// function back to the start and on to the end of its code section, in 16-byte units rounded up
// (so the range the BPF side rebuilds covers the code), each clamped to 20 bits.
inline uint64_t AttachCookie(uint16_t func, LibraryClass library, uint64_t code_before = 0,
                             uint64_t code_after = 0) {
  auto units = [](uint64_t bytes) {
    uint64_t u = (bytes + 15) / 16;
    return u > FLYT_COOKIE_CODE_MAX_UNITS ? FLYT_COOKIE_CODE_MAX_UNITS : u;
  };
  return static_cast<uint64_t>(func) | static_cast<uint64_t>(library) << 16 |
         units(code_before) << 24 | units(code_after) << 44;
}

// Kernel launches (not graph launches): recorded at entry unless launch results are asked for.
inline bool IsKernelLaunch(uint16_t func) {
  return func >= FLYT_FN_cudaLaunchKernel && func <= FLYT_FN_cuLaunchKernelEx_ptsz &&
         func != FLYT_FN_cudaGraphLaunch && func != FLYT_FN_cudaGraphLaunch_ptsz;
}

// "cudaMalloc", "launch", "nvidia_runtime"; "func 77" / "kind 99" / "library 9" when unknown.
std::string FuncName(uint16_t func);
std::string KindName(uint16_t kind);
std::string LibraryClassName(uint16_t library);

}  // namespace flyt::trace
