// DevicePool on a fake clock: leases go to the least loaded device up to
// the pipeline depth; a device marked down is re-created after a back-off
// that doubles on each failure, up to its cap.
#include "server/device_pool.h"

#include <gtest/gtest.h>

#include <memory>

#include "absl/status/status.h"
#include "tests/stub_engine.h"

namespace sortd {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

using testing::StubEngine;

std::vector<DeviceSlot> Slots(int n, EngineFactory factory = nullptr) {
  std::vector<DeviceSlot> slots;
  for (int i = 0; i < n; ++i) {
    slots.push_back({std::make_unique<StubEngine>(1000 << i), factory});
  }
  return slots;
}

TEST(DevicePool, NamesStayApartAndLimitsAreEveryDevices) {
  std::vector<DeviceSlot> slots = Slots(2);
  slots.push_back({nullptr, nullptr});  // left out
  DevicePool pool(std::move(slots), {});
  ASSERT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool[0].name, "stub");
  EXPECT_EQ(pool[1].name, "stub #2");
  EXPECT_EQ(pool.max_batch_keys(SortJob{}, 8, 1 << 20), 1000u);
  EXPECT_EQ(pool.max_batch_keys(SortJob{}, 8, 10), 10u);
  EXPECT_EQ(pool.max_transpose_matrices(77), 77u);  // no device limit
}

TEST(DevicePool, LeasesGoToTheLeastLoadedUpToTheDepth) {
  DevicePool pool(Slots(2), {.pipeline_depth = 2});
  EXPECT_TRUE(pool.MayLease(0));
  pool.Lease(0, 100);
  EXPECT_FALSE(pool.MayLease(0));  // device 1 holds fewer
  EXPECT_TRUE(pool.MayLease(1));
  pool.Lease(1, 50);
  EXPECT_TRUE(pool.MayLease(0));
  pool.Lease(0, 100);
  pool.Lease(1, 50);
  EXPECT_FALSE(pool.MayLease(0));  // the depth
  EXPECT_FALSE(pool.MayLease(1));
  EXPECT_EQ(pool.inflight_units(), 300u);
  pool.Return(1, 50);
  EXPECT_TRUE(pool.MayLease(1));
  EXPECT_EQ(pool.inflight_units(), 250u);
  // A device that is down neither leases nor counts.
  pool.MarkDown(0, kT0);
  EXPECT_FALSE(pool.MayLease(0));
  EXPECT_EQ(pool.devices_up(), 1);
  EXPECT_EQ(pool.inflight_units(), 50u);
}

// A deeper lease than pipeline_depth goes no further than the runs the
// engine serves at once; pipeline_depth itself is never cut.
TEST(DevicePool, DeeperLeasesStopAtTheEnginesConcurrentRuns) {
  std::vector<DeviceSlot> slots;
  slots.push_back({std::make_unique<StubEngine>(0, 3), nullptr});
  DevicePool pool(std::move(slots), {.pipeline_depth = 2});
  pool.Lease(0, 1);
  pool.Lease(0, 1);
  EXPECT_FALSE(pool.MayLease(0));
  EXPECT_TRUE(pool.MayLease(0, 4));
  pool.Lease(0, 1);
  EXPECT_FALSE(pool.MayLease(0, 4));  // three lanes
  std::vector<DeviceSlot> one;
  one.push_back({std::make_unique<StubEngine>(0, 1), nullptr});
  DevicePool narrow(std::move(one), {.pipeline_depth = 2});
  narrow.Lease(0, 1);
  EXPECT_TRUE(narrow.MayLease(0, 4));  // up to pipeline_depth regardless
  narrow.Lease(0, 1);
  EXPECT_FALSE(narrow.MayLease(0, 4));
}

TEST(DevicePool, ReCreationBacksOffAndDoublesUpToTheCap) {
  int calls = 0;
  bool fail = true;
  EngineFactory factory = [&]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
    ++calls;
    if (fail) return absl::UnavailableError("no device");
    return std::make_unique<StubEngine>();
  };
  DevicePool pool(Slots(1, factory), {.pipeline_depth = 1,
                                      .reinit_backoff = absl::Seconds(1),
                                      .max_reinit_backoff = absl::Seconds(3)});
  pool.Lease(0, 10);
  pool.MarkDown(0, kT0);
  EXPECT_FALSE(pool.WantsReinit(0));  // a batch is still in flight
  pool.Return(0, 10);
  ASSERT_TRUE(pool.WantsReinit(0));
  EXPECT_EQ(pool[0].next_attempt, kT0 + absl::Seconds(1));
  pool.BeginReinit(0);
  EXPECT_FALSE(pool.WantsReinit(0));  // one runner re-creates
  absl::Time now = pool[0].next_attempt;
  for (absl::Duration want :
       {absl::Seconds(2), absl::Seconds(3), absl::Seconds(3)}) {
    EngineFactory make = pool.FreeEngine(0);
    EXPECT_EQ(pool[0].engine, nullptr);
    const DevicePool::Reinit r = pool.EndReinit(0, make(), now);
    EXPECT_FALSE(r.up);
    EXPECT_EQ(r.error.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(r.next_try, want);
    EXPECT_EQ(pool[0].next_attempt, now + want);
    now = pool[0].next_attempt;
    ASSERT_TRUE(pool.WantsReinit(0));
    pool.BeginReinit(0);
  }
  fail = false;
  const DevicePool::Reinit r = pool.EndReinit(0, pool.FreeEngine(0)(), now);
  EXPECT_TRUE(r.up);
  EXPECT_EQ(calls, 4);
  EXPECT_TRUE(pool[0].up);
  EXPECT_NE(pool[0].engine, nullptr);
  EXPECT_TRUE(pool.MayLease(0));
  // The next failure starts from the first back-off again.
  pool.MarkDown(0, now);
  EXPECT_EQ(pool[0].next_attempt, now + absl::Seconds(1));
}

TEST(DevicePool, WithoutAFactoryADeviceStaysDown) {
  DevicePool pool(Slots(1), {});
  pool.MarkDown(0, kT0);
  EXPECT_FALSE(pool.WantsReinit(0));
  EXPECT_EQ(pool.devices_up(), 0);
}

}  // namespace
}  // namespace sortd
