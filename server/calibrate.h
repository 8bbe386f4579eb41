// Startup calibration of the router, in two steps: MeasureRouting times the
// CPU path and a device engine on the same generated inputs, and
// ChooseRouting, a pure function of those timings, derives where each
// operation's requests should go (server/scheduler.h) and the linear cost
// models with which the router weighs the two paths' backlogs (overflow of
// small requests into batches; spilling, within the CPU range), both by
// throughput: what a request costs each path when requests keep arriving.
// Calibrate does both.
//
//   absl::StatusOr<Calibration> c = Calibrate(cpu, *engine, {});
//   if (c.ok()) { options.sort = c->sort; options.gpu_sort = c->gpu_sort; }
//   std::fputs(c->report.c_str(), stderr);
#ifndef SORTD_SERVER_CALIBRATE_H_
#define SORTD_SERVER_CALIBRATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sorter.h"
#include "server/scheduler.h"

namespace sortd {

struct CalibrationOptions {
  // Largest single sort timed (keys); transposes go up to a sixteenth of
  // it in matrices.
  size_t max_keys = size_t{1} << 20;
  // Timed repetitions per point; the median is used.
  int repeats = 3;
  // Batching stops paying once a lone request costs at most this factor
  // more than its share of a batch.
  double solo_gain = 1.25;
  // The CPU path keeps sizes where it costs at most this factor more than a
  // device under load (ChooseRouting).
  double cpu_gain = 2.0;
  // Callers that keep the CPU path busy when its throughput is timed (the
  // requests it serves at once: sortd's --cpu_threads).
  int cpu_callers = 1;
  // Keys of the largest batch timed (sortd's --max_batch_keys, at most
  // four times max_keys).
  size_t max_batch_keys = size_t{1} << 20;
  // Request arrays of at least this many bytes lie in the device's
  // page-locked memory (sortd's host buffer pool), so batches of them, and
  // such requests alone on a device under load, are timed from there;
  // smaller ones from the heap. Batches are timed as the
  // scheduler runs them (batch::SortTogether: packed, or sorted where they
  // lie).
  size_t pinned_min_bytes = SIZE_MAX;
};

// Timings of one operation at growing sizes, in units (keys, or rows: 32
// per matrix).
struct OperationTimings {
  struct Point {
    size_t units = 0;
    double cpu = 0, gpu = 0;  // seconds on the CPU path and on the device
    // Seconds of the CPU path per request while cpu_callers keep it busy
    // (its throughput's inverse); 0: not timed, `cpu` stands for it.
    double cpu_loaded = 0;
    // Seconds of the device per request while as many callers as it runs
    // at once keep it busy, their arrays where sortd keeps requests of
    // that size; 0: not timed, `gpu` stands for it.
    double gpu_loaded = 0;
  };
  struct BatchPoint {
    size_t units = 0;  // of one request
    double solo = 0;   // that request alone on the device
    double share = 0;  // its share of a batch of like requests, packed
    // Its share sorted where the requests' arrays lie (page-locked, as
    // sortd keeps requests of this size); 0: not timed.
    double in_place = 0;
    // Timed in a batch of four beyond max_keys keys: it weighs in the
    // thresholds, not in the queue estimates (ChooseRouting).
    bool beyond_max_keys = false;
  };
  std::vector<Point> points;        // ascending units
  std::vector<BatchPoint> batched;  // ascending units
};

struct RoutingTimings {
  OperationTimings sort, transpose;
};

struct Calibration {
  Thresholds sort, transpose;
  // Batched sorts of this many keys or more a request are sorted where
  // their arrays lie, smaller ones packed (Scheduler::Options).
  size_t sort_in_place_min_keys = 0;
  CostModel cpu_sort, gpu_sort, cpu_transpose, gpu_transpose;
  // One line per measured point and the thresholds chosen, for the log.
  std::string report;
};

// Times both paths (seconds of device and CPU time at startup).
absl::StatusOr<RoutingTimings> MeasureRouting(
    Sorter& cpu, Sorter& device, const CalibrationOptions& options);

// The thresholds and cost models `timings` call for, by throughput: what a
// request costs each path when requests keep arriving. On the CPU path
// that is its time per request with every caller busy; on a device, its
// share of a batch of like requests, or its time per request alone (with
// as many at once as the device runs, where that was timed) where that is
// less. The queue estimates weigh a device by batch shares and lone runs
// one at a time.
// Requests up to cpu_max units go to the CPU path: from the last point
// where it costs at most cpu_gain times the device's (the CPU path answers
// without a batch's delay, and what it cannot take in time overflows to a
// batch), midway (geometrically) to the next. Only these sizes may spill to
// the CPU path (spill_max = cpu_max, which a pinned CPU range leaves be):
// larger requests would cost the host's cores, which the devices'
// transfers and launches need too, more than they take off the devices.
// Requests of solo_min units or more run alone: the first size at which a
// lone request costs at most solo_gain times its share of a batch, always
// above cpu_max (so the batch band is empty where batching does not win).
// Batches are sorted where their requests lie from the smallest timed size
// from which doing so costs no more than packing them at every larger timed
// size (0 where it always does; past the timed sizes where it never does),
// and a batch share is the one of the way chosen.
Calibration ChooseRouting(const RoutingTimings& timings, double solo_gain,
                          double cpu_gain);

absl::StatusOr<Calibration> Calibrate(Sorter& cpu, Sorter& device,
                                      const CalibrationOptions& options);

// The scheduler's thresholds, cost models and in-place bound from `c`.
void ApplyCalibration(const Calibration& c, Scheduler::Options* options);

}  // namespace sortd

#endif  // SORTD_SERVER_CALIBRATE_H_
