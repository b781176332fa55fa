// The simulated device: a Backend with no GPU behind it, so that real nvcc-built programs run
// their whole host-side path (registration, launches, copies, streams, events) through the client
// runtime, the protocol and the server on machines without a GPU.
//
// Device memory is host memory (copies, memsets and device-to-device copies are byte-exact;
// large allocations are reserved lazily, so an 80 GiB device costs only what is touched). The
// device describes itself as an H100 SXM (compute capability 9.0, 132 SMs by default). Modules are
// parsed with the cuda library, so a kernel name the image does not hold fails as it would on a
// GPU; launches are checked (block size, grid limits, dynamic shared memory, parameter-buffer
// size) and then counted, not executed — kernels do not run, so a program's results are not what
// a GPU would compute. Streams complete at once; events record the host time.
//
// Fault injection, for tests of CUDA's sticky-error semantics: launching a kernel whose name
// contains "flyt_sim_fault" corrupts the session as an illegal memory access would on a GPU —
// the next synchronising call returns cudaErrorIllegalAddress, and so does every later device
// operation. (A test kernel that really dereferences a bad pointer under that name behaves the
// same on a real GPU.) By default (fault_poisons_process) the fault also corrupts every other
// session of the backend, and Reset cannot clear it, as the H100 did with driver 580 (every
// context of the process and every new one failed): only a new process recovers, which the
// server's process per client provides. With fault_poisons_process off, the fault stays in its
// session and Reset clears it.
//
// Thread safety: as Backend requires (the backend object is immutable after construction; each
// Session guards its own state, used by one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "remote_server/backend.h"

namespace flyt::remote {

struct SimOptions {
  uint64_t memory_bytes = 85'520'809'984;  // what an H100 80GB HBM3 reports
  int sm_count = 132;  // the device's SMs
  // An SM share: asked SMs, granted rounded up to sm_granularity and capped at sm_count, as a GPU
  // under MPS grants a context's execution affinity. multiProcessorCount is then the grant.
  std::optional<int> sm_share;
  int sm_granularity = 8;  // like the H100's
  std::string name = "NVIDIA H100 80GB HBM3 (flyt simulated)";
  // A fault corrupts the whole backend (every session; Reset cannot clear it), as on a GPU.
  bool fault_poisons_process = true;
  // Lets the server read and write device memory directly (Session::HostView). Off: every copy
  // goes through MemcpyHtoD/MemcpyDtoH in chunks, as with a GPU (tests of that path).
  bool host_view = true;
};

std::unique_ptr<Backend> MakeSimBackend(const SimOptions& options = {});

// The SMs a share of `asked` gets on a device of `total` SMs granted in steps of `granularity`:
// `asked` rounded up to a multiple of `granularity`, at most `total` (and at least 1).
int GrantedSmCount(int asked, int total, int granularity);

}  // namespace flyt::remote
