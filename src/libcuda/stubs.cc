// libcuda.so.1's table of exported driver functions, and the stubs of those flyt does not
// implement (symbols.h). This file must not include cuda.h: it declares every entry point under
// its exported name with a signature of its own (a stub ignores its arguments, which the calling
// convention lets a function do).
#include <algorithm>
#include <string_view>
#include <vector>

#include "libcuda/symbols.h"

namespace flyt::libcuda {
int UnsupportedEntryPoint(const char* symbol);  // driver.cc: logs once, CUDA_ERROR_NOT_SUPPORTED
}  // namespace flyt::libcuda

// Weak, so that an api_*.cc definition of the same symbol replaces the stub at link time.
#define FLYT_PROC(name, version, variant, symbol)                                        \
  extern "C" __attribute__((weak, visibility("default"))) int symbol() {                 \
    return flyt::libcuda::UnsupportedEntryPoint(#symbol);                                \
  }
#include "libcuda/proc_table.def"
#undef FLYT_PROC

namespace flyt::libcuda {
namespace {

struct Exported {
  std::string_view symbol;
  void* function;
};

const std::vector<Exported>& Table() {
  static const std::vector<Exported>* table = [] {
    auto* t = new std::vector<Exported>{
#define FLYT_PROC(name, version, variant, symbol) {#symbol, reinterpret_cast<void*>(&symbol)},
#include "libcuda/proc_table.def"
#undef FLYT_PROC
    };
    std::sort(t->begin(), t->end(),
              [](const Exported& a, const Exported& b) { return a.symbol < b.symbol; });
    return t;
  }();
  return *table;
}

}  // namespace

void* ExportedFunction(std::string_view symbol) {
  const std::vector<Exported>& table = Table();
  auto it = std::lower_bound(table.begin(), table.end(), symbol,
                             [](const Exported& e, std::string_view s) { return e.symbol < s; });
  return it != table.end() && it->symbol == symbol ? it->function : nullptr;
}

}  // namespace flyt::libcuda
