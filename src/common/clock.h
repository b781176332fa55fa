// Clock: the one way flyt code reads time, injected wherever time matters so that tests can move
// time by hand instead of sleeping (docs/conventions.md: "Clocks are injected").
//
// SystemClock reads the real clocks. FakeClock starts at a fixed instant and moves only when told;
// its methods are thread-safe (an atomic offset), so a test thread may advance it while a
// monitor thread reads it.
#pragma once

#include <atomic>
#include <chrono>

namespace flyt {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for intervals and deadlines.
  virtual std::chrono::steady_clock::time_point SteadyNow() const = 0;
  // Wall-clock time, for timestamps shown to people and stored.
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point SteadyNow() const override {
    return std::chrono::steady_clock::now();
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
  // A process-wide instance; it has no state, so sharing it is safe.
  static SystemClock& Instance() {
    static SystemClock clock;
    return clock;
  }
};

class FakeClock final : public Clock {
 public:
  // Starts at 2026-01-01T00:00:00Z on the wall clock.
  FakeClock() = default;

  std::chrono::steady_clock::time_point SteadyNow() const override {
    return std::chrono::steady_clock::time_point(Offset());
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::time_point(std::chrono::seconds(kWallStartSeconds)) +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(Offset());
  }
  void Advance(std::chrono::nanoseconds by) { offset_ns_.fetch_add(by.count()); }

  static constexpr long long kWallStartSeconds = 1767225600;  // 2026-01-01T00:00:00Z

 private:
  std::chrono::nanoseconds Offset() const { return std::chrono::nanoseconds(offset_ns_.load()); }
  std::atomic<long long> offset_ns_{0};
};

}  // namespace flyt
