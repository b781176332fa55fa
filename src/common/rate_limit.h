// RateLimiter: one token bucket per key (a bearer token's holder, a client address), so that one
// caller's flood of fast, complete requests costs the others nothing. A bucket holds up to
// `burst` requests and refills at `rate_per_second`; a request takes one, and a request that finds
// less than one is refused with the time until one is there (the answer's Retry-After).
//
// The map of buckets is bounded: a bucket idle long enough to be full again says nothing a new
// one would not, so it is dropped as soon as it is the least recently used; past `max_keys`
// buckets the least recently used one goes even when it is not full (that key then starts again
// with a full bucket — the price of a bound that a flood of distinct keys cannot push past).
//
// Time comes from the injected Clock. Thread-safe (one lock; each call is O(1) amortised).
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"

namespace flyt {

struct RateLimit {
  double rate_per_second = 0;  // 0: not limited
  double burst = 1;            // requests at once above the rate (at least 1)
  bool limited() const { return rate_per_second > 0; }
};

class RateLimiter {
 public:
  struct Verdict {
    bool allowed = true;
    std::chrono::milliseconds retry_after{0};  // when refused: until one request is available
  };

  explicit RateLimiter(Clock& clock, size_t max_keys = 10000);

  // Takes one request from `key`'s bucket under `limit` (a limit that is not limited always
  // allows and keeps no bucket).
  Verdict Take(std::string_view key, const RateLimit& limit);
  size_t size() const;

  // A Retry-After header's value for a wait: whole seconds, rounded up, at least 1.
  static int RetryAfterSeconds(std::chrono::milliseconds wait);

 private:
  struct Bucket {
    std::string key;
    double tokens = 0;
    double capacity = 1;
    double rate = 0;
    std::chrono::steady_clock::time_point last;
  };
  using List = std::list<Bucket>;  // most recently used first

  static double Refilled(const Bucket& b, std::chrono::steady_clock::time_point now);
  void DropIdleLocked(std::chrono::steady_clock::time_point now) FLYT_REQUIRES(mu_);

  Clock& clock_;
  const size_t max_keys_;
  mutable Mutex mu_;
  List lru_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<std::string_view, List::iterator> index_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt
