// Token buckets per key on a FakeClock: the burst, the refill, the wait a refusal names, and the
// bound on the number of buckets a flood of distinct keys can make.
#include "common/rate_limit.h"

#include <gtest/gtest.h>

#include <string>

namespace flyt {
namespace {

using std::chrono::milliseconds;

TEST(RateLimiterTest, BurstThenRate) {
  FakeClock clock;
  RateLimiter limiter(clock);
  const RateLimit limit{2.0, 3.0};  // 2 per second, 3 at once
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Take("a", limit).allowed) << i;
  RateLimiter::Verdict v = limiter.Take("a", limit);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.retry_after, milliseconds(500));  // one request back at 2 per second
  EXPECT_EQ(RateLimiter::RetryAfterSeconds(v.retry_after), 1);
  // Another key has a bucket of its own.
  EXPECT_TRUE(limiter.Take("b", limit).allowed);
  clock.Advance(milliseconds(499));
  EXPECT_FALSE(limiter.Take("a", limit).allowed);
  clock.Advance(milliseconds(2));
  EXPECT_TRUE(limiter.Take("a", limit).allowed);
  EXPECT_FALSE(limiter.Take("a", limit).allowed);
  // Long idle: full again, never more than the burst.
  clock.Advance(std::chrono::hours(1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Take("a", limit).allowed) << i;
  EXPECT_FALSE(limiter.Take("a", limit).allowed);
}

TEST(RateLimiterTest, RetryAfterIsWholeSecondsRoundedUp) {
  FakeClock clock;
  RateLimiter limiter(clock);
  const RateLimit slow{0.4, 1.0};  // one request every 2.5 s
  EXPECT_TRUE(limiter.Take("k", slow).allowed);
  RateLimiter::Verdict v = limiter.Take("k", slow);
  ASSERT_FALSE(v.allowed);
  EXPECT_EQ(v.retry_after, milliseconds(2500));
  EXPECT_EQ(RateLimiter::RetryAfterSeconds(v.retry_after), 3);
  EXPECT_EQ(RateLimiter::RetryAfterSeconds(milliseconds(1)), 1);
  EXPECT_EQ(RateLimiter::RetryAfterSeconds(milliseconds(0)), 1);
  EXPECT_EQ(RateLimiter::RetryAfterSeconds(milliseconds(2000)), 2);
}

TEST(RateLimiterTest, NoLimitKeepsNoBucket) {
  FakeClock clock;
  RateLimiter limiter(clock);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter.Take("node", RateLimit{}).allowed);
  EXPECT_EQ(limiter.size(), 0u);
}

TEST(RateLimiterTest, DistinctKeysCannotGrowTheMapPastItsBound) {
  FakeClock clock;
  RateLimiter limiter(clock, 100);
  const RateLimit limit{1.0, 5.0};
  for (int i = 0; i < 10000; ++i) {
    // Each key spends part of its bucket, so none is idle (full) when the next one comes.
    EXPECT_TRUE(limiter.Take("key-" + std::to_string(i), limit).allowed);
    EXPECT_LE(limiter.size(), 100u);
  }
  EXPECT_EQ(limiter.size(), 100u);
}

TEST(RateLimiterTest, IdleBucketsAreDropped) {
  FakeClock clock;
  RateLimiter limiter(clock);
  const RateLimit limit{10.0, 10.0};
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(limiter.Take("k" + std::to_string(i), limit).allowed);
  EXPECT_EQ(limiter.size(), 50u);
  clock.Advance(std::chrono::seconds(1));  // every bucket is full again
  ASSERT_TRUE(limiter.Take("fresh", limit).allowed);
  EXPECT_EQ(limiter.size(), 1u);
}

TEST(RateLimiterTest, AKeyFollowsItsLimitWhenItChanges) {
  FakeClock clock;
  RateLimiter limiter(clock);
  EXPECT_TRUE(limiter.Take("k", RateLimit{1.0, 10.0}).allowed);
  // A smaller burst caps what the bucket holds at once.
  EXPECT_TRUE(limiter.Take("k", RateLimit{1.0, 1.0}).allowed);
  EXPECT_FALSE(limiter.Take("k", RateLimit{1.0, 1.0}).allowed);
}

}  // namespace
}  // namespace flyt
