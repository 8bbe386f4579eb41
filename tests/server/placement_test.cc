// Placement at given times: the route follows the CPU path's backlog, the
// devices' queued and leased units and how late the devices have lately
// answered; that lateness weighs answers in and fades; a runner takes any
// batch within the pipeline depth, only a full one beyond it, and a
// handover wherever its device has room.
#include "server/placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "tests/stub_engine.h"

namespace sortd {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

using testing::StubEngine;

DevicePool Pool(int devices, int runs, int pipeline_depth = 2) {
  std::vector<DeviceSlot> slots;
  for (int i = 0; i < devices; ++i) {
    slots.push_back({std::make_unique<StubEngine>(0, runs), nullptr});
  }
  return DevicePool(std::move(slots), {.pipeline_depth = pipeline_depth});
}

// CPU: 10 ns a key; device: 50 us a run, 1 ns a key, 100 us batching delay.
Placement::Options Costed() {
  Placement::Options o;
  o.router.sort = {.cpu_max = 8192, .solo_min = 1 << 20};
  o.router.cpu_sort = {.per_unit = 10e-9};
  o.router.gpu_sort = {.fixed = 50e-6, .per_unit = 1e-9};
  o.router.max_batch_delay = absl::Microseconds(100);
  return o;
}

TEST(Placement, TheCpuBacklogSendsTinySortsToADeviceUntilItRuns) {
  Placement p(Costed());
  DevicePool pool = Pool(1, 1);
  const RouteRequest tiny{.units = 4000};
  EXPECT_EQ(p.Choose(tiny, pool, 0, kT0, nullptr), Route::kCpu);
  // 500 us of queue: 540 us on the CPU path against 154 us on the device.
  p.CpuQueued(30000);
  p.CpuQueued(20000);
  EXPECT_EQ(p.cpu_queued_units(), 50000u);
  EXPECT_EQ(p.cpu_queued_requests(), 2u);
  RouteEstimate e;
  EXPECT_EQ(p.Choose(tiny, pool, 0, kT0, &e), Route::kBatch);
  EXPECT_DOUBLE_EQ(e.cpu, 540e-6);
  EXPECT_DOUBLE_EQ(e.device, 154e-6);
  p.CpuStarted(30000);
  p.CpuStarted(20000);
  EXPECT_EQ(p.cpu_queued_units(), 0u);
  EXPECT_EQ(p.cpu_queued_requests(), 0u);
  EXPECT_EQ(p.Choose(tiny, pool, 0, kT0, nullptr), Route::kCpu);
}

TEST(Placement, TheDeviceBacklogIsQueuedAndLeasedUnits) {
  Placement p(Costed());
  DevicePool pool = Pool(1, 1);
  const RouteRequest large{.units = 1 << 20};
  EXPECT_EQ(p.Choose(large, pool, 0, kT0, nullptr), Route::kSolo);
  // 2^34 units ahead: 17 s on the device against 10 ms on the CPU path.
  EXPECT_EQ(p.Choose(large, pool, size_t{1} << 34, kT0, nullptr),
            Route::kSpill);
  pool.Lease(0, size_t{1} << 34);
  EXPECT_EQ(p.Choose(large, pool, 0, kT0, nullptr), Route::kSpill);
  pool.Return(0, size_t{1} << 34);
  EXPECT_EQ(p.Choose(large, pool, 0, kT0, nullptr), Route::kSolo);
  pool.MarkDown(0, kT0);
  EXPECT_EQ(p.Choose(large, pool, 0, kT0, nullptr), Route::kFailover);
}

TEST(Placement, LateAnswersStopOverflowByOperationAndFade) {
  Placement p(Costed());
  DevicePool pool = Pool(1, 1);
  const RouteRequest tiny{.units = 4000};
  p.CpuQueued(50000);
  EXPECT_DOUBLE_EQ(p.late(Op::kSort, kT0), 1.0);
  EXPECT_EQ(p.Choose(tiny, pool, 0, kT0, nullptr), Route::kBatch);
  // Answers eight times later than estimated: each weighs a tenth.
  double late = 1;
  for (int i = 0; i < 30; ++i) {
    late = p.Answered(Op::kSort, 8 * 154e-6, 154e-6, kT0);
  }
  EXPECT_GT(late, 5.0);
  EXPECT_LT(late, 8.0);
  EXPECT_DOUBLE_EQ(p.late(Op::kSort, kT0), late);
  EXPECT_EQ(p.Choose(tiny, pool, 0, kT0, nullptr), Route::kCpu);
  // Each operation's own: transposes answered on time stay at 1 and leave
  // the sorts' factor as it was.
  EXPECT_DOUBLE_EQ(p.late(Op::kTranspose, kT0), 1.0);
  EXPECT_DOUBLE_EQ(p.Answered(Op::kTranspose, 1e-3, 1e-3, kT0), 1.0);
  EXPECT_DOUBLE_EQ(p.late(Op::kSort, kT0), late);
  // Half the logarithm a half-life later; on time again after twenty.
  const absl::Time later = kT0 + Placement::Lateness::kHalfLife;
  EXPECT_NEAR(p.late(Op::kSort, later), std::sqrt(late), 1e-9);
  const absl::Time much_later = kT0 + 20 * Placement::Lateness::kHalfLife;
  EXPECT_LT(p.late(Op::kSort, much_later), 1.01);
  EXPECT_EQ(p.Choose(tiny, pool, 0, much_later, nullptr), Route::kBatch);
}

TEST(Placement, LatenessIsBoundedAndIgnoresAnswersWithoutAnEstimate) {
  Placement::Lateness late;
  EXPECT_DOUBLE_EQ(late.Add(1.0, 0, kT0), 1.0);  // no estimate: no weight
  for (int i = 0; i < 500; ++i) late.Add(1e6, 1e-6, kT0);
  EXPECT_NEAR(late.At(kT0), Placement::Lateness::kMax, 1e-6);
  for (int i = 0; i < 500; ++i) late.Add(1e-9, 1.0, kT0);
  EXPECT_NEAR(late.At(kT0), Placement::Lateness::kMin, 1e-6);
}

TEST(Placement, RunnersTakeAnyBatchWithinTheDepthAndOnlyAFullOneBeyond) {
  // Engines serving three runs at once, depth 2, full depth 3.
  Placement p({.pipeline_depth = 2, .full_pipeline_depth = 3});
  DevicePool pool = Pool(2, 3);
  EXPECT_EQ(p.Runners(pool, 0), 3);
  using Take = Placement::Take;
  EXPECT_EQ(p.MayTake(pool, 0), Take::kAnyBatch);
  pool.Lease(0, 1);
  // Device 1 holds fewer: device 0 takes no new batch, but a handover
  // (which device 1 may have failed) still goes to it.
  EXPECT_EQ(p.MayTake(pool, 0), Take::kNothing);
  EXPECT_TRUE(p.MayTakeHandover(pool, 0));
  EXPECT_EQ(p.MayTake(pool, 1), Take::kAnyBatch);
  pool.Lease(1, 1);
  pool.Lease(0, 1);
  pool.Lease(1, 1);
  EXPECT_EQ(p.MayTake(pool, 0), Take::kFullBatch);
  EXPECT_EQ(p.MayTake(pool, 1), Take::kFullBatch);
  pool.Lease(0, 1);
  EXPECT_EQ(p.MayTake(pool, 0), Take::kNothing);
  EXPECT_FALSE(p.MayTakeHandover(pool, 0));
  EXPECT_EQ(p.MayTake(pool, 1), Take::kFullBatch);
  // A device down takes nothing, handovers included.
  pool.MarkDown(1, kT0);
  EXPECT_EQ(p.MayTake(pool, 1), Take::kNothing);
  EXPECT_FALSE(p.MayTakeHandover(pool, 1));
}

TEST(Placement, DepthsAreRaisedToOneAndToThePipelineDepth) {
  Placement p({.pipeline_depth = 0, .full_pipeline_depth = -3});
  EXPECT_EQ(p.options().pipeline_depth, 1);
  EXPECT_EQ(p.options().full_pipeline_depth, 1);
  Placement q({.pipeline_depth = 3, .full_pipeline_depth = 2});
  EXPECT_EQ(q.options().full_pipeline_depth, 3);
  // An engine serving one run at a time still gets pipeline_depth runners;
  // beyond it, no more than its runs.
  Placement deep({.pipeline_depth = 3, .full_pipeline_depth = 5});
  EXPECT_EQ(deep.Runners(Pool(1, 1, 3), 0), 3);
  EXPECT_EQ(deep.Runners(Pool(1, 4, 3), 0), 4);
  EXPECT_EQ(deep.Runners(Pool(1, 9, 3), 0), 5);
  // A depth raised to 1 takes a batch with none in flight, none beyond.
  DevicePool one = Pool(1, 1, 1);
  EXPECT_EQ(p.MayTake(one, 0), Placement::Take::kAnyBatch);
  one.Lease(0, 1);
  EXPECT_EQ(p.MayTake(one, 0), Placement::Take::kNothing);
}

}  // namespace
}  // namespace sortd
