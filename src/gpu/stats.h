// Running statistics in bounded memory: min, max, mean and count exactly, and p50/p95/p99 from a
// log-bucketed histogram. Buckets are 1% wide (relative), so at most ~2,100 buckets cover
// 0.001 … 10^7 — whatever the number of samples — and each keeps the sum of its values, so a
// percentile is the mean of the values in its bucket: exact when they are all equal (a GPU at
// exactly 97% for most of a run reports p50 = 97, not an estimate near it), within 1% otherwise.
// Not thread-safe: one owner (the Monitor, under its lock).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace flyt::gpu {

class QuantileHistogram {
 public:
  void Add(double x);
  // Nearest-rank quantile (p in [0, 1]); nullopt before the first sample.
  std::optional<double> Quantile(double p) const;
  uint64_t count() const { return count_; }
  size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    uint64_t count = 0;
    double sum = 0;
  };
  static int32_t BucketOf(double x);
  std::map<int32_t, Bucket> buckets_;
  uint64_t count_ = 0;
};

struct Summary {
  uint64_t samples = 0;
  double min = 0, max = 0, mean = 0;
  double p50 = 0, p95 = 0, p99 = 0;
};

class RunningStats {
 public:
  void Add(double x);
  uint64_t count() const { return count_; }
  // nullopt when no sample was added.
  std::optional<Summary> Get() const;

 private:
  uint64_t count_ = 0;
  double min_ = 0, max_ = 0, sum_ = 0;
  QuantileHistogram histogram_;
};

}  // namespace flyt::gpu
