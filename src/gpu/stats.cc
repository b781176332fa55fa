#include "gpu/stats.h"

#include <algorithm>
#include <cmath>

namespace flyt::gpu {
namespace {

constexpr double kGrowth = 1.01;    // bucket width: 1% of its lower edge
constexpr double kSmallest = 1e-3;  // values at or below this share bucket kZeroBucket
constexpr int32_t kZeroBucket = -1;
constexpr int32_t kMaxBucket = 2400;  // 1e-3 · 1.01^2400 ≈ 2·10^7: larger values share the top

}  // namespace

int32_t QuantileHistogram::BucketOf(double x) {
  if (!(x > kSmallest)) return kZeroBucket;
  double b = std::floor(std::log(x / kSmallest) / std::log(kGrowth));
  return static_cast<int32_t>(std::min<double>(b, kMaxBucket));
}

void QuantileHistogram::Add(double x) {
  Bucket& b = buckets_[BucketOf(x)];
  ++b.count;
  b.sum += x;
  ++count_;
}

std::optional<double> QuantileHistogram::Quantile(double p) const {
  if (count_ == 0) return std::nullopt;
  // Nearest rank: the smallest value with at least ceil(p·n) samples at or below it.
  auto rank =
      static_cast<uint64_t>(std::ceil(std::clamp(p, 0.0, 1.0) * static_cast<double>(count_)));
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  for (const auto& [index, bucket] : buckets_) {
    seen += bucket.count;
    if (seen >= rank) return bucket.sum / static_cast<double>(bucket.count);
  }
  const Bucket& last = buckets_.rbegin()->second;
  return last.sum / static_cast<double>(last.count);
}

void RunningStats::Add(double x) {
  if (std::isnan(x)) return;
  if (count_ == 0) {
    min_ = max_ = x;
  } else {
    min_ = std::min(min_, x);
    max_ = std::max(max_, x);
  }
  sum_ += x;
  ++count_;
  histogram_.Add(x);
}

std::optional<Summary> RunningStats::Get() const {
  if (count_ == 0) return std::nullopt;
  Summary s;
  s.samples = count_;
  s.min = min_;
  s.max = max_;
  s.mean = sum_ / static_cast<double>(count_);
  s.p50 = std::clamp(*histogram_.Quantile(0.50), min_, max_);
  s.p95 = std::clamp(*histogram_.Quantile(0.95), min_, max_);
  s.p99 = std::clamp(*histogram_.Quantile(0.99), min_, max_);
  return s;
}

}  // namespace flyt::gpu
