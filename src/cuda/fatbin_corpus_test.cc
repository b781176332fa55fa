// Replays the fuzzer's seed corpus (tests/data/cuda/corpus, which also keeps every input the
// fuzzer ever found a bug with) through the fuzz target's function in the normal build, plus a
// fixed set of mutations of each file, so that CI exercises the parsers' error paths without
// clang. Nothing is asserted but survival: every input must come back, with or without an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "cuda/testing.h"

namespace flyt::cuda {
int FuzzOneInput(const uint8_t* data, size_t size);
namespace {

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(testing::DataPath("corpus"))) {
    if (e.is_regular_file()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void Replay(const std::vector<std::byte>& input) {
  // An exact-size heap copy, so that reads past the end are visible to sanitizers.
  std::vector<uint8_t> copy(input.size());
  std::memcpy(copy.data(), input.data(), input.size());
  FuzzOneInput(copy.data(), copy.size());
}

TEST(FatbinCorpusTest, EveryCorpusFileComesBack) {
  const auto files = CorpusFiles();
  ASSERT_GE(files.size(), 8u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    Replay(testing::ReadBytes(f));
  }
}

TEST(FatbinCorpusTest, MutatedCorpusFilesComeBack) {
  std::mt19937 rng(20250522);  // fixed: the same mutations on every run
  for (const std::string& f : CorpusFiles()) {
    SCOPED_TRACE(f);
    const std::vector<std::byte> original = testing::ReadBytes(f);
    if (original.empty()) continue;
    std::uniform_int_distribution<size_t> pos(0, original.size() - 1);
    for (int round = 0; round < 300; ++round) {
      std::vector<std::byte> m = original;
      const int edits = 1 + round % 4;
      for (int e = 0; e < edits; ++e) {
        const size_t at = pos(rng);
        switch (rng() % 4) {
          case 0:  // flip a bit
            m[at] ^= std::byte{static_cast<uint8_t>(1u << (rng() % 8))};
            break;
          case 1:  // an extreme byte
            m[at] = std::byte{static_cast<uint8_t>(rng() % 2 ? 0xff : 0x00)};
            break;
          case 2:  // an extreme 32-bit field
            if (at + 4 <= m.size()) {
              const uint32_t v = rng() % 2 ? 0xffffffffu : 0x7fffffffu;
              std::memcpy(&m[at], &v, 4);
            }
            break;
          default:  // cut the tail
            m.resize(at);
            break;
        }
        if (m.empty()) break;
        pos = std::uniform_int_distribution<size_t>(0, m.size() - 1);
      }
      Replay(m);
      pos = std::uniform_int_distribution<size_t>(0, original.size() - 1);
    }
  }
}

}  // namespace
}  // namespace flyt::cuda
