// The NVML entry points flyt uses, written once (docs/conventions.md: "One list, many uses").
//
// FLYT_NVML_ENTRY_POINTS(X) calls X(member, requirement, return, (params), (args), names...) for
// each entry point. `names` lists the exported symbols newest first; the loader binds the first
// one the library exports, so a driver with nvmlDeviceGetCount_v2 gets it and an old one falls
// back to nvmlDeviceGetCount. Entries whose versions take different structs (process lists,
// memory info) are separate members. The list is expanded three times: the loader's function
// table, its dlsym loop, and the simulated NVML library's exports.
//
// requirement: kRequired entries must resolve or the library is refused; kOptional entries that
// do not resolve are absent and every reading that needs them is absent.
//
// The unversioned nvmlDeviceGetPciInfo is not bound: it takes the older, shorter nvmlPciInfo_t.
// Process lists are three members, one symbol each (_v3, _v2, unversioned), and the backend walks
// them newest first itself: it must be able to drop a _v3 that misbehaves (some early R535
// drivers wrote records of another size through it) and use _v2 on that device instead.
#pragma once

#include "nvml/nvml_types.h"

// clang-format off
#define FLYT_NVML_ENTRY_POINTS(X)                                                                   \
  X(Init, kRequired, nvmlReturn_t, (void), (), nvmlInit_v2, nvmlInit)                               \
  X(Shutdown, kRequired, nvmlReturn_t, (void), (), nvmlShutdown)                                   \
  X(ErrorString, kOptional, const char*, (nvmlReturn_t result), (result), nvmlErrorString)         \
  X(SystemGetDriverVersion, kOptional, nvmlReturn_t, (char* version, unsigned int length),          \
    (version, length), nvmlSystemGetDriverVersion)                                                   \
  X(SystemGetNVMLVersion, kOptional, nvmlReturn_t, (char* version, unsigned int length),            \
    (version, length), nvmlSystemGetNVMLVersion)                                                     \
  X(SystemGetCudaDriverVersion, kOptional, nvmlReturn_t, (int* version), (version),                 \
    nvmlSystemGetCudaDriverVersion_v2, nvmlSystemGetCudaDriverVersion)                               \
  X(DeviceGetCount, kRequired, nvmlReturn_t, (unsigned int* count), (count),                        \
    nvmlDeviceGetCount_v2, nvmlDeviceGetCount)                                                       \
  X(DeviceGetHandleByIndex, kRequired, nvmlReturn_t, (unsigned int index, nvmlDevice_t* device),    \
    (index, device), nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByIndex)                      \
  X(DeviceGetIndex, kOptional, nvmlReturn_t, (nvmlDevice_t device, unsigned int* index),            \
    (device, index), nvmlDeviceGetIndex)                                                             \
  X(DeviceGetUUID, kOptional, nvmlReturn_t, (nvmlDevice_t device, char* uuid, unsigned int length), \
    (device, uuid, length), nvmlDeviceGetUUID)                                                       \
  X(DeviceGetName, kOptional, nvmlReturn_t, (nvmlDevice_t device, char* name, unsigned int length), \
    (device, name, length), nvmlDeviceGetName)                                                       \
  X(DeviceGetPciInfo, kOptional, nvmlReturn_t, (nvmlDevice_t device, nvmlPciInfo_t* pci),           \
    (device, pci), nvmlDeviceGetPciInfo_v3, nvmlDeviceGetPciInfo_v2)                                 \
  X(DeviceGetSerial, kOptional, nvmlReturn_t,                                                       \
    (nvmlDevice_t device, char* serial, unsigned int length), (device, serial, length),             \
    nvmlDeviceGetSerial)                                                                             \
  X(DeviceGetMemoryInfoV2, kOptional, nvmlReturn_t, (nvmlDevice_t device, nvmlMemory_v2_t* memory), \
    (device, memory), nvmlDeviceGetMemoryInfo_v2)                                                    \
  X(DeviceGetMemoryInfo, kOptional, nvmlReturn_t, (nvmlDevice_t device, nvmlMemory_t* memory),      \
    (device, memory), nvmlDeviceGetMemoryInfo)                                                       \
  X(DeviceGetUtilizationRates, kOptional, nvmlReturn_t,                                             \
    (nvmlDevice_t device, nvmlUtilization_t* utilization), (device, utilization),                   \
    nvmlDeviceGetUtilizationRates)                                                                   \
  X(DeviceGetTemperature, kOptional, nvmlReturn_t,                                                  \
    (nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* temp),                     \
    (device, sensor, temp), nvmlDeviceGetTemperature)                                                \
  X(DeviceGetPowerUsage, kOptional, nvmlReturn_t, (nvmlDevice_t device, unsigned int* power_mw),    \
    (device, power_mw), nvmlDeviceGetPowerUsage)                                                     \
  X(DeviceGetEnforcedPowerLimit, kOptional, nvmlReturn_t,                                           \
    (nvmlDevice_t device, unsigned int* limit_mw), (device, limit_mw),                              \
    nvmlDeviceGetEnforcedPowerLimit)                                                                 \
  X(DeviceGetTotalEnergyConsumption, kOptional, nvmlReturn_t,                                       \
    (nvmlDevice_t device, unsigned long long* energy_mj), (device, energy_mj),                      \
    nvmlDeviceGetTotalEnergyConsumption)                                                             \
  X(DeviceGetClockInfo, kOptional, nvmlReturn_t,                                                    \
    (nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz), (device, type, mhz),            \
    nvmlDeviceGetClockInfo)                                                                          \
  X(DeviceGetMaxClockInfo, kOptional, nvmlReturn_t,                                                 \
    (nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz), (device, type, mhz),            \
    nvmlDeviceGetMaxClockInfo)                                                                       \
  X(DeviceGetNumGpuCores, kOptional, nvmlReturn_t, (nvmlDevice_t device, unsigned int* cores),      \
    (device, cores), nvmlDeviceGetNumGpuCores)                                                       \
  X(DeviceGetPcieThroughput, kOptional, nvmlReturn_t,                                               \
    (nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int* kb_per_s),                   \
    (device, counter, kb_per_s), nvmlDeviceGetPcieThroughput)                                        \
  X(DeviceGetFieldValues, kOptional, nvmlReturn_t,                                                 \
    (nvmlDevice_t device, int count, nvmlFieldValue_t* values), (device, count, values),            \
    nvmlDeviceGetFieldValues)                                                                        \
  X(DeviceGetEncoderUtilization, kOptional, nvmlReturn_t,                                          \
    (nvmlDevice_t device, unsigned int* percent, unsigned int* sampling_period_us),                 \
    (device, percent, sampling_period_us), nvmlDeviceGetEncoderUtilization)                         \
  X(DeviceGetDecoderUtilization, kOptional, nvmlReturn_t,                                          \
    (nvmlDevice_t device, unsigned int* percent, unsigned int* sampling_period_us),                 \
    (device, percent, sampling_period_us), nvmlDeviceGetDecoderUtilization)                         \
  X(DeviceGetPcieReplayCounter, kOptional, nvmlReturn_t, (nvmlDevice_t device, unsigned int* count),\
    (device, count), nvmlDeviceGetPcieReplayCounter)                                                 \
  X(DeviceGetFanSpeed, kOptional, nvmlReturn_t, (nvmlDevice_t device, unsigned int* percent),       \
    (device, percent), nvmlDeviceGetFanSpeed)                                                        \
  X(DeviceGetPerformanceState, kOptional, nvmlReturn_t, (nvmlDevice_t device, nvmlPstates_t* state),\
    (device, state), nvmlDeviceGetPerformanceState)                                                  \
  X(DeviceGetComputeMode, kOptional, nvmlReturn_t, (nvmlDevice_t device, nvmlComputeMode_t* mode),  \
    (device, mode), nvmlDeviceGetComputeMode)                                                        \
  X(DeviceGetMigMode, kOptional, nvmlReturn_t,                                                      \
    (nvmlDevice_t device, unsigned int* current, unsigned int* pending), (device, current, pending),\
    nvmlDeviceGetMigMode)                                                                            \
  X(DeviceGetTotalEccErrors, kOptional, nvmlReturn_t,                                               \
    (nvmlDevice_t device, nvmlMemoryErrorType_t error_type, nvmlEccCounterType_t counter_type,      \
     unsigned long long* count), (device, error_type, counter_type, count),                          \
    nvmlDeviceGetTotalEccErrors)                                                                     \
  X(DeviceGetClocksEventReasons, kOptional, nvmlReturn_t,                                           \
    (nvmlDevice_t device, unsigned long long* reasons), (device, reasons),                          \
    nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetCurrentClocksThrottleReasons)               \
  X(DeviceGetComputeRunningProcesses, kOptional, nvmlReturn_t,                                      \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos), (device, count, infos),   \
    nvmlDeviceGetComputeRunningProcesses_v3)                                                         \
  X(DeviceGetComputeRunningProcessesV2, kOptional, nvmlReturn_t,                                    \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos), (device, count, infos),   \
    nvmlDeviceGetComputeRunningProcesses_v2)                                                         \
  X(DeviceGetComputeRunningProcessesV1, kOptional, nvmlReturn_t,                                    \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos), (device, count, infos),\
    nvmlDeviceGetComputeRunningProcesses)                                                            \
  X(DeviceGetGraphicsRunningProcesses, kOptional, nvmlReturn_t,                                     \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos), (device, count, infos),   \
    nvmlDeviceGetGraphicsRunningProcesses_v3)                                                        \
  X(DeviceGetGraphicsRunningProcessesV2, kOptional, nvmlReturn_t,                                   \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos), (device, count, infos),   \
    nvmlDeviceGetGraphicsRunningProcesses_v2)                                                        \
  X(DeviceGetGraphicsRunningProcessesV1, kOptional, nvmlReturn_t,                                   \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos), (device, count, infos),\
    nvmlDeviceGetGraphicsRunningProcesses)                                                           \
  X(DeviceGetProcessUtilization, kOptional, nvmlReturn_t,                                           \
    (nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples, unsigned int* count,             \
     unsigned long long last_seen_us), (device, samples, count, last_seen_us),                      \
    nvmlDeviceGetProcessUtilization)                                                                 \
  X(DeviceGetSamples, kOptional, nvmlReturn_t,                                                    \
    (nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long last_seen_us,                 \
     nvmlValueType_t* value_type, unsigned int* count, nvmlSample_t* samples),                      \
    (device, type, last_seen_us, value_type, count, samples), nvmlDeviceGetSamples)                  \
  X(EventSetCreate, kOptional, nvmlReturn_t, (nvmlEventSet_t* set), (set), nvmlEventSetCreate)      \
  X(DeviceGetSupportedEventTypes, kOptional, nvmlReturn_t,                                          \
    (nvmlDevice_t device, unsigned long long* types), (device, types),                              \
    nvmlDeviceGetSupportedEventTypes)                                                                \
  X(DeviceRegisterEvents, kOptional, nvmlReturn_t,                                                  \
    (nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set), (device, types, set),      \
    nvmlDeviceRegisterEvents)                                                                        \
  X(EventSetWait, kOptional, nvmlReturn_t,                                                          \
    (nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms), (set, data, timeout_ms),  \
    nvmlEventSetWait_v2, nvmlEventSetWait)                                                           \
  X(EventSetFree, kOptional, nvmlReturn_t, (nvmlEventSet_t set), (set), nvmlEventSetFree)
