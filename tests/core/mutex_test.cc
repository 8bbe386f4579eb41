// sortd::Mutex, MutexLock and CondVar (core/mutex.h).
#include "core/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace sortd {
namespace {

struct Counter {
  Mutex mu;
  CondVar cv;
  int value ABSL_GUARDED_BY(mu) = 0;
  bool ready ABSL_GUARDED_BY(mu) = false;
};

TEST(MutexTest, MutexLockExcludes) {
  Counter c;
  constexpr int kThreads = 4, kAdds = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < kAdds; ++i) {
        MutexLock lock(&c.mu);
        ++c.value;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&c.mu);
  EXPECT_EQ(c.value, kThreads * kAdds);
}

TEST(MutexTest, LockAndUnlock) {
  Counter c;
  c.mu.Lock();
  c.value = 1;
  c.mu.AssertHeld();
  c.mu.Unlock();
  // Free again: another thread takes it.
  std::thread other([&c] {
    MutexLock lock(&c.mu);
    ++c.value;
  });
  other.join();
  MutexLock lock(&c.mu);
  EXPECT_EQ(c.value, 2);
}

// The waiter sees the notifier's write, made under the lock, once its
// predicate loop ends; the lock is held again after each wait.
TEST(CondVarTest, WaitLoopsUntilThePredicateHolds) {
  Counter c;
  std::thread notifier([&c] {
    for (int i = 0; i < 3; ++i) {
      MutexLock lock(&c.mu);
      ++c.value;
      c.cv.NotifyAll();
    }
    MutexLock lock(&c.mu);
    c.ready = true;
    c.cv.NotifyOne();
  });
  {
    MutexLock lock(&c.mu);
    while (!c.ready) c.cv.Wait(&c.mu);
    EXPECT_EQ(c.value, 3);
    ++c.value;  // still held: the analysis and the notifier agree
  }
  notifier.join();
  MutexLock lock(&c.mu);
  EXPECT_EQ(c.value, 4);
}

TEST(CondVarTest, WaitForTimesOutWithoutNotification) {
  Counter c;
  MutexLock lock(&c.mu);
  const auto start = std::chrono::steady_clock::now();
  // A spurious wake-up returns true; the loop waits again until it times
  // out, which it must, with nobody to notify.
  while (c.cv.WaitFor(&c.mu, std::chrono::milliseconds(20))) {
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(20));
  c.value = 1;  // held again after the timeout
  EXPECT_EQ(c.value, 1);
}

TEST(CondVarTest, WaitUntilAPastDeadlineReturnsFalse) {
  Counter c;
  MutexLock lock(&c.mu);
  EXPECT_FALSE(c.cv.WaitUntil(
      &c.mu, std::chrono::steady_clock::now() - std::chrono::seconds(1)));
}

TEST(CondVarTest, WaitForReturnsTrueWhenNotified) {
  Counter c;
  std::thread notifier([&c] {
    MutexLock lock(&c.mu);
    c.ready = true;
    c.cv.NotifyAll();
  });
  bool timed_out = false;
  {
    MutexLock lock(&c.mu);
    while (!c.ready && !timed_out) {
      timed_out = !c.cv.WaitFor(&c.mu, std::chrono::seconds(60));
    }
    EXPECT_TRUE(c.ready);
  }
  notifier.join();
  EXPECT_FALSE(timed_out);
}

}  // namespace
}  // namespace sortd
