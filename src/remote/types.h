// Value types of remote CUDA: device addresses, the opaque handles a backend hands out, launch
// geometry, function attributes and what a backend reports about its device. Plain data shared by
// the protocol (protocol.h, calls.def), the client side (client.h, the runtime library) and the
// server side (backend.h and its implementations), so that neither the protocol nor the client
// has to include the Backend interface to name them.
//
// Plain structs and constants; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace flyt::remote {

// A device address in the device's (unified) virtual address space. Kernel parameters carry
// these verbatim, so they are never translated.
using DevicePtr = uint64_t;

// Opaque backend-native handles; their meaning is private to the backend that returned them.
enum class StreamHandle : uint64_t {};
enum class EventHandle : uint64_t {};
enum class ModuleHandle : uint64_t {};
enum class FunctionHandle : uint64_t {};

// The legacy default stream (CUDA's stream 0 / cudaStreamLegacy): it synchronises with every
// blocking stream of the session. Per-thread default streams are ordinary streams the client
// created, so the backend never sees cudaStreamPerThread.
inline constexpr StreamHandle kDefaultStream{0};

// Flags, with CUDA's values.
inline constexpr uint32_t kStreamNonBlocking = 0x1;  // cudaStreamNonBlocking
inline constexpr uint32_t kEventBlockingSync = 0x1;  // cudaEventBlockingSync
inline constexpr uint32_t kEventDisableTiming = 0x2;  // cudaEventDisableTiming

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  bool operator==(const Dim3&) const = default;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t dynamic_shared_bytes = 0;
  StreamHandle stream = kDefaultStream;
};

// Function attributes, numbered as the driver's CUfunction_attribute (the runtime's
// cudaFuncAttribute uses the same numbers for the settable ones, 8 and up).
enum class FunctionAttribute : uint32_t {
  kMaxThreadsPerBlock = 0,
  kSharedSizeBytes = 1,
  kConstSizeBytes = 2,
  kLocalSizeBytes = 3,
  kNumRegs = 4,
  kPtxVersion = 5,
  kBinaryVersion = 6,
  kCacheModeCa = 7,
  kMaxDynamicSharedSizeBytes = 8,
  kPreferredSharedMemoryCarveout = 9,
  kClusterSizeMustBeSet = 10,
  kRequiredClusterWidth = 11,
  kRequiredClusterHeight = 12,
  kRequiredClusterDepth = 13,
  kNonPortableClusterSizeAllowed = 14,
  kClusterSchedulingPolicyPreference = 15,
};
inline constexpr uint32_t kFunctionAttributeCount = 16;

// What identifies the device; the rest of its description is attributes (DeviceAttribute).
struct DeviceIdentity {
  std::string name;               // e.g. "NVIDIA H100 80GB HBM3"
  std::array<uint8_t, 16> uuid{};  // as cudaDeviceProp::uuid
  uint64_t total_memory_bytes = 0;
  int32_t driver_version = 0;  // cuDriverGetVersion's number, e.g. 13000
  bool simulated = false;
  // The device's SMs, and those a client of this backend may use (the SM share: the driver's
  // execution affinity grant, the sim's rounding up to sm_granularity; the total without one).
  int32_t sm_count_total = 0;
  int32_t sm_count_granted = 0;
  // The step in which the device grants SMs to a share (measured on the driver backend where it
  // can be, else the configured default).
  int32_t sm_granularity = 0;
  bool sm_granularity_measured = false;
  // SM shares are enforced by NVIDIA MPS for this device (driver: the device supports execution
  // affinity by SM count, which MPS provides).
  bool mps = false;
};

struct MemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

struct GlobalSymbol {
  DevicePtr ptr = 0;
  uint64_t bytes = 0;
};

}  // namespace flyt::remote
