// The router's calibration as a function of timings (ChooseRouting): where
// the CPU path ends, where lone requests start, and the cost models, on
// made-up timings whose right answers are known.
#include "server/calibrate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

namespace sortd {
namespace {

using ::testing::HasSubstr;
using Point = OperationTimings::Point;
using BatchPoint = OperationTimings::BatchPoint;

// Sort timings at 64, 256, ... keys: the CPU path `cpu(n)`, the device
// `gpu(n)`.
template <typename Cpu, typename Gpu>
std::vector<Point> Points(Cpu cpu, Gpu gpu, size_t last = size_t{1} << 20) {
  std::vector<Point> points;
  for (size_t n = 64; n <= last; n *= 4) {
    points.push_back(
        {n, cpu(static_cast<double>(n)), gpu(static_cast<double>(n))});
  }
  return points;
}

// A point's device cost as the calibration weighs it: the batch share at
// that size where one was timed, else the lone run.
double DeviceCostForTest(const Point& p, const std::vector<BatchPoint>& b) {
  for (const BatchPoint& x : b) {
    if (x.units == p.units) return std::min(p.gpu, x.share);
  }
  return p.gpu;
}

RoutingTimings SortOnly(std::vector<Point> points,
                        std::vector<BatchPoint> batched = {}) {
  RoutingTimings t;
  t.sort = {std::move(points), std::move(batched)};
  t.transpose.points = {{128, 1e-6, 1e-4}, {512, 2e-6, 1e-4}};
  return t;
}

TEST(ChooseRouting, TheCpuPathEndsMidwayPastItsLastWin) {
  // CPU: 1 ns a key; device: 50 us fixed, 0.1 ns a key. The CPU path
  // keeps 65536 keys (65.5 us against 56.6 us: the device is not 1.25x
  // cheaper) and loses 262144 (262 us against 76 us).
  const auto t = SortOnly(Points([](double n) { return 1e-9 * n; },
                                 [](double n) { return 5e-5 + 1e-10 * n; }));
  const Calibration c = ChooseRouting(t, 1.25, 1.25);
  EXPECT_EQ(c.sort.cpu_max, 2 * 65536u);
  EXPECT_GT(c.sort.solo_min, c.sort.cpu_max);
  EXPECT_THAT(c.report, HasSubstr("router sort: CPU path up to 131072 keys"));
  // Without the margin the CPU path ends at its last outright win.
  EXPECT_EQ(ChooseRouting(t, 1.0, 1.0).sort.cpu_max, 2 * 16384u);
}

TEST(ChooseRouting, ANarrowDeviceWinBeforeTheCpuWinsAgainDoesNotCount) {
  std::vector<Point> points = {{64, 1e-6, 9e-6},
                               {256, 2e-6, 9e-6},
                               {1024, 10e-6, 9e-6},
                               {4096, 8e-6, 9e-6},
                               {16384, 40e-6, 10e-6}};
  const Calibration c = ChooseRouting(SortOnly(points), 1.25, 1.25);
  EXPECT_EQ(c.sort.cpu_max, 2 * 4096u);
}

TEST(ChooseRouting, EitherPathWinningEverywhere) {
  const Calibration cpu = ChooseRouting(
      SortOnly(Points([](double) { return 1e-6; }, [](double) { return 1.0; })),
      1.25, 1.25);
  EXPECT_EQ(cpu.sort.cpu_max, size_t{1} << 20);  // the last point, not twice
  const Calibration gpu = ChooseRouting(
      SortOnly(Points([](double) { return 1.0; }, [](double) { return 1e-6; })),
      1.25, 1.25);
  EXPECT_EQ(gpu.sort.cpu_max, 0u);
  EXPECT_EQ(gpu.sort.solo_min, SIZE_MAX);  // no batch was timed
}

TEST(ChooseRouting, LoneRequestsStartWhereBatchingStopsPaying) {
  const auto points = Points([](double) { return 1.0; },
                             [](double n) { return 1e-5 + 1e-9 * n; });
  // Alone against its share of a batch: 4x, 2x, 1.2x, 1.1x.
  const std::vector<BatchPoint> batched = {{256, 4e-5, 1e-5},
                                           {1024, 2e-5, 1e-5},
                                           {4096, 1.2e-5, 1e-5},
                                           {16384, 1.1e-5, 1e-5}};
  EXPECT_EQ(ChooseRouting(SortOnly(points, batched), 1.25, 1.25).sort.solo_min,
            4096u);
  EXPECT_EQ(ChooseRouting(SortOnly(points, batched), 1.15, 1.15).sort.solo_min,
            16384u);
  // None pays: beyond the largest batched size.
  EXPECT_EQ(ChooseRouting(SortOnly(points, batched), 1.05, 1.05).sort.solo_min,
            4 * 16384u);
}

// The CPU range and lone requests each follow their own gain.
TEST(ChooseRouting, TheCpuAndSoloGainsAreSeparate) {
  // CPU path 1.5x a batch's share at every size; alone 1.5x its share.
  const auto points = Points([](double n) { return 1.5e-9 * n; },
                             [](double n) { return 1.5e-9 * n; });
  std::vector<BatchPoint> batched;
  for (const Point& p : points)
    batched.push_back({p.units, p.gpu, p.gpu / 1.5});
  const Calibration cpu_first =
      ChooseRouting(SortOnly(points, batched), 1.25, 2.0);
  EXPECT_EQ(cpu_first.sort.cpu_max, size_t{1} << 20);
  const Calibration batches =
      ChooseRouting(SortOnly(points, batched), 2.0, 1.25);
  EXPECT_EQ(batches.sort.cpu_max, 0u);
  EXPECT_EQ(batches.sort.solo_min, 64u);  // alone at once: 1.5x <= 2.0
  EXPECT_EQ(ChooseRouting(SortOnly(points, batched), 1.25, 1.25).sort.solo_min,
            4 * (size_t{1} << 20));  // never alone: beyond the largest batch
}

TEST(ChooseRouting, LoneRequestsNeverStartInsideTheCpuRange) {
  const auto points = Points([](double n) { return 1e-9 * n; },
                             [](double n) { return 5e-5 + 1e-10 * n; });
  const std::vector<BatchPoint> batched = {{256, 1e-5, 1e-5}};  // pays at once
  const Calibration c = ChooseRouting(SortOnly(points, batched), 1.25, 1.25);
  EXPECT_EQ(c.sort.cpu_max, 131072u);
  EXPECT_EQ(c.sort.solo_min, c.sort.cpu_max + 1);
}

// Points as a host measured them: (keys, the CPU path's ms a request
// under load, a device's lone ms); the CPU path alone taken as ten times
// its loaded cost (unused by the choices tested with these).
std::vector<Point> MeasuredPoints(
    const std::vector<std::tuple<size_t, double, double>>& rows) {
  std::vector<Point> points;
  for (const auto& [n, cpu_loaded, gpu] : rows) {
    points.push_back(
        {n, 10 * cpu_loaded * 1e-3, gpu * 1e-3, cpu_loaded * 1e-3});
  }
  return points;
}

// Costs under load as a 16-core GPU host measured them (ms a request):
// the CPU path 1.7x a batch's share at 16K keys, 5-7x at 64K and 256K, 3x
// a lone device run at 1M. Under load there the CPU path (with overflow to
// batches) served 16K-key requests faster than batches did; larger ones
// were served faster in batches, and spilling them to the CPU path cost
// the batches more than it gained.
TEST(ChooseRouting, TheCpuPathKeepsSizesAtTwiceTheDeviceCostAndOnlyTheySpill) {
  const double ms = 1e-3;
  std::vector<Point> points = MeasuredPoints({{4096, 0.004, 0.070},
                                              {16384, 0.022, 0.079},
                                              {65536, 0.153, 0.108},
                                              {262144, 0.565, 0.270},
                                              {1048576, 2.434, 0.625}});
  const std::vector<BatchPoint> batched = {{4096, 0.070 * ms, 0.003 * ms},
                                           {16384, 0.079 * ms, 0.013 * ms},
                                           {65536, 0.108 * ms, 0.022 * ms},
                                           {262144, 0.270 * ms, 0.079 * ms}};
  Calibration c = ChooseRouting(SortOnly(points, batched), 1.25, 2.0);
  EXPECT_EQ(c.sort.cpu_max, 32768u);
  EXPECT_EQ(c.sort.spill_max, c.sort.cpu_max);
  EXPECT_EQ(c.sort.solo_min, 1048576u);
  EXPECT_THAT(c.report, HasSubstr("CPU path up to 32768 keys, alone on a "
                                  "device from 1048576 keys"));
  // At 1.25x, 16K keys would have gone to batches, and 4K keys too (1.33x).
  c = ChooseRouting(SortOnly(points, batched), 1.25, 1.25);
  EXPECT_EQ(c.sort.cpu_max, 0u);
  EXPECT_EQ(c.sort.spill_max, 0u);
  // A CPU path within 2x of a device at every size keeps them all.
  for (Point& p : points) p.cpu_loaded = 1.9 * DeviceCostForTest(p, batched);
  EXPECT_EQ(ChooseRouting(SortOnly(points, batched), 1.25, 2.0).sort.cpu_max,
            size_t{1} << 20);
}

// Timings of one start on the H200 host (ms a request): the device's lone
// time at 1M keys (1.05 ms, from heap arrays) put the busy CPU path (1.54)
// within 2x of it, and every size up to 1M keys went to the CPU path; with
// its lanes busy the device spends 0.24 ms a 1M-key request, and the CPU
// range ends at 32K keys. The queue estimates weigh the device as before.
TEST(ChooseRouting, TheCpuRangeWeighsADeviceWithItsLanesBusy) {
  const double ms = 1e-3;
  const std::vector<Point> points = MeasuredPoints({{4096, 0.002, 0.065},
                                                    {16384, 0.013, 0.071},
                                                    {65536, 0.110, 0.095},
                                                    {262144, 0.382, 0.257},
                                                    {1048576, 1.539, 1.054}});
  const std::vector<BatchPoint> batched = {
      {4096, 0.065 * ms, 0.004 * ms},
      {16384, 0.071 * ms, 0.018 * ms},
      {65536, 0.095 * ms, 0.076 * ms, 0.027 * ms},
      {262144, 0.257 * ms, 0.351 * ms, 0.089 * ms}};
  const Calibration lone = ChooseRouting(SortOnly(points, batched), 1.25, 2.0);
  EXPECT_EQ(lone.sort.cpu_max, size_t{1} << 20);
  std::vector<Point> loaded = points;
  const std::vector<double> gpu_loaded = {0.073, 0.115, 0.111, 0.149, 0.238};
  for (size_t i = 0; i < loaded.size(); ++i) {
    loaded[i].gpu_loaded = gpu_loaded[i] * ms;
  }
  const Calibration c = ChooseRouting(SortOnly(loaded, batched), 1.25, 2.0);
  EXPECT_EQ(c.sort.cpu_max, 32768u);
  EXPECT_EQ(c.sort.spill_max, 32768u);
  EXPECT_THAT(c.report, HasSubstr("device     1.054 ms (    0.238 ms)"));
  EXPECT_EQ(c.gpu_sort.queued_per_unit, lone.gpu_sort.queued_per_unit);
  EXPECT_EQ(c.gpu_sort.per_unit, lone.gpu_sort.per_unit);
  // A batch of four of the largest size weighs in the CPU range, not in
  // the queue estimates.
  std::vector<BatchPoint> with_largest = batched;
  with_largest.push_back({1048576, 1.054 * ms, 0.750 * ms, 0.245 * ms,
                          /*beyond_max_keys=*/true});
  const Calibration c4 =
      ChooseRouting(SortOnly(points, with_largest), 1.25, 2.0);
  EXPECT_EQ(c4.sort.cpu_max, 32768u);
  EXPECT_EQ(c4.sort.solo_min, 4 * 1048576u);
  EXPECT_EQ(c4.gpu_sort.queued_per_unit, lone.gpu_sort.queued_per_unit);
  // A loaded time above the lone one (a device sharing the host's cores)
  // does not raise the device's cost.
  for (Point& p : loaded) p.gpu_loaded = 10 * p.gpu;
  EXPECT_EQ(ChooseRouting(SortOnly(loaded, batched), 1.25, 2.0).sort.cpu_max,
            lone.sort.cpu_max);
}

// By throughput: a lone request on the CPU path beats a lone device run at
// every size, but with every caller busy the CPU path serves a request in
// 1 ns a key, against a batch share of 2 us plus 0.2 ns a key: from 4096
// keys on, batches win, and the CPU range ends midway to that point.
TEST(ChooseRouting, TheCpuPathIsWeighedUnderLoadAgainstBatchShares) {
  std::vector<Point> points =
      Points([](double n) { return 0.5e-9 * n; },
             [](double n) { return 1e-4 + 0.1e-9 * n; }, size_t{1} << 16);
  for (Point& p : points) p.cpu_loaded = 1e-9 * static_cast<double>(p.units);
  std::vector<BatchPoint> batched;
  for (size_t n = 256; n <= (size_t{1} << 16); n *= 4) {
    // Alone 0.1 ms; a batch's share 2 us fixed plus 0.2 ns a key.
    batched.push_back({n, 1e-4 + 0.1e-9 * static_cast<double>(n),
                       2e-6 + 0.2e-9 * static_cast<double>(n)});
  }
  const Calibration c = ChooseRouting(SortOnly(points, batched), 1.25, 1.25);
  // 1024 keys: CPU 1.02 us, batch 2.2 us; 4096: 4.1 us against 2.8 us.
  EXPECT_EQ(c.sort.cpu_max, 2 * 1024u);
  // Batches keep paying up to the largest size timed.
  EXPECT_EQ(c.sort.solo_min, 4 * (size_t{1} << 16));
  EXPECT_THAT(c.report, HasSubstr("a request under load"));
  // A lone request costs its lone time, the timed sizes exactly. A queue
  // drains at the rate under load, but never slower than lone requests one
  // after another: here both loaded rates (1 ns and 0.2 ns a key) are
  // slower than the lone ones (0.5 and 0.1).
  EXPECT_NEAR(c.cpu_sort.Seconds(4096), 0.5e-9 * 4096, 1e-12);
  EXPECT_NEAR(c.gpu_sort.Seconds(4096), 1e-4 + 0.1e-9 * 4096, 1e-12);
  EXPECT_NEAR(c.cpu_sort.queued_per_unit, 0.5e-9, 1e-13);
  EXPECT_NEAR(c.gpu_sort.queued_per_unit, 0.1e-9, 1e-13);
  // Neither has a fixed part under load here: the lone CPU line has none.
  EXPECT_NEAR(c.cpu_sort.queued_fixed, 0, 1e-12);
  EXPECT_EQ(c.gpu_sort.queued_fixed, 0);
  std::vector<Point> faster = points;
  for (Point& p : faster) p.cpu_loaded = 0.05e-9 * static_cast<double>(p.units);
  EXPECT_NEAR(ChooseRouting(SortOnly(faster, batched), 1.25, 1.25)
                  .cpu_sort.queued_per_unit,
              0.05e-9, 1e-13);
  // Timed one request at a time (0.5 ns a key), the CPU path would have
  // kept twice as much: its last win is at 4096 keys.
  for (Point& p : points) p.cpu_loaded = 0;
  EXPECT_EQ(ChooseRouting(SortOnly(points, batched), 1.25, 1.25).sort.cpu_max,
            2 * 4096u);
}

// Under load the CPU path serves a request in 3 us plus 0.5 ns a key (16
// callers sharing the cores): its queue drains at that line, fixed part
// included; alone it takes 8 us plus 2 ns a key, never the drain's bound
// here. Device batches carry their fixed part in their share.
TEST(ChooseRouting, TheCpuQueueDrainsAtItsLoadedLineFixedPartIncluded) {
  std::vector<Point> points =
      Points([](double n) { return 8e-6 + 2e-9 * n; },
             [](double n) { return 1e-4 + 0.1e-9 * n; }, size_t{1} << 16);
  for (Point& p : points) {
    p.cpu_loaded = 3e-6 + 0.5e-9 * static_cast<double>(p.units);
  }
  const Calibration c = ChooseRouting(SortOnly(points), 1.25, 1.25);
  EXPECT_NEAR(c.cpu_sort.queued_fixed, 3e-6, 1e-10);
  EXPECT_NEAR(c.cpu_sort.queued_per_unit, 0.5e-9, 1e-13);
  EXPECT_NEAR(c.cpu_sort.Drain(1000 * 100.0, 1000), 3e-3 + 0.05e-3, 1e-8);
  EXPECT_EQ(c.gpu_sort.queued_fixed, 0);
  // Slower under load than alone, the lone line bounds the drain.
  for (Point& p : points) {
    p.cpu_loaded = 20e-6 + 4e-9 * static_cast<double>(p.units);
  }
  const Calibration slow = ChooseRouting(SortOnly(points), 1.25, 1.25);
  EXPECT_NEAR(slow.cpu_sort.queued_fixed, 8e-6, 1e-10);
  EXPECT_NEAR(slow.cpu_sort.queued_per_unit, 2e-9, 1e-13);
}

TEST(ChooseRouting, CostModelsFitFixedAndPerUnitTimes) {
  const Calibration c =
      ChooseRouting(SortOnly(Points([](double n) { return 2e-6 + 3e-9 * n; },
                                    [](double n) { return 4e-5 + 5e-11 * n; })),
                    1.25, 1.25);
  EXPECT_NEAR(c.cpu_sort.per_unit, 3e-9, 1e-12);
  EXPECT_NEAR(c.cpu_sort.fixed, 2e-6, 1e-9);
  EXPECT_NEAR(c.gpu_sort.per_unit, 5e-11, 1e-14);
  EXPECT_NEAR(c.gpu_sort.fixed, 4e-5, 1e-9);
  EXPECT_TRUE(c.cpu_transpose.known());
  EXPECT_NEAR(c.cpu_sort.Seconds(1 << 20), 2e-6 + 3e-9 * (1 << 20), 1e-9);
}

// Batches of requests in page-locked memory timed both ways: packed, and
// where they lie. In place is chosen from the smallest size from which it
// never costs more at a larger timed size; a batch share is the share of
// the way chosen.
TEST(ChooseRouting, BatchesAreSortedWhereTheyLieFromWhereThatPays) {
  const auto points =
      Points([](double) { return 1.0; },
             [](double n) { return 1e-4 + 1e-9 * n; }, size_t{1} << 18);
  // Packed shares 10 us and 40 us a request at 64K and 256K keys.
  auto timed = [&](double in_place_64k, double in_place_256k) {
    std::vector<BatchPoint> batched = {{16384, 1e-4, 5e-6},
                                       {65536, 2e-4, 1e-5, in_place_64k},
                                       {262144, 4e-4, 4e-5, in_place_256k}};
    return ChooseRouting(SortOnly(points, batched), 1.25, 1.25);
  };
  // Packing wins at 64K, in place at 256K: in place from 256K.
  const Calibration from_256k = timed(1.5e-5, 3e-5);
  EXPECT_EQ(from_256k.sort_in_place_min_keys, 262144u);
  EXPECT_THAT(from_256k.report,
              HasSubstr("packed below 262144 keys a request"));
  EXPECT_THAT(from_256k.report, HasSubstr("where they lie     0.030 ms"));
  // The device's cost model takes each size's chosen share: 10 us at 64K
  // (packed), 30 us at 256K (in place): 5 us more per 96K keys.
  EXPECT_NEAR(from_256k.gpu_sort.queued_per_unit, 2e-5 / (262144 - 65536),
              1e-14);
  // In place wins at both: whenever the engine can, as before.
  EXPECT_EQ(timed(1e-5, 3e-5).sort_in_place_min_keys, 0u);
  EXPECT_THAT(timed(1e-5, 3e-5).report,
              HasSubstr("in page-locked memory are sorted where they lie"));
  // Packing wins at both: in place only past the sizes timed.
  EXPECT_EQ(timed(2e-5, 5e-5).sort_in_place_min_keys, 2 * 262144u);
  // A win at 64K that the larger size does not confirm does not count.
  EXPECT_EQ(timed(0.5e-5, 5e-5).sort_in_place_min_keys, 2 * 262144u);
  // Nothing timed in place (requests not page-locked, or an engine that
  // does not take parts): in place whenever the engine can.
  EXPECT_EQ(timed(0, 0).sort_in_place_min_keys, 0u);
}

}  // namespace
}  // namespace sortd
