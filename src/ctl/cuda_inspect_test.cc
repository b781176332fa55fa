#include "ctl/cuda_inspect.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/strings.h"

namespace flyt::ctl {
namespace {

std::string Data(const std::string& name) {
  return std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/" + name;
}

std::string Program(const std::string& name) {
  const std::string path = std::string(FLYT_BINARY_DIR) + "/tests/cuda/" + name;
  return std::filesystem::exists(path) ? path : "";
}

CudaInspection Inspect(const std::string& path) {
  auto r = InspectCudaFile(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : CudaInspection{};
}

void ExpectContains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing: " << part << "\nin:\n" << text;
}

TEST(CudaInspectTest, RawFatbinAsTextAndJson) {
  const CudaInspection inspection = Inspect(Data("many_params.fatbin"));
  EXPECT_EQ(inspection.format, "fatbin");
  ASSERT_EQ(inspection.containers.size(), 1u);
  const std::string text = RenderCudaInspection(inspection);
  ExpectContains(text, "many_params.fatbin: fatbin, 1 container, 2 kernels");
  ExpectContains(text, "container 0 (offset 0x0, 9608 bytes): 3 entries");
  ExpectContains(text, "  0   ELF  sm_80       -");
  ExpectContains(text, "  2   PTX  compute_90  zstd");
  ExpectContains(text,
                 "kernel _Z10ManyParamscsidPKf6PackedcxfPd  (ManyParams(char, short, int, "
                 "double, float const*, Packed, char, long long, float, double*))");
  ExpectContains(text, "sm_80: registers 22, static shared 0 B, max threads -, constant[0] 432 B");
  ExpectContains(text, "parameters: 10, 80 bytes");
  ExpectContains(text, "            5      24      24\n");  // the struct by value

  const nlohmann::json j = CudaInspectionToJson(inspection);
  EXPECT_EQ(j["format"], "fatbin");
  const auto& c = j["containers"][0];
  EXPECT_EQ(c["size_bytes"], 9608);
  EXPECT_EQ(c["entries"][2]["kind"], "ptx");
  EXPECT_EQ(c["entries"][2]["compression"], "zstd");
  EXPECT_EQ(c["entries"][0]["compression"], "none");
  const auto& k = c["kernels"][0];
  EXPECT_EQ(k["name"], "_Z10ManyParamscsidPKf6PackedcxfPd");
  EXPECT_EQ(k["sm_arch"], 80);
  EXPECT_EQ(k["registers"], 22);
  EXPECT_EQ(k["param_bytes"], 80);
  EXPECT_EQ(k["params"][5], (nlohmann::json{{"ordinal", 5}, {"offset", 24}, {"size_bytes", 24}}));
  EXPECT_TRUE(k["max_threads_per_block"].is_null());
}

TEST(CudaInspectTest, CubinAndPtxFiles) {
  const CudaInspection cubin = Inspect(Data("corpus/matrix_mul_sm90.cubin"));
  EXPECT_EQ(cubin.format, "cubin");
  ExpectContains(RenderCudaInspection(cubin),
                 "sm_90: registers 32, static shared 2048 B, max threads 256");
  const CudaInspection ptx = Inspect(Data("corpus/many_params.ptx"));
  EXPECT_EQ(ptx.format, "ptx");
  ExpectContains(RenderCudaInspection(ptx), "parameters: 10, 80 bytes (laid out from PTX)");
  EXPECT_TRUE(CudaInspectionToJson(ptx)["containers"][0]["kernels"][0]["registers"].is_null());
}

TEST(CudaInspectTest, HostProgramsBuiltByNvcc) {
  if (Program("rdc").empty()) GTEST_SKIP() << "CUDA test programs not built (no nvcc)";
  const CudaInspection many = Inspect(Program("many_params"));
  EXPECT_EQ(many.format, "host ELF");
  // nvcc 13 also embeds its device-link step's container, which holds no kernels.
  ASSERT_EQ(many.containers.size(), 2u);
  EXPECT_TRUE(many.containers[0].kernels.empty());
  EXPECT_EQ(many.containers[1].kernels.size(), 2u);
  EXPECT_EQ(many.containers[1].section, ".nv_fatbin");
  const CudaInspection rdc = Inspect(Program("rdc"));
  ASSERT_EQ(rdc.containers.size(), 3u);  // linked + one relocatable per translation unit
  EXPECT_EQ(rdc.containers[0].section, ".nv_fatbin");
  EXPECT_EQ(rdc.containers[1].section, "__nv_relfatbin");
  EXPECT_EQ(rdc.containers[2].section, "__nv_relfatbin");
  ExpectContains(RenderCudaInspection(rdc), "__nv_relfatbin + 0x");
}

TEST(CudaInspectTest, RefusesWhatIsNotCudaCode) {
  const std::string text = "hello";
  auto r = InspectCuda({reinterpret_cast<const std::byte*>(text.data()), text.size()}, "x.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("x.txt: neither an ELF file nor a fatbin"),
            std::string::npos);
  auto self = InspectCudaFile("/proc/self/exe");
  ASSERT_FALSE(self.ok());
  EXPECT_EQ(self.status().code(), StatusCode::kNotFound);
  EXPECT_NE(self.status().message().find("no .nv_fatbin"), std::string::npos);
  EXPECT_FALSE(InspectCudaFile("/nonexistent/a.out").ok());
}

TEST(CudaInspectTest, CorruptFatbinNamesTheContainer) {
  auto text = ReadFile(Data("many_params_compress_all.fatbin"));
  ASSERT_TRUE(text.ok());
  std::string bytes = *text;
  bytes[16 + 4] = 1;  // first entry's header size
  auto r =
      InspectCuda({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "f.fatbin");
  ASSERT_FALSE(r.ok());
  ExpectContains(r.status().message(), "f.fatbin: container at offset 0x0: fatbin entry 0");
}

}  // namespace
}  // namespace flyt::ctl
