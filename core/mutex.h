// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// clang's thread-safety annotations, so that `clang++ -Wthread-safety`
// (scripts/thread-safety.sh, the thread_safety test) checks that every
// member marked ABSL_GUARDED_BY(mu_) is touched only with mu_ held.
//
//   sortd::Mutex mu_;
//   sortd::CondVar cv_;
//   int pending_ ABSL_GUARDED_BY(mu_) = 0;
//
//   void Push() ABSL_LOCKS_EXCLUDED(mu_) {
//     sortd::MutexLock lock(&mu_);
//     ++pending_;
//     cv_.NotifyOne();
//   }
//   void Drain() ABSL_LOCKS_EXCLUDED(mu_) {
//     sortd::MutexLock lock(&mu_);
//     while (pending_ > 0) cv_.Wait(&mu_);
//   }
//
// std::mutex rather than absl::Mutex: ThreadSanitizer sees the ordering that
// pthread mutexes give, not that of Debian's uninstrumented Abseil. The
// wrappers add no cost: CondVar waits on the std::mutex itself (no
// condition_variable_any).
#ifndef SORTD_CORE_MUTEX_H_
#define SORTD_CORE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace sortd {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { native_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { native_.unlock(); }
  // Tells the analysis that the caller holds this mutex where it cannot
  // see it (e.g. a callback run under the lock); checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex native_;
};

// Holds `mu` from construction to the end of the scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable waited on with a held Mutex. Waits may wake
// spuriously: callers loop on their condition.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  // Releases `mu`, waits for a notification, then takes `mu` again.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->native_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, for at most `timeout`. False when it timed out.
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->native_, std::adopt_lock);
    const std::cv_status status = cv_.wait_for(lock, timeout);
    lock.release();
    return status == std::cv_status::no_timeout;
  }
  // As Wait, until `deadline` at the latest. False when it timed out.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu,
                 const std::chrono::time_point<Clock, Duration>& deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->native_, std::adopt_lock);
    const std::cv_status status = cv_.wait_until(lock, deadline);
    lock.release();
    return status == std::cv_status::no_timeout;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace sortd

#endif  // SORTD_CORE_MUTEX_H_
