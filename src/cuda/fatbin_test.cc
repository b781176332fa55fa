#include "cuda/fatbin.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "common/subprocess.h"
#include "cuda/elf.h"
#include "cuda/testing.h"

namespace flyt::cuda {
namespace {

using testing::AsText;
using testing::Find;
using testing::KernelsOfData;
using testing::Layout;
using testing::ProgramPath;
using testing::ReadBytes;
using testing::ReadData;

const char kManyParams[] = "_Z10ManyParamscsidPKf6PackedcxfPd";

// The layout of ManyParams(char c, short s, int i, double d, const float* in, Packed p, char c2,
// long long ll, float f, double* out), written from the C++ signature: each parameter at the
// next multiple of its alignment; Packed is {char; double; int} = 24 bytes, 8-aligned.
const std::vector<std::pair<uint32_t, uint32_t>> kManyParamsLayout = {
    {0, 1}, {2, 2}, {4, 4}, {8, 8}, {16, 8}, {24, 24}, {48, 1}, {56, 8}, {64, 4}, {72, 8}};

void ExpectManyParams(const KernelInfo* k) {
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(Layout(*k), kManyParamsLayout);
  EXPECT_EQ(k->param_bytes, 80u);
}

// Compares everything the parser reports about two kernel lists.
void ExpectSameKernels(const std::vector<KernelInfo>& a, const std::vector<KernelInfo>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].name + " sm_" + std::to_string(a[i].sm_arch));
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].sm_arch, b[i].sm_arch);
    EXPECT_EQ(a[i].from_ptx, b[i].from_ptx);
    EXPECT_EQ(Layout(a[i]), Layout(b[i]));
    EXPECT_EQ(a[i].param_bytes, b[i].param_bytes);
    EXPECT_EQ(a[i].registers, b[i].registers);
    EXPECT_EQ(a[i].static_shared_bytes, b[i].static_shared_bytes);
    EXPECT_EQ(a[i].max_threads_per_block, b[i].max_threads_per_block);
    EXPECT_EQ(a[i].const_bytes, b[i].const_bytes);
    EXPECT_EQ(a[i].local_bytes, b[i].local_bytes);
  }
}

void Put32(std::vector<std::byte>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
void Put64(std::vector<std::byte>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }

// The error message of a failed parse (the test fails if it succeeded).
std::string ErrorOf(std::span<const std::byte> bytes) {
  auto r = ParseFatbin(bytes);
  EXPECT_FALSE(r.ok()) << "parsed a corrupt container";
  return r.ok() ? "" : r.status().message();
}

TEST(FatbinTest, ReadsEntriesOfNvccDefaultContainer) {
  const std::vector<std::byte> bytes = ReadData("many_params.fatbin");
  auto size = FatbinSize(bytes);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, bytes.size());
  auto fatbin = ParseFatbin(bytes);
  ASSERT_TRUE(fatbin.ok()) << fatbin.status().ToString();
  EXPECT_EQ(fatbin->size_bytes, bytes.size());
  ASSERT_EQ(fatbin->entries.size(), 3u);
  const FatbinEntry& elf80 = fatbin->entries[0];
  const FatbinEntry& elf90 = fatbin->entries[1];
  const FatbinEntry& ptx90 = fatbin->entries[2];
  EXPECT_EQ(elf80.kind, FatbinEntry::Kind::kElf);
  EXPECT_EQ(elf80.sm_arch, 80u);
  EXPECT_FALSE(elf80.was_compressed);  // nvcc compresses only PTX by default
  EXPECT_EQ(elf80.compression, "");
  EXPECT_EQ(AsText(elf80.payload).substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(elf90.sm_arch, 90u);
  EXPECT_EQ(ptx90.kind, FatbinEntry::Kind::kPtx);
  EXPECT_EQ(ptx90.sm_arch, 90u);
  EXPECT_TRUE(ptx90.was_compressed);
  EXPECT_EQ(ptx90.compression, "zstd");
  EXPECT_EQ(ptx90.version_major, 9);  // PTX ISA 9.0 from CUDA 13.0
  EXPECT_LT(ptx90.stored_size_bytes, ptx90.payload.size());
  const std::string_view ptx = AsText(ptx90.payload);
  EXPECT_NE(ptx.find(".target sm_90"), std::string_view::npos);
  EXPECT_NE(ptx.back(), '\0');  // trailing NULs dropped
  EXPECT_EQ(fatbin->skipped_entries, 0u);
}

TEST(FatbinTest, FatbinSizeNeedsOnlyTheHeader) {
  const std::vector<std::byte> bytes = ReadData("many_params.fatbin");
  auto size = FatbinSize(std::span(bytes).first(16));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, bytes.size());
  EXPECT_FALSE(FatbinSize(std::span(bytes).first(15)).ok());
}

