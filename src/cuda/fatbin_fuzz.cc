// libFuzzer target for the cuda library: any bytes through every parser. The first bytes pick the
// reader (ELF magic: ElfFile and ParseCubin; fatbin magic: SplitFatbins, ParseFatbin and
// KernelsOf; anything else: ParsePtx), so one corpus covers all three. Errors are expected and
// ignored; a crash, a sanitizer report or a hang is a bug.
//
// Build with clang: cmake -DCMAKE_CXX_COMPILER=clang++ -DFLYT_BUILD_FUZZ=ON ...; run
// build/bin/fatbin_fuzz -max_total_time=300 tests/data/cuda/corpus. fatbin_corpus_test replays the
// same function over the corpus in the normal build.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "cuda/elf.h"
#include "cuda/fatbin.h"
#include "cuda/image.h"

namespace flyt::cuda {

int FuzzOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  // What flyt's libcuda.so.1 and the sim backend read of a module image of any kind.
  if (auto kernels = KernelsOfImage(bytes); kernels.ok() && !kernels->empty()) {
    std::vector<std::byte> arg(64);
    uint32_t slots = 0;
    for (const KernelParam& p : (*kernels)[0].params) slots = std::max(slots, p.ordinal + 1);
    std::vector<void*> args(slots, arg.data());
    if (std::all_of((*kernels)[0].params.begin(), (*kernels)[0].params.end(),
                    [](const KernelParam& p) { return p.size_bytes <= 64; })) {
      (void)PackParameters((*kernels)[0], args.data());
    }
  }
  if (size >= 4 && std::memcmp(data,
                               "\x7f"
                               "ELF",
                               4) == 0) {
    if (auto elf = ElfFile::Parse(bytes); elf.ok()) {
      (void)elf->Symbols();
      for (const ElfSection& s : elf->sections()) (void)elf->FindSection(s.name);
    }
    (void)ParseCubin(bytes);
    return 0;
  }
  uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, data, 4);
  if (magic == kFatbinMagic) {
    (void)FatbinSize(bytes);
    if (auto spans = SplitFatbins(bytes); spans.ok()) {
      for (auto span : *spans) {
        if (auto fatbin = ParseFatbin(span); fatbin.ok()) (void)KernelsOf(*fatbin);
      }
    }
    if (auto fatbin = ParseFatbin(bytes); fatbin.ok()) (void)KernelsOf(*fatbin);
    return 0;
  }
  (void)ParsePtx(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

}  // namespace flyt::cuda

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return flyt::cuda::FuzzOneInput(data, size);
}
