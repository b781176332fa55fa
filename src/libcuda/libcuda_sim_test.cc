// flyt's libcuda.so.1 against an in-process server on the simulated device, loaded as NVIDIA's
// runtime loads a driver (dlopen of the built library; FLYT_SERVER names the server), every entry
// point found through cuGetProcAddress as the runtimes find them. The simulated device's memory
// is byte-exact, so copies and memsets are checked to the byte; kernels are counted, not run.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cuda/image.h"
#include "libcuda/proc_address.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace flyt::libcuda {
namespace {

std::vector<char> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string DataPath(const std::string& name) {
  return std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/" + name;
}

// One server and one loaded library per test process (the library keeps its connection for the
// process's life, as a program's driver does).
class Environment {
 public:
  static Environment& Get() {
    static Environment* env = new Environment();
    return *env;
  }
  bool ready() const { return started_ && lib_ != nullptr; }
  void* lib() const { return lib_; }
  remote::Server& server() { return *server_; }

  // The exported function `symbol` (cuMemAlloc_v2), found as a CUDA 13.0 program finds it:
  // cuGetProcAddress of its name (cuMemAlloc) at 13000. Null (and a test failure) when that is
  // not `symbol`.
  template <typename F>
  F* Proc(const std::string& symbol, uint64_t flags = kProcLegacyStream) {
    using GetProc = CUresult(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto get = reinterpret_cast<GetProc*>(::dlsym(lib_, "cuGetProcAddress_v2"));
    std::string name = symbol;
    if (size_t v = name.rfind("_v"); v != std::string::npos && v + 3 == name.size()) {
      name.resize(v);
    }
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status;
    if (get == nullptr || get(name.c_str(), &fn, 13000, flags, &status) != CUDA_SUCCESS) {
      ADD_FAILURE() << "cuGetProcAddress(" << name << ") failed";
      return nullptr;
    }
    if (fn == nullptr || fn != ::dlsym(lib_, symbol.c_str())) {
      ADD_FAILURE() << "cuGetProcAddress(" << name << ", 13000) is not " << symbol;
      return nullptr;
    }
    return reinterpret_cast<F*>(fn);
  }
  // Kernels the server has launched for every client so far.
  uint64_t Launches() const {
    uint64_t n = 0;
    for (const remote::ClientStats& c : server_->Stats().clients) n += c.launches;
    return n;
  }

 private:
  Environment()
      : dir_(std::filesystem::temp_directory_path() /
             ("flyt-libcuda-sim-test-" + std::to_string(::getpid()))) {
    // spdlog's registry first: the server's threads log while the atexit handler below stops
    // them, so the registry must be destroyed after it runs (static objects and atexit handlers
    // end in the reverse order of their making).
    (void)spdlog::default_logger_raw();
    std::filesystem::create_directories(dir_);
    remote::ServerOptions options;
    options.listen.push_back(*remote::ParseEndpoint("unix:" + (dir_ / "s.sock").string()));
    server_ = std::make_unique<remote::Server>(*backend_, options);
    started_ = server_->Start().ok();
    ::setenv("FLYT_SERVER", server_->endpoints()[0].ToString().c_str(), 1);
    ::setenv("FLYT_SHM", "0", 1);
    lib_ = ::dlopen(FLYT_LIBCUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    std::atexit([] {
      Environment& env = Get();
      env.server_->Stop();
      std::filesystem::remove_all(env.dir_);
    });
  }

  std::filesystem::path dir_;
  std::unique_ptr<remote::Backend> backend_ = remote::MakeSimBackend();
  std::unique_ptr<remote::Server> server_;
  bool started_ = false;
  void* lib_ = nullptr;
};

#define PROC(symbol) auto symbol = Environment::Get().Proc<decltype(::symbol)>(#symbol)

class LibcudaSim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Environment::Get().ready()) << ::dlerror();
    PROC(cuInit);
    PROC(cuDevicePrimaryCtxRetain);
    PROC(cuCtxSetCurrent);
    ASSERT_NE(cuInit, nullptr);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
  }
  CUcontext context_ = nullptr;
};