TEST(FatbinTest, ManyParamsLayoutMatchesTheSignature) {
  const auto kernels = KernelsOfData("many_params.fatbin");
  ASSERT_EQ(kernels.size(), 2u);  // sm_80 and sm_90 cubins; compute_90 PTX adds nothing new
  for (uint32_t sm : {80u, 90u}) {
    SCOPED_TRACE(sm);
    const KernelInfo* k = Find(kernels, kManyParams, sm);
    ExpectManyParams(k);
    ASSERT_NE(k, nullptr);
    EXPECT_FALSE(k->from_ptx);
    ASSERT_TRUE(k->registers.has_value());
    EXPECT_GT(*k->registers, 0u);
    EXPECT_EQ(k->static_shared_bytes, 0u);
    EXPECT_EQ(k->max_threads_per_block, std::nullopt);  // no __launch_bounds__
    EXPECT_EQ(k->local_bytes, 0u);
  }
  // As ptxas reported them when the data was generated (nvcc 13.0, -O3 device code).
  EXPECT_EQ(Find(kernels, kManyParams, 80)->registers, 22u);
  EXPECT_EQ(Find(kernels, kManyParams, 90)->registers, 20u);
  EXPECT_EQ(Find(kernels, kManyParams, 80)->const_bytes, 432u);
}

TEST(FatbinTest, CompressedContainersGiveIdenticalKernels) {
  const auto plain = KernelsOfData("many_params.fatbin");
  for (const char* name : {"many_params_compress_all.fatbin", "many_params_lz4.fatbin"}) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = ReadData(name);
    auto fatbin = ParseFatbin(bytes);
    ASSERT_TRUE(fatbin.ok()) << fatbin.status().ToString();
    ASSERT_EQ(fatbin->entries.size(), 3u);
    const std::string want = std::string(name).find("lz4") != std::string::npos ? "lz4" : "zstd";
    for (const FatbinEntry& e : fatbin->entries) {
      EXPECT_TRUE(e.was_compressed);
      EXPECT_EQ(e.compression, want);
      EXPECT_LT(e.stored_size_bytes, e.payload.size());
    }
    auto kernels = KernelsOf(*fatbin);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    ExpectSameKernels(*kernels, plain);
  }
  // The decompressed cubins are the very bytes nvcc left uncompressed.
  auto a = ParseFatbin(ReadData("many_params.fatbin"));
  auto b = ParseFatbin(ReadData("many_params_lz4.fatbin"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->entries[1].payload.size(), b->entries[1].payload.size());
}

