// Checks flyt's NVML declarations against the sizes and offsets NVIDIA documents (nvml.h, API
// 11.7 to 13.x, x86_64). The numbers here are written from the documentation, not derived from
// flyt's own structs, so the binding and the simulated library (which share the declarations)
// cannot drift together away from the real ABI without this test failing.
#include <gtest/gtest.h>

#include <cstddef>

#include "nvml/library.h"
#include "nvml/nvml_types.h"

namespace flyt::nvml {
namespace {

TEST(NvmlLayoutTest, MemoryStructsMatchTheDocumentedLayout) {
  EXPECT_EQ(sizeof(nvmlMemory_t), 24u);
  EXPECT_EQ(offsetof(nvmlMemory_t, total), 0u);
  EXPECT_EQ(offsetof(nvmlMemory_t, free), 8u);
  EXPECT_EQ(offsetof(nvmlMemory_t, used), 16u);

  EXPECT_EQ(sizeof(nvmlMemory_v2_t), 40u);
  EXPECT_EQ(offsetof(nvmlMemory_v2_t, version), 0u);
  EXPECT_EQ(offsetof(nvmlMemory_v2_t, total), 8u);
  EXPECT_EQ(offsetof(nvmlMemory_v2_t, reserved), 16u);
  EXPECT_EQ(offsetof(nvmlMemory_v2_t, free), 24u);
  EXPECT_EQ(offsetof(nvmlMemory_v2_t, used), 32u);
  EXPECT_EQ(nvmlMemory_v2, 0x02000028u);  // NVML_STRUCT_VERSION(Memory, 2)
}

TEST(NvmlLayoutTest, UtilizationAndPciInfo) {
  EXPECT_EQ(sizeof(nvmlUtilization_t), 8u);
  EXPECT_EQ(offsetof(nvmlUtilization_t, memory), 4u);
  EXPECT_EQ(sizeof(nvmlPciInfo_t), 68u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, busIdLegacy), 0u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, domain), 16u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, bus), 20u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, device), 24u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, pciDeviceId), 28u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, pciSubSystemId), 32u);
  EXPECT_EQ(offsetof(nvmlPciInfo_t, busId), 36u);
}

TEST(NvmlLayoutTest, ProcessStructs) {
  EXPECT_EQ(sizeof(nvmlProcessInfo_v1_t), 16u);
  EXPECT_EQ(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory), 8u);
  EXPECT_EQ(sizeof(nvmlProcessInfo_t), 24u);
  EXPECT_EQ(offsetof(nvmlProcessInfo_t, pid), 0u);
  EXPECT_EQ(offsetof(nvmlProcessInfo_t, usedGpuMemory), 8u);
  EXPECT_EQ(offsetof(nvmlProcessInfo_t, gpuInstanceId), 16u);
  EXPECT_EQ(offsetof(nvmlProcessInfo_t, computeInstanceId), 20u);

  EXPECT_EQ(sizeof(nvmlProcessUtilizationSample_t), 32u);
  EXPECT_EQ(offsetof(nvmlProcessUtilizationSample_t, timeStamp), 8u);
  EXPECT_EQ(offsetof(nvmlProcessUtilizationSample_t, smUtil), 16u);
  EXPECT_EQ(offsetof(nvmlProcessUtilizationSample_t, memUtil), 20u);
  EXPECT_EQ(offsetof(nvmlProcessUtilizationSample_t, encUtil), 24u);
  EXPECT_EQ(offsetof(nvmlProcessUtilizationSample_t, decUtil), 28u);
}

TEST(NvmlLayoutTest, EventData) {
  EXPECT_EQ(sizeof(nvmlEventData_t), 32u);
  EXPECT_EQ(offsetof(nvmlEventData_t, eventType), 8u);
  EXPECT_EQ(offsetof(nvmlEventData_t, eventData), 16u);
  EXPECT_EQ(offsetof(nvmlEventData_t, gpuInstanceId), 24u);
  EXPECT_EQ(offsetof(nvmlEventData_t, computeInstanceId), 28u);
}

TEST(NvmlLayoutTest, FieldValues) {
  EXPECT_EQ(sizeof(nvmlFieldValue_t), 40u);
  EXPECT_EQ(offsetof(nvmlFieldValue_t, scopeId), 4u);
  EXPECT_EQ(offsetof(nvmlFieldValue_t, timestamp), 8u);
  EXPECT_EQ(offsetof(nvmlFieldValue_t, latencyUsec), 16u);
  EXPECT_EQ(offsetof(nvmlFieldValue_t, valueType), 24u);
  EXPECT_EQ(offsetof(nvmlFieldValue_t, nvmlReturn), 28u);
  EXPECT_EQ(offsetof(nvmlFieldValue_t, value), 32u);
  EXPECT_EQ(NVML_FI_DEV_MEMORY_TEMP, 82u);
  EXPECT_EQ(NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 3);
}

TEST(NvmlLayoutTest, DocumentedConstants) {
  EXPECT_EQ(NVML_ERROR_GPU_IS_LOST, 15);
  EXPECT_EQ(NVML_ERROR_UNKNOWN, 999);
  EXPECT_EQ(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, 25);
  EXPECT_EQ(nvmlEventTypeXidCriticalError, 0x8ULL);
  EXPECT_EQ(NVML_PCIE_UTIL_RX_BYTES, 1);
  EXPECT_EQ(NVML_CLOCK_MEM, 2);
  EXPECT_EQ(NVML_DEVICE_UUID_V2_BUFFER_SIZE, 96u);
  EXPECT_EQ(NVML_DEVICE_SERIAL_BUFFER_SIZE, 30u);
}

TEST(NvmlLayoutTest, SamplesOfNvmlDeviceGetSamples) {
  EXPECT_EQ(sizeof(nvmlSample_t), 16u);
  EXPECT_EQ(offsetof(nvmlSample_t, timeStamp), 0u);
  EXPECT_EQ(offsetof(nvmlSample_t, sampleValue), 8u);
  EXPECT_EQ(NVML_TOTAL_POWER_SAMPLES, 0);
  EXPECT_EQ(NVML_GPU_UTILIZATION_SAMPLES, 1);
  EXPECT_EQ(NVML_MEMORY_UTILIZATION_SAMPLES, 2);
  EXPECT_EQ(NVML_VALUE_TYPE_UNSIGNED_INT, 1);
}

TEST(NvmlErrorTest, NamesTheCallAndTheCode) {
  Status s = NvmlError(nullptr, "nvmlDeviceGetPowerUsage", NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_EQ(s.message(), "nvmlDeviceGetPowerUsage: NVML_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(ReturnName(static_cast<nvmlReturn_t>(4242)), "NVML_ERROR_4242");
}

TEST(NvmlLoaderTest, MissingLibraryIsAClearError) {
  auto lib = Library::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(NvmlLoaderTest, LibraryWithoutNvmlIsRefusedNamingWhatIsMissing) {
  auto lib = Library::Load("libm.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find("nvmlInit_v2"), std::string::npos);
}

}  // namespace
}  // namespace flyt::nvml
