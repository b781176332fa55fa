// flyt's own declarations of the NVML types it uses, written from NVIDIA's NVML API reference
// (nvml.h of NVML API 11.7 through 13.x; the layouts below are identical in all of them).
//
// flyt never includes nvml.h: the real library is loaded at run time with dlopen, and these
// declarations are the contract both for that binding and for flyt's simulated NVML library.
// Every struct carries a comment naming its documented layout and a static_assert on its size
// (x86_64 / LP64); nvml_layout_test.cc checks each field offset against the documented numbers,
// so the binding and the simulator cannot drift together away from the real ABI.
//
// Plain data and constants only; no state, nothing to synchronise.
#pragma once

#include <cstddef>

extern "C" {

// nvmlReturn_t: a plain C enum, 4 bytes.
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

// Opaque handles: pointers to incomplete structs.
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
} nvmlClockType_t;

typedef enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

// PCIe throughput counters, in KB/s (1 KB granularity, sampled over 20 ms).
typedef enum nvmlPcieUtilCounter_enum {
  NVML_PCIE_UTIL_TX_BYTES = 0,
  NVML_PCIE_UTIL_RX_BYTES = 1,
} nvmlPcieUtilCounter_t;

typedef enum nvmlMemoryErrorType_enum {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
} nvmlMemoryErrorType_t;

typedef enum nvmlEccCounterType_enum {
  NVML_VOLATILE_ECC = 0,
  NVML_AGGREGATE_ECC = 1,
} nvmlEccCounterType_t;

typedef enum nvmlComputeMode_enum {
  NVML_COMPUTEMODE_DEFAULT = 0,
  NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
  NVML_COMPUTEMODE_PROHIBITED = 2,
  NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,
} nvmlComputeMode_t;

// NVML_PSTATE_0 .. NVML_PSTATE_15 are 0..15.
typedef enum nvmlPStates_enum {
  NVML_PSTATE_0 = 0,
  NVML_PSTATE_15 = 15,
  NVML_PSTATE_UNKNOWN = 32,
} nvmlPstates_t;

// nvmlMemory_t: { unsigned long long total @0, free @8, used @16 }, 24 bytes.
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

// nvmlMemory_v2_t: { unsigned int version @0, (4 bytes padding), unsigned long long total @8,
// reserved @16, free @24, used @32 }, 40 bytes. `version` must be nvmlMemory_v2.
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

// NVML_STRUCT_VERSION(data, ver) = sizeof(nvml<data>_v<ver>_t) | (ver << 24).
#define FLYT_NVML_STRUCT_VERSION(type, ver) \
  (static_cast<unsigned int>(sizeof(type)) | (static_cast<unsigned int>(ver) << 24U))
constexpr unsigned int nvmlMemory_v2 = FLYT_NVML_STRUCT_VERSION(nvmlMemory_v2_t, 2);

// nvmlUtilization_t: { unsigned int gpu @0, memory @4 }, 8 bytes, percent over the last sample
// period.
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;

// nvmlPciInfo_t: { char busIdLegacy[16] @0, unsigned int domain @16, bus @20, device @24,
// pciDeviceId @28, pciSubSystemId @32, char busId[32] @36 }, 68 bytes.
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

// nvmlProcessInfo_v1_t: { unsigned int pid @0, (padding), unsigned long long usedGpuMemory @8 },
// 16 bytes. Used by the unversioned nvmlDeviceGet{Compute,Graphics}RunningProcesses.
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

// nvmlProcessInfo_t == nvmlProcessInfo_v2_t: { unsigned int pid @0, unsigned long long
// usedGpuMemory @8, unsigned int gpuInstanceId @16, computeInstanceId @20 }, 24 bytes. Used by
// the _v2 and _v3 process queries. Instance ids are 0xFFFFFFFF when MIG is off.
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

// NVML_VALUE_NOT_AVAILABLE is (-1); as an unsigned long long, all ones. usedGpuMemory carries it
// when the driver cannot attribute memory to the process.
constexpr unsigned long long kNvmlValueNotAvailableULL = ~0ULL;
constexpr unsigned int kNvmlInstanceIdNone = 0xFFFFFFFFU;

