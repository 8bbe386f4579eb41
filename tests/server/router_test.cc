// The router as a table: each row a request, a load and the route the
// scheduler must take for it, with the reason in its name.
#include "server/router.h"

#include <gtest/gtest.h>

namespace sortd {
namespace {

struct Row {
  const char* why;
  RouteRequest request;
  RouteLoad load;
  Route want;
};

// A queue drains at its path's rate under load, not one request at a
// time: behind 1M queued units, a CPU path that takes 10 ns a key alone
// but 1 ns a key under load answers a 100K-key sort before a device
// whose backlog of 4M units drains at 0.5 ns a unit.
// A lone request's time: the timed sizes, the line between two of them,
// and beyond the last that time plus per_unit a unit.
TEST(CostModel, InterpolatesBetweenTimedSizesAndExtrapolatesBeyond) {
  CostModel m{.fixed = 1e-3, .per_unit = 1e-9};
  EXPECT_DOUBLE_EQ(m.Seconds(1000), 1e-3 + 1e-6);  // nothing timed: the line
  m.timed = {{1000, 2e-6}, {4000, 5e-6}, {16000, 8e-6}};
  EXPECT_DOUBLE_EQ(m.Seconds(10), 2e-6);  // below the first: the first
  EXPECT_DOUBLE_EQ(m.Seconds(4000), 5e-6);
  EXPECT_DOUBLE_EQ(m.Seconds(10000), 6.5e-6);
  EXPECT_DOUBLE_EQ(m.Seconds(20000), 8e-6 + 4000 * 1e-9);
}

TEST(ChooseRoute, QueuesDrainAtThePathsRateUnderLoad) {
  RouterConfig c;
  c.sort = {.cpu_max = 1000, .solo_min = 1 << 22};
  c.cpu_sort = {.per_unit = 10e-9, .queued_per_unit = 1e-9};
  c.gpu_sort = {.fixed = 50e-6, .per_unit = 1e-9, .queued_per_unit = 0.5e-9};
  const RouteLoad load{.devices = 1,
                       .devices_up = 1,
                       .device_backlog_units = 4 << 20,
                       .cpu_queued_units = 1 << 20};
  // CPU: 1 ms + 1.05 ms; device: 0.15 ms + 2.1 ms.
  EXPECT_EQ(ChooseRoute(c, {.units = 100000}, load), Route::kSpill);
  // Drained one request at a time, the CPU queue would take 10.5 ms.
  c.cpu_sort.queued_per_unit = 0;
  EXPECT_EQ(ChooseRoute(c, {.units = 100000}, load), Route::kBatch);
}

// A queue of many small requests costs their fixed parts too: 2000 queued
// 25-key sorts hold only 50K units (50 us at 1 ns a unit) but 20 us apiece
// under load (40 ms), so a small sort overflows to a device batch.
TEST(ChooseRoute, QueuedRequestsCostTheirFixedPartsToo) {
  RouterConfig c;
  c.sort = {.cpu_max = 1000, .solo_min = 1 << 22};
  c.cpu_sort = {.fixed = 20e-6,
                .per_unit = 10e-9,
                .queued_fixed = 20e-6,
                .queued_per_unit = 1e-9};
  c.gpu_sort = {.fixed = 50e-6, .per_unit = 1e-9, .queued_per_unit = 0.5e-9};
  const RouteLoad load{.devices = 1,
                       .devices_up = 1,
                       .cpu_queued_units = 50000,
                       .cpu_queued_requests = 2000};
  // CPU: 21 us + 40.05 ms; device: 0.1 ms delay + 50.1 us.
  EXPECT_EQ(ChooseRoute(c, {.units = 100}, load), Route::kBatch);
  // The same units as one request: 91 us in all, the CPU path keeps it.
  RouteLoad one = load;
  one.cpu_queued_requests = 1;
  EXPECT_EQ(ChooseRoute(c, {.units = 100}, one), Route::kCpu);
  // With no fixed part under load the units alone decide, as above.
  c.cpu_sort.queued_fixed = 0;
  EXPECT_EQ(ChooseRoute(c, {.units = 100}, load), Route::kCpu);
}

TEST(ChooseRoute, FollowsThresholdsCostsAndLoad) {
  RouterConfig c;
  c.sort = {.cpu_max = 8192, .solo_min = 1 << 20};
  c.transpose = {.cpu_max = 32 * 128, .solo_min = 32 * 16384};
  // CPU: 10 ns a key; device: 50 us a run plus 1 ns a key.
  c.cpu_sort = {.fixed = 0, .per_unit = 10e-9};
  c.gpu_sort = {.fixed = 50e-6, .per_unit = 1e-9};
  c.max_batch_delay = absl::Microseconds(100);
  const RouteLoad idle{.devices = 1, .devices_up = 1};
  const Row rows[] = {
      {"tiny sort: the CPU path", {.units = 1000}, idle, Route::kCpu},
      {"at cpu_max: still the CPU path", {.units = 8192}, idle, Route::kCpu},
      {"mid-size 64-bit sort: a batch", {.units = 50000}, idle, Route::kBatch},
      {"mid-size 32-bit sort: a batch, whatever the segment length",
       {.units = 500000},
       idle,
       Route::kBatch},
      {"at solo_min: alone", {.units = 1 << 20}, idle, Route::kSolo},
      {"tiny transpose: the CPU path",
       {.op = Op::kTranspose, .units = 32 * 10},
       idle,
       Route::kCpu},
      {"mid transpose: a batch",
       {.op = Op::kTranspose, .units = 32 * 1000},
       idle,
       Route::kBatch},
      {"no devices at all: the CPU path",
       {.units = 1 << 22},
       {.devices = 0, .devices_up = 0},
       Route::kCpu},
      {"every device down: failover",
       {.units = 1 << 22},
       {.devices = 2, .devices_up = 0},
       Route::kFailover},
      {"large sort behind a long device backlog: spill",
       {.units = 1 << 20},
       {.devices = 1, .devices_up = 1, .device_backlog_units = size_t{1} << 34},
       Route::kSpill},
      {"large sort, idle devices: never spilled",
       {.units = 1 << 20},
       {.devices = 1, .devices_up = 1, .cpu_queued_units = 0},
       Route::kSolo},
      {"tiny sort behind a long CPU queue: overflows to a device",
       {.units = 4000},
       {.devices = 1, .devices_up = 1, .cpu_queued_units = size_t{1} << 24},
       Route::kBatch},
      {"tiny sort behind a short CPU queue: stays",
       {.units = 4000},
       {.devices = 1, .devices_up = 1, .cpu_queued_units = 10},
       Route::kCpu},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ChooseRoute(c, r.request, r.load), r.want)
        << r.why << ": got " << RouteName(ChooseRoute(c, r.request, r.load));
  }
}

TEST(ChooseRoute, WithoutCostModelsOrWithSpillOffOnlyThresholdsDecide) {
  RouterConfig c;
  c.sort = {.cpu_max = 8192, .solo_min = 1 << 20};
  const RouteLoad busy{.devices = 1,
                       .devices_up = 1,
                       .device_backlog_units = size_t{1} << 34,
                       .cpu_queued_units = size_t{1} << 30};
  EXPECT_EQ(ChooseRoute(c, {.units = 1 << 20}, busy), Route::kSolo);
  EXPECT_EQ(ChooseRoute(c, {.units = 100}, busy), Route::kCpu);
  c.cpu_sort = {.per_unit = 10e-9};
  c.gpu_sort = {.fixed = 50e-6, .per_unit = 1e-9};
  c.spill = false;
  EXPECT_EQ(ChooseRoute(c, {.units = 1 << 20}, busy), Route::kSolo);
  EXPECT_EQ(ChooseRoute(c, {.units = 100}, busy), Route::kCpu);
  c.spill = true;
  EXPECT_EQ(ChooseRoute(c, {.units = 1 << 20}, busy), Route::kSpill);
}

TEST(ChooseRoute, OnlyRequestsUpToSpillMaxSpill) {
  RouterConfig c;
  c.sort = {.cpu_max = 8192, .solo_min = 1 << 20, .spill_max = 65536};
  c.transpose = {.cpu_max = 32 * 128, .solo_min = 32 * 16384, .spill_max = 0};
  c.cpu_sort = c.cpu_transpose = {.per_unit = 10e-9};
  c.gpu_sort = c.gpu_transpose = {.fixed = 50e-6, .per_unit = 1e-9};
  const RouteLoad busy{
      .devices = 1, .devices_up = 1, .device_backlog_units = size_t{1} << 34};
  EXPECT_EQ(ChooseRoute(c, {.units = 65536}, busy), Route::kSpill);
  EXPECT_EQ(ChooseRoute(c, {.units = 65537}, busy), Route::kBatch);
  EXPECT_EQ(ChooseRoute(c, {.units = 1 << 20}, busy), Route::kSolo);
  EXPECT_EQ(ChooseRoute(c, {.op = Op::kTranspose, .units = 32 * 1000}, busy),
            Route::kBatch);
  // As calibrated, spill_max is the CPU range: nothing spills.
  c.sort.spill_max = c.sort.cpu_max;
  EXPECT_EQ(ChooseRoute(c, {.units = 8193}, busy), Route::kBatch);
  EXPECT_EQ(ChooseRoute(c, {.units = 8192}, busy), Route::kCpu);
  // A pinned CPU range above it: still nothing spills.
  c.sort.spill_max = 1000;
  EXPECT_EQ(ChooseRoute(c, {.units = 9000}, busy), Route::kBatch);
  // Overflow from the CPU path is not spilling: spill_max leaves it be.
  const RouteLoad cpu_busy{
      .devices = 1, .devices_up = 1, .cpu_queued_units = size_t{1} << 24};
  EXPECT_EQ(ChooseRoute(c, {.op = Op::kTranspose, .units = 32 * 100}, cpu_busy),
            Route::kBatch);
}

// Devices answering later than estimated weigh more: a small sort that
// overflows to a device answering on time stays on the CPU path when the
// device's answers come five times later, and a mid-size one behind a
// device backlog spills sooner.
TEST(ChooseRoute, DeviceEstimatesScaleByHowLateDevicesAnswer) {
  RouterConfig c;
  c.sort = {.cpu_max = 8192, .solo_min = 1 << 20};
  c.cpu_sort = {.per_unit = 10e-9};
  c.gpu_sort = {.fixed = 50e-6, .per_unit = 1e-9};
  c.max_batch_delay = absl::Microseconds(100);
  // CPU: 40 us + 500 us of queue; device: 100 us delay + 54 us.
  RouteLoad cpu_busy{.devices = 1, .devices_up = 1, .cpu_queued_units = 50000};
  RouteEstimate e;
  EXPECT_EQ(ChooseRoute(c, {.units = 4000}, cpu_busy, &e), Route::kBatch);
  EXPECT_DOUBLE_EQ(e.cpu, 540e-6);
  EXPECT_DOUBLE_EQ(e.device, 154e-6);
  cpu_busy.device_late = 5;  // 770 us
  EXPECT_EQ(ChooseRoute(c, {.units = 4000}, cpu_busy, &e), Route::kCpu);
  EXPECT_DOUBLE_EQ(e.device, 154e-6);  // estimates are before lateness
  cpu_busy.device_late = 3;            // 462 us
  EXPECT_EQ(ChooseRoute(c, {.units = 4000}, cpu_busy), Route::kBatch);
  // Not a positive number: on time.
  cpu_busy.device_late = 0;
  EXPECT_EQ(ChooseRoute(c, {.units = 4000}, cpu_busy), Route::kBatch);
  // An overflowed request from solo_min runs alone (pinned below cpu_max).
  c.sort.solo_min = 2000;
  EXPECT_EQ(ChooseRoute(c, {.units = 4000}, cpu_busy), Route::kSolo);
  c.sort.solo_min = 1 << 20;
  // 100K keys: 1 ms on the CPU path; 0.15 ms + 0.6 ms on the device, 1.5
  // ms when its answers come twice as late.
  RouteLoad device_busy{
      .devices = 1, .devices_up = 1, .device_backlog_units = 600000};
  EXPECT_EQ(ChooseRoute(c, {.units = 100000}, device_busy, &e), Route::kBatch);
  EXPECT_DOUBLE_EQ(e.device, 100e-6 + 150e-6 + 600e-6);
  device_busy.device_late = 2;
  EXPECT_EQ(ChooseRoute(c, {.units = 100000}, device_busy, &e), Route::kSpill);
  EXPECT_DOUBLE_EQ(e.device, 850e-6);
  // Without cost models there is nothing to scale or report.
  c.cpu_sort = {};
  EXPECT_EQ(ChooseRoute(c, {.units = 100000}, device_busy, &e), Route::kBatch);
  EXPECT_EQ(e.device, 0);
}

TEST(ChooseRoute, BacklogIsSharedAmongHealthyDevices) {
  RouterConfig c;
  c.sort = {.cpu_max = 0, .solo_min = 1 << 20};
  c.cpu_sort = {.per_unit = 10e-9};
  c.gpu_sort = {.fixed = 0, .per_unit = 1e-9};
  // 1M keys: 10 ms on the CPU. 16M keys of backlog: 16 ms on one device,
  // 4 ms on four.
  const RouteRequest r{.units = 1 << 20};
  EXPECT_EQ(
      ChooseRoute(
          c, r,
          {.devices = 4, .devices_up = 1, .device_backlog_units = 16 << 20}),
      Route::kSpill);
  EXPECT_EQ(
      ChooseRoute(
          c, r,
          {.devices = 4, .devices_up = 4, .device_backlog_units = 16 << 20}),
      Route::kSolo);
}

}  // namespace
}  // namespace sortd
