#include "server/calibrate.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace sortd {
namespace {

// Median wall time of `repeats` calls of `run`, after one untimed call.
template <typename F>
absl::StatusOr<double> MedianSeconds(int repeats, F run) {
  if (absl::Status s = run(); !s.ok()) return s;
  std::vector<double> times;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const absl::Time start = absl::Now();
    if (absl::Status s = run(); !s.ok()) return s;
    times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

using Point = OperationTimings::Point;
using BatchPoint = OperationTimings::BatchPoint;

// CPU-path and device times of run(sorter, n) for n = first, 4 first, ...
// up to last; a point's units are n * units_per_n.
template <typename Run>
absl::StatusOr<std::vector<Point>> TimeBothPaths(Sorter& cpu, Sorter& device,
                                                 size_t first, size_t last,
                                                 size_t units_per_n,
                                                 int repeats, Run run) {
  std::vector<Point> points;
  for (size_t n = first; n <= last; n *= 4) {
    Point p;
    p.units = n * units_per_n;
    absl::StatusOr<double> c =
        MedianSeconds(repeats, [&] { return run(cpu, n); });
    if (!c.ok()) return c.status();
    absl::StatusOr<double> g =
        MedianSeconds(repeats, [&] { return run(device, n); });
    if (!g.ok()) return g.status();
    p.cpu = *c;
    p.gpu = *g;
    points.push_back(p);
  }
  return points;
}

// fixed + n * per_unit through the two largest points (the slope) and the
// smallest (the fixed cost).
CostModel Fit(const std::vector<Point>& points, double Point::*field) {
  CostModel m;
  if (points.size() < 2) return m;
  const Point& a = points[points.size() - 2];
  const Point& b = points.back();
  m.per_unit = std::max(
      1e-12, (b.*field - a.*field) / static_cast<double>(b.units - a.units));
  m.fixed =
      std::max(0.0, points.front().*field - m.per_unit * points.front().units);
  return m;
}

// Requests up to cpu_max units go to the CPU path: from the last point where
// the CPU is as fast as the device, midway (geometrically) to the next.
// Requests of solo_min units or more run alone: the first size at which a
// lone request costs at most `gain` times its share of a batch.
Thresholds Choose(const std::vector<Point>& points,
                  const std::vector<BatchPoint>& batched, size_t tile,
                  double gain) {
  Thresholds t;
  // After the last point where the CPU wins: a noisy point where the
  // device wins narrowly before the CPU wins again does not count.
  t.cpu_max = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].cpu <= points[i].gpu) {
      t.cpu_max = i + 1 < points.size() ? points[i].units * 2 : points[i].units;
    }
  }
  t.solo_min = tile > 0
                   ? tile + 1
                   : (batched.empty() ? SIZE_MAX : batched.back().units * 4);
  for (const BatchPoint& b : batched) {
    if (b.solo <= gain * b.share) {
      t.solo_min = std::min(t.solo_min, b.units);
      break;
    }
  }
  if (t.solo_min <= t.cpu_max) t.solo_min = t.cpu_max + 1;
  return t;
}

void Report(std::string* out, const char* op, const char* unit,
            const std::vector<Point>& points,
            const std::vector<BatchPoint>& batched, const Thresholds& t,
            size_t per_unit_divisor) {
  for (const Point& p : points) {
    absl::StrAppendFormat(out,
                          "sortd: calibrate %s %8zu %s: cpu %9.3f ms, device "
                          "%9.3f ms\n",
                          op, p.units / per_unit_divisor, unit, p.cpu * 1e3,
                          p.gpu * 1e3);
  }
  for (const BatchPoint& b : batched) {
    absl::StrAppendFormat(out,
                          "sortd: calibrate %s %8zu %s alone %9.3f ms, as "
                          "part of a batch %9.3f ms\n",
                          op, b.units / per_unit_divisor, unit, b.solo * 1e3,
                          b.share * 1e3);
  }
  auto fmt = [&](size_t v, bool up) -> std::string {
    if (v == SIZE_MAX) return "never";
    return absl::StrCat((v + (up ? per_unit_divisor - 1 : 0)) /
                        per_unit_divisor);
  };
  absl::StrAppend(out, "sortd: router ", op, ": CPU path up to ",
                  fmt(t.cpu_max, false), " ", unit, ", alone on a device from ",
                  fmt(t.solo_min, true), " ", unit, ", batched between\n");
}

}  // namespace

