// SimAddressSpace: the device addresses of one simulated device (one SimBackend), which are taken
// and which are free. Every block of simulated device memory gets its device address here and
// gives it back when it goes, so that a device address is a number of the backend's own, not a
// host address: another server (another process) can then place an allocation at exactly the
// address a migrated client's pointers hold (Session::MallocAt).
//
// The space covers [kBase, kBase + kSize) = [2^47, 2^47 + 2^46): never a valid user-space host
// address on x86-64 (a client cannot confuse a device address with its own pointers, and managed
// memory can alias host addresses below kBase), still 48 bits wide. Allocation is first fit over
// the free ranges in address order, starting at an origin (the base unless given; a SimBackend
// picks a random one, so that the clients of a process per client, each with a backend of its
// own, do not all get the same addresses, much as address-space randomisation gives processes
// different ones) and wrapping round to the base; a range given back joins its free neighbours. A
// range is the size asked rounded up to 256 bytes; it starts on a 256-byte boundary, or a 2 MiB one
// for sizes of 2 MiB and more, as cudaMalloc places memory. Reserve takes any free range,
// wherever the origin is.
//
// Thread safety: every method may be called from any thread (the backend's sessions share it).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

#include "common/mutex.h"

namespace flyt::remote::sim_internal {

class SimAddressSpace {
 public:
  static constexpr uint64_t kBase = uint64_t{1} << 47;
  static constexpr uint64_t kSize = uint64_t{1} << 46;
  static constexpr uint64_t kSmallAlignment = 256;
  static constexpr uint64_t kLargeAlignment = uint64_t{2} << 20;

  // The whole space, or (tests) a smaller one at `base`, which must be 2 MiB aligned; first fit
  // starts at `origin` (0: the base; else it is rounded down to 2 MiB and kept inside the space).
  explicit SimAddressSpace(uint64_t base = kBase, uint64_t size = kSize, uint64_t origin = 0)
      : base_(base), end_(base + size) {
    if (size != 0) free_.emplace(base, size);
    if (origin > base_ && origin < end_) {
      origin_ = base_ + (origin - base_) / kLargeAlignment * kLargeAlignment;
    }
  }
  SimAddressSpace(const SimAddressSpace&) = delete;
  SimAddressSpace& operator=(const SimAddressSpace&) = delete;

  // The range a request of `bytes` takes: `bytes` (at least 1) rounded up to 256.
  static uint64_t Extent(uint64_t bytes) {
    if (bytes == 0) bytes = 1;
    return (bytes + kSmallAlignment - 1) / kSmallAlignment * kSmallAlignment;
  }
  static uint64_t Alignment(uint64_t bytes) {
    return bytes >= kLargeAlignment ? kLargeAlignment : kSmallAlignment;
  }

  // The lowest free, suitably aligned address with room for `bytes`, now taken; nullopt when no
  // free range has room.
  std::optional<uint64_t> Allocate(uint64_t bytes) FLYT_EXCLUDES(mu_) {
    if (bytes > end_ - base_) return std::nullopt;
    const uint64_t extent = Extent(bytes);
    const uint64_t align = Alignment(bytes);
    // Where in [from, to) an aligned range of `extent` starts, if it fits.
    auto fit = [&](uint64_t from, uint64_t to) -> std::optional<uint64_t> {
      const uint64_t start = (from + align - 1) / align * align;
      if (start < to && to - start >= extent) return start;
      return std::nullopt;
    };
    MutexLock lock(mu_);
    // From the origin up (the part of the free range that holds it first), then from the base.
    auto it = free_.upper_bound(origin_);
    if (it != free_.begin()) {
      auto holder = std::prev(it);
      if (auto start = fit(origin_, holder->first + holder->second)) {
        Take(holder, *start, extent);
        return start;
      }
    }
    for (; it != free_.end(); ++it) {
      if (auto start = fit(it->first, it->first + it->second)) {
        Take(it, *start, extent);
        return start;
      }
    }
    for (it = free_.begin(); it != free_.end() && it->first < origin_; ++it) {
      if (auto start = fit(it->first, it->first + it->second)) {
        Take(it, *start, extent);
        return start;
      }
    }
    return std::nullopt;
  }

  // Takes exactly [address, address + Extent(bytes)): false (and nothing taken) when any byte of
  // it is taken already or outside the space, or `address` is not 256-byte aligned.
  bool Reserve(uint64_t address, uint64_t bytes) FLYT_EXCLUDES(mu_) {
    if (address % kSmallAlignment != 0 || address < base_ || bytes > end_ - base_) return false;
    const uint64_t extent = Extent(bytes);
    if (extent > end_ - address) return false;
    MutexLock lock(mu_);
    auto it = free_.upper_bound(address);
    if (it == free_.begin()) return false;
    --it;
    if (it->first + it->second < address + extent) return false;
    Take(it, address, extent);
    return true;
  }

  // Gives back [address, address + Extent(bytes)), as Allocate or Reserve took it. A range that
  // is not wholly taken (a double release) is ignored rather than freed twice.
  void Release(uint64_t address, uint64_t bytes) FLYT_EXCLUDES(mu_) {
    const uint64_t extent = Extent(bytes);
    if (address < base_ || address > end_ || extent > end_ - address) return;
    MutexLock lock(mu_);
    auto next = free_.lower_bound(address);
    if (next != free_.end() && next->first < address + extent) return;
    uint64_t start = address;
    uint64_t size = extent;
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      const uint64_t prev_end = prev->first + prev->second;
      if (prev_end > address) return;
      if (prev_end == address) {
        start = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && next->first == address + extent) {
      size += next->second;
      free_.erase(next);
    }
    free_.emplace(start, size);
  }

  // What the tests look at: the free bytes and the number of free ranges.
  uint64_t free_bytes() const FLYT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    uint64_t total = 0;
    for (const auto& [start, size] : free_) total += size;
    return total;
  }
  size_t free_ranges() const FLYT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return free_.size();
  }
  uint64_t base() const { return base_; }
  uint64_t end() const { return end_; }
  uint64_t origin() const { return origin_; }

 private:
  // Cuts [start, start + extent) out of the free range `it`, which holds it.
  void Take(std::map<uint64_t, uint64_t>::iterator it, uint64_t start, uint64_t extent)
      FLYT_REQUIRES(mu_) {
    const uint64_t range_start = it->first;
    const uint64_t range_end = it->first + it->second;
    free_.erase(it);
    if (start > range_start) free_.emplace(range_start, start - range_start);
    if (start + extent < range_end) free_.emplace(start + extent, range_end - (start + extent));
  }

  const uint64_t base_;
  const uint64_t end_;
  uint64_t origin_ = base_;  // set once, in the constructor
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> free_ FLYT_GUARDED_BY(mu_);  // start -> size, disjoint, apart
};

}  // namespace flyt::remote::sim_internal
