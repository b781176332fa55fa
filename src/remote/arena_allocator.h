// ArenaAllocator: hands out page-aligned blocks of a fixed range (the shared-memory arena that
// backs a client's pinned host memory, shm_channel.h) by offset. First fit over the free blocks,
// kept by offset; a freed block merges with free neighbours. Allocations are rounded up to
// kAlignment, so every block starts on a page.
//
// Not thread-safe: the runtime holds its lock around it.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

namespace flyt::remote {

class ArenaAllocator {
 public:
  static constexpr uint64_t kAlignment = 4096;

  explicit ArenaAllocator(uint64_t bytes) : bytes_(bytes / kAlignment * kAlignment) {
    if (bytes_ > 0) free_[0] = bytes_;
  }

  // A block of at least `bytes` (rounded up to kAlignment; 0 counts as 1), or nullopt when no
  // free block is large enough.
  std::optional<uint64_t> Allocate(uint64_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes > bytes_) return std::nullopt;
    const uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size) continue;
      const uint64_t offset = it->first;
      const uint64_t rest = it->second - size;
      free_.erase(it);
      if (rest > 0) free_[offset + size] = rest;
      used_[offset] = size;
      used_bytes_ += size;
      return offset;
    }
    return std::nullopt;
  }

  // Frees the block that starts at `offset`; false if no block starts there.
  bool Free(uint64_t offset) {
    auto used = used_.find(offset);
    if (used == used_.end()) return false;
    uint64_t start = offset, size = used->second;
    used_bytes_ -= size;
    used_.erase(used);
    auto next = free_.lower_bound(start);
    if (next != free_.end() && next->first == start + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_[start] = size;
    return true;
  }

  // The size of the block that starts at `offset` (0: none).
  uint64_t BlockSize(uint64_t offset) const {
    auto it = used_.find(offset);
    return it == used_.end() ? 0 : it->second;
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }
  size_t free_blocks() const { return free_.size(); }

 private:
  uint64_t bytes_;
  uint64_t used_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size
  std::map<uint64_t, uint64_t> used_;  // offset -> size
};

}  // namespace flyt::remote
