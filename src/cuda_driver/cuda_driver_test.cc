// The CUDA driver loader, on every machine: flyt's declarations against the documented ABI (and
// the toolkit's cuda.h where one is installed), a missing or foreign library refused with a clear
// message, and binding on fake drivers built from the entry-point list itself (fake_libcuda.cc:
// newest names, fallbacks on an old driver, a broken one refused naming every missing entry).
// Where the CUDA toolkit is installed, also on NVIDIA's stub libcuda.so: it exports every entry
// point by the newest name, which must be the one cuda.h selects.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "cuda_driver/cuda_driver_types.h"
#include "cuda_driver/library.h"

namespace flyt::cuda_driver {
namespace {

namespace fs = std::filesystem;

// The CUDA toolkit's directory, where the stub library and headers are; empty when absent.
fs::path ToolkitDir() {
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* value = std::getenv(env);
    if (value != nullptr && fs::exists(fs::path(value) / "include" / "cuda.h")) return value;
  }
  if (fs::exists("/usr/local/cuda/include/cuda.h")) return "/usr/local/cuda";
  return {};
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CudaDriverLayoutTest, StructsMatchTheDocumentedLayout) {
  EXPECT_EQ(sizeof(CUresult), 4u);
  EXPECT_EQ(sizeof(CUdevice), 4u);
  EXPECT_EQ(sizeof(CUdeviceptr), 8u);
  EXPECT_EQ(sizeof(CUuuid), 16u);
  EXPECT_EQ(sizeof(CUexecAffinityParam), 8u);
  EXPECT_EQ(offsetof(CUexecAffinityParam, type), 0u);
  EXPECT_EQ(offsetof(CUexecAffinityParam, param), 4u);
  EXPECT_EQ(sizeof(CUctxCreateParams), 24u);
  EXPECT_EQ(offsetof(CUctxCreateParams, execAffinityParams), 0u);
  EXPECT_EQ(offsetof(CUctxCreateParams, numExecAffinityParams), 8u);
  EXPECT_EQ(offsetof(CUctxCreateParams, cigParams), 16u);
  // [issue 18: migration] the virtual memory management structs.
  EXPECT_EQ(sizeof(CUmemLocation), 8u);
  EXPECT_EQ(offsetof(CUmemLocation, id), 4u);
  EXPECT_EQ(sizeof(CUmemAllocationProp), 32u);
  EXPECT_EQ(offsetof(CUmemAllocationProp, requestedHandleTypes), 4u);
  EXPECT_EQ(offsetof(CUmemAllocationProp, location), 8u);
  EXPECT_EQ(offsetof(CUmemAllocationProp, win32HandleMetaData), 16u);
  EXPECT_EQ(offsetof(CUmemAllocationProp, allocFlags), 24u);
  EXPECT_EQ(sizeof(CUmemAccessDesc), 12u);
  EXPECT_EQ(offsetof(CUmemAccessDesc, flags), 8u);
}

// The values flyt declares, written here from the Driver API reference.
const std::map<std::string, long> kDocumentedValues = {
    {"CUDA_SUCCESS", 0},
    {"CUDA_ERROR_INVALID_VALUE", 1},
    {"CUDA_ERROR_OUT_OF_MEMORY", 2},
    {"CUDA_ERROR_NOT_INITIALIZED", 3},
    {"CUDA_ERROR_STUB_LIBRARY", 34},
    {"CUDA_ERROR_NO_DEVICE", 100},
    {"CUDA_ERROR_INVALID_DEVICE", 101},
    {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", 202},
    {"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", 224},
    {"CUDA_ERROR_NOT_FOUND", 500},
    {"CUDA_ERROR_NOT_SUPPORTED", 801},
    {"CUDA_ERROR_KEY_ROTATION", 916},
    {"CUDA_ERROR_UNKNOWN", 999},
    {"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", 16},
    {"CU_EXEC_AFFINITY_TYPE_SM_COUNT", 0},
};

TEST(CudaDriverLayoutTest, ConstantsHaveTheDocumentedValues) {
  const std::map<std::string, long> declared = {
      {"CUDA_SUCCESS", CUDA_SUCCESS},
      {"CUDA_ERROR_INVALID_VALUE", CUDA_ERROR_INVALID_VALUE},
      {"CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY},
      {"CUDA_ERROR_NOT_INITIALIZED", CUDA_ERROR_NOT_INITIALIZED},
      {"CUDA_ERROR_STUB_LIBRARY", CUDA_ERROR_STUB_LIBRARY},
      {"CUDA_ERROR_NO_DEVICE", CUDA_ERROR_NO_DEVICE},
      {"CUDA_ERROR_INVALID_DEVICE", CUDA_ERROR_INVALID_DEVICE},
      {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", CUDA_ERROR_CONTEXT_ALREADY_CURRENT},
      {"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY},
      {"CUDA_ERROR_NOT_FOUND", CUDA_ERROR_NOT_FOUND},
      {"CUDA_ERROR_NOT_SUPPORTED", CUDA_ERROR_NOT_SUPPORTED},
      {"CUDA_ERROR_KEY_ROTATION", CUDA_ERROR_KEY_ROTATION},
      {"CUDA_ERROR_UNKNOWN", CUDA_ERROR_UNKNOWN},
      {"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {"CU_EXEC_AFFINITY_TYPE_SM_COUNT", CU_EXEC_AFFINITY_TYPE_SM_COUNT},
  };
  EXPECT_EQ(declared, kDocumentedValues);
  EXPECT_EQ(CU_MEMHOSTALLOC_PORTABLE, 0x01u);
  EXPECT_EQ(CU_LAUNCH_PARAM_END, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(CU_LAUNCH_PARAM_BUFFER_POINTER), 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(CU_LAUNCH_PARAM_BUFFER_SIZE), 2u);
}

TEST(CudaDriverLayoutTest, ConstantsAgreeWithTheToolkitHeader) {
  const fs::path toolkit = ToolkitDir();
  if (toolkit.empty()) GTEST_SKIP() << "no CUDA toolkit headers";
  const std::string header = ReadText(toolkit / "include" / "cuda.h");
  for (const auto& [name, value] : kDocumentedValues) {
    SCOPED_TRACE(name);
    std::smatch match;
    ASSERT_TRUE(std::regex_search(header, match, std::regex("\\b" + name + R"(\s*=\s*(\d+))")));
    EXPECT_EQ(std::stol(match[1].str()), value);
  }
}

TEST(CudaDriverLoaderTest, MissingLibraryIsUnavailableNamingIt) {
  auto lib = Library::Load("/nonexistent/flyt-test/libcuda.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("/nonexistent/flyt-test/libcuda.so.1"), std::string::npos)
      << lib.status().message();
}

TEST(CudaDriverLoaderTest, LibraryWithoutTheDriverApiIsRefusedNamingWhatIsMissing) {
  auto lib = Library::Load("libm.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  const std::string& message = lib.status().message();
  EXPECT_NE(message.find("libm.so.6 is not a usable CUDA driver library"), std::string::npos)
      << message;
  EXPECT_NE(message.find("cuInit"), std::string::npos) << message;
  EXPECT_NE(message.find("cuMemAlloc_v2"), std::string::npos) << message;
  EXPECT_NE(message.find("cuCtxCreate_v4 or cuCtxCreate_v2"), std::string::npos) << message;
}

TEST(CudaDriverLoaderTest, BindsEveryEntryPointOfAFullDriverByItsNewestName) {
  auto lib = Library::Load(FLYT_FAKE_DRIVER);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  ASSERT_FALSE((*lib)->bindings().empty());
  for (const Binding& b : (*lib)->bindings()) {
    SCOPED_TRACE(b.member);
    ASSERT_FALSE(b.candidates.empty());
    EXPECT_EQ(b.bound, b.candidates.front());
  }
  EXPECT_EQ((*lib)->BoundSymbol("MemAlloc"), "cuMemAlloc_v2");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetUuid"), "cuDeviceGetUuid_v2");
  EXPECT_EQ((*lib)->BoundSymbol("CtxCreateV4"), "cuCtxCreate_v4");
  EXPECT_EQ((*lib)->path(), FLYT_FAKE_DRIVER);
  // The table calls the library's functions (the fake answers CUDA_ERROR_NO_DEVICE to all).
  EXPECT_EQ((*lib)->api().Init(0), CUDA_ERROR_NO_DEVICE);
  int count = -1;
  EXPECT_EQ((*lib)->api().DeviceGetCount(&count), CUDA_ERROR_NO_DEVICE);
  // A failing cuGetErrorName: the message falls back to the number.
  EXPECT_EQ((*lib)->ErrorMessage("cuInit", CUDA_ERROR_NO_DEVICE), "cuInit: CUresult 100");
}

TEST(CudaDriverLoaderTest, AnOldDriverFallsBackAndLacksOptionalEntries) {
  auto lib = Library::Load(FLYT_FAKE_DRIVER_OLD);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ((*lib)->BoundSymbol("EventElapsedTime"), "cuEventElapsedTime");
  EXPECT_EQ((*lib)->BoundSymbol("CtxCreateV4"), "");
  EXPECT_EQ((*lib)->BoundSymbol("CtxCreateV3"), "");
  EXPECT_EQ((*lib)->BoundSymbol("CtxCreate"), "cuCtxCreate_v2");
  EXPECT_EQ((*lib)->BoundSymbol("FuncGetParamInfo"), "");
  EXPECT_EQ((*lib)->api().CtxCreateV4, nullptr);
  EXPECT_EQ((*lib)->api().FuncGetParamInfo, nullptr);
  EXPECT_NE((*lib)->api().EventElapsedTime, nullptr);
}

TEST(CudaDriverLoaderTest, ABrokenDriverIsRefusedNamingEveryMissingEntry) {
  auto lib = Library::Load(FLYT_FAKE_DRIVER_BROKEN);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(lib.status().message(),
            std::string(FLYT_FAKE_DRIVER_BROKEN) +
                " is not a usable CUDA driver library: it does not export cuMemAlloc_v2, "
                "cuCtxCreate_v4 or cuCtxCreate_v2");
}

TEST(CudaDriverLoaderTest, StubLibraryExportsEveryEntryPointByItsNewestName) {
  const fs::path toolkit = ToolkitDir();
  const fs::path stub = toolkit / "lib64" / "stubs" / "libcuda.so";
  if (toolkit.empty() || !fs::exists(stub)) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so";
  auto lib = Library::Load(stub.string());
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  ASSERT_FALSE((*lib)->bindings().empty());
  for (const Binding& b : (*lib)->bindings()) {
    SCOPED_TRACE(b.member);
    ASSERT_FALSE(b.candidates.empty());
    // The toolkit flyt builds with is CUDA 13: its driver API has every entry flyt knows, and
    // the versioned name flyt prefers is the one cuda.h maps the plain name to.
    EXPECT_EQ(b.bound, b.candidates.front());
  }
  EXPECT_EQ((*lib)->BoundSymbol("MemAlloc"), "cuMemAlloc_v2");
  EXPECT_EQ((*lib)->BoundSymbol("MemcpyHtoDAsync"), "cuMemcpyHtoDAsync_v2");
  EXPECT_EQ((*lib)->BoundSymbol("CtxCreateV4"), "cuCtxCreate_v4");
  EXPECT_EQ((*lib)->BoundSymbol("CtxCreateV3"), "cuCtxCreate_v3");
  EXPECT_EQ((*lib)->BoundSymbol("ModuleGetGlobal"), "cuModuleGetGlobal_v2");
  EXPECT_EQ((*lib)->BoundSymbol("EventElapsedTime"), "cuEventElapsedTime_v2");
  EXPECT_EQ((*lib)->BoundSymbol("FuncGetParamInfo"), "cuFuncGetParamInfo");
}

TEST(CudaDriverLoaderTest, VersionedNamesAreTheOnesCudaHeaderSelects) {
  // cuda.h #defines the plain names to the ABI flyt must bind (cuMemAlloc → cuMemAlloc_v2);
  // every such mapping for an entry flyt binds must name flyt's first candidate.
  const fs::path toolkit = ToolkitDir();
  const fs::path stub = toolkit / "lib64" / "stubs" / "libcuda.so";
  if (toolkit.empty() || !fs::exists(stub)) GTEST_SKIP() << "no CUDA toolkit";
  auto lib = Library::Load(stub.string());
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  const std::string header = ReadText(toolkit / "include" / "cuda.h");
  std::map<std::string, std::string> selected;  // cuMemAlloc → cuMemAlloc_v2
  const std::regex define(
      R"(#define\s+(cu[A-Za-z0-9]+)\s+(?:__CUDA_API_PT[DS]{1,2}\()?(cu[A-Za-z0-9_]+)\)?)");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), define);
       it != std::sregex_iterator(); ++it) {
    selected.emplace((*it)[1].str(), (*it)[2].str());
  }
  ASSERT_GT(selected.size(), 20u);
  int checked = 0;
  for (const Binding& b : (*lib)->bindings()) {
    const std::string& first = b.candidates.front();
    const std::string plain = first.substr(0, first.find("_v"));
    auto it = selected.find(plain);
    if (it == selected.end() || b.member == "CtxCreate" || b.member == "CtxCreateV3") continue;
    SCOPED_TRACE(b.member);
    EXPECT_EQ(first, it->second);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace flyt::cuda_driver