TEST(LibcudaSimLoad, TheLibraryIsNamedAsNvidiasDriverAndExportsTheWholeDriverApi) {
  ASSERT_TRUE(Environment::Get().ready()) << ::dlerror();
  void* lib = Environment::Get().lib();
  size_t missing = 0;
  for (const ProcEntry& e : ProcTable()) {
    if (::dlsym(lib, std::string(e.symbol).c_str()) == nullptr) ++missing;
  }
  EXPECT_EQ(missing, 0u) << "driver entry points the library does not export";
  EXPECT_NE(::dlsym(lib, "flyt_libcuda_version"), nullptr);
}

TEST(LibcudaSimLoad, GetProcAddressAnswersEveryFunctionOfTheToolkitAtEveryVersionItHad) {
  ASSERT_TRUE(Environment::Get().ready());
  using GetProc = CUresult(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get = reinterpret_cast<GetProc*>(::dlsym(Environment::Get().lib(), "cuGetProcAddress_v2"));
  ASSERT_NE(get, nullptr);
  for (const ProcEntry& e : ProcTable()) {
    const std::string name(e.name);
    const uint64_t flags = e.variant.empty() ? kProcLegacyStream : kProcPerThreadDefaultStream;
    // At the version its ABI came with, each entry's own function (or, for a per-thread form
    // asked with the per-thread flag, that form; for a name with two ABIs in one release, the
    // newer), as ResolveProc says and the library's export of that symbol is.
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    ASSERT_EQ(get(name.c_str(), &fn, e.version, flags, &status), CUDA_SUCCESS) << name;
    ASSERT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name << " at " << e.version;
    ProcLookup expected = ResolveProc(name, e.version, flags);
    ASSERT_NE(expected.entry, nullptr) << name;
    EXPECT_EQ(fn, ::dlsym(Environment::Get().lib(), std::string(expected.entry->symbol).c_str()))
        << name << " at " << e.version << " flags " << flags;
  }
  // A name that is no driver function, and one asked for at a version before it existed.
  void* fn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(get("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(get("cuLaunchKernelEx", &fn, 11000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // CUDA 13 changed cuCtxSynchronize: a 12.x program gets the old one, a 13.0 one the new.
  void* old_sync = nullptr;
  void* new_sync = nullptr;
  EXPECT_EQ(get("cuCtxSynchronize", &old_sync, 12080, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(get("cuCtxSynchronize", &new_sync, 13000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(old_sync, ::dlsym(Environment::Get().lib(), "cuCtxSynchronize"));
  EXPECT_EQ(new_sync, ::dlsym(Environment::Get().lib(), "cuCtxSynchronize_v2"));
  // The first form says "not found" with an error.
  using GetProcV1 = CUresult(const char*, void**, int, cuuint64_t);
  auto get_v1 = reinterpret_cast<GetProcV1*>(::dlsym(Environment::Get().lib(), "cuGetProcAddress"));
  ASSERT_NE(get_v1, nullptr);
  EXPECT_EQ(get_v1("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
}

TEST(LibcudaSimLoad, CallsBeforeCuInitAreRefusedAndUnknownExportTablesAreRefused) {
  ASSERT_TRUE(Environment::Get().ready());
  PROC(cuGetExportTable);
  PROC(cuDriverGetVersion);
  PROC(cuDeviceGetCount);
  int count = -1;
  // Each test runs in a process of its own (ctest): here cuInit has not been called.
  if (::testing::UnitTest::GetInstance()->total_test_count() == 1 ||
      ::testing::FLAGS_gtest_filter != "*") {
    EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  }
  int version = 0;
  ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_GE(version, 12000);
  const void* table = reinterpret_cast<const void*>(1);
  CUuuid id{};
  std::memset(id.bytes, 0x5a, sizeof id.bytes);
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(table, nullptr);
}

TEST_F(LibcudaSim, DeviceQueriesDescribeTheServersDevice) {
  PROC(cuDeviceGetCount);
  PROC(cuDeviceGetName);
  PROC(cuDeviceGetAttribute);
  PROC(cuDeviceTotalMem_v2);
  PROC(cuDeviceGet);
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  CUdevice device = -1;
  EXPECT_EQ(cuDeviceGet(&device, 0), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cuDeviceGet(&device, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[256] = {};
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_NE(std::string(name).find("H100"), std::string::npos) << name;
  int sms = 0, major = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(sms, 132);
  ASSERT_EQ(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(major, 9);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 85'520'809'984u);
}

TEST_F(LibcudaSim, CopiesAndMemsetsMoveTheBytesExactly) {
  PROC(cuMemAlloc_v2);
  PROC(cuMemFree_v2);
  PROC(cuMemcpyHtoD_v2);
  PROC(cuMemcpyDtoH_v2);
  PROC(cuMemcpyDtoD_v2);
  PROC(cuMemsetD32_v2);
  PROC(cuMemsetD16_v2);
  PROC(cuMemcpyHtoDAsync_v2);
  PROC(cuMemcpyDtoHAsync_v2);
  PROC(cuStreamCreate);
  PROC(cuStreamSynchronize);
  PROC(cuStreamDestroy_v2);
  PROC(cuMemGetAddressRange_v2);
  constexpr size_t kCount = 1 << 16;
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, kCount * 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, kCount * 4), CUDA_SUCCESS);
  std::vector<uint32_t> host(kCount), back(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_EQ(cuMemcpyHtoD_v2(a, host.data(), kCount * 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(b, a, kCount * 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), b, kCount * 4), CUDA_SUCCESS);
  EXPECT_EQ(back, host);

  // A 32-bit pattern whose bytes differ, then a 16-bit one over part of it.
  ASSERT_EQ(cuMemsetD32_v2(a, 0xdeadbeef, kCount), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD16_v2(a + 8, 0x1234, 2), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), a, kCount * 4), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 0xdeadbeefu);
  EXPECT_EQ(back[2], 0x12341234u);
  EXPECT_EQ(back[3], 0xdeadbeefu);
  EXPECT_EQ(back[kCount - 1], 0xdeadbeefu);

  // Async copies on a stream land by its synchronisation.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(b, host.data(), kCount * 4, stream), CUDA_SUCCESS);
  std::vector<uint32_t> async_back(kCount);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(async_back.data(), b, kCount * 4, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(async_back, host);
  ASSERT_EQ(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);

  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, a + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, kCount * 4);
  // A range past the allocation never leaves the process.
  EXPECT_EQ(cuMemcpyHtoD_v2(a + 8, host.data(), kCount * 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
}

TEST_F(LibcudaSim, AFatbinsKernelsLaunchWithKernelParamsOrExtraAndBadLaunchesFail) {
  PROC(cuModuleLoadData);
  PROC(cuModuleGetFunction);
  PROC(cuModuleUnload);
  PROC(cuLaunchKernel);
  PROC(cuCtxSynchronize_v2);
  PROC(cuFuncGetAttribute);
  std::vector<char> image = ReadFileBytes(DataPath("many_params.fatbin"));
  ASSERT_FALSE(image.empty());
  auto kernels = cuda::KernelsOfImage(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(image.data()), image.size()));
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  const cuda::KernelInfo* many = nullptr;
  for (const cuda::KernelInfo& k : *kernels) {
    if (k.name.find("ManyParams") != std::string::npos && !k.from_ptx) many = &k;
  }
  ASSERT_NE(many, nullptr);

  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
  CUfunction function = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&function, module, many->name.c_str()), CUDA_SUCCESS);
  CUfunction none = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&none, module, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  int registers = -1;
  EXPECT_EQ(cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, function), CUDA_SUCCESS);
  EXPECT_GE(registers, 0);

  // kernelParams: one pointer per parameter (their values do not matter to the simulated device).
  std::vector<std::vector<std::byte>> values;
  std::vector<void*> args;
  for (const cuda::KernelParam& p : many->params) values.emplace_back(p.size_bytes);
  for (auto& v : values) args.push_back(v.data());
  const uint64_t launched = Environment::Get().Launches();
  EXPECT_EQ(cuLaunchKernel(function, 2, 1, 1, 64, 1, 1, 0, nullptr, args.data(), nullptr),
            CUDA_SUCCESS);
  // `extra`: the buffer as given.
  std::vector<std::byte> buffer(many->param_bytes);
  size_t buffer_size = buffer.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &buffer_size, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Environment::Get().Launches(), launched + 2);

  // A block larger than the device allows fails at the next synchronisation (posted launch).
  EXPECT_EQ(cuLaunchKernel(function, 1, 1, 1, 4096, 1, 1, 0, nullptr, args.data(), nullptr),
            CUDA_SUCCESS);
  EXPECT_NE(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(module), CUDA_ERROR_INVALID_HANDLE);
  // A handle the library never gave out is refused, never followed.
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(args.data()), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(LibcudaSim, ACubinAndPtxTextLoadAsTheyAre) {
  PROC(cuModuleLoadData);
  PROC(cuModuleGetFunction);
  std::vector<char> bytes = ReadFileBytes(DataPath("many_params.fatbin"));
  auto fatbin = cuda::ParseFatbin(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  ASSERT_TRUE(fatbin.ok()) << fatbin.status().ToString();
  auto kernels = cuda::KernelsOf(*fatbin);
  ASSERT_TRUE(kernels.ok());
  std::string name;
  for (const cuda::KernelInfo& k : *kernels) {
    if (k.name.find("ManyParams") != std::string::npos) name = k.name;
  }
  int loaded = 0;
  for (const cuda::FatbinEntry& e : fatbin->entries) {
    std::vector<std::byte> image = e.payload;
    if (e.kind == cuda::FatbinEntry::Kind::kPtx) image.push_back(std::byte{0});  // NUL-ended text
    CUmodule module = nullptr;
    ASSERT_EQ(cuModuleLoadData(&module, image.data()), CUDA_SUCCESS)
        << (e.kind == cuda::FatbinEntry::Kind::kPtx ? "PTX" : "cubin") << " sm_" << e.sm_arch;
    CUfunction function = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&function, module, name.c_str()), CUDA_SUCCESS);
    ++loaded;
  }
  EXPECT_GE(loaded, 2);
}

TEST_F(LibcudaSim, TruncatedOrForeignImagesAreRefusedWithoutHarm) {
  PROC(cuModuleLoadData);
  PROC(cuMemAlloc_v2);
  std::vector<char> garbage(4096, 'x');
  garbage.back() = '\0';
  CUmodule module = nullptr;
  EXPECT_EQ(cuModuleLoadData(&module, garbage.data()), CUDA_ERROR_INVALID_IMAGE);
  // A fatbin whose header claims far more than any image.
  std::vector<char> image = ReadFileBytes(DataPath("many_params.fatbin"));
  ASSERT_GE(image.size(), 16u);
  uint64_t huge = uint64_t{1} << 40;
  std::memcpy(image.data() + 8, &huge, 8);
  EXPECT_EQ(cuModuleLoadData(&module, image.data()), CUDA_ERROR_INVALID_IMAGE);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 256), CUDA_SUCCESS);  // the connection is unharmed
}

TEST_F(LibcudaSim, ContextsStackPerThreadAndEventsTime) {
  PROC(cuCtxCreate_v4);
  PROC(cuCtxDestroy_v2);
  PROC(cuCtxPushCurrent_v2);
  PROC(cuCtxPopCurrent_v2);
  PROC(cuCtxGetCurrent);
  PROC(cuCtxGetDevice_v2);
  PROC(cuEventCreate);
  PROC(cuEventRecord);
  PROC(cuEventSynchronize);
  PROC(cuEventElapsedTime_v2);
  PROC(cuEventDestroy_v2);
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&created, nullptr, 0, 0), CUDA_SUCCESS);
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, created);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, context_);
  ASSERT_EQ(cuCtxPushCurrent_v2(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, context_);
  EXPECT_EQ(cuCtxDestroy_v2(created), CUDA_ERROR_INVALID_CONTEXT);
  CUdevice device = -1;
  EXPECT_EQ(cuCtxGetDevice_v2(&device, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);

  CUevent start = nullptr, end = nullptr;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(end, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = -1;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cuEventDestroy_v2(start), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(start), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(end), CUDA_SUCCESS);
}

TEST_F(LibcudaSim, AFunctionFlytDoesNotProvideSaysSo) {
  // cuGraphCreate is exported (a program linked against the driver loads) but not implemented.
  auto create = reinterpret_cast<CUresult (*)(CUgraph*, unsigned)>(
      ::dlsym(Environment::Get().lib(), "cuGraphCreate"));
  ASSERT_NE(create, nullptr);
  CUgraph graph = nullptr;
  EXPECT_EQ(create(&graph, 0), CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
}  // namespace flyt::libcuda

namespace flyt::libcuda {
namespace {

// NVIDIA's libraries under a program that uses flyt's runtime: both libraries in one process use
// one connection, so memory and streams made through the runtime are valid to the driver API.
TEST_F(LibcudaSim, TheRuntimeAndTheDriverShareOneConnectionAndItsObjects) {
  void* cudart = ::dlopen(FLYT_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(cudart, nullptr) << ::dlerror();
  auto cuda_malloc = reinterpret_cast<int (*)(void**, size_t)>(::dlsym(cudart, "cudaMalloc"));
  auto cuda_stream = reinterpret_cast<int (*)(void**)>(::dlsym(cudart, "cudaStreamCreate"));
  auto cuda_memcpy =
      reinterpret_cast<int (*)(void*, const void*, size_t, int)>(::dlsym(cudart, "cudaMemcpy"));
  ASSERT_TRUE(cuda_malloc && cuda_stream && cuda_memcpy);
  PROC(cuMemcpyHtoDAsync_v2);
  PROC(cuStreamSynchronize);
  const size_t clients_before = Environment::Get().server().Stats().clients.size();
  void* device = nullptr;
  ASSERT_EQ(cuda_malloc(&device, 4096), 0);
  void* stream = nullptr;
  ASSERT_EQ(cuda_stream(&stream), 0);
  std::vector<uint8_t> host(4096), back(4096);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7);
  // The runtime's pointer and stream, to the driver API.
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(reinterpret_cast<CUdeviceptr>(device), host.data(), host.size(),
                                 static_cast<CUstream>(stream)),
            CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(static_cast<CUstream>(stream)), CUDA_SUCCESS);
  ASSERT_EQ(cuda_memcpy(back.data(), device, back.size(), 2 /*cudaMemcpyDeviceToHost*/), 0);
  EXPECT_EQ(back, host);
  EXPECT_EQ(Environment::Get().server().Stats().clients.size(), clients_before)
      << "the runtime opened a second connection";
}

}  // namespace
}  // namespace flyt::libcuda

namespace flyt::libcuda {
namespace {

CUuuid Uuid(std::initializer_list<unsigned> bytes) {
  CUuuid id{};
  int i = 0;
  for (unsigned b : bytes) id.bytes[i++] = static_cast<char>(b);
  return id;
}

// The private tables NVIDIA's static runtime asks for (export_tables.h): their sizes, the
// integrity check's fixed answers, context-local storage, the primary context's handle.
TEST_F(LibcudaSim, TheExportTablesOfNvidiasRuntimeAreThere) {
  PROC(cuGetExportTable);
  PROC(cuDevicePrimaryCtxRetain);
  const void* table = nullptr;
  const CUuuid cudart = Uuid({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9,
                              0x39, 0x12, 0xfd, 0x9d, 0xf9});
  ASSERT_EQ(cuGetExportTable(&table, &cudart), CUDA_SUCCESS);
  auto slots = static_cast<void* const*>(table);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slots[0]), 13 * sizeof(void*));
  CUcontext from_table = nullptr, retained = nullptr;
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(slots[2])(&from_table, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&retained, 0), CUDA_SUCCESS);
  EXPECT_EQ(from_table, retained);

  const CUuuid integrity = Uuid({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba,
                                 0x12, 0x3c, 0x66, 0xe1, 0xf2});
  ASSERT_EQ(cuGetExportTable(&table, &integrity), CUDA_SUCCESS);
  slots = static_cast<void* const*>(table);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slots[0]), 3 * sizeof(void*));
  auto check = reinterpret_cast<CUresult (*)(uint32_t, uint64_t, uint64_t*)>(slots[1]);
  uint64_t answer[2] = {};
  ASSERT_EQ(check(13000, 1764000000, answer), CUDA_SUCCESS);
  EXPECT_EQ(answer[0], 0x3341181C03CB675Cull);
  uint64_t first[2] = {}, again[2] = {};
  ASSERT_EQ(check(13002, 1764000000, first), CUDA_SUCCESS);
  ASSERT_EQ(check(13002, 1764000000, again), CUDA_SUCCESS);
  EXPECT_EQ(first[0], again[0]);  // the same inputs, the same answer
  ASSERT_EQ(check(13002, 1764000001, again), CUDA_SUCCESS);
  EXPECT_NE(first[0], again[0]);  // the time is hashed

  const CUuuid storage = Uuid({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68,
                               0xf3, 0x55, 0xd8, 0x95, 0x93});
  ASSERT_EQ(cuGetExportTable(&table, &storage), CUDA_SUCCESS);
  slots = static_cast<void* const*>(table);
  using Destroy = void (*)(CUcontext, void*, void*);
  auto reg = reinterpret_cast<CUresult (*)(CUcontext, void*, void*, Destroy)>(slots[0]);
  auto unreg = reinterpret_cast<CUresult (*)(CUcontext, void*)>(slots[1]);
  auto get = reinterpret_cast<CUresult (*)(void**, CUcontext, void*)>(slots[2]);
  int key = 0, value = 0;
  void* got = nullptr;
  EXPECT_NE(get(&got, nullptr, &key), CUDA_SUCCESS);  // nothing registered yet
  ASSERT_EQ(reg(nullptr, &key, &value, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(get(&got, context_, &key), CUDA_SUCCESS);  // the current context is the primary
  EXPECT_EQ(got, &value);
  ASSERT_EQ(unreg(nullptr, &key), CUDA_SUCCESS);
  EXPECT_NE(get(&got, nullptr, &key), CUDA_SUCCESS);
}

}  // namespace
}  // namespace flyt::libcuda

