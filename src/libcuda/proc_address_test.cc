// cuGetProcAddress's answers (proc_address.h): the ABI changes the CUDA 12 and 13 runtimes meet,
// per-thread forms, refusals, and every entry against NVIDIA's own export list.
#include "libcuda/proc_address.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace flyt::libcuda {
namespace {

std::string Symbol(std::string_view name, int version, uint64_t flags = kProcLegacyStream) {
  ProcLookup r = ResolveProc(name, version, flags);
  if (r.status != ProcStatus::kFound) return "status " + std::to_string(static_cast<int>(r.status));
  return std::string(r.entry->symbol);
}

TEST(ProcAddressTest, EachRuntimeGetsTheAbiItWasBuiltFor) {
  // CUDA 13 gave cuCtxGetDevice and cuCtxSynchronize a context argument.
  EXPECT_EQ(Symbol("cuCtxGetDevice", 12080), "cuCtxGetDevice");
  EXPECT_EQ(Symbol("cuCtxGetDevice", 13000), "cuCtxGetDevice_v2");
  EXPECT_EQ(Symbol("cuCtxSynchronize", 12090), "cuCtxSynchronize");
  EXPECT_EQ(Symbol("cuCtxSynchronize", 13000), "cuCtxSynchronize_v2");
  // 12.2 changed prefetch and advise to take a location.
  EXPECT_EQ(Symbol("cuMemPrefetchAsync", 12010), "cuMemPrefetchAsync");
  EXPECT_EQ(Symbol("cuMemPrefetchAsync", 12020), "cuMemPrefetchAsync_v2");
  EXPECT_EQ(Symbol("cuMemAdvise", 12000), "cuMemAdvise");
  EXPECT_EQ(Symbol("cuMemAdvise", 12020), "cuMemAdvise_v2");
  // 3.2's 64-bit device pointers, and the entry point itself.
  EXPECT_EQ(Symbol("cuMemAlloc", 3010), "cuMemAlloc");
  EXPECT_EQ(Symbol("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(Symbol("cuGetProcAddress", 11030), "cuGetProcAddress");
  EXPECT_EQ(Symbol("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
  // A version between two ABIs gets the older one.
  EXPECT_EQ(Symbol("cuStreamBeginCapture", 10000), "cuStreamBeginCapture");
  EXPECT_EQ(Symbol("cuStreamBeginCapture", 10005), "cuStreamBeginCapture");
  EXPECT_EQ(Symbol("cuStreamBeginCapture", 10010), "cuStreamBeginCapture_v2");
}

TEST(ProcAddressTest, PerThreadFormsOnlyWhenAskedAndOnlyForTheCurrentAbi) {
  const uint64_t pt = kProcPerThreadDefaultStream;
  EXPECT_EQ(Symbol("cuMemcpyHtoD", 13000), "cuMemcpyHtoD_v2");
  EXPECT_EQ(Symbol("cuMemcpyHtoD", 13000, 0), "cuMemcpyHtoD_v2");  // DEFAULT is legacy here
  EXPECT_EQ(Symbol("cuMemcpyHtoD", 13000, pt), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(Symbol("cuLaunchKernel", 13000, pt), "cuLaunchKernel_ptsz");
  EXPECT_EQ(Symbol("cuMemPrefetchAsync", 12000, pt), "cuMemPrefetchAsync_ptsz");
  EXPECT_EQ(Symbol("cuMemPrefetchAsync", 13000, pt), "cuMemPrefetchAsync_v2_ptsz");
  // Per-thread forms came with CUDA 7.0: an older caller gets the legacy function.
  EXPECT_EQ(Symbol("cuMemcpyHtoD", 6050, pt), "cuMemcpyHtoD_v2");
  // A function with no per-thread form is returned as it is.
  EXPECT_EQ(Symbol("cuMemAlloc", 13000, pt), "cuMemAlloc_v2");
}

TEST(ProcAddressTest, UnknownNamesAndTooOldVersionsAreRefusedWithTheirStatus) {
  EXPECT_EQ(ResolveProc("cuNoSuchFunction", 13000, 0).status, ProcStatus::kSymbolNotFound);
  EXPECT_EQ(ResolveProc("", 13000, 0).status, ProcStatus::kSymbolNotFound);
  // The exported name with its suffix is not a base name.
  EXPECT_EQ(ResolveProc("cuMemAlloc_v2", 13000, 0).status, ProcStatus::kSymbolNotFound);
  // Graphics interop: no display on a machine without a GPU.
  EXPECT_EQ(ResolveProc("cuGraphicsGLRegisterBuffer", 13000, 0).status,
            ProcStatus::kSymbolNotFound);
  EXPECT_EQ(ResolveProc("cuMemAlloc", 1000, 0).status, ProcStatus::kVersionNotSufficient);
  // Libraries came with CUDA 12.0: a runtime built for 11.x cannot have asked for them.
  EXPECT_EQ(ResolveProc("cuLibraryLoadData", 11080, 0).status, ProcStatus::kVersionNotSufficient);
  EXPECT_EQ(Symbol("cuLibraryLoadData", 12000), "cuLibraryLoadData");
}

// Every name at every version a caller could ask for gets the newest ABI not newer than the
// caller, of the kind it asked for.
TEST(ProcAddressTest, EveryNameAtEveryVersionGetsTheNewestAbiNotNewerThanTheCaller) {
  std::map<std::string_view, std::set<int>> versions;
  for (const ProcEntry& e : ProcTable()) versions[e.name].insert(e.version);
  ASSERT_GT(versions.size(), 400u);
  for (const auto& [name, set] : versions) {
    std::set<int> asked = set;
    for (int v : set) asked.insert({v - 10, v + 5});
    asked.insert({11030, 12000, 12080, 12090, 13000, 13010, 99990});
    for (int v : asked) {
      for (uint64_t flags : {uint64_t{0}, kProcPerThreadDefaultStream}) {
        ProcLookup r = ResolveProc(name, v, flags);
        if (v < *set.begin()) {
          EXPECT_EQ(r.status, ProcStatus::kVersionNotSufficient) << name << " @" << v;
          continue;
        }
        if (r.status != ProcStatus::kFound) {
          // Only a name whose every plain ABI is newer (none here has per-thread forms alone).
          ADD_FAILURE() << name << " @" << v << ": status " << static_cast<int>(r.status);
          continue;
        }
        EXPECT_EQ(r.entry->name, name);
        EXPECT_LE(r.entry->version, v) << name;
        if (flags == 0) {
          EXPECT_TRUE(r.entry->variant.empty()) << name << " @" << v;
        }
        for (const ProcEntry& e : ProcTable()) {
          if (e.name == name && e.variant.empty() && e.version <= v) {
            EXPECT_LE(e.version, r.entry->version) << name << " @" << v << ": an ABI newer than "
                                                   << r.entry->symbol << " is " << e.symbol;
          }
        }
      }
    }
  }
}

// The table is NVIDIA's export list: every symbol it names is a function of the toolkit's stub
// libcuda.so (the rule "k-th ABI is name_v<k>" holds for each). The converse, that the stub
// exports nothing the table lacks, is libcuda.proc_table_is_the_toolkits (check_proc_table.sh).
TEST(ProcAddressTest, EverySymbolIsAFunctionOfNvidiasLibcuda) {
  const char* stub = FLYT_CUDA_STUB_LIBCUDA;
  if (*stub == 0) GTEST_SKIP() << "the CUDA toolkit's stub libcuda.so was not found";
  void* lib = dlopen(stub, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) GTEST_SKIP() << "no stub libcuda.so at " << stub << ": " << dlerror();
  size_t checked = 0;
  for (const ProcEntry& e : ProcTable()) {
    const std::string symbol(e.symbol);
    EXPECT_NE(dlsym(lib, symbol.c_str()), nullptr) << symbol << " (" << e.name << " @"
                                                   << e.version << ")";
    ++checked;
  }
  EXPECT_GT(checked, 600u);
  dlclose(lib);
}

}  // namespace
}  // namespace flyt::libcuda
