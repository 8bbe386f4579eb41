// Placement: where the scheduler puts work, and the state behind that
// choice that is neither the queues' (server/batcher.h) nor the devices'
// (server/device_pool.h):
//   - the route of each task: the router (server/router.h) over the load
//     at that moment;
//   - the CPU path's backlog, in units and requests;
//   - how late the devices have lately answered overflowed requests
//     (Lateness), which scales the router's device estimates;
//   - the pipeline depth: whether a device's runner may take a batch now,
//     and how many runners a device has.
//
// Not thread-safe: the scheduler holds it under its one lock, with the
// queues and the devices it reads. Times are the caller's.
//
//   Placement placement({.router = config, .pipeline_depth = 2,
//                        .full_pipeline_depth = 3});
//   Route r = placement.Choose({.op = Op::kSort, .units = n}, pool,
//                              queued_units, now, &estimate);
//   if (r == Route::kCpu) placement.CpuQueued(n);  // ... CpuStarted(n)
//   switch (placement.MayTake(pool, d)) { ... }
#ifndef SORTD_SERVER_PLACEMENT_H_
#define SORTD_SERVER_PLACEMENT_H_

#include <cstddef>

#include "absl/time/time.h"
#include "server/device_pool.h"
#include "server/router.h"

namespace sortd {

class Placement {
 public:
  struct Options {
    RouterConfig router = {};
    // Batches in flight per device (see Scheduler::Options): any batch up
    // to pipeline_depth, beyond it up to full_pipeline_depth only a full
    // one. Values below 1 (and a full depth below pipeline_depth) are
    // raised to them.
    int pipeline_depth = 2;
    int full_pipeline_depth = 2;
  };

  // How late the devices' answers to overflowed requests (small ones sent
  // to a batch by estimate) come against the router's estimates, for one
  // operation, over all devices: a moving geometric mean of answered /
  // estimated seconds, each answer weighing kWeight (so a batch of ten
  // moves it most of the way: weighed by batch instead, it rose too slowly
  // to stop overflow), its logarithm fading towards 0 (on time) by half
  // every kHalfLife, so that devices judged late under one load are tried
  // again under another.
  class Lateness {
   public:
    static constexpr double kWeight = 0.1;
    static constexpr absl::Duration kHalfLife = absl::Seconds(30);
    // A ratio beyond these bounds counts as the bound.
    static constexpr double kMin = 1.0 / 16;
    static constexpr double kMax = 16;
    double At(absl::Time now) const;
    // Weighs one answer in; the factor now.
    double Add(double answered_s, double estimated_s, absl::Time now);

   private:
    double log_ = 0;  // of the ratio, as of at_
    absl::Time at_ = absl::InfinitePast();
  };

  // What a device's runner may take now.
  enum class Take {
    kNothing,    // its device is at its depth, or another holds fewer
    kFullBatch,  // beyond pipeline_depth: a full batch, or a solo task
                 // no longer than one (Batchers::TakeFull)
    kAnyBatch,   // the next batch ready
  };

  explicit Placement(const Options& options);

  const Options& options() const { return options_; }

  // The route of `request` with `device_queued_units` waiting for the
  // devices (in batches and handovers) and `pool` as it is; the router's
  // estimates into `estimate` (may be null).
  Route Choose(const RouteRequest& request, const DevicePool& pool,
               size_t device_queued_units, absl::Time now,
               RouteEstimate* estimate) const;

  // A task of `units` joined the CPU path's queue / left it to run (each
  // CpuStarted follows its CpuQueued).
  void CpuQueued(size_t units);
  void CpuStarted(size_t units);
  size_t cpu_queued_units() const { return cpu_units_; }
  size_t cpu_queued_requests() const { return cpu_requests_; }

  // The factor the router scales `op`'s device estimates by at `now`.
  double late(Op op, absl::Time now) const { return late_[Index(op)].At(now); }
  // Weighs in a device's answer to an overflowed task, `answered_s` after
  // it was queued against the `estimated_s` the router made; the factor
  // now.
  double Answered(Op op, double answered_s, double estimated_s,
                  absl::Time now) {
    return late_[Index(op)].Add(answered_s, estimated_s, now);
  }

  // Whether device `d`'s runner may take a batch now: within
  // pipeline_depth, any, when no device up holds fewer; beyond it, up to
  // the full depth, a full one.
  Take MayTake(const DevicePool& pool, size_t d) const;
  // The next two read the pool's own pipeline_depth as the floor of every
  // depth: the scheduler builds both from the same options.
  // Whether device `d` may take a batch another device failed: up, with
  // fewer than the full depth in flight, whatever the others hold (only
  // some devices may take it: waiting to be the least loaded of all could
  // wait for a device that never will).
  bool MayTakeHandover(const DevicePool& pool, size_t d) const {
    return pool.HasRoom(d, options_.full_pipeline_depth);
  }
  // Runner threads for device `d`: one per batch it may hold at once.
  int Runners(const DevicePool& pool, size_t d) const {
    return pool.Depth(d, options_.full_pipeline_depth);
  }

 private:
  static Options Normalized(Options options);
  static int Index(Op op) { return op == Op::kSort ? 0 : 1; }

  const Options options_;
  size_t cpu_units_ = 0;
  size_t cpu_requests_ = 0;
  Lateness late_[2];  // by Op
};

}  // namespace sortd

#endif  // SORTD_SERVER_PLACEMENT_H_
