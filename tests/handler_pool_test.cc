#include "server/handler_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace sortd {
namespace {

TEST(HandlerPool, OneThreadRunsTasksInTheOrderPosted) {
  absl::Mutex mu;
  std::vector<int> order;
  {
    HandlerPool pool(1);
    for (int i = 0; i < 100; ++i) {
      pool.Post([&, i] {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      });
    }
  }  // the destructor runs what is queued
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

// A task that waits for a later one does not hold it up: the pool's
// threads run tasks at once, side by side.
TEST(HandlerPool, ThreadsRunTasksSideBySide) {
  HandlerPool pool(2);
  absl::Notification second_ran, first_done;
  std::atomic<bool> first_saw_second{false};
  pool.Post([&] {
    first_saw_second =
        second_ran.WaitForNotificationWithTimeout(absl::Seconds(30));
    first_done.Notify();
  });
  pool.Post([&] { second_ran.Notify(); });
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(first_saw_second);
}

// Every task posted before the pool is destroyed runs, however many wait
// behind a busy thread, and none is counted queued once started.
TEST(HandlerPool, DestructionRunsEveryQueuedTask) {
  std::atomic<int> ran{0};
  absl::Notification release;
  {
    HandlerPool pool(1);
    pool.Post([&] {
      release.WaitForNotification();
      ran.fetch_add(1);
    });
    for (int i = 0; i < 50; ++i) pool.Post([&] { ran.fetch_add(1); });
    // The first may or may not have started; the other 50 wait for it.
    EXPECT_GE(pool.queued(), 50u);
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 51);
}

TEST(HandlerPool, DefaultThreadsIsAtLeastTwo) {
  EXPECT_GE(HandlerPool::DefaultThreads(), 2);
}

}  // namespace
}  // namespace sortd
