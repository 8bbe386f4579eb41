// Batchers on a fake clock: when a class's batch closes, what it holds,
// which queue goes first.
#include "server/batcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace sortd {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

std::shared_ptr<Task> SortTask(size_t keys, absl::Time enqueued,
                               KeyType key = KeyType::kU32) {
  auto t = std::make_shared<Task>();
  t->op = Op::kSort;
  t->units = keys;
  t->sort.key_type = key;
  t->enqueued = enqueued;
  return t;
}

std::shared_ptr<Task> TransposeTask(size_t matrices, absl::Time enqueued) {
  auto t = std::make_shared<Task>();
  t->op = Op::kTranspose;
  t->units = matrices * 32;
  t->enqueued = enqueued;
  return t;
}

Batchers::Limits Limits() {
  return {.max_delay = absl::Microseconds(100),
          .max_requests = 4,
          .max_units = {10000, 32 * 64}};
}

TEST(Batchers, ABatchClosesWhenItsOldestTaskIsDue) {
  Batchers q(Limits());
  q.Add(SortTask(100, kT0), false);
  q.Add(SortTask(200, kT0 + absl::Microseconds(30)), false);
  Batch batch;
  absl::Time wake = absl::InfiniteFuture();
  EXPECT_FALSE(q.TakeReady(kT0 + absl::Microseconds(99), false, &batch, &wake));
  EXPECT_EQ(wake, kT0 + absl::Microseconds(100));
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(q.units(), 300u);
  EXPECT_EQ(q.requests(), 2u);
  ASSERT_TRUE(q.TakeReady(kT0 + absl::Microseconds(100), false, &batch, &wake));
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->units, 100u);
  EXPECT_EQ(batch[1]->units, 200u);
  EXPECT_EQ(q.units(), 0u);
  EXPECT_EQ(q.requests(), 0u);
}

TEST(Batchers, AFullBatchClosesAtOnceAndHoldsNoMoreThanItsLimits) {
  Batchers q(Limits());
  for (int i = 0; i < 6; ++i) q.Add(SortTask(10, kT0), false);
  Batch batch;
  absl::Time wake = absl::InfiniteFuture();
  ASSERT_TRUE(q.TakeReady(kT0, false, &batch, &wake));
  EXPECT_EQ(batch.size(), 4u);  // max_requests
  EXPECT_EQ(q.requests(), 2u);
  // By units: 6000 + 6000 > 10000, so the second waits for the next batch.
  Batchers by_units(Limits());
  by_units.Add(SortTask(6000, kT0), false);
  by_units.Add(SortTask(6000, kT0), false);
  Batch first;
  ASSERT_TRUE(by_units.TakeReady(kT0, false, &first, &wake));
  EXPECT_EQ(first.size(), 1u);
  // A task larger than the limit alone still makes a batch of one.
  Batchers huge(Limits());
  huge.Add(SortTask(50000, kT0), false);
  Batch alone;
  ASSERT_TRUE(huge.TakeReady(kT0, false, &alone, &wake));
  EXPECT_EQ(alone.size(), 1u);
}

