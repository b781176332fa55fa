// Internal to the profiler: a fixed-capacity ring of values (the newest overwrites the oldest)
// and the quantile rule the profiler's windows use. Not thread-safe on its own: the Profiler's
// mutex guards every ring.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace flyt::profile::internal {

template <typename T>
class Ring {
 public:
  // Allocates the whole capacity now, so that memory does not grow later.
  void Reset(size_t capacity) {
    buf_.assign(std::max<size_t>(capacity, 1), T{});
    head_ = 0;
    size_ = 0;
  }
  void Clear() {
    head_ = 0;
    size_ = 0;
  }
  void Push(T v) {
    buf_[head_] = v;
    head_ = (head_ + 1) % buf_.size();
    if (size_ < buf_.size()) ++size_;
  }
  size_t size() const { return size_; }
  size_t capacity() const { return buf_.size(); }
  bool empty() const { return size_ == 0; }
  // The i-th newest value (0: the newest). Requires i < size().
  const T& Back(size_t i = 0) const { return buf_[(head_ + buf_.size() - 1 - i) % buf_.size()]; }
  T& Back(size_t i = 0) { return buf_[(head_ + buf_.size() - 1 - i) % buf_.size()]; }
  // Appends the newest min(n, size()) values to `out`, oldest first.
  template <typename U>
  void Tail(size_t n, std::vector<U>& out) const {
    n = std::min(n, size_);
    for (size_t i = n; i-- > 0;) out.push_back(static_cast<U>(Back(i)));
  }

 private:
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// The q-quantile (0..1) of `sorted` (ascending, non-empty) by linear interpolation between the
// closest ranks (NumPy's default, "type 7"): position q * (n - 1).
inline double QuantileSorted(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace flyt::profile::internal
