// MD2 against RFC 1319's test suite, and the integrity check's answer against a published one.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "libcuda/integrity.h"
#include "libcuda/md2.h"

namespace flyt::libcuda {
namespace {

std::string Hex(const Md2Digest& d) {
  std::string out;
  char buf[3];
  for (uint8_t b : d) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    out += buf;
  }
  return out;
}

Md2Digest Md2Of(const std::string& s) {
  return Md2(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(Md2Test, RfcTestSuite) {
  EXPECT_EQ(Hex(Md2Of("")), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Hex(Md2Of("a")), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Hex(Md2Of("abc")), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Hex(Md2Of("message digest")), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(Hex(Md2Of("abcdefghijklmnopqrstuvwxyz")), "4e8ddff3650292ab5a4108c3aa47940b");
  // A message of exactly one block gets a whole block of padding.
  EXPECT_EQ(Hex(Md2Of("12345678901234567890123456789012345678901234567890123456789012345678901234"
                      "567890")),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(IntegrityTest, TheFirstTwoVersionsOfARelease) {
  IntegrityInputs in;
  in.version = 13000;
  EXPECT_EQ(IntegrityAnswer(in)[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(IntegrityAnswer(in)[1], 0x8ED383AA1F4CD1E8ull);
  in.version = 13001;
  EXPECT_EQ(IntegrityAnswer(in)[0], 0x1841181C03CB675Cull);
}

// Inputs and answer as published with an open implementation of the interface (a CUDA 12.2
// runtime on one GPU).
TEST(IntegrityTest, APublishedAnswer) {
  IntegrityInputs::Device device;
  device.uuid = {0x67, 0x22, 0xCB, 0xCF, 0xC6, 0x61, 0xF2, 0x92,
                 0x74, 0xD6, 0xED, 0x23, 0x2A, 0x32, 0x13, 0x1C};
  device.pci_domain = 0;
  device.pci_bus = 4;
  device.pci_device = 0;
  IntegrityInputs in;
  in.driver_version = 12020;
  in.version = 0x2B4A;
  in.pid = 0x4D08;
  in.tid = 0x2B78;
  in.cudart_table = 0x7FF8C80717F0;
  in.integrity_table = 0x7FF8C825E4B0;
  in.function = 0x7FF8C7DD0AD0;
  in.unix_seconds = 0x64A365EE;
  in.devices = std::span<const IntegrityInputs::Device>(&device, 1);
  const auto answer = IntegrityAnswer(in);
  EXPECT_EQ(answer[0], 0xA7C34628F214707Aull);
  EXPECT_EQ(answer[1], 0xEAF1313342BFCD84ull);
}

}  // namespace
}  // namespace flyt::libcuda