TEST(FatbinTest, PtxOnlyLayoutEqualsCubinLayout) {
  const auto cubin = KernelsOfData("many_params.fatbin");
  for (const char* name : {"many_params_ptx.fatbin", "many_params_ptx_plain.fatbin"}) {
    SCOPED_TRACE(name);
    const auto ptx = KernelsOfData(name);
    ASSERT_EQ(ptx.size(), 1u);
    const KernelInfo& k = ptx[0];
    EXPECT_EQ(k.name, kManyParams);
    EXPECT_EQ(k.sm_arch, 80u);
    EXPECT_TRUE(k.from_ptx);
    ExpectManyParams(&k);
    EXPECT_EQ(Layout(k), Layout(*Find(cubin, kManyParams, 80)));
    EXPECT_EQ(k.registers, std::nullopt);  // PTX does not say
    EXPECT_EQ(k.static_shared_bytes, std::nullopt);
  }
  // Every kernel of every PTX entry in the committed data lays out as its cubin does.
  for (const char* name :
       {"layouts.fatbin", "matrix_mul.fatbin", "templated.fatbin", "many_params.fatbin"}) {
    SCOPED_TRACE(name);
    auto fatbin = ParseFatbin(ReadData(name));
    ASSERT_TRUE(fatbin.ok());
    const auto kernels = KernelsOf(*fatbin);
    ASSERT_TRUE(kernels.ok());
    size_t compared = 0;
    for (const FatbinEntry& e : fatbin->entries) {
      if (e.kind != FatbinEntry::Kind::kPtx) continue;
      auto from_ptx = ParsePtx(AsText(e.payload), e.sm_arch);
      ASSERT_TRUE(from_ptx.ok()) << from_ptx.status().ToString();
      for (const KernelInfo& p : *from_ptx) {
        const KernelInfo* c = Find(*kernels, p.name, e.sm_arch);
        ASSERT_NE(c, nullptr) << p.name;
        EXPECT_EQ(Layout(p), Layout(*c)) << p.name;
        EXPECT_EQ(p.param_bytes, c->param_bytes) << p.name;
        EXPECT_EQ(p.max_threads_per_block, c->max_threads_per_block) << p.name;
        ++compared;
      }
    }
    EXPECT_GT(compared, 0u);
  }
}

TEST(FatbinTest, KernelsOfPrefersCubinsAndFallsBackToPtx) {
  auto fatbin = ParseFatbin(ReadData("many_params.fatbin"));
  ASSERT_TRUE(fatbin.ok());
  // Keep the sm_80 cubin and the PTX; relabel the PTX as compute_100, which no cubin covers.
  Fatbin f;
  f.entries = {fatbin->entries[0], fatbin->entries[2]};
  f.entries[1].sm_arch = 100;
  auto kernels = KernelsOf(f);
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  ASSERT_EQ(kernels->size(), 2u);
  EXPECT_FALSE(Find(*kernels, kManyParams, 80)->from_ptx);
  EXPECT_TRUE(Find(*kernels, kManyParams, 100)->from_ptx);
  // A broken entry makes the whole fatbin an error that names the entry.
  f.entries[0].payload.resize(100);
  auto broken = KernelsOf(f);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("fatbin entry 0 (sm_80 cubin)"), std::string::npos)
      << broken.status().message();
}

// Truncating a container anywhere must give an error, never a crash or a read past the end:
// both the bytes (the header then claims more than is there) and the header's own size (the
// walk then meets a cut entry or payload).
TEST(FatbinTest, TruncationAtEveryByteIsAnError) {
  for (const char* name :
       {"many_params_compress_all.fatbin", "many_params_lz4.fatbin", "many_params_ptx.fatbin",
        "many_params_ptx_plain.fatbin", "corpus/vector_add_plain.fatbin"}) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = ReadData(name);
    ASSERT_GT(bytes.size(), 64u);
    for (size_t len = 0; len < bytes.size(); ++len) {
      // A fresh copy of exactly `len` bytes, so that a read past it is a heap overflow that
      // ASan would report.
      std::vector<std::byte> cut(bytes.begin(), bytes.begin() + len);
      EXPECT_FALSE(ParseFatbin(cut).ok()) << "length " << len;
      if (len >= 16) {
        Put64(cut, 8, len - 16);  // the header now claims exactly what is there
        auto r = ParseFatbin(cut);
        // Cuts that fall exactly between entries are valid containers with fewer entries.
        if (r.ok()) {
          EXPECT_LT(r->entries.size(), 3u) << "length " << len;
        }
      }
    }
  }
}

