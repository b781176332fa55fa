#include "libcuda/md2.h"

#include <vector>

namespace flyt::libcuda {
namespace {

// RFC 1319's permutation of 0..255 built from the digits of pi.
constexpr uint8_t kPiSubst[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20};

}  // namespace

Md2Digest Md2(std::span<const uint8_t> message) {
  // Padding: n bytes of value n bring the length to a multiple of 16 (n = 16 for an aligned one).
  std::vector<uint8_t> data(message.begin(), message.end());
  const uint8_t pad = static_cast<uint8_t>(16 - data.size() % 16);
  data.insert(data.end(), pad, pad);
  // The checksum block, appended.
  uint8_t checksum[16] = {};
  uint8_t last = 0;
  for (size_t block = 0; block < data.size(); block += 16) {
    for (int j = 0; j < 16; ++j) {
      checksum[j] ^= kPiSubst[data[block + j] ^ last];
      last = checksum[j];
    }
  }
  data.insert(data.end(), checksum, checksum + 16);
  // The 48-byte state, 18 rounds per block.
  uint8_t x[48] = {};
  for (size_t block = 0; block < data.size(); block += 16) {
    for (int j = 0; j < 16; ++j) {
      x[16 + j] = data[block + j];
      x[32 + j] = static_cast<uint8_t>(x[16 + j] ^ x[j]);
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; ++round) {
      for (uint8_t& b : x) t = b = static_cast<uint8_t>(b ^ kPiSubst[t]);
      t = static_cast<uint8_t>(t + round);
    }
  }
  Md2Digest digest;
  for (int j = 0; j < 16; ++j) digest[j] = x[j];
  return digest;
}

Md2Digest HmacMd2(std::span<const uint8_t, 16> key, std::span<const uint8_t> message) {
  std::vector<uint8_t> inner(16);
  for (int j = 0; j < 16; ++j) inner[j] = static_cast<uint8_t>(key[j] ^ 0x36);
  inner.insert(inner.end(), message.begin(), message.end());
  const Md2Digest inner_digest = Md2(inner);
  std::vector<uint8_t> outer(16);
  for (int j = 0; j < 16; ++j) outer[j] = static_cast<uint8_t>(key[j] ^ 0x5c);
  outer.insert(outer.end(), inner_digest.begin(), inner_digest.end());
  return Md2(outer);
}

}  // namespace flyt::libcuda