// clang-format on

// Applies M(context, name) to each of up to three symbol names.
#define FLYT_NVML_FOR_EACH_NAME_1(M, c, a) M(c, a)
#define FLYT_NVML_FOR_EACH_NAME_2(M, c, a, b) M(c, a) M(c, b)
#define FLYT_NVML_FOR_EACH_NAME_3(M, c, a, b, d) M(c, a) M(c, b) M(c, d)
#define FLYT_NVML_PICK_4TH(_1, _2, _3, NAME, ...) NAME
#define FLYT_NVML_FOR_EACH_NAME(M, c, ...)                                              \
  FLYT_NVML_PICK_4TH(__VA_ARGS__, FLYT_NVML_FOR_EACH_NAME_3, FLYT_NVML_FOR_EACH_NAME_2, \
                     FLYT_NVML_FOR_EACH_NAME_1)                                         \
  (M, c, __VA_ARGS__)
// The oldest (last) of up to three symbol names.
#define FLYT_NVML_LAST_NAME(...) \
  FLYT_NVML_PICK_4TH(__VA_ARGS__, FLYT_NVML_L3, FLYT_NVML_L2, FLYT_NVML_L1)(__VA_ARGS__)
#define FLYT_NVML_L1(a) a
#define FLYT_NVML_L2(a, b) b
#define FLYT_NVML_L3(a, b, c) c
#define FLYT_NVML_STRINGIFY_NAME(c, name) #name,
