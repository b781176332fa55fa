#include "trace/probes.h"

#include <gtest/gtest.h>

#include <set>

namespace flyt::trace {
namespace {

TEST(ProbeTable, NamesAndFuncsAreUniqueAndBelowTheCount) {
  std::set<std::string_view> names;
  std::set<uint16_t> funcs;
  for (const ProbeSpec& spec : ProbeTable()) {
    EXPECT_TRUE(names.insert(spec.symbol).second) << spec.symbol;
    EXPECT_TRUE(funcs.insert(spec.func).second) << spec.symbol;
    EXPECT_GT(spec.func, FLYT_FN_NONE);
    EXPECT_LT(spec.func, FLYT_FN_COUNT);
    EXPECT_EQ(FuncName(spec.func), spec.symbol);
  }
  EXPECT_EQ(names.size(), ProbeTable().size());
}

TEST(ProbeTable, FamiliesFollowTheNames) {
  for (const ProbeSpec& spec : ProbeTable()) {
    std::string_view s = spec.symbol;
    if (s == "setenv" || s == "putenv") {
      EXPECT_EQ(spec.family, ProbeFamily::kLibc) << s;
    } else if (s.starts_with("cuda") || s.starts_with("__cuda")) {
      EXPECT_EQ(spec.family, ProbeFamily::kRuntime) << s;
    } else {
      EXPECT_TRUE(s.starts_with("cu")) << s;
      EXPECT_EQ(spec.family, ProbeFamily::kDriver) << s;
    }
  }
}

TEST(ProbeTable, WhichFilesCarryWhat) {
  auto malloc_spec = FindProbe("cudaMalloc");
  auto driver_spec = FindProbe("cuMemAlloc_v2");
  auto env_spec = FindProbe("putenv");
  ASSERT_TRUE(malloc_spec && driver_spec && env_spec);
  EXPECT_EQ(malloc_spec->func, FLYT_FN_cudaMalloc);
  EXPECT_TRUE(Carries(LibraryClass::kNvidiaRuntime, *malloc_spec));
  EXPECT_TRUE(Carries(LibraryClass::kFlytRuntime, *malloc_spec));
  EXPECT_TRUE(Carries(LibraryClass::kStaticRuntime, *malloc_spec));
  EXPECT_FALSE(Carries(LibraryClass::kDriver, *malloc_spec));
  EXPECT_TRUE(Carries(LibraryClass::kDriver, *driver_spec));
  EXPECT_FALSE(Carries(LibraryClass::kNvidiaRuntime, *driver_spec));
  EXPECT_TRUE(Carries(LibraryClass::kLibc, *env_spec));
  EXPECT_FALSE(FindProbe("cudaGetDeviceCount"));
  EXPECT_EQ(AttachCookie(FLYT_FN_cudaMalloc, LibraryClass::kDriver),
            static_cast<uint64_t>(FLYT_FN_cudaMalloc) | 3u << 16);
}

TEST(ProbeTable, Names) {
  EXPECT_EQ(KindName(FLYT_EV_LAUNCH), "launch");
  EXPECT_EQ(KindName(999), "kind 999");
  EXPECT_EQ(FuncName(FLYT_FN_cuLaunchKernelEx_ptsz), "cuLaunchKernelEx_ptsz");
  EXPECT_EQ(FuncName(159), "func 159");
  EXPECT_EQ(LibraryClassName(FLYT_LIB_FLYT_RUNTIME), "flyt_runtime");
}

}  // namespace
}  // namespace flyt::trace
