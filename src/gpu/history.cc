#include "gpu/history.h"

#include <array>

namespace flyt::gpu {

void History::Add(uint32_t gpu_index, const HistoryPoint& point) {
  Ring& ring = rings_[gpu_index];
  if (ring.points.capacity() < capacity_) ring.points.reserve(capacity_);
  if (ring.points.size() < capacity_) {
    ring.points.push_back(point);
  } else {
    ring.points[ring.head] = point;
    ring.head = (ring.head + 1) % capacity_;
  }
}

std::vector<HistoryPoint> History::Query(uint32_t gpu_index, int64_t since_ms,
                                         int64_t step_ms) const {
  std::vector<HistoryPoint> out;
  auto it = rings_.find(gpu_index);
  if (it == rings_.end()) return out;
  const Ring& ring = it->second;
  const size_t n = ring.points.size();
  const size_t start = n < capacity_ ? 0 : ring.head;
  std::vector<HistoryPoint> raw;
  raw.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const HistoryPoint& p = ring.points[(start + i) % n];
    if (p.t_ms >= since_ms) raw.push_back(p);
  }
  if (step_ms <= 0) return raw;

  constexpr size_t kFields = 6;
  auto fields = [](HistoryPoint& p) {
    return std::array<float*, kFields>{&p.gpu_util_percent, &p.memory_util_percent,
                                       &p.memory_used_mib,  &p.temperature_c,
                                       &p.power_draw_w,     &p.sm_clock_mhz};
  };
  size_t i = 0;
  while (i < raw.size()) {
    int64_t bucket = raw[i].t_ms - ((raw[i].t_ms % step_ms) + step_ms) % step_ms;
    std::array<double, kFields> sum{};
    std::array<int, kFields> count{};
    for (; i < raw.size() && raw[i].t_ms < bucket + step_ms; ++i) {
      auto f = fields(raw[i]);
      for (size_t k = 0; k < kFields; ++k) {
        if (!std::isnan(*f[k])) {
          sum[k] += *f[k];
          ++count[k];
        }
      }
    }
    HistoryPoint avg;
    avg.t_ms = bucket;
    auto f = fields(avg);
    for (size_t k = 0; k < kFields; ++k) {
      if (count[k] > 0) *f[k] = static_cast<float>(sum[k] / count[k]);
    }
    out.push_back(avg);
  }
  return out;
}

}  // namespace flyt::gpu
