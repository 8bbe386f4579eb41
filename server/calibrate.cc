#include "server/calibrate.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/batch_codec.h"

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
template <typename Cost>
CostModel Fit(const std::vector<Point>& points, Cost cost) {
  CostModel m;
  if (points.size() < 2) return m;
  const Point& a = points[points.size() - 2];
  const Point& b = points.back();
  m.per_unit = std::max(
      1e-12, (cost(b) - cost(a)) / static_cast<double>(b.units - a.units));
  m.fixed =
      std::max(0.0, cost(points.front()) -
                        m.per_unit * static_cast<double>(points.front().units));
  return m;
}

// Host arrays of `bytes` bytes for timed requests: from `memory` when it
// has them, else the heap.
class TimedArray {
 public:
  TimedArray(size_t bytes, std::shared_ptr<HostMemory> memory)
      : bytes_(std::max<size_t>(bytes, 1)) {
    if (memory != nullptr) {
      data_ = static_cast<uint32_t*>(memory->Allocate(bytes_));
      if (data_ != nullptr) memory_ = std::move(memory);
    }
    if (data_ == nullptr) {
      heap_.resize((bytes_ + 3) / 4);
      data_ = heap_.data();
    }
  }
  ~TimedArray() {
    if (memory_ != nullptr) memory_->Free(data_, bytes_);
  }
  TimedArray(const TimedArray&) = delete;
  TimedArray& operator=(const TimedArray&) = delete;
  uint32_t* data() { return data_; }

 private:
  size_t bytes_;
  std::shared_ptr<HostMemory> memory_;
  std::vector<uint32_t> heap_;
  uint32_t* data_ = nullptr;
};

// A device under load: as many callers as it runs at once (two where it
// sets no limit), each at most this many requests a repetition, so that
// small sizes, which cost a device mostly its fixed time, stay quick to
// time.
constexpr size_t kDeviceLoadedEach = 16;

// How each path is timed under load: the CPU path with cpu_callers from
// the heap (where its arrays lie makes no difference to it), a device with
// as many callers as it runs at once, from its page-locked memory where
// sortd keeps requests of the size there.
struct LoadedPath {
  Sorter* sorter;
  int callers;
  size_t each;
  std::shared_ptr<HostMemory> memory;
  double Point::*field;
};
std::vector<LoadedPath> LoadedPaths(Sorter& cpu, Sorter& device,
                                    const CalibrationOptions& options) {
  return {{&cpu, options.cpu_callers, SIZE_MAX, nullptr, &Point::cpu_loaded},
          {&device, device.concurrent_runs() > 0 ? device.concurrent_runs() : 2,
           kDeviceLoadedEach, device.host_memory(), &Point::gpu_loaded}};
}

// A path's time per request at each point while `callers` threads keep it
// busy, each with requests of its own, about `budget` units of work (at
// most `max_each` requests) per caller and repetition: its throughput's
// inverse, into `field`. Each caller's arrays lie where sortd keeps
// requests of that size (`memory` from pinned_min_bytes, else the heap).
template <typename Run>
absl::Status TimeUnderLoad(Sorter& sorter, int callers, size_t budget,
                           size_t max_each, const CalibrationOptions& options,
                           const std::shared_ptr<HostMemory>& memory,
                           const std::vector<uint32_t>& data,
                           std::vector<Point>& points, double Point::*field,
                           Run run) {
  callers = std::max(callers, 1);
  for (Point& p : points) {
    const size_t each =
        std::clamp<size_t>(budget / p.units, 1, std::max<size_t>(max_each, 1));
    const size_t bytes = p.units * sizeof(uint32_t);
    const bool pinned = bytes >= options.pinned_min_bytes;
    std::vector<std::unique_ptr<TimedArray>> ins, outs;
    for (int c = 0; c < callers; ++c) {
      ins.push_back(
          std::make_unique<TimedArray>(bytes, pinned ? memory : nullptr));
      outs.push_back(
          std::make_unique<TimedArray>(bytes, pinned ? memory : nullptr));
      std::copy(data.begin(), data.begin() + p.units, ins.back()->data());
    }
    absl::StatusOr<double> t =
        MedianSeconds(options.repeats, [&]() -> absl::Status {
          std::vector<absl::Status> status(callers);
          std::vector<std::thread> threads;
          for (int c = 0; c < callers; ++c) {
            threads.emplace_back([&, c] {
              for (size_t r = 0; r < each && status[c].ok(); ++r) {
                status[c] =
                    run(sorter, p.units, ins[c]->data(), outs[c]->data());
              }
            });
          }
          for (std::thread& t : threads) t.join();
          for (const absl::Status& s : status) {
            if (!s.ok()) return s;
          }
          return absl::OkStatus();
        });
    if (!t.ok()) return t.status();
    p.*field = *t / static_cast<double>(each * callers);
  }
  return absl::OkStatus();
}

