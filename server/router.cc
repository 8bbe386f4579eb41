#include "server/router.h"

#include <algorithm>
#include <cmath>

namespace sortd {

const char* RouteName(Route route) {
  switch (route) {
    case Route::kCpu:
      return "cpu";
    case Route::kBatch:
      return "batch";
    case Route::kSolo:
      return "solo";
    case Route::kSpill:
      return "spill";
    case Route::kFailover:
      return "failover";
  }
  return "unknown";
}

double CostModel::Seconds(double units) const {
  if (!timed.empty() && units > timed.back().first) {
    return timed.back().second + (units - timed.back().first) * per_unit;
  }
  if (timed.size() >= 2) {
    if (units <= timed.front().first) return timed.front().second;
    size_t i = 1;
    while (timed[i].first < units) ++i;
    const auto [u0, s0] = timed[i - 1];
    const auto [u1, s1] = timed[i];
    return s0 + (s1 - s0) * (units - u0) / (u1 - u0);
  }
  return fixed + units * per_unit;
}

Route ChooseRoute(const RouterConfig& c, const RouteRequest& r,
                  const RouteLoad& load, RouteEstimate* estimate) {
  if (estimate != nullptr) *estimate = {};
  if (load.devices_up == 0) {
    return load.devices == 0 ? Route::kCpu : Route::kFailover;
  }
  const bool sort = r.op == Op::kSort;
  const Thresholds& th = sort ? c.sort : c.transpose;
  const CostModel& gpu = sort ? c.gpu_sort : c.gpu_transpose;
  const CostModel& cpu = sort ? c.cpu_sort : c.cpu_transpose;
  // Estimated time to answer this request on each side, behind what is
  // already waiting there (only with both calibrated cost models).
  const bool estimated = c.spill && gpu.known() && cpu.known();
  const double n = static_cast<double>(r.units);
  const double cpu_eta =
      cpu.Seconds(n) + cpu.Drain(static_cast<double>(load.cpu_queued_units),
                                 static_cast<double>(load.cpu_queued_requests));
  const double gpu_eta =
      gpu.Seconds(n) +
      gpu.Drain(static_cast<double>(load.device_backlog_units)) /
          load.devices_up;
  const double delay = absl::ToDoubleSeconds(c.max_batch_delay);
  // Not a positive number: as estimated.
  const double late = load.device_late > 0 && std::isfinite(load.device_late)
                          ? load.device_late
                          : 1.0;
  Route route;
  if (r.units <= th.cpu_max) {
    // Small requests belong to the CPU path, unless its own backlog would
    // answer this one later than a device batch would (overflow).
    const bool overflow = estimated && r.units > 0 &&
                          load.cpu_queued_units > 0 &&
                          (delay + gpu_eta) * late < cpu_eta;
    route = !overflow                ? Route::kCpu
            : r.units >= th.solo_min ? Route::kSolo
                                     : Route::kBatch;
  } else if (estimated && r.units <= th.spill_max &&
             load.device_backlog_units > 0 && cpu_eta < gpu_eta * late) {
    // Spill only when the devices have a backlog: on idle devices the
    // calibrated thresholds (or the operator's pinned ones) decide.
    route = Route::kSpill;
  } else {
    route = r.units >= th.solo_min ? Route::kSolo : Route::kBatch;
  }
  if (estimated && estimate != nullptr) {
    estimate->cpu = cpu_eta;
    estimate->device = gpu_eta + (r.units < th.solo_min ? delay : 0);
  }
  return route;
}

}  // namespace sortd
