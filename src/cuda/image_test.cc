// Driver-API module images located from a bare pointer, and launch buffers packed by a layout.
#include "cuda/image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/testing.h"

namespace flyt::cuda {
namespace {

TEST(ImageTest, AFatbinItsWrapperACubinAndPtxTextAreMeasuredFromTheirOwnHeaders) {
  std::vector<std::byte> bytes = testing::ReadData("many_params.fatbin");
  ASSERT_FALSE(bytes.empty());
  auto fatbin = LocateImage(bytes.data());
  ASSERT_TRUE(fatbin.ok()) << fatbin.status().ToString();
  EXPECT_EQ(fatbin->kind, ImageKind::kFatbin);
  EXPECT_EQ(fatbin->bytes.size(), bytes.size());

  // The wrapper nvcc's host code registers points at the container.
  struct {
    uint32_t magic = kFatbinWrapperMagic;
    uint32_t version = 1;
    const void* data;
    const void* unused = nullptr;
  } wrapper;
  wrapper.data = bytes.data();
  auto wrapped = LocateImage(&wrapper);
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(wrapped->bytes.data(), bytes.data());

  auto parsed = ParseFatbin(bytes);
  ASSERT_TRUE(parsed.ok());
  bool saw_cubin = false, saw_ptx = false;
  for (const FatbinEntry& e : parsed->entries) {
    std::vector<std::byte> image = e.payload;
    if (e.kind == FatbinEntry::Kind::kPtx) {
      image.push_back(std::byte{0});
      auto ptx = LocateImage(image.data());
      ASSERT_TRUE(ptx.ok()) << ptx.status().ToString();
      EXPECT_EQ(ptx->kind, ImageKind::kPtx);
      EXPECT_EQ(ptx->bytes.size(), std::strlen(reinterpret_cast<const char*>(image.data())) + 1);
      saw_ptx = true;
    } else {
      auto cubin = LocateImage(image.data());
      ASSERT_TRUE(cubin.ok()) << cubin.status().ToString();
      EXPECT_EQ(cubin->kind, ImageKind::kCubin);
      EXPECT_EQ(cubin->bytes.size(), image.size());  // a cubin ends with its section table
      auto kernels = KernelsOfImage(*cubin);
      ASSERT_TRUE(kernels.ok());
      EXPECT_FALSE(kernels->empty());
      saw_cubin = true;
    }
  }
  EXPECT_TRUE(saw_cubin && saw_ptx);
}

TEST(ImageTest, BytesThatAreNoImageAndHeadersThatClaimTooMuchAreRefused) {
  std::string text(4096, 'x');
  EXPECT_FALSE(LocateImage(text.c_str()).ok());
  EXPECT_FALSE(KernelsOfImage(std::span<const std::byte>(
                                  reinterpret_cast<const std::byte*>(text.data()), text.size()))
                   .ok());
  EXPECT_FALSE(LocateImage(nullptr).ok());
  std::vector<std::byte> bytes = testing::ReadData("many_params.fatbin");
  uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bytes.data() + 8, &huge, 8);
  auto located = LocateImage(bytes.data());
  ASSERT_FALSE(located.ok());
  // An ELF header whose section table lies far past any plausible image.
  std::vector<std::byte> elf(64);
  std::memcpy(elf.data(),
              "\x7f"
              "ELF\x02\x01",
              6);
  uint64_t shoff = uint64_t{1} << 41;
  std::memcpy(elf.data() + 0x28, &shoff, 8);
  EXPECT_FALSE(LocateImage(elf.data()).ok());
}

TEST(ImageTest, ParametersArePackedAtTheirOffsetsAndABadLayoutIsRefused) {
  KernelInfo layout;
  layout.name = "k";
  layout.params = {{0, 0, 4}, {1, 8, 8}};
  layout.param_bytes = 16;
  int32_t a = 0x11223344;
  uint64_t b = 0x5566778899aabbccull;
  void* args[] = {&a, &b};
  auto packed = PackParameters(layout, args);
  ASSERT_TRUE(packed.ok());
  ASSERT_EQ(packed->size(), 16u);
  int32_t a_back;
  uint64_t b_back;
  std::memcpy(&a_back, packed->data(), 4);
  std::memcpy(&b_back, packed->data() + 8, 8);
  EXPECT_EQ(a_back, a);
  EXPECT_EQ(b_back, b);
  EXPECT_FALSE(PackParameters(layout, nullptr).ok());
  layout.params.push_back({2, 12, 8});  // past the 16-byte buffer
  EXPECT_FALSE(PackParameters(layout, args).ok());
}

}  // namespace
}  // namespace flyt::cuda