// What a request costs each path under load (ChooseRouting): the CPU path
// with every caller busy; a device as the cheaper of a batch share and
// its requests alone, as many at once as it runs (`loaded`), or one at a
// time.
double CpuCost(const Point& p) {
  return p.cpu_loaded > 0 ? p.cpu_loaded : p.cpu;
}
double DeviceCost(const Point& p, const std::vector<BatchPoint>& batched,
                  bool loaded = true) {
  double cost =
      loaded && p.gpu_loaded > 0 ? std::min(p.gpu, p.gpu_loaded) : p.gpu;
  for (const BatchPoint& b : batched) {
    if (b.units == p.units) cost = std::min(cost, b.share);
  }
  return cost;
}

// A path's cost model: a lone request's time from its lone timings (the
// timed sizes themselves, a line beyond them), the drain rate of a queue
// from its costs under load, never slower than lone requests one after
// another. The CPU path's queue also pays its requests' fixed part under
// load (a device's batches share theirs: the batch share is the cost). A
// device's queue is weighed by lone runs one at a time and by batches of
// up to max_keys keys: the slope comes from the largest sizes, and theirs
// with the device's lanes busy (5.5G keys a second on the H200 host) or in
// batches of four (4.3G) drained a backlog of 16K-key requests several
// times faster than their batches ran, and overflowed up to 45% of them
// into batches (docs/decisions/025-routing-under-load.md).
CostModel Models(const std::vector<Point>& points,
                 const std::vector<BatchPoint>& batched, bool cpu) {
  auto lone = [cpu](const Point& p) { return cpu ? p.cpu : p.gpu; };
  CostModel m = Fit(points, lone);
  for (const Point& p : points) {
    m.timed.emplace_back(static_cast<double>(p.units), lone(p));
  }
  std::vector<BatchPoint> queue_batches;
  for (const BatchPoint& b : batched) {
    if (!b.beyond_max_keys) queue_batches.push_back(b);
  }
  const CostModel loaded =
      cpu ? Fit(points, CpuCost) : Fit(points, [&](const Point& p) {
        return DeviceCost(p, queue_batches, /*loaded=*/false);
      });
  m.queued_per_unit = std::min(m.per_unit, loaded.per_unit);
  if (cpu) m.queued_fixed = std::min(m.fixed, loaded.fixed);
  return m;
}

// Up to where the CPU path costs at most `gain` times the device's under
// load: after the last point where it does (a noisy point where the device
// wins narrowly before the CPU wins again does not count), midway
// (geometrically) to the next timed size.
size_t CpuWinsUpTo(const std::vector<Point>& points,
                   const std::vector<BatchPoint>& batched, double gain) {
  size_t max = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (CpuCost(points[i]) <= gain * DeviceCost(points[i], batched)) {
      max = i + 1 < points.size() ? points[i].units * 2 : points[i].units;
    }
  }
  return max;
}

Thresholds Choose(const std::vector<Point>& points,
                  const std::vector<BatchPoint>& batched, double solo_gain,
                  double cpu_gain) {
  Thresholds t;
  // The device must be cheaper by `cpu_gain` to take a size from the CPU
  // path, which answers at once, without a batch's delay, and sends what
  // it cannot take in time to a batch (overflow). Nothing larger spills to
  // it: only sizes in this range, where an operator pins a smaller one.
  t.cpu_max = CpuWinsUpTo(points, batched, cpu_gain);
  t.spill_max = t.cpu_max;
  t.solo_min = batched.empty() ? SIZE_MAX : batched.back().units * 4;
  for (const BatchPoint& b : batched) {
    if (b.solo <= solo_gain * b.share) {
      t.solo_min = std::min(t.solo_min, b.units);
      break;
    }
  }
  if (t.solo_min <= t.cpu_max) t.solo_min = t.cpu_max + 1;
  return t;
}

