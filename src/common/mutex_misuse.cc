// Compiled by the `common.mutex_contract` test, never linked: clang with -Wthread-safety must
// reject it, which shows that FLYT_GUARDED_BY is a contract the build enforces, not a comment.
#include "common/mutex.h"

namespace flyt {

class Counter {
 public:
  void Good() {
    MutexLock lock(mu_);
    ++count_;
  }
#ifdef FLYT_MISUSE
  void Bad() { ++count_; }  // writes a guarded member without its lock
#endif

 private:
  Mutex mu_;
  int count_ FLYT_GUARDED_BY(mu_) = 0;
};

}  // namespace flyt
