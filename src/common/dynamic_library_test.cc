// DynamicLibrary and SymbolBinder against the C math library, which every machine has: binding by
// the first exported name, fallbacks, optional entries, the refusal that names what is missing.
#include "common/dynamic_library.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flyt {
namespace {

constexpr const char* kLibm = "libm.so.6";

TEST(DynamicLibraryTest, MissingFileIsUnavailableNamingThePath) {
  auto lib = DynamicLibrary::Open("/nonexistent/flyt-test/libnothing.so");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("/nonexistent/flyt-test/libnothing.so"), std::string::npos)
      << lib.status().message();
}

TEST(DynamicLibraryTest, LooksUpExportedSymbolsOnly) {
  auto lib = DynamicLibrary::Open(kLibm);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_TRUE(lib->loaded());
  EXPECT_EQ(lib->requested_path(), kLibm);
  EXPECT_NE(lib->Symbol("cos"), nullptr);
  EXPECT_EQ(lib->Symbol("flyt_no_such_symbol"), nullptr);
  DynamicLibrary moved = std::move(lib).value();
  EXPECT_TRUE(moved.loaded());
  EXPECT_NE(moved.Symbol("cos"), nullptr);
}

TEST(SymbolBinderTest, BindsTheFirstExportedNameAndFallsBack) {
  auto lib = DynamicLibrary::Open(kLibm);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  SymbolBinder binder(*lib, "math library");
  double (*cosine)(double) = nullptr;
  double (*sine)(double) = nullptr;
  binder.Bind(cosine, "Cos", SymbolRequirement::kRequired, {"cos", "flyt_cos_v0"});
  // Newest name absent: the older one is bound.
  binder.Bind(sine, "Sin", SymbolRequirement::kRequired, {"flyt_sin_v2", "sin"});
  void* absent = binder.Bind("Tan", SymbolRequirement::kOptional, {"flyt_tan_v2", "flyt_tan"});
  EXPECT_EQ(absent, nullptr);
  auto bindings = std::move(binder).Finish();
  ASSERT_TRUE(bindings.ok()) << bindings.status().ToString();
  ASSERT_NE(cosine, nullptr);
  ASSERT_NE(sine, nullptr);
  EXPECT_DOUBLE_EQ(cosine(0.0), 1.0);
  EXPECT_DOUBLE_EQ(sine(0.0), 0.0);

  ASSERT_EQ(bindings->size(), 3u);
  const SymbolBinding& first = (*bindings)[0];
  EXPECT_EQ(first.member, "Cos");
  EXPECT_TRUE(first.required());
  EXPECT_EQ(first.candidates, (std::vector<std::string>{"cos", "flyt_cos_v0"}));
  EXPECT_EQ(first.bound, "cos");
  EXPECT_EQ(BoundSymbol(*bindings, "Sin"), "sin");
  EXPECT_EQ(BoundSymbol(*bindings, "Tan"), "");  // optional and absent
  EXPECT_FALSE((*bindings)[2].required());
  EXPECT_EQ(BoundSymbol(*bindings, "NoSuchMember"), "");
}

TEST(SymbolBinderTest, MissingRequiredEntriesAreNamedByTheirNewestName) {
  auto lib = DynamicLibrary::Open(kLibm);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  SymbolBinder binder(*lib, "FLYT test library");
  binder.Bind("Init", SymbolRequirement::kRequired, {"flytInit_v2", "flytInit"});
  binder.Bind("Cos", SymbolRequirement::kRequired, {"cos"});
  binder.Bind("Optional", SymbolRequirement::kOptional, {"flytOptional"});
  binder.Bind("Alloc", SymbolRequirement::kRequired, {"flytAlloc_v2"});
  auto bindings = std::move(binder).Finish();
  ASSERT_FALSE(bindings.ok());
  EXPECT_EQ(bindings.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(bindings.status().message(),
            "libm.so.6 is not a usable FLYT test library: it does not export flytInit_v2, "
            "flytAlloc_v2");
}

TEST(SymbolBinderTest, RequireAnyOfIsMetByOneAndNamesAllWhenNoneIsBound) {
  auto lib = DynamicLibrary::Open(kLibm);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  {
    SymbolBinder binder(*lib, "math library");
    binder.Bind("CreateV4", SymbolRequirement::kOptional, {"flytCreate_v4"});
    binder.Bind("Create", SymbolRequirement::kOptional, {"cos"});
    binder.RequireAnyOf({"CreateV4", "Create"});
    EXPECT_TRUE(std::move(binder).Finish().ok());
  }
  SymbolBinder binder(*lib, "math library");
  binder.Bind("CreateV4", SymbolRequirement::kOptional, {"flytCreate_v4"});
  binder.Bind("Create", SymbolRequirement::kOptional, {"flytCreate_v2", "flytCreate"});
  binder.RequireAnyOf({"CreateV4", "Create"});
  auto bindings = std::move(binder).Finish();
  ASSERT_FALSE(bindings.ok());
  EXPECT_EQ(bindings.status().message(),
            "libm.so.6 is not a usable math library: it does not export flytCreate_v4 or "
            "flytCreate_v2");
}

}  // namespace
}  // namespace flyt
