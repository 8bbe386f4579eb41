#include "server/handler_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

namespace sortd {
namespace {

TEST(HandlerPool, OneThreadRunsTasksInTheOrderPosted) {
  std::mutex mu;
  std::vector<int> order;
  {
    HandlerPool pool(1);
    for (int i = 0; i < 100; ++i) {
      pool.Post([&, i] {
        std::lock_guard<std::mutex> lock(mu);
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
  std::promise<void> second_ran;
  std::shared_future<void> second = second_ran.get_future().share();
  std::promise<bool> first_saw_second;
  std::future<bool> first = first_saw_second.get_future();
  pool.Post([&] {
    first_saw_second.set_value(second.wait_for(std::chrono::seconds(30)) ==
                               std::future_status::ready);
  });
  pool.Post([&] { second_ran.set_value(); });
  ASSERT_EQ(first.wait_for(std::chrono::seconds(60)),
            std::future_status::ready);
  EXPECT_TRUE(first.get());
}

// Every task posted before the pool is destroyed runs, however many wait
// behind a busy thread.
TEST(HandlerPool, DestructionRunsEveryQueuedTask) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  {
    HandlerPool pool(1);
    pool.Post([&] {
      released.wait();
      ran.fetch_add(1);
    });
    for (int i = 0; i < 50; ++i) pool.Post([&] { ran.fetch_add(1); });
    // The first may or may not have started; the other 50 wait for it.
    EXPECT_GE(pool.queued(), 50u);
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 51);
}

TEST(HandlerPool, DefaultThreadsIsAtLeastTwo) {
  EXPECT_GE(HandlerPool::DefaultThreads(), 2);
}

}  // namespace
}  // namespace sortd
