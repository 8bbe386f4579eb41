#include "server/fair_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sortd {
namespace {

using ::testing::ElementsAre;

// Pops and runs everything.
void Drain(FairShares& shares) {
  FairShares::Item item;
  while (shares.Pop(true, &item)) item.work();
}

class FairSharesTest : public ::testing::Test {
 protected:
  void Push(FairShares& shares, const std::string& client, size_t units,
            const std::string& name) {
    shares.Push(client, units, [this, name] { order_.push_back(name); });
  }
  std::vector<std::string> order_;
};

TEST_F(FairSharesTest, OneClientIsServedInOrder) {
  FairShares shares({.bulk_units = 1000, .request_units = 1});
  for (const char* name : {"a0", "a1", "a2", "a3", "a4"}) {
    Push(shares, "a", 10, name);
  }
  Drain(shares);
  EXPECT_THAT(order_, ElementsAre("a0", "a1", "a2", "a3", "a4"));
  EXPECT_TRUE(shares.empty());
}

TEST_F(FairSharesTest, ALateClientGoesAheadOfAnotherBacklog) {
  FairShares shares({.bulk_units = 1000, .request_units = 1});
  for (int i = 0; i < 100; ++i) Push(shares, "a", 1, "a");
  FairShares::Item item;
  ASSERT_TRUE(shares.Pop(true, &item));  // a's first runs
  item.work();
  Push(shares, "b", 1, "b");
  Drain(shares);
  // b waits for at most one more of a's.
  ASSERT_GE(order_.size(), 3u);
  EXPECT_TRUE(order_[1] == "b" || order_[2] == "b");
}

TEST_F(FairSharesTest, ClientsWithBacklogsAlternateByWork) {
  FairShares shares({.bulk_units = 1000, .request_units = 0});
  // a's tasks are twice b's: b runs two for each of a's.
  for (int i = 0; i < 4; ++i) Push(shares, "a", 20, "a");
  for (int i = 0; i < 8; ++i) Push(shares, "b", 10, "b");
  Drain(shares);
  EXPECT_THAT(order_, ElementsAre("a", "b", "b", "a", "b", "b", "a", "b", "b",
                                  "a", "b", "b"));
}

TEST_F(FairSharesTest, ManyTinyRequestsPayTheirRequestCost) {
  // 1-unit requests cost 1 + 9: a client of one 30-unit task runs it
  // after three of the other's tiny ones, not after thirty.
  FairShares shares({.bulk_units = 1000, .request_units = 9});
  for (int i = 0; i < 40; ++i) Push(shares, "tiny", 1, "t");
  Push(shares, "one", 30, "one");
  Drain(shares);
  size_t at = 0;
  while (order_[at] != "one") ++at;
  EXPECT_LE(at, 2u);
}

TEST_F(FairSharesTest, BulkWaitsWhenNotAllowedAndSmallWorkGoesOn) {
  FairShares shares({.bulk_units = 100, .request_units = 1});
  Push(shares, "a", 500, "bulk");
  Push(shares, "a", 1, "small-a");
  Push(shares, "b", 1, "small-b");
  FairShares::Item item;
  std::vector<bool> bulk;
  while (shares.Pop(false, &item)) {
    bulk.push_back(item.bulk);
    item.work();
  }
  EXPECT_THAT(order_, ElementsAre("small-a", "small-b"));
  EXPECT_THAT(bulk, ElementsAre(false, false));
  ASSERT_FALSE(shares.empty());
  ASSERT_TRUE(shares.Pop(true, &item));
  EXPECT_TRUE(item.bulk);
  item.work();
  EXPECT_EQ(order_.back(), "bulk");
  EXPECT_TRUE(shares.empty());
}

TEST_F(FairSharesTest, IdleClientsAreForgotten) {
  FairShares shares({.bulk_units = 1000, .request_units = 1});
  for (int c = 0; c < 1000; ++c) Push(shares, std::to_string(c), 1, "x");
  EXPECT_EQ(shares.flows(), 1000u);
  Drain(shares);
  EXPECT_EQ(shares.flows(), 0u);
  // Under a standing backlog, flows whose share was served go too.
  for (int i = 0; i < 10000; ++i) Push(shares, "busy", 1, "b");
  for (int c = 0; c < 1000; ++c) {
    Push(shares, absl::StrCat("c", c), 1, "x");
    FairShares::Item item;
    ASSERT_TRUE(shares.Pop(true, &item));
    ASSERT_TRUE(shares.Pop(true, &item));
  }
  EXPECT_LE(shares.flows(), 200u);
}

// Waits for `pred` under `mu`, at most 30 s.
template <typename Pred>
bool Await(std::mutex& mu, std::condition_variable& cv, Pred pred) {
  std::unique_lock<std::mutex> lock(mu);
  return cv.wait_for(lock, std::chrono::seconds(30), pred);
}

TEST(FairQueueTest, BulkWorkLeavesAThreadToSmallWork) {
  FairQueue queue({.threads = 2, .shares = {.bulk_units = 100}});
  std::mutex mu;
  std::condition_variable cv;
  int bulk_started = 0, small_done = 0;
  bool release = false;
  auto bulk = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++bulk_started;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  queue.Submit("a", 1000, bulk);
  queue.Submit("a", 1000, bulk);
  queue.Submit("a", 1000, bulk);
  ASSERT_TRUE(Await(mu, cv, [&] { return bulk_started == 1; }));
  for (int i = 0; i < 50; ++i) {
    queue.Submit(i % 2 ? "a" : "b", 1, [&] {
      std::lock_guard<std::mutex> lock(mu);
      ++small_done;
      cv.notify_all();
    });
  }
  // Every small task runs while the first bulk one holds its thread, and
  // the other bulk ones wait for it.
  ASSERT_TRUE(Await(mu, cv, [&] { return small_done == 50; }));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(bulk_started, 1);
    release = true;
  }
  cv.notify_all();
  queue.Stop();
  EXPECT_EQ(bulk_started, 3);
}

TEST(FairQueueTest, StopRunsEverythingQueued) {
  std::mutex mu;
  int ran = 0;
  {
    FairQueue queue({.threads = 3, .shares = {.bulk_units = 10}});
    for (int i = 0; i < 200; ++i) {
      queue.Submit(std::to_string(i % 7), i % 20, [&] {
        std::lock_guard<std::mutex> lock(mu);
        ++ran;
      });
    }
    queue.Stop();
  }
  EXPECT_EQ(ran, 200);
}

TEST(FairQueueTest, OneThreadRunsBulkWorkToo) {
  std::mutex mu;
  std::condition_variable cv;
  int ran = 0;
  FairQueue queue({.threads = 1, .shares = {.bulk_units = 10}});
  for (int i = 0; i < 4; ++i) {
    queue.Submit("a", 100, [&] {
      std::lock_guard<std::mutex> lock(mu);
      ++ran;
      cv.notify_all();
    });
  }
  EXPECT_TRUE(Await(mu, cv, [&] { return ran == 4; }));
}

}  // namespace
}  // namespace sortd
