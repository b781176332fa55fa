// GranuleChunks: the bookkeeping of memory placed at given addresses when the device maps memory
// only in whole granules (the driver's virtual memory management: 2 MiB on current GPUs), used by
// the driver backend's MallocAt (driver_migration.cc). A migrated client's allocations sit where
// its old server's cuMemAlloc put them, several small ones often inside one granule; each is
// placed inside *chunks*: granule-aligned runs, each one reservation + physical memory + mapping,
// made for the granules an allocation needs that no chunk covers yet, shared by every allocation
// that overlaps them and released with the last of those. Chunks never split or merge.
//
// Pure bookkeeping, no driver calls: Plan says which runs to make, Commit records them (with what
// the caller made for each, `Payload`) and the allocation, Remove says which chunks to release.
// Not thread-safe; the session that owns it serialises its calls.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <vector>

namespace flyt::remote {

template <typename Payload>
class GranuleChunks {
 public:
  struct Run {
    uint64_t base = 0;
    uint64_t bytes = 0;
  };
  struct Chunk {
    uint64_t base = 0;
    uint64_t bytes = 0;
    Payload payload{};
  };

  explicit GranuleChunks(uint64_t granularity) : granularity_(granularity) {}

  uint64_t granularity() const { return granularity_; }
  bool empty() const { return allocations_.empty(); }
  size_t allocations() const { return allocations_.size(); }
  size_t chunks() const { return chunks_.size(); }

  // The granule-aligned runs [address, address + bytes) needs that no chunk covers, in address
  // order; nullopt when the range is empty, wraps, or overlaps an allocation already placed.
  std::optional<std::vector<Run>> Plan(uint64_t address, uint64_t bytes) const {
    if (bytes == 0 || address > UINT64_MAX - bytes) return std::nullopt;
    const uint64_t end = address + bytes;
    if (end > UINT64_MAX - granularity_) return std::nullopt;
    if (OverlapsAllocation(address, end)) return std::nullopt;
    const uint64_t first = address / granularity_ * granularity_;
    const uint64_t last = (end + granularity_ - 1) / granularity_ * granularity_;
    std::vector<Run> runs;
    uint64_t at = first;
    while (at < last) {
      if (std::optional<uint64_t> covered_to = CoveredTo(at)) {
        at = *covered_to;
        continue;
      }
      // Up to the next chunk, or the end.
      uint64_t stop = last;
      if (auto next = chunks_.upper_bound(at); next != chunks_.end() && next->first < stop) {
        stop = next->first;
      }
      runs.push_back(Run{at, stop - at});
      at = stop;
    }
    return runs;
  }

  // Records the chunks made for Plan's runs (payloads in the same order) and the allocation,
  // which uses every chunk it overlaps.
  void Commit(uint64_t address, uint64_t bytes, const std::vector<Run>& runs,
              std::vector<Payload> payloads) {
    for (size_t i = 0; i < runs.size(); ++i) {
      chunks_[runs[i].base] = Entry{runs[i].bytes, 0, std::move(payloads[i])};
    }
    const uint64_t end = address + bytes;
    for (auto it = FirstOverlapping(address); it != chunks_.end() && it->first < end; ++it) {
      ++it->second.users;
    }
    allocations_[address] = bytes;
  }

  // Forgets the allocation placed at exactly `address` (false: none is) and hands back the
  // chunks no allocation uses any more, which the caller releases.
  bool Remove(uint64_t address, std::vector<Chunk>& released) {
    auto a = allocations_.find(address);
    if (a == allocations_.end()) return false;
    const uint64_t end = address + a->second;
    allocations_.erase(a);
    for (auto it = FirstOverlapping(address); it != chunks_.end() && it->first < end;) {
      if (--it->second.users == 0) {
        released.push_back(Chunk{it->first, it->second.bytes, std::move(it->second.payload)});
        it = chunks_.erase(it);
      } else {
        ++it;
      }
    }
    return true;
  }

  // Every chunk, for the session's cleanup; forgets everything.
  std::vector<Chunk> TakeAll() {
    std::vector<Chunk> all;
    for (auto& [base, e] : chunks_) all.push_back(Chunk{base, e.bytes, std::move(e.payload)});
    chunks_.clear();
    allocations_.clear();
    return all;
  }

 private:
  struct Entry {
    uint64_t bytes = 0;
    uint64_t users = 0;
    Payload payload{};
  };
  using Chunks = std::map<uint64_t, Entry>;

  // The end of the chunk that covers `at`, if one does.
  std::optional<uint64_t> CoveredTo(uint64_t at) const {
    auto it = chunks_.upper_bound(at);
    if (it == chunks_.begin()) return std::nullopt;
    --it;
    if (at >= it->first + it->second.bytes) return std::nullopt;
    return it->first + it->second.bytes;
  }
  typename Chunks::iterator FirstOverlapping(uint64_t address) {
    auto it = chunks_.upper_bound(address);
    if (it != chunks_.begin()) {
      auto prev = std::prev(it);
      if (address < prev->first + prev->second.bytes) return prev;
    }
    return it;
  }
  bool OverlapsAllocation(uint64_t address, uint64_t end) const {
    auto it = allocations_.lower_bound(address);
    if (it != allocations_.end() && it->first < end) return true;
    if (it != allocations_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second > address) return true;
    }
    return false;
  }

  uint64_t granularity_;
  Chunks chunks_;
  std::map<uint64_t, uint64_t> allocations_;  // address -> bytes
};

}  // namespace flyt::remote