// Where batches start to be sorted where their requests lie (see
// ChooseRouting): walking down from the largest size timed both ways, the
// last size from which in place never cost more.
size_t InPlaceMin(const std::vector<BatchPoint>& batched) {
  size_t min = 0;
  for (auto b = batched.rbegin(); b != batched.rend(); ++b) {
    if (b->in_place <= 0) continue;
    if (b->in_place > b->share) {
      // Packing wins here: in place from the next size timed up (or, past
      // the largest, midway to the next size).
      return min == 0 ? b->units * 2 : min;
    }
    min = b->units;
  }
  // In place won at every size timed both ways (or none was): whenever
  // the engine can.
  return 0;
}

void ReportInPlace(std::string* out, const std::vector<BatchPoint>& batched,
                   size_t min) {
  bool any = false;
  for (const BatchPoint& b : batched) {
    if (b.in_place <= 0) continue;
    any = true;
    absl::StrAppendFormat(out,
                          "sortd: calibrate sort %8zu keys in a batch: packed "
                          "%9.3f ms, where they lie %9.3f ms a request\n",
                          b.units, b.share * 1e3, b.in_place * 1e3);
  }
  if (!any) return;
  if (min == 0) {
    absl::StrAppend(out,
                    "sortd: router sort: batched requests in page-locked "
                    "memory are sorted where they lie\n");
  } else {
    absl::StrAppend(out,
                    "sortd: router sort: batched requests are packed "
                    "below ",
                    min,
                    " keys a request, sorted where they "
                    "lie from there\n");
  }
}

