// History: a bounded time series per GPU, kept in memory for charts and the history API.
//
// Each GPU has a ring of fixed capacity (retention ÷ interval points) of 32-byte points, so memory
// is bounded up front: 3600 points (1 h at 1 s) is 112.5 KiB per GPU. Absent readings are NaN
// inside a point and absent (null) when served. Not thread-safe: the Monitor owns it under its
// lock.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace flyt::gpu {

struct HistoryPoint {
  int64_t t_ms = 0;  // Unix time, milliseconds
  float gpu_util_percent = NAN;
  float memory_util_percent = NAN;
  float memory_used_mib = NAN;
  float temperature_c = NAN;
  float power_draw_w = NAN;
  float sm_clock_mhz = NAN;
};
// The memory bound stated above depends on this size.
static_assert(sizeof(HistoryPoint) == 32, "HistoryPoint is 8 + 6 x 4 bytes");

class History {
 public:
  explicit History(size_t capacity_per_gpu)
      : capacity_(capacity_per_gpu == 0 ? 1 : capacity_per_gpu) {}

  void Add(uint32_t gpu_index, const HistoryPoint& point);

  // Points of `gpu_index` with t_ms >= since_ms, oldest first. With step_ms > 0, points are
  // averaged into buckets [k·step, (k+1)·step) (each reading over the points that have it), one
  // point per non-empty bucket stamped with the bucket start.
  std::vector<HistoryPoint> Query(uint32_t gpu_index, int64_t since_ms, int64_t step_ms) const;

  // Bytes reserved for points (all GPUs seen so far, at full capacity).
  size_t MemoryBytes() const { return rings_.size() * capacity_ * sizeof(HistoryPoint); }

 private:
  struct Ring {
    std::vector<HistoryPoint> points;
    size_t head = 0;  // next slot to write once full
  };
  size_t capacity_;
  std::map<uint32_t, Ring> rings_;
};

}  // namespace flyt::gpu