// TakeFull takes what TakeReady would, and only when that is a full batch
// or a solo task: full work never overtakes an older batch that is due.
TEST(Batchers, TakeFullTakesTheNextBatchOnlyWhenItIsFull) {
  Batchers q(Limits());
  for (int i = 0; i < 3; ++i) q.Add(SortTask(10, kT0), false);
  q.Add(SortTask(6000, kT0 + absl::Microseconds(5), KeyType::kU64), false);
  const absl::Time early = kT0 + absl::Microseconds(10);
  Batch batch;
  EXPECT_FALSE(q.TakeFull(early, false, &batch));  // nothing full, nothing due
  q.Add(SortTask(5000, kT0 + absl::Microseconds(6), KeyType::kU64), false);
  // The 64-bit class holds 11000 units: full, and the only one ready.
  ASSERT_TRUE(q.TakeFull(early, false, &batch));
  ASSERT_EQ(batch.size(), 1u);  // 6000 + 5000 > 10000: the first alone
  EXPECT_EQ(batch[0]->units, 6000u);
  EXPECT_EQ(q.requests(), 4u);
  EXPECT_EQ(q.units(), 30u + 5000u);
  q.Add(SortTask(6000, kT0 + absl::Microseconds(7), KeyType::kU64), false);
  // Due now: the 32-bit batch (3 of 4 requests) is older than the full
  // 64-bit one, so nothing goes beyond the depth until it has gone.
  const absl::Time due = kT0 + absl::Microseconds(100);
  Batch none;
  EXPECT_FALSE(q.TakeFull(due, false, &none));
  absl::Time wake = absl::InfiniteFuture();
  ASSERT_TRUE(q.TakeReady(due, false, &none, &wake));
  EXPECT_EQ(none.size(), 3u);
  Batch wide;
  ASSERT_TRUE(q.TakeFull(due, false, &wide));
  EXPECT_EQ(wide[0]->units, 5000u);
  // A solo task is full by itself: it goes when it is the oldest, before
  // a younger full batch, and not before an older batch that is due.
  Batchers solo_first(Limits());
  solo_first.Add(SortTask(8000, kT0), true);
  for (int i = 0; i < 4; ++i) {
    solo_first.Add(SortTask(10, kT0 + absl::Microseconds(1)), false);
  }
  Batch alone;
  ASSERT_TRUE(solo_first.TakeFull(early, false, &alone));
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0]->units, 8000u);
  Batch full;
  ASSERT_TRUE(solo_first.TakeFull(early, false, &full));
  EXPECT_EQ(full.size(), 4u);
  EXPECT_EQ(solo_first.requests(), 0u);
  Batchers due_first(Limits());
  due_first.Add(SortTask(10, kT0), false);
  due_first.Add(SortTask(8000, kT0 + absl::Microseconds(1)), true);
  Batch after;
  EXPECT_FALSE(due_first.TakeFull(due, false, &after));
  EXPECT_TRUE(after.empty());
  absl::Time wake2 = absl::InfiniteFuture();
  ASSERT_TRUE(due_first.TakeReady(due, false, &after, &wake2));
  EXPECT_EQ(after[0]->units, 10u);
  Batch solo;
  ASSERT_TRUE(due_first.TakeFull(due, false, &solo));
  EXPECT_EQ(solo[0]->units, 8000u);
  // An older full batch goes before a solo task; a solo task longer than a
  // full batch (10000 units) does not go beyond the depth.
  Batchers full_first(Limits());
  for (int i = 0; i < 4; ++i) full_first.Add(SortTask(10, kT0), false);
  full_first.Add(SortTask(10000, kT0 + absl::Microseconds(1)), true);
  full_first.Add(SortTask(10001, kT0 + absl::Microseconds(2)), true);
  Batch first, second, third;
  ASSERT_TRUE(full_first.TakeFull(early, false, &first));
  EXPECT_EQ(first.size(), 4u);
  ASSERT_TRUE(full_first.TakeFull(early, false, &second));
  EXPECT_EQ(second[0]->units, 10000u);
  EXPECT_FALSE(full_first.TakeFull(early, false, &third));
  EXPECT_EQ(full_first.requests(), 1u);
  // Draining makes every batch ready: an older one, though not full, is
  // not overtaken then either.
  Batchers draining(Limits());
  draining.Add(SortTask(10, kT0), false);
  draining.Add(SortTask(100, kT0 + absl::Microseconds(1)), true);
  Batch none_yet;
  EXPECT_FALSE(draining.TakeFull(early, true, &none_yet));
  ASSERT_TRUE(draining.TakeFull(early, false, &none_yet));
  EXPECT_EQ(none_yet[0]->units, 100u);
}

TEST(Batchers, ClassesBatchApartAndTheOldestReadyGoesFirst) {
  Batchers q(Limits());
  q.Add(SortTask(10, kT0 + absl::Microseconds(5), KeyType::kU64), false);
  q.Add(SortTask(10, kT0 + absl::Microseconds(1)), false);
  q.Add(TransposeTask(2, kT0), false);
  q.Add(SortTask(10, kT0 + absl::Microseconds(2), KeyType::kF32), false);
  const absl::Time later = kT0 + absl::Milliseconds(1);
  absl::Time wake = absl::InfiniteFuture();
  Batch a, b, c;
  ASSERT_TRUE(q.TakeReady(later, false, &a, &wake));
  ASSERT_TRUE(q.TakeReady(later, false, &b, &wake));
  ASSERT_TRUE(q.TakeReady(later, false, &c, &wake));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]->op, Op::kTranspose);
  // u32 and f32 keys share a class (both normalised to 32-bit bits).
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0]->sort.key_type, KeyType::kU32);
  EXPECT_EQ(b[1]->sort.key_type, KeyType::kF32);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]->sort.key_type, KeyType::kU64);
  Batch none;
  EXPECT_FALSE(q.TakeReady(later, false, &none, &wake));
}