// nvmlProcessUtilizationSample_t: { unsigned int pid @0, (padding), unsigned long long timeStamp
// @8 (CPU timestamp, microseconds), unsigned int smUtil @16, memUtil @20, encUtil @24, decUtil @28
// }, 32 bytes.
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

// nvmlEventData_t: { nvmlDevice_t device @0, unsigned long long eventType @8, eventData @16,
// unsigned int gpuInstanceId @24, computeInstanceId @28 }, 32 bytes. eventData is the XID for
// XidCriticalError events (999 = unknown XID), 0 otherwise.
typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

// Event type bits.
constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
constexpr unsigned long long nvmlEventTypePState = 0x4ULL;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
constexpr unsigned long long nvmlEventTypeClock = 0x10ULL;
constexpr unsigned long long nvmlEventTypePowerSourceChange = 0x80ULL;
constexpr unsigned long long nvmlEventMigConfigChange = 0x100ULL;

// Clocks event ("throttle") reason bits.
constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ULL;
constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ULL;
constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ULL;
constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8ULL;
constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ULL;
constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ULL;
constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40ULL;
constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80ULL;
constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ULL;

// nvmlValueType_t: which member of nvmlValue_t holds a field value.
typedef enum nvmlValueType_enum {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
} nvmlValueType_t;

// nvmlValue_t: an 8-byte union.
typedef union nvmlValue_st {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  signed int siVal;
} nvmlValue_t;

// nvmlFieldValue_t: { unsigned int fieldId @0, scopeId @4, long long timestamp @8 (CPU µs since
// 1970), latencyUsec @16, nvmlValueType_t valueType @24, nvmlReturn_t nvmlReturn @28, nvmlValue_t
// value @32 }, 40 bytes. `value` is valid only when `nvmlReturn` is NVML_SUCCESS.
typedef struct nvmlFieldValue_st {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// nvmlSamplingType_t: which of the driver's sample buffers nvmlDeviceGetSamples reads.
typedef enum nvmlSamplingType_enum {
  NVML_TOTAL_POWER_SAMPLES = 0,
  NVML_GPU_UTILIZATION_SAMPLES = 1,  // percent of time a kernel ran, per driver sample period
  NVML_MEMORY_UTILIZATION_SAMPLES = 2,
  NVML_ENC_UTILIZATION_SAMPLES = 3,
  NVML_DEC_UTILIZATION_SAMPLES = 4,
  NVML_PROCESSOR_CLK_SAMPLES = 5,
  NVML_MEMORY_CLK_SAMPLES = 6,
} nvmlSamplingType_t;

// nvmlSample_t: { unsigned long long timeStamp @0 (CPU timestamp, microseconds), nvmlValue_t
// sampleValue @8 }, 16 bytes. Utilisation samples carry an unsigned int (uiVal).
typedef struct nvmlSample_st {
  unsigned long long timeStamp;
  nvmlValue_t sampleValue;
} nvmlSample_t;

// Field ids for nvmlDeviceGetFieldValues.
constexpr unsigned int NVML_FI_DEV_MEMORY_TEMP = 82;  // memory (HBM) temperature, °C

// MIG modes for nvmlDeviceGetMigMode.
constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;

// Buffer sizes (each includes the terminating NUL).
constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned int NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80;
constexpr unsigned int NVML_DEVICE_SERIAL_BUFFER_SIZE = 30;

}  // extern "C"

static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is a 4-byte C enum");
static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t: 3 x unsigned long long");
static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t: version + pad + 4 x u64");
static_assert(nvmlMemory_v2 == 0x02000028U, "nvmlMemory_v2 = 40 | (2 << 24)");
static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t: 2 x unsigned int");
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t: 16 + 5 x 4 + 32 bytes");
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t: pid + pad + u64");
static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t: pid + pad + u64 + 2 x u32");
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32,
              "nvmlProcessUtilizationSample_t: pid + pad + u64 + 4 x u32");
static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t: ptr + 2 x u64 + 2 x u32");
static_assert(sizeof(nvmlValue_t) == 8, "nvmlValue_t: an 8-byte union");
static_assert(sizeof(nvmlSample_t) == 16, "nvmlSample_t: u64 timestamp + 8-byte value");
static_assert(sizeof(nvmlSamplingType_t) == 4, "nvmlSamplingType_t is a 4-byte C enum");
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t: 2 x u32 + 2 x i64 + 2 x enum + value");