TEST(FatbinTest, CorruptHeadersAreNamedWithTheirOffset) {
  const std::vector<std::byte> good = ReadData("many_params_compress_all.fatbin");
  auto parsed = ParseFatbin(good);
  ASSERT_TRUE(parsed.ok());
  auto contains = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  // Container header.
  auto b = good;
  Put32(b, 0, 0x12345678);
  contains(ErrorOf(b), "bad magic 0x12345678 at offset 0");
  b = good;
  b[4] = std::byte{2};
  contains(ErrorOf(b), "container version 2");
  b = good;
  b[6] = std::byte{8};
  contains(ErrorOf(b), "header size 8");
  b = good;
  Put64(b, 8, ~uint64_t{0});
  contains(ErrorOf(b), "implausible");
  // First entry, at offset 0x10.
  const size_t e = 16;
  b = good;
  Put32(b, e + 4, 32);
  contains(ErrorOf(b), "fatbin entry 0 at offset 0x10: entry header size 32");
  b = good;
  Put64(b, e + 8, uint64_t{1} << 40);
  contains(ErrorOf(b), "run past the end");
  b = good;
  Put64(b, e + 40, 0x2000 | 0x8000 | 0x11);
  contains(ErrorOf(b), "both LZ4 and zstd");
  b = good;
  Put64(b, e + 56, kMaxFatbinEntryBytes + 1);
  contains(ErrorOf(b), "decompressed size");
  b = good;
  Put64(b, e + 56, parsed->entries[0].payload.size() + 1);
  contains(ErrorOf(b), "the header says");
  b = good;
  Put32(b, e + 16, 0);
  contains(ErrorOf(b), "compressed size 0");
  b = good;
  b[e + 64 + 10] ^= std::byte{0xff};  // inside the zstd frame
  contains(ErrorOf(b), "fatbin entry 0 at offset 0x10");
  // Second entry: its offset is named.
  const size_t e1 = e + 64 + parsed->entries[0].stored_size_bytes;
  b = good;
  Put32(b, e1 + 4, 0);
  char where[64];
  std::snprintf(where, sizeof(where), "fatbin entry 1 at offset 0x%zx", e1);
  contains(ErrorOf(b), where);
  // Options descriptor of the PTX entry pointing outside its header.
  const std::vector<std::byte> ptx = ReadData("many_params_ptx.fatbin");
  b = ptx;
  Put32(b, e + 20, 4000);
  contains(ErrorOf(b), "options descriptor");
  // LZ4: garbage and an impossible ratio.
  const std::vector<std::byte> lz4 = ReadData("many_params_lz4.fatbin");
  b = lz4;
  for (size_t i = 0; i < 32; ++i) b[e + 64 + 100 + i] = std::byte{0xff};
  contains(ErrorOf(b), "LZ4");
  b = lz4;
  Put32(b, e + 16, 4);
  contains(ErrorOf(b), "more than LZ4 can produce");
}

TEST(FatbinTest, UnknownEntryKindsAreSkipped) {
  std::vector<std::byte> b = ReadData("many_params_compress_all.fatbin");
  b[16] = std::byte{8};  // LTO IR
  auto f = ParseFatbin(b);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->entries.size(), 2u);
  EXPECT_EQ(f->skipped_entries, 1u);
}

