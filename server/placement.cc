#include "server/placement.h"

#include <algorithm>
#include <cmath>

namespace sortd {

double Placement::Lateness::At(absl::Time now) const {
  if (at_ == absl::InfinitePast()) return 1;
  const double halves = std::max(0.0, absl::FDivDuration(now - at_, kHalfLife));
  return std::exp(log_ * std::exp2(-halves));
}

double Placement::Lateness::Add(double answered_s, double estimated_s,
                                absl::Time now) {
  if (!(estimated_s > 0)) return At(now);
  const double ratio = std::clamp(answered_s / estimated_s, kMin, kMax);
  const double current = std::log(At(now));
  log_ = current + kWeight * (std::log(ratio) - current);
  at_ = std::max(at_, now);
  return At(now);
}

Placement::Options Placement::Normalized(Options o) {
  o.pipeline_depth = std::max(1, o.pipeline_depth);
  o.full_pipeline_depth = std::max(o.pipeline_depth, o.full_pipeline_depth);
  return o;
}

Placement::Placement(const Options& options) : options_(Normalized(options)) {}

Route Placement::Choose(const RouteRequest& request, const DevicePool& pool,
                        size_t device_queued_units, absl::Time now,
                        RouteEstimate* estimate) const {
  const RouteLoad load{
      .devices = static_cast<int>(pool.size()),
      .devices_up = pool.devices_up(),
      .device_backlog_units = device_queued_units + pool.inflight_units(),
      .cpu_queued_units = cpu_units_,
      .cpu_queued_requests = cpu_requests_,
      .device_late = late(request.op, now)};
  return ChooseRoute(options_.router, request, load, estimate);
}

void Placement::CpuQueued(size_t units) {
  cpu_units_ += units;
  ++cpu_requests_;
}

void Placement::CpuStarted(size_t units) {
  cpu_units_ -= units;
  --cpu_requests_;
}

Placement::Take Placement::MayTake(const DevicePool& pool, size_t d) const {
  if (pool.MayLease(d, options_.pipeline_depth)) return Take::kAnyBatch;
  if (pool.MayLease(d, options_.full_pipeline_depth)) return Take::kFullBatch;
  return Take::kNothing;
}

}  // namespace sortd
