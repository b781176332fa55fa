// Mutex, MutexLock and CondVar: locks whose use the compiler checks.
//
// libstdc++'s std::mutex carries no thread-safety attributes, so clang's -Wthread-safety cannot
// see who holds it. These thin wrappers carry them: a member declared `FLYT_GUARDED_BY(mu_)` may
// be touched only with `mu_` held, a function declared `FLYT_REQUIRES(mu_)` may be called only
// with it held, and the clang build (scripts/test.sh, -Wthread-safety -Werror) rejects code that
// breaks either contract. GCC ignores the attributes; the behaviour is std::mutex's.
//
// Thread-safety: a Mutex is shared by the threads it serialises; a MutexLock belongs to the thread
// that made it; a CondVar may be waited on and notified from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define FLYT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FLYT_THREAD_ANNOTATION(x)
#endif

#define FLYT_CAPABILITY(name) FLYT_THREAD_ANNOTATION(capability(name))
#define FLYT_SCOPED_CAPABILITY FLYT_THREAD_ANNOTATION(scoped_lockable)
#define FLYT_GUARDED_BY(mu) FLYT_THREAD_ANNOTATION(guarded_by(mu))
#define FLYT_PT_GUARDED_BY(mu) FLYT_THREAD_ANNOTATION(pt_guarded_by(mu))
#define FLYT_REQUIRES(...) FLYT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define FLYT_EXCLUDES(...) FLYT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define FLYT_ACQUIRE(...) FLYT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define FLYT_RELEASE(...) FLYT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define FLYT_TRY_ACQUIRE(...) FLYT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define FLYT_ASSERT_CAPABILITY(x) FLYT_THREAD_ANNOTATION(assert_capability(x))
#define FLYT_RETURN_CAPABILITY(x) FLYT_THREAD_ANNOTATION(lock_returned(x))
// For the rare function whose locking the analysis cannot follow; say why beside each use.
#define FLYT_NO_THREAD_SAFETY_ANALYSIS FLYT_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace flyt {

class FLYT_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() FLYT_ACQUIRE() { mu_.lock(); }
  void Unlock() FLYT_RELEASE() { mu_.unlock(); }
  bool TryLock() FLYT_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds the lock (it cannot check this at run time).
  void AssertHeld() const FLYT_ASSERT_CAPABILITY(this) {}

  // BasicLockable, for std::condition_variable_any inside CondVar.
  void lock() FLYT_ACQUIRE() { mu_.lock(); }
  void unlock() FLYT_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for a scope; Unlock()/Lock() let a scope give it up around slow work.
class FLYT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FLYT_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() FLYT_RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() FLYT_RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() FLYT_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable over a Mutex. Wait* require the mutex held and return with it held. There
// is no predicate overload on purpose: a lambda is analysed apart from its caller and would not
// know the mutex is held, so write the loop (`while (!ready_) cv_.Wait(mu_);`).
class CondVar {
 public:
  void Wait(Mutex& mu) FLYT_REQUIRES(mu) { cv_.wait(mu); }
  // Returns false when `timeout` passed first.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout) FLYT_REQUIRES(mu) {
    return cv_.wait_for(mu, timeout) == std::cv_status::no_timeout;
  }
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline) FLYT_REQUIRES(mu) {
    return cv_.wait_until(mu, deadline) == std::cv_status::no_timeout;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace flyt