TEST(FatbinTest, SplitFatbinsFindsEveryContainer) {
  const std::vector<std::byte> rel = ReadData("rdc_relocatable.fatbin");
  auto spans = SplitFatbins(rel);
  ASSERT_TRUE(spans.ok()) << spans.status().ToString();
  ASSERT_EQ(spans->size(), 2u);  // one per translation unit
  std::set<std::string> names;
  for (auto span : *spans) {
    auto f = ParseFatbin(span);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->size_bytes, span.size());
    auto k = KernelsOf(*f);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    for (const auto& kernel : *k) names.insert(kernel.name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"_Z10ResetCallsv", "_Z7StencilPKfPfi"}));
  // Zero padding between containers is skipped; anything else is an error with its offset.
  std::vector<std::byte> padded((*spans)[0].begin(), (*spans)[0].end());
  padded.resize(padded.size() + 8);
  padded.insert(padded.end(), (*spans)[1].begin(), (*spans)[1].end());
  auto again = SplitFatbins(padded);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), 2u);
  padded[(*spans)[0].size() + 3] = std::byte{1};
  auto bad = SplitFatbins(padded);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("container 1 at offset"), std::string::npos)
      << bad.status().message();
  padded.resize(padded.size() - 1);
  EXPECT_FALSE(SplitFatbins(std::span(padded).first(padded.size() - 100)).ok());
}

// __fatBinC_Wrapper_t as nvcc emits it (crt/fatbinary_section.h).
struct Wrapper {
  int magic;
  int version;
  const void* data;
  const void* filename_or_fatbins;
};

TEST(FatbinTest, WrapperVersion1HoldsOneContainer) {
  const std::vector<std::byte> bytes = ReadData("many_params.fatbin");
  const Wrapper w{static_cast<int>(kFatbinWrapperMagic), 1, bytes.data(), nullptr};
  auto spans = FatbinsOfWrapper(&w);
  ASSERT_TRUE(spans.ok()) << spans.status().ToString();
  ASSERT_EQ(spans->size(), 1u);
  EXPECT_EQ((*spans)[0].data(), bytes.data());
  EXPECT_EQ((*spans)[0].size(), bytes.size());
}

TEST(FatbinTest, WrapperVersion2ListsLinkedThenPrelinked) {
  // As in an -rdc=true program: data is the device-linked container (.nv_fatbin), the second
  // field a NULL-terminated array of the translation units' containers (__nv_relfatbin).
  const std::vector<std::byte> linked = ReadData("rdc_linked.fatbin");
  const std::vector<std::byte> rel = ReadData("rdc_relocatable.fatbin");
  auto rel_spans = SplitFatbins(rel);
  ASSERT_TRUE(rel_spans.ok());
  ASSERT_EQ(rel_spans->size(), 2u);
  const void* prelinked[] = {(*rel_spans)[0].data(), (*rel_spans)[1].data(), nullptr};
  const Wrapper w{static_cast<int>(kFatbinWrapperMagic), 2, linked.data(), prelinked};
  auto spans = FatbinsOfWrapper(&w);
  ASSERT_TRUE(spans.ok()) << spans.status().ToString();
  ASSERT_EQ(spans->size(), 3u);
  EXPECT_EQ((*spans)[0].data(), linked.data());
  EXPECT_EQ((*spans)[0].size(), linked.size());
  EXPECT_EQ((*spans)[1].size(), (*rel_spans)[0].size());
  EXPECT_EQ((*spans)[2].data(), (*rel_spans)[1].data());
  // The linked container has every kernel of the program, as final (ET_EXEC) cubins.
  auto f = ParseFatbin((*spans)[0]);
  ASSERT_TRUE(f.ok());
  auto kernels = KernelsOf(*f);
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  for (uint32_t sm : {80u, 90u}) {
    const KernelInfo* stencil = Find(*kernels, "_Z7StencilPKfPfi", sm);
    ASSERT_NE(stencil, nullptr);
    EXPECT_EQ(Layout(*stencil),
              (std::vector<std::pair<uint32_t, uint32_t>>{{0, 8}, {8, 8}, {16, 4}}));
    EXPECT_NE(Find(*kernels, "_Z10ResetCallsv", sm), nullptr);
  }
  // An empty prelinked list, or none, leaves the linked container alone.
  const void* none[] = {nullptr};
  const Wrapper w2{static_cast<int>(kFatbinWrapperMagic), 2, linked.data(), none};
  EXPECT_EQ(FatbinsOfWrapper(&w2)->size(), 1u);
}