absl::StatusOr<RoutingTimings> MeasureRouting(
    Sorter& cpu, Sorter& device, const CalibrationOptions& options) {
  RoutingTimings timings;
  const size_t max_keys = std::max<size_t>(options.max_keys, 1024);
  std::mt19937 rng(12345);
  std::vector<uint32_t> keys(max_keys), out(max_keys);
  for (uint32_t& k : keys) k = rng();
  auto sort_job = [&](size_t n) {
    SortJob job;
    job.key_type = KeyType::kU32;
    job.count = n;
    job.keys = reinterpret_cast<const std::byte*>(keys.data());
    job.keys_out = reinterpret_cast<std::byte*>(out.data());
    return job;
  };

  absl::StatusOr<std::vector<Point>> measured =
      TimeBothPaths(cpu, device, 64, max_keys, 1, options.repeats,
                    [&](Sorter& s, size_t n) { return s.Sort(sort_job(n)); });
  if (!measured.ok()) return measured.status();
  const std::vector<Point>& points = *measured;
  const size_t tile = device.fused_segment_keys(KeyType::kU32);
  std::vector<BatchPoint>& batched = timings.sort.batched;
  const size_t batch_keys = std::min<size_t>(max_keys, size_t{1} << 18);
  for (const Point& p : points) {
    if (p.units < 256 || (tile > 0 && p.units > tile)) continue;
    const size_t k = std::clamp<size_t>(batch_keys / p.units, 0, 256);
    if (k < 4) break;
    std::vector<uint32_t> offsets(k + 1);
    for (size_t i = 0; i <= k; ++i)
      offsets[i] = static_cast<uint32_t>(i * p.units);
    auto t = MedianSeconds(options.repeats, [&] {
      return device.SortSegments(sort_job(k * p.units), offsets);
    });
    if (!t.ok()) return t.status();
    batched.push_back({p.units, p.gpu, *t / static_cast<double>(k)});
  }
  timings.sort.points = points;
  timings.sort.fused_max = tile;

  // Transposes: units are rows, 32 per matrix.
  const size_t max_matrices = std::max<size_t>(max_keys / 16, 64);
  std::vector<uint32_t> rows(max_matrices * 32), rows_out(max_matrices * 32);
  for (uint32_t& r : rows) r = rng();
  auto transpose_job = [&](size_t m) {
    TransposeJob job;
    job.count = m;
    job.in = reinterpret_cast<const std::byte*>(rows.data());
    job.out = reinterpret_cast<std::byte*>(rows_out.data());
    return job;
  };
  absl::StatusOr<std::vector<Point>> tmeasured = TimeBothPaths(
      cpu, device, 4, max_matrices, 32, options.repeats,
      [&](Sorter& s, size_t m) { return s.Transpose(transpose_job(m)); });
  if (!tmeasured.ok()) return tmeasured.status();
  const std::vector<Point>& tpoints = *tmeasured;
  std::vector<BatchPoint>& tbatched = timings.transpose.batched;
  const size_t batch_matrices = std::min<size_t>(max_matrices, 1 << 14);
  for (const Point& p : tpoints) {
    const size_t m = p.units / 32;
    const size_t k = std::min<size_t>(batch_matrices / m, 256);
    if (k < 4) break;
    auto t = MedianSeconds(options.repeats, [&] {
      return device.Transpose(transpose_job(k * m));
    });
    if (!t.ok()) return t.status();
    tbatched.push_back({p.units, p.gpu, *t / static_cast<double>(k)});
  }
  timings.transpose.points = tpoints;
  return timings;
}

Calibration ChooseRouting(const RoutingTimings& timings, double solo_gain) {
  Calibration c;
  const OperationTimings& s = timings.sort;
  c.sort = Choose(s.points, s.batched, s.fused_max, solo_gain);
  c.cpu_sort = Fit(s.points, &Point::cpu);
  c.gpu_sort = Fit(s.points, &Point::gpu);
  Report(&c.report, "sort", "keys", s.points, s.batched, c.sort, 1);
  const OperationTimings& t = timings.transpose;
  c.transpose = Choose(t.points, t.batched, t.fused_max, solo_gain);
  c.cpu_transpose = Fit(t.points, &Point::cpu);
  c.gpu_transpose = Fit(t.points, &Point::gpu);
  Report(&c.report, "transpose", "matrices", t.points, t.batched, c.transpose,
         32);
  return c;
}

absl::StatusOr<Calibration> Calibrate(Sorter& cpu, Sorter& device,
                                      const CalibrationOptions& options) {
  absl::StatusOr<RoutingTimings> timings = MeasureRouting(cpu, device, options);
  if (!timings.ok()) return timings.status();
  return ChooseRouting(*timings, options.solo_gain);
}

}  // namespace sortd
