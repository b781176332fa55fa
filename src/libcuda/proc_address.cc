#include "libcuda/proc_address.h"

#include <algorithm>

namespace flyt::libcuda {
namespace {

#define FLYT_STR2(x) #x
#define FLYT_STR(x) FLYT_STR2(x)
constexpr ProcEntry kTable[] = {
#define FLYT_PROC(name, version, variant, symbol) \
  {#name, version, FLYT_STR(variant), #symbol},
#include "libcuda/proc_table.def"
#undef FLYT_PROC
};
#undef FLYT_STR
#undef FLYT_STR2

}  // namespace

std::span<const ProcEntry> ProcTable() { return kTable; }

ProcLookup ResolveProc(std::string_view name, int cuda_version, uint64_t flags) {
  // The rows of one name are adjacent (the generator sorts by name).
  const auto [first, last] = std::equal_range(
      std::begin(kTable), std::end(kTable), ProcEntry{name, 0, "", ""},
      [](const ProcEntry& a, const ProcEntry& b) { return a.name < b.name; });
  if (first == last) return {ProcStatus::kSymbolNotFound, nullptr};
  const ProcEntry* legacy = nullptr;
  const ProcEntry* per_thread = nullptr;
  for (const ProcEntry* e = first; e != last; ++e) {
    if (e->version > cuda_version) continue;
    const ProcEntry*& best = e->variant.empty() ? legacy : per_thread;
    if (best == nullptr || e->version > best->version) best = e;
  }
  if (legacy == nullptr) return {ProcStatus::kVersionNotSufficient, nullptr};
  // A per-thread form counts only for the ABI the caller gets: one older than that ABI has the
  // older signature.
  if ((flags & kProcPerThreadDefaultStream) != 0 && per_thread != nullptr &&
      per_thread->version >= legacy->version) {
    return {ProcStatus::kFound, per_thread};
  }
  return {ProcStatus::kFound, legacy};
}

}  // namespace flyt::libcuda