TEST(FatbinTest, WrapperErrorsSayWhatIsWrong) {
  const std::vector<std::byte> bytes = ReadData("many_params.fatbin");
  auto message = [](const Wrapper& w) {
    auto r = FatbinsOfWrapper(&w);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_FALSE(FatbinsOfWrapper(nullptr).ok());
  EXPECT_NE(message({0x1234, 1, bytes.data(), nullptr}).find("bad magic 0x1234"),
            std::string::npos);
  EXPECT_NE(
      message({static_cast<int>(kFatbinWrapperMagic), 3, bytes.data(), nullptr}).find("version 3"),
      std::string::npos);
  EXPECT_NE(message({static_cast<int>(kFatbinWrapperMagic), 1, nullptr, nullptr}).find("null"),
            std::string::npos);
  std::vector<std::byte> bad = bytes;
  bad[0] = std::byte{0};
  EXPECT_NE(
      message({static_cast<int>(kFatbinWrapperMagic), 1, bad.data(), nullptr}).find("bad magic"),
      std::string::npos);
  const void* list[] = {bad.data(), nullptr};
  EXPECT_NE(message({static_cast<int>(kFatbinWrapperMagic), 2, bytes.data(), list})
                .find("prelinked fatbin 0"),
            std::string::npos);
}

// ---- the CUDA test programs built by nvcc (skipped without nvcc) ----------------------------

// The containers of a host program's .nv_fatbin section.
std::vector<KernelInfo> KernelsOfProgram(const std::vector<std::byte>& program) {
  auto elf = ElfFile::Parse(program, "program");
  EXPECT_TRUE(elf.ok()) << elf.status().ToString();
  if (!elf.ok()) return {};
  const ElfSection* section = elf->FindSection(".nv_fatbin");
  EXPECT_NE(section, nullptr);
  if (section == nullptr) return {};
  auto spans = SplitFatbins(section->data);
  EXPECT_TRUE(spans.ok()) << spans.status().ToString();
  std::vector<KernelInfo> all;
  for (auto span : *spans) {
    auto f = ParseFatbin(span);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) continue;
    auto k = KernelsOf(*f);
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    if (k.ok()) all.insert(all.end(), k->begin(), k->end());
  }
  return all;
}

TEST(FatbinTest, BuiltProgramsCarryTheCommittedLayouts) {
  const std::string many = ProgramPath("many_params");
  if (many.empty()) GTEST_SKIP() << "CUDA test programs not built (no nvcc)";
  const auto built = KernelsOfProgram(ReadBytes(many));
  ExpectSameKernels(built, KernelsOfData("many_params.fatbin"));
  ExpectSameKernels(KernelsOfProgram(ReadBytes(ProgramPath("many_params_compressed"))), built);
  auto ptx = ParseFatbin(ReadBytes(ProgramPath("many_params_ptx.fatbin")));
  ASSERT_TRUE(ptx.ok());
  auto ptx_kernels = KernelsOf(*ptx);
  ASSERT_TRUE(ptx_kernels.ok());
  ExpectSameKernels(*ptx_kernels, KernelsOfData("many_params_ptx.fatbin"));
  const auto matmul = KernelsOfProgram(ReadBytes(ProgramPath("matrix_mul")));
  for (uint32_t sm : {80u, 90u}) {
    const KernelInfo* k = Find(matmul, "_Z6MatMulPKfS0_Pfi", sm);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->static_shared_bytes, 2048u);  // two 16x16 float tiles
    EXPECT_EQ(k->max_threads_per_block, 256u);
  }
}

