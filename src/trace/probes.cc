#include "trace/probes.h"

#include <array>

namespace flyt::trace {
namespace {

#define FLYT_RUNTIME_PROBE(name) ProbeSpec{#name, FLYT_FN_##name, ProbeFamily::kRuntime}
#define FLYT_DRIVER_PROBE(name) ProbeSpec{#name, FLYT_FN_##name, ProbeFamily::kDriver}
#define FLYT_LIBC_PROBE(name) ProbeSpec{#name, FLYT_FN_##name, ProbeFamily::kLibc}

constexpr std::array kProbes = {
    FLYT_RUNTIME_PROBE(cudaLaunchKernel),
    FLYT_RUNTIME_PROBE(cudaLaunchKernel_ptsz),
    FLYT_RUNTIME_PROBE(__cudaLaunchKernel),
    FLYT_RUNTIME_PROBE(__cudaLaunchKernel_ptsz),
    FLYT_RUNTIME_PROBE(cudaLaunchKernelExC),
    FLYT_RUNTIME_PROBE(cudaLaunchKernelExC_ptsz),
    FLYT_RUNTIME_PROBE(cudaLaunchCooperativeKernel),
    FLYT_RUNTIME_PROBE(cudaLaunchCooperativeKernel_ptsz),
    FLYT_RUNTIME_PROBE(cudaGraphLaunch),
    FLYT_RUNTIME_PROBE(cudaGraphLaunch_ptsz),
    FLYT_DRIVER_PROBE(cuLaunchKernel),
    FLYT_DRIVER_PROBE(cuLaunchKernel_ptsz),
    FLYT_DRIVER_PROBE(cuLaunchKernelEx),
    FLYT_DRIVER_PROBE(cuLaunchKernelEx_ptsz),
    FLYT_DRIVER_PROBE(cuGraphLaunch),
    FLYT_DRIVER_PROBE(cuGraphLaunch_ptsz),
    FLYT_RUNTIME_PROBE(cudaMalloc),
    FLYT_RUNTIME_PROBE(cudaFree),
    FLYT_RUNTIME_PROBE(cudaMallocAsync),
    FLYT_RUNTIME_PROBE(cudaMallocAsync_ptsz),
    FLYT_RUNTIME_PROBE(cudaFreeAsync),
    FLYT_RUNTIME_PROBE(cudaFreeAsync_ptsz),
    FLYT_RUNTIME_PROBE(cudaMallocFromPoolAsync),
    FLYT_RUNTIME_PROBE(cudaMallocFromPoolAsync_ptsz),
    FLYT_RUNTIME_PROBE(cudaMallocManaged),
    FLYT_RUNTIME_PROBE(cudaMallocPitch),
    FLYT_RUNTIME_PROBE(cudaMallocHost),
    FLYT_RUNTIME_PROBE(cudaHostAlloc),
    FLYT_RUNTIME_PROBE(cudaFreeHost),
    FLYT_DRIVER_PROBE(cuMemAlloc_v2),
    FLYT_DRIVER_PROBE(cuMemFree_v2),
    FLYT_RUNTIME_PROBE(cudaMemcpy),
    FLYT_RUNTIME_PROBE(cudaMemcpy_ptds),
    FLYT_RUNTIME_PROBE(cudaMemcpyAsync),
    FLYT_RUNTIME_PROBE(cudaMemcpyAsync_ptsz),
    FLYT_RUNTIME_PROBE(cudaMemset),
    FLYT_RUNTIME_PROBE(cudaMemset_ptds),
    FLYT_RUNTIME_PROBE(cudaMemsetAsync),
    FLYT_RUNTIME_PROBE(cudaMemsetAsync_ptsz),
    FLYT_RUNTIME_PROBE(cudaStreamSynchronize),
    FLYT_RUNTIME_PROBE(cudaStreamSynchronize_ptsz),
    FLYT_RUNTIME_PROBE(cudaDeviceSynchronize),
    FLYT_RUNTIME_PROBE(cudaEventRecord),
    FLYT_RUNTIME_PROBE(cudaEventRecord_ptsz),
    FLYT_RUNTIME_PROBE(cudaEventSynchronize),
    FLYT_RUNTIME_PROBE(cudaEventQuery),
    FLYT_DRIVER_PROBE(cuStreamSynchronize),
    FLYT_DRIVER_PROBE(cuStreamSynchronize_ptsz),
    FLYT_DRIVER_PROBE(cuCtxSynchronize),
    FLYT_RUNTIME_PROBE(cudaStreamCreate),
    FLYT_RUNTIME_PROBE(cudaStreamCreateWithFlags),
    FLYT_RUNTIME_PROBE(cudaStreamCreateWithPriority),
    FLYT_RUNTIME_PROBE(cudaStreamDestroy),
    FLYT_DRIVER_PROBE(cuStreamCreate),
    FLYT_DRIVER_PROBE(cuStreamCreateWithPriority),
    FLYT_DRIVER_PROBE(cuStreamDestroy_v2),
    FLYT_RUNTIME_PROBE(cudaSetDevice),
    FLYT_RUNTIME_PROBE(__cudaRegisterFunction),
    FLYT_RUNTIME_PROBE(__cudaGetKernel),
    FLYT_RUNTIME_PROBE(cudaGetKernel),
    FLYT_DRIVER_PROBE(cuModuleGetFunction),
    FLYT_LIBC_PROBE(setenv),
    FLYT_LIBC_PROBE(putenv),
};

#undef FLYT_RUNTIME_PROBE
#undef FLYT_DRIVER_PROBE
#undef FLYT_LIBC_PROBE

}  // namespace

std::span<const ProbeSpec> ProbeTable() { return kProbes; }

std::optional<ProbeSpec> FindProbe(std::string_view symbol) {
  for (const ProbeSpec& spec : kProbes) {
    if (spec.symbol == symbol) return spec;
  }
  return std::nullopt;
}

ProbeFamily FamilyOf(LibraryClass library) {
  switch (library) {
    case LibraryClass::kDriver:
      return ProbeFamily::kDriver;
    case LibraryClass::kLibc:
      return ProbeFamily::kLibc;
    default:
      return ProbeFamily::kRuntime;
  }
}

bool Carries(LibraryClass library, const ProbeSpec& spec) {
  return spec.family == FamilyOf(library);
}

std::string FuncName(uint16_t func) {
  for (const ProbeSpec& spec : kProbes) {
    if (spec.func == func) return std::string(spec.symbol);
  }
  if (func == FLYT_FN_NONE) return "none";
  return "func " + std::to_string(func);
}

std::string KindName(uint16_t kind) {
  switch (kind) {
    case FLYT_EV_LAUNCH: return "launch";
    case FLYT_EV_ALLOC: return "alloc";
    case FLYT_EV_FREE: return "free";
    case FLYT_EV_COPY: return "copy";
    case FLYT_EV_MEMSET: return "memset";
    case FLYT_EV_SYNC: return "sync";
    case FLYT_EV_EVENT_RECORD: return "event_record";
    case FLYT_EV_STREAM_CREATE: return "stream_create";
    case FLYT_EV_STREAM_DESTROY: return "stream_destroy";
    case FLYT_EV_SET_DEVICE: return "set_device";
    case FLYT_EV_REGISTER_FUNCTION: return "register_function";
    case FLYT_EV_GET_KERNEL: return "get_kernel";
    case FLYT_EV_MODULE_FUNCTION: return "module_function";
    case FLYT_EV_SETENV: return "setenv";
    case FLYT_EV_EXEC: return "exec";
    case FLYT_EV_LIBRARY_OPEN: return "library_open";
    case FLYT_EV_EXIT: return "exit";
    case FLYT_EV_ENVIRON: return "environ";
  }
  return "kind " + std::to_string(kind);
}

std::string LibraryClassName(uint16_t library) {
  switch (library) {
    case FLYT_LIB_NVIDIA_RUNTIME: return "nvidia_runtime";
    case FLYT_LIB_FLYT_RUNTIME: return "flyt_runtime";
    case FLYT_LIB_DRIVER: return "driver";
    case FLYT_LIB_STATIC_RUNTIME: return "static_runtime";
    case FLYT_LIB_LIBC: return "libc";
    case 0: return "none";
  }
  return "library " + std::to_string(library);
}

}  // namespace flyt::trace