TEST(Batchers, SoloTasksAreAlwaysReadyInTheirTurn) {
  Batchers q(Limits());
  q.Add(SortTask(10, kT0), false);
  q.Add(SortTask(1 << 20, kT0 + absl::Microseconds(1)), true);
  absl::Time wake = absl::InfiniteFuture();
  Batch batch;
  // The class is not due yet; the solo task is.
  ASSERT_TRUE(q.TakeReady(kT0 + absl::Microseconds(2), false, &batch, &wake));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->units, size_t{1} << 20);
  // Once due, the older class goes before a younger solo task.
  q.Add(SortTask(1 << 20, kT0 + absl::Microseconds(3)), true);
  Batch next;
  ASSERT_TRUE(q.TakeReady(kT0 + absl::Seconds(1), false, &next, &wake));
  EXPECT_EQ(next[0]->units, 10u);
}

TEST(Batchers, DrainingClosesEveryBatchAndTakeAllEmptiesTheQueues) {
  Batchers q(Limits());
  q.Add(SortTask(10, kT0), false);
  absl::Time wake = absl::InfiniteFuture();
  Batch batch;
  EXPECT_TRUE(q.TakeReady(kT0, /*close_all=*/true, &batch, &wake));
  q.Add(SortTask(10, kT0), false);
  q.Add(TransposeTask(1, kT0), false);
  q.Add(SortTask(10, kT0), true);
  EXPECT_EQ(q.TakeAll().size(), 3u);
  EXPECT_EQ(q.requests(), 0u);
  EXPECT_EQ(q.units(), 0u);
  Batch none;
  EXPECT_FALSE(q.TakeReady(kT0 + absl::Hours(1), true, &none, &wake));
}

}  // namespace
}  // namespace sortd

namespace sortd {
namespace {

std::shared_ptr<Task> ClientTask(const std::string& client, size_t keys,
                                 absl::Time enqueued) {
  auto t = SortTask(keys, enqueued);
  t->client = client;
  return t;
}

TEST(Batchers, AClientsBacklogDoesNotKeepAnotherOutOfTheNextBatch) {
  Batchers q(Limits());
  for (int i = 0; i < 12; ++i) q.Add(ClientTask("a", 10, kT0), false);
  q.Add(ClientTask("b", 10, kT0 + absl::Microseconds(1)), false);
  absl::Time wake = absl::InfiniteFuture();
  Batch first;
  ASSERT_TRUE(q.TakeReady(kT0, false, &first, &wake));  // full: 4 requests
  ASSERT_EQ(first.size(), 4u);
  int from_b = 0;
  for (const auto& t : first) from_b += t->client == "b";
  EXPECT_EQ(from_b, 1) << "b's one task waited behind a's backlog";
  EXPECT_EQ(q.requests(), 9u);
}

TEST(Batchers, SoloTasksOfClientsAlternate) {
  Batchers q(Limits());
  for (int i = 0; i < 3; ++i) {
    q.Add(ClientTask("a", 1 << 20, kT0 + absl::Microseconds(i)), true);
  }
  q.Add(ClientTask("b", 1 << 20, kT0 + absl::Microseconds(5)), true);
  std::vector<std::string> order;
  absl::Time wake = absl::InfiniteFuture();
  Batch batch;
  while (q.TakeReady(kT0 + absl::Seconds(1), false, &batch, &wake)) {
    ASSERT_EQ(batch.size(), 1u);
    order.push_back(batch[0]->client);
    batch.clear();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "a", "a"}));
}

TEST(FairTasks, OneClientIsFirstInFirstOutAndOldestIsItsHead) {
  FairTasks tasks;
  for (int i = 0; i < 5; ++i) {
    tasks.Add(ClientTask("a", 10 * (i + 1), kT0 + absl::Microseconds(i)));
  }
  EXPECT_EQ(tasks.oldest(), kT0);
  for (int i = 0; i < 5; ++i) {
    ASSERT_FALSE(tasks.empty());
    EXPECT_EQ(tasks.oldest(), kT0 + absl::Microseconds(i));
    EXPECT_EQ(tasks.PopFront()->units, 10u * (i + 1));
  }
  EXPECT_TRUE(tasks.empty());
}

}  // namespace
}  // namespace sortd
