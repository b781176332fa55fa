#include <gtest/gtest.h>

#include "cuda/fatbin.h"
#include "cuda/testing.h"

namespace flyt::cuda {
namespace {

using testing::Layout;
using Pairs = std::vector<std::pair<uint32_t, uint32_t>>;

std::vector<KernelInfo> Parse(std::string_view ptx, uint32_t sm = 80) {
  auto r = ParsePtx(ptx, sm);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<KernelInfo>{};
}

std::string ErrorOf(std::string_view ptx) {
  auto r = ParsePtx(ptx, 80);
  EXPECT_FALSE(r.ok()) << "parsed: " << ptx;
  return r.ok() ? "" : r.status().message();
}

TEST(PtxTest, ScalarsArraysAndAlignment) {
  const auto kernels = Parse(R"(
.version 9.0
.target sm_80
.address_size 64
// comment with .entry in it
.visible .entry _Z1kcsid(
	.param .u8 _Z1kcsid_param_0,
	.param .u16 _Z1kcsid_param_1,
	.param .align 8 .b8 _Z1kcsid_param_2[24],
	.param .s8 _Z1kcsid_param_3,
	.param .f64 _Z1kcsid_param_4,
	.param .align 16 .b8 _Z1kcsid_param_5[3],
	.param .b8 _Z1kcsid_param_6[5],
	.param .v4 .f32 _Z1kcsid_param_7,
	.param .u64 .ptr .global .align 16 _Z1kcsid_param_8,
	.param .u32 _Z1kcsid_param_9
)
.maxntid 128, 2, 1
.minnctapersm 2
{
	.reg .b32 %r<3>;
	{ /* nested } braces */ }
	ret;
}
)");
  ASSERT_EQ(kernels.size(), 1u);
  const KernelInfo& k = kernels[0];
  EXPECT_EQ(k.name, "_Z1kcsid");
  EXPECT_TRUE(k.from_ptx);
  EXPECT_EQ(k.sm_arch, 80u);
  // .ptr's .align is the pointee's: the parameter itself aligns to 8.
  EXPECT_EQ(Layout(k), (Pairs{{0, 1},
                              {2, 2},
                              {8, 24},
                              {32, 1},
                              {40, 8},
                              {48, 3},
                              {51, 5},
                              {64, 16},
                              {80, 8},
                              {88, 4}}));
  EXPECT_EQ(k.param_bytes, 92u);
  EXPECT_EQ(k.max_threads_per_block, 256u);
  EXPECT_EQ(k.registers, std::nullopt);
}

TEST(PtxTest, ManyEntriesFunctionsAndDeclarations) {
  const auto kernels = Parse(R"(
.func (.param .b32 r) helper(.param .b32 x) { ret; }
.entry _Z4nonev() { ret; }
.entry bare { ret; }
.weak .entry tex(.param .texref t, .param .samplerref s, .param .u32 n) .reqntid 64 { ret; }
.extern .entry declared(.param .u64 p);
.pragma "nounroll";
.file 1 "a \" .entry fake( file.cu"
)",
                             0);
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_EQ(kernels[0].name, "_Z4nonev");
  EXPECT_TRUE(kernels[0].params.empty());
  EXPECT_EQ(kernels[1].name, "bare");
  EXPECT_EQ(kernels[2].name, "tex");
  EXPECT_EQ(Layout(kernels[2]), (Pairs{{0, 8}, {8, 8}, {16, 4}}));
  EXPECT_EQ(kernels[2].max_threads_per_block, 64u);
  EXPECT_EQ(kernels[3].name, "declared");
  EXPECT_EQ(kernels[3].sm_arch, 0u);  // no .target and none given
}

TEST(PtxTest, TargetGivesTheArchitectureWhenNotKnown) {
  const auto kernels = Parse(".version 9.0\n.target sm_90a, debug\n.entry k(.param .u32 a) {}", 0);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].sm_arch, 90u);
}

TEST(PtxTest, MinifiedPtxAsStoredInFatbins) {
  // nvcc's fatbin PTX has no indentation; the layout must not depend on blanks.
  const auto kernels = Parse(
      ".visible .entry k(\n.param .u8 k_param_0,\n.param .align 8 .b8 "
      "k_param_1[24]\n)\n{\nret;\n}\n");
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(Layout(kernels[0]), (Pairs{{0, 1}, {8, 24}}));
}

TEST(PtxTest, ErrorsNameTheLine) {
  auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  has(ErrorOf(".entry k(\n.param .u32 a\n.param .u32 b)"), "PTX line 3: expected ',' or ')'");
  has(ErrorOf(".entry k(.param a) {}"), "has no type");
  has(ErrorOf(".entry k(.param .u32) {}"), "expected the name of parameter 0");
  has(ErrorOf(".entry k(.param .u32 .u64 a) {}"), "has two types");
  has(ErrorOf(".entry k(.param .align 3 .b8 a[4]) {}"), "not a power of two");
  has(ErrorOf(".entry k(.param .b8 a[99999999999999999999]) {}"), "expected an array length");
  has(ErrorOf(".entry k(.param .b8 a[4294967296][4294967296]) {}"), "too large");
  has(ErrorOf(".entry k(.param .global .u64 a) {}"), "without .ptr");
  has(ErrorOf(".entry k(.param .u32 .wibble a) {}"), "unknown directive .wibble");
  has(ErrorOf(".entry ( {}"), "expected a kernel name");
  has(ErrorOf(".entry k() { ret;"), "ends inside a '{' block");
  has(ErrorOf("}"), "without a matching '{'");
  has(ErrorOf("/* never ends"), "comment never ends");
  has(ErrorOf(".file 1 \"never ends"), "string never ends");
  has(ErrorOf(".entry k() .maxntid 0 {}"), "out of range");
  has(ErrorOf(".entry k() .maxntid x {}"), "expected a thread count");
}

TEST(PtxTest, TruncationAtEveryByteNeverCrashes) {
  auto fatbin = ParseFatbin(testing::ReadData("many_params_ptx_plain.fatbin"));
  ASSERT_TRUE(fatbin.ok());
  const std::string ptx(testing::AsText(fatbin->entries[0].payload));
  const size_t entry = ptx.find(".entry");
  const size_t end = ptx.rfind('}');
  ASSERT_NE(entry, std::string::npos);
  for (size_t len = 0; len < ptx.size(); ++len) {
    const std::string cut = ptx.substr(0, len);
    auto r = ParsePtx(cut, 80);
    // Before ".entry" is whole there is no kernel; from there to the closing brace the module is
    // incomplete, an error; after it, the kernel is all there.
    if (len < entry + 6) {
      ASSERT_TRUE(r.ok()) << "length " << len << ": " << r.status().ToString();
      EXPECT_TRUE(r->empty()) << "length " << len;
    } else if (len <= end) {
      EXPECT_FALSE(r.ok()) << "length " << len;
    } else {
      ASSERT_TRUE(r.ok()) << "length " << len;
      EXPECT_EQ(r->size(), 1u);
    }
  }
}

}  // namespace
}  // namespace flyt::cuda
