// AddressRanges: a set of disjoint [base, base + size) ranges, each with a small value, looked up
// by any address inside it. The server keeps one per client to check that every copy and memset
// stays inside one of that client's own allocations or module globals; the client runtime keeps
// one to tell device pointers from host pointers (cudaMemcpyDefault, cudaPointerGetAttributes).
//
// Not thread-safe: the owner serialises access (the server's client thread, the runtime's lock).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

namespace flyt::remote {

template <typename Value>
class AddressRanges {
 public:
  struct Range {
    uint64_t base = 0;
    uint64_t size = 0;
    Value value{};
  };

  // Adds a range; false (and nothing added) when it is empty, wraps around, or overlaps one that
  // is already there.
  bool Add(uint64_t base, uint64_t size, Value value = {}) {
    if (size == 0 || base + size < base) return false;
    auto next = ranges_.lower_bound(base);
    if (next != ranges_.end() && next->first < base + size) return false;
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size > base) return false;
    }
    ranges_.emplace(base, Entry{size, std::move(value)});
    return true;
  }

  // Removes the range that starts exactly at `base`; returns it, or nullopt if there is none.
  std::optional<Range> Remove(uint64_t base) {
    auto it = ranges_.find(base);
    if (it == ranges_.end()) return std::nullopt;
    Range out{it->first, it->second.size, std::move(it->second.value)};
    ranges_.erase(it);
    return out;
  }

  // The range containing `address`.
  std::optional<Range> Find(uint64_t address) const {
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    if (address - it->first >= it->second.size) return std::nullopt;
    return Range{it->first, it->second.size, it->second.value};
  }

  // Whether [address, address + size) lies inside one range (size 0 counts as inside when the
  // address itself is).
  bool Contains(uint64_t address, uint64_t size) const {
    auto range = Find(address);
    if (!range) return false;
    uint64_t offset = address - range->base;
    return size <= range->size - offset;
  }

  size_t size() const { return ranges_.size(); }
  bool empty() const { return ranges_.empty(); }

  // Calls fn(base, size, value) for every range, in address order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [base, entry] : ranges_) fn(base, entry.size, entry.value);
  }

  void Clear() { ranges_.clear(); }

 private:
  struct Entry {
    uint64_t size;
    Value value;
  };
  std::map<uint64_t, Entry> ranges_;
};

}  // namespace flyt::remote