void Report(std::string* out, const char* op, const char* unit,
            const std::vector<Point>& points,
            const std::vector<BatchPoint>& batched, const Thresholds& t,
            size_t per_unit_divisor) {
  for (const Point& p : points) {
    absl::StrAppendFormat(out,
                          "sortd: calibrate %s %8zu %s: cpu %9.3f ms (%9.3f ms "
                          "a request under load), device %9.3f ms (%9.3f "
                          "ms)\n",
                          op, p.units / per_unit_divisor, unit, p.cpu * 1e3,
                          CpuCost(p) * 1e3, p.gpu * 1e3,
                          (p.gpu_loaded > 0 ? p.gpu_loaded : p.gpu) * 1e3);
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

// Seconds per request of a batch of k sorts of n u32 keys as the
// scheduler runs it (packed, or where the requests' arrays lie), the
// arrays where sortd would keep requests of that size.
absl::StatusOr<BatchPoint> TimeBatch(Sorter& device,
                                     const CalibrationOptions& options,
                                     size_t n, size_t k,
                                     const std::vector<uint32_t>& keys) {
  const size_t bytes = n * k * sizeof(uint32_t);
  const bool pinned = n * sizeof(uint32_t) >= options.pinned_min_bytes;
  TimedArray in(bytes, pinned ? device.host_memory() : nullptr);
  TimedArray out(bytes, pinned ? device.host_memory() : nullptr);
  std::copy(keys.begin(), keys.begin() + n * k, in.data());
  std::vector<SortJob> jobs(k);
  std::vector<const SortJob*> batch;
  for (size_t i = 0; i < k; ++i) {
    jobs[i].key_type = KeyType::kU32;
    jobs[i].count = n;
    jobs[i].keys = reinterpret_cast<const std::byte*>(in.data() + i * n);
    jobs[i].keys_out = reinterpret_cast<std::byte*>(out.data() + i * n);
    batch.push_back(&jobs[i]);
  }
  // Packed, and where they lie when the engine takes them so.
  BatchPoint point{.units = n};
  batch::PackBuffer pack;
  for (const bool in_place : {false, true}) {
    if (in_place && !(pinned && device.SortsParts(batch))) break;
    auto t = MedianSeconds(options.repeats, [&] {
      return batch::SortTogether(device, batch, nullptr, &pack,
                                 in_place ? 0 : SIZE_MAX);
    });
    if (!t.ok()) return t.status();
    (in_place ? point.in_place : point.share) = *t / static_cast<double>(k);
  }
  return point;
}

// Whether the device sorts four requests of `keys` u32 keys in all in one
// run, as a batch of them would be.
bool FitsOneRun(const Sorter& device, size_t keys) {
  SortJob shape;
  shape.key_type = KeyType::kU32;
  const size_t max = device.max_batch_keys(shape, 4);
  return max == 0 || keys <= max;
}

// Sorts of u32 keys: both paths alone, the CPU path under load, and the
// device's batches of like requests.
absl::StatusOr<OperationTimings> MeasureSorts(Sorter& cpu, Sorter& device,
                                              const CalibrationOptions& options,
                                              size_t max_keys,
                                              std::mt19937& rng) {
  // Batches are timed up to max_batch_keys, so that the largest sizes
  // timed alone are also timed in batches of four where batches may hold
  // them.
  const size_t batch_keys =
      std::clamp<size_t>(options.max_batch_keys, 1024, 4 * max_keys);
  std::vector<uint32_t> keys(std::max(max_keys, batch_keys)), out(max_keys);
  for (uint32_t& k : keys) k = rng();
  // n keys from `in` sorted into `into`, alone or under load.
  auto sort_arrays = [](Sorter& sorter, size_t n, const uint32_t* in,
                        uint32_t* into) {
    SortJob job;
    job.key_type = KeyType::kU32;
    job.count = n;
    job.keys = reinterpret_cast<const std::byte*>(in);
    job.keys_out = reinterpret_cast<std::byte*>(into);
    return sorter.Sort(job);
  };
  OperationTimings timings;
  absl::StatusOr<std::vector<Point>> measured = TimeBothPaths(
      cpu, device, 64, max_keys, 1, options.repeats, [&](Sorter& s, size_t n) {
        return sort_arrays(s, n, keys.data(), out.data());
      });
  if (!measured.ok()) return measured.status();
  timings.points = *std::move(measured);
  for (const LoadedPath& path : LoadedPaths(cpu, device, options)) {
    if (absl::Status s = TimeUnderLoad(*path.sorter, path.callers, max_keys,
                                       path.each, options, path.memory, keys,
                                       timings.points, path.field, sort_arrays);
        !s.ok()) {
      return s;
    }
  }
  // Each size in a batch of up to max_keys keys and 256 requests (in
  // batches of up to 4M keys, 256 16K-key requests' share was half what
  // 64 gave, and moved the CPU range from 32K keys to 8K on the H200
  // host); sizes beyond, in batches of four where batches may hold them.
  const size_t typical_batch_keys = std::min(batch_keys, max_keys);
  for (const Point& p : timings.points) {
    if (p.units < 256) continue;
    size_t k = std::min<size_t>(typical_batch_keys / p.units, 256);
    const bool beyond =
        k < 4 && 4 * p.units <= batch_keys && FitsOneRun(device, 4 * p.units);
    if (beyond) k = 4;
    if (k < 4) break;
    absl::StatusOr<BatchPoint> b = TimeBatch(device, options, p.units, k, keys);
    if (!b.ok()) return b.status();
    b->beyond_max_keys = beyond;
    b->solo = p.gpu;
    timings.batched.push_back(*b);
  }
  return timings;
}

// Transposes, the same way (each size in batches of up to the largest
// size timed and 256 requests); units are rows, 32 per matrix.
absl::StatusOr<OperationTimings> MeasureTransposes(
    Sorter& cpu, Sorter& device, const CalibrationOptions& options,
    size_t max_matrices, std::mt19937& rng) {
  std::vector<uint32_t> rows(max_matrices * 32), out(max_matrices * 32);
  for (uint32_t& r : rows) r = rng();
  // `rows_n` rows (rows_n / 32 matrices) from `in` transposed into `into`.
  auto transpose_arrays = [](Sorter& sorter, size_t rows_n, const uint32_t* in,
                             uint32_t* into) {
    TransposeJob job;
    job.count = rows_n / 32;
    job.in = reinterpret_cast<const std::byte*>(in);
    job.out = reinterpret_cast<std::byte*>(into);
    return sorter.Transpose(job);
  };
  OperationTimings timings;
  absl::StatusOr<std::vector<Point>> measured = TimeBothPaths(
      cpu, device, 4, max_matrices, 32, options.repeats,
      [&](Sorter& s, size_t m) {
        return transpose_arrays(s, m * 32, rows.data(), out.data());
      });
  if (!measured.ok()) return measured.status();
  timings.points = *std::move(measured);
  for (const LoadedPath& path : LoadedPaths(cpu, device, options)) {
    if (absl::Status s = TimeUnderLoad(
            *path.sorter, path.callers, max_matrices * 32, path.each, options,
            path.memory, rows, timings.points, path.field, transpose_arrays);
        !s.ok()) {
      return s;
    }
  }
  const size_t batch_matrices =
      std::clamp<size_t>(options.max_batch_keys / 32, 64, max_matrices);
  for (const Point& p : timings.points) {
    const size_t m = p.units / 32;
    const size_t k = std::min<size_t>(batch_matrices / m, 256);
    if (k < 4) break;
    auto t = MedianSeconds(options.repeats, [&] {
      return transpose_arrays(device, k * m * 32, rows.data(), out.data());
    });
    if (!t.ok()) return t.status();
    timings.batched.push_back({p.units, p.gpu, *t / static_cast<double>(k)});
  }
  return timings;
}

}  // namespace

absl::StatusOr<RoutingTimings> MeasureRouting(
    Sorter& cpu, Sorter& device, const CalibrationOptions& options) {
  const size_t max_keys = std::max<size_t>(options.max_keys, 1024);
  std::mt19937 rng(12345);
  RoutingTimings timings;
  absl::StatusOr<OperationTimings> sorts =
      MeasureSorts(cpu, device, options, max_keys, rng);
  if (!sorts.ok()) return sorts.status();
  timings.sort = *std::move(sorts);
  absl::StatusOr<OperationTimings> transposes = MeasureTransposes(
      cpu, device, options, std::max<size_t>(max_keys / 16, 64), rng);
  if (!transposes.ok()) return transposes.status();
  timings.transpose = *std::move(transposes);
  return timings;
}

Calibration ChooseRouting(const RoutingTimings& timings, double solo_gain,
                          double cpu_gain) {
  Calibration c;
  const OperationTimings& s = timings.sort;
  c.sort_in_place_min_keys = InPlaceMin(s.batched);
  // Each batch share as the scheduler will run that size.
  std::vector<BatchPoint> batched = s.batched;
  for (BatchPoint& b : batched) {
    if (b.in_place > 0 && b.units >= c.sort_in_place_min_keys) {
      b.share = b.in_place;
    }
  }
  c.sort = Choose(s.points, batched, solo_gain, cpu_gain);
  c.cpu_sort = Models(s.points, batched, /*cpu=*/true);
  c.gpu_sort = Models(s.points, batched, /*cpu=*/false);
  Report(&c.report, "sort", "keys", s.points, s.batched, c.sort, 1);
  ReportInPlace(&c.report, s.batched, c.sort_in_place_min_keys);
  const OperationTimings& t = timings.transpose;
  c.transpose = Choose(t.points, t.batched, solo_gain, cpu_gain);
  c.cpu_transpose = Models(t.points, t.batched, /*cpu=*/true);
  c.gpu_transpose = Models(t.points, t.batched, /*cpu=*/false);
  Report(&c.report, "transpose", "matrices", t.points, t.batched, c.transpose,
         32);
  return c;
}

absl::StatusOr<Calibration> Calibrate(Sorter& cpu, Sorter& device,
                                      const CalibrationOptions& options) {
  absl::StatusOr<RoutingTimings> timings = MeasureRouting(cpu, device, options);
  if (!timings.ok()) return timings.status();
  return ChooseRouting(*timings, options.solo_gain, options.cpu_gain);
}

void ApplyCalibration(const Calibration& c, Scheduler::Options* o) {
  o->sort = c.sort;
  o->transpose = c.transpose;
  o->cpu_sort = c.cpu_sort;
  o->gpu_sort = c.gpu_sort;
  o->cpu_transpose = c.cpu_transpose;
  o->gpu_transpose = c.gpu_transpose;
  o->in_place_min_keys = c.sort_in_place_min_keys;
}

}  // namespace sortd