// The programs must load libcudart.so.13 at run time (-cudart=shared), so that flyt's runtime
// can stand in for it.
TEST(FatbinTest, ProgramsLinkLibcudartDynamically) {
  if (ProgramPath("vector_add").empty()) GTEST_SKIP() << "CUDA test programs not built (no nvcc)";
  for (const char* name :
       {"vector_add", "matrix_mul", "streams_events", "constant_memory", "many_params", "templated",
        "rdc", "many_params_compressed", "per_thread_stream"}) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = ReadBytes(ProgramPath(name));
    auto elf = ElfFile::Parse(bytes, name);
    ASSERT_TRUE(elf.ok()) << elf.status().ToString();
    const ElfSection* dynamic = elf->FindSection(".dynamic");
    const ElfSection* dynstr = elf->FindSection(".dynstr");
    ASSERT_TRUE(dynamic != nullptr && dynstr != nullptr);
    std::set<std::string> needed;
    for (size_t at = 0; at + 16 <= dynamic->data.size(); at += 16) {
      uint64_t tag = 0, value = 0;
      std::memcpy(&tag, dynamic->data.data() + at, 8);
      std::memcpy(&value, dynamic->data.data() + at + 8, 8);
      if (tag == 1 && value < dynstr->data.size()) {  // DT_NEEDED
        const std::string_view rest = AsText(dynstr->data.subspan(value));
        needed.insert(std::string(rest.substr(0, rest.find('\0'))));
      }
    }
    EXPECT_TRUE(needed.count("libcudart.so.13")) << "NEEDED: " << ::testing::PrintToString(needed);
  }
}

// Runs each program under the registration-capture shim: what the program registers must be
// exactly what FatbinsOfWrapper and KernelsOf find.
TEST(FatbinTest, ProgramsRegisterKernelsTheParserFinds) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an ASan-built shim cannot be preloaded into the uninstrumented programs";
#elif !defined(FLYT_CAPTURE_SHIM)
  GTEST_SKIP() << "capture shim not built";
#else
  if (ProgramPath("vector_add").empty()) GTEST_SKIP() << "CUDA test programs not built (no nvcc)";
  const std::string out = ::testing::TempDir() + "/flyt_capture.json";
  for (const char* name :
       {"vector_add", "matrix_mul", "streams_events", "constant_memory", "many_params", "templated",
        "rdc", "many_params_compressed", "per_thread_stream"}) {
    SCOPED_TRACE(name);
    std::remove(out.c_str());
    auto run = RunCommand({"env", std::string("LD_PRELOAD=") + FLYT_CAPTURE_SHIM,
                           "FLYT_CAPTURE_OUT=" + out, ProgramPath(name)});
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ASSERT_EQ(run->exit_code, 0) << run->stderr_text;
    auto text = ReadFile(out);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    const auto modules = nlohmann::json::parse(*text);
    ASSERT_EQ(modules.size(), 1u);
    const auto& m = modules[0];
    ASSERT_FALSE(m.contains("error")) << m.dump();
    const bool rdc = std::string(name) == "rdc";
    EXPECT_EQ(m["wrapper_version"], rdc ? 2 : 1);
    // -rdc=true: the linked container, then one relocatable container per translation unit.
    ASSERT_EQ(m["containers"].size(), rdc ? 3u : 1u);
    std::set<std::string> in_linked;
    for (const auto& k : m["containers"][0]["kernels"]) {
      EXPECT_FALSE(k["from_ptx"].get<bool>());
      in_linked.insert(k["name"].get<std::string>() + "@" +
                       std::to_string(k["sm_arch"].get<int>()));
    }
    ASSERT_FALSE(m["functions"].empty());
    for (const auto& f : m["functions"]) {
      for (int sm : {80, 90}) {
        EXPECT_TRUE(in_linked.count(f.get<std::string>() + "@" + std::to_string(sm)))
            << f << " sm_" << sm << " not found by the parser";
      }
    }
    EXPECT_EQ(in_linked.size(), 2 * m["functions"].size());
  }
#endif
}

}  // namespace
}  // namespace flyt::cuda
