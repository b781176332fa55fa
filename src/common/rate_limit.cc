#include "common/rate_limit.h"

#include <algorithm>
#include <cmath>

namespace flyt {

RateLimiter::RateLimiter(Clock& clock, size_t max_keys)
    : clock_(clock), max_keys_(std::max<size_t>(1, max_keys)) {}

double RateLimiter::Refilled(const Bucket& b, std::chrono::steady_clock::time_point now) {
  const double elapsed_s = std::chrono::duration<double>(now - b.last).count();
  return std::min(b.capacity, b.tokens + std::max(0.0, elapsed_s) * b.rate);
}

void RateLimiter::DropIdleLocked(std::chrono::steady_clock::time_point now) {
  // The least recently used buckets that are full again: forgetting them changes nothing.
  while (!lru_.empty() && Refilled(lru_.back(), now) >= lru_.back().capacity) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

RateLimiter::Verdict RateLimiter::Take(std::string_view key, const RateLimit& limit) {
  if (!limit.limited()) return {};
  const auto now = clock_.SteadyNow();
  const double capacity = std::max(1.0, limit.burst);
  MutexLock lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    DropIdleLocked(now);
    if (lru_.size() >= max_keys_) {
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
    lru_.push_front(Bucket{std::string(key), capacity, capacity, limit.rate_per_second, now});
    it = index_.emplace(lru_.front().key, lru_.begin()).first;
  } else if (it->second != lru_.begin()) {
    lru_.splice(lru_.begin(), lru_, it->second);
  }
  Bucket& b = *it->second;
  b.tokens = Refilled(b, now);
  b.last = now;
  // The limit of a key may change (a role's limit, a new config): the bucket follows it.
  b.capacity = capacity;
  b.rate = limit.rate_per_second;
  b.tokens = std::min(b.tokens, b.capacity);
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    DropIdleLocked(now);
    return {};
  }
  const double wait_s = (1.0 - b.tokens) / b.rate;
  Verdict v;
  v.allowed = false;
  v.retry_after = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(wait_s * 1000.0)));
  return v;
}

size_t RateLimiter::size() const {
  MutexLock lock(mu_);
  return lru_.size();
}

int RateLimiter::RetryAfterSeconds(std::chrono::milliseconds wait) {
  const int64_t s = (wait.count() + 999) / 1000;
  return static_cast<int>(std::clamp<int64_t>(s, 1, 24 * 3600));
}

}  // namespace flyt