namespace flyt::libcuda {
namespace {

// What cuBLAS asks before its first call: limits (kept in the process) and occupancy figures.
TEST_F(LibcudaSim, LimitsAndOccupancyFiguresLibrariesAskFor) {
  PROC(cuCtxGetLimit);
  PROC(cuCtxSetLimit);
  PROC(cuModuleLoadData);
  PROC(cuModuleGetFunction);
  PROC(cuOccupancyAvailableDynamicSMemPerBlock);
  PROC(cuOccupancyMaxActiveClusters);
  size_t value = 1;
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_PERSISTING_L2_CACHE_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 0u);
  ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 4096u);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetLimit(&value, static_cast<CUlimit>(77)), CUDA_ERROR_UNSUPPORTED_LIMIT);

  std::vector<char> image = ReadFileBytes(DataPath("many_params.fatbin"));
  auto kernels = cuda::KernelsOfImage(std::span<const std::byte>(
      reinterpret_cast<const std::byte*>(image.data()), image.size()));
  ASSERT_TRUE(kernels.ok());
  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
  CUfunction function = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&function, module, kernels->front().name.c_str()), CUDA_SUCCESS);
  size_t one = 0, four = 0;
  ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&one, function, 1, 128), CUDA_SUCCESS);
  ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&four, function, 4, 128), CUDA_SUCCESS);
  EXPECT_GT(one, 0u);
  EXPECT_LT(four, one);  // four blocks on an SM share its memory
  CUlaunchConfig config{};
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2;
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
  EXPECT_GT(clusters, 0);
}

}  // namespace
}  // namespace flyt::libcuda
