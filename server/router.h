// The router: where a request goes, decided from its size, the calibrated
// costs and the load at the moment, with no state of its own (the
// scheduler passes the load in), so that every decision can be tested
// from a table.
//
//   tiny  (<= cpu_max units)        -> oneTBB CPU path, no batching delay
//   medium                          -> joins a batch of its class
//   large (>= solo_min units)       -> runs alone on a device
//   up to spill_max units, when the devices' backlog would finish it
//   later than the CPU path         -> CPU ("spill")
//   tiny, when the CPU path's backlog would finish it later than a device
//                                   -> a device batch (overflow)
//   no healthy device               -> CPU ("failover")
//
//   RouterConfig config{.sort = {.cpu_max = 8192, .solo_min = 1 << 20}};
//   Route r = ChooseRoute(config, {.op = Op::kSort, .units = 50000},
//                         {.devices = 1, .devices_up = 1});  // kBatch
#ifndef SORTD_SERVER_ROUTER_H_
#define SORTD_SERVER_ROUTER_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace sortd {

enum class Op { kSort, kTranspose };
inline const char* OpName(Op op) {
  return op == Op::kSort ? "sort" : "transpose";
}

// How a task was (or will be) routed.
enum class Route { kCpu, kBatch, kSolo, kSpill, kFailover };
const char* RouteName(Route route);

// Where requests of one operation go, in units (keys; 32 rows per matrix).
struct Thresholds {
  size_t cpu_max = 0;          // at most: the CPU path
  size_t solo_min = SIZE_MAX;  // at least: alone on a device
  // At most: may spill to the CPU path when the devices are backed up.
  // Larger requests wait for a device: on the CPU path they would cost the
  // host's cores more than they take off the devices.
  size_t spill_max = SIZE_MAX;
};

// A path's costs. One request of n units alone: between two timed sizes
// (`timed`, ascending units), on the line between them; beyond the last,
// its time plus per_unit a unit more; with nothing timed, fixed + n *
// per_unit. A queue of r requests holding q units, served while requests
// keep arriving (in parallel on the CPU path, in batches on a device):
// drained in about r * queued_fixed + q * queued_per_unit (0: per_unit),
// so that many small requests cost their fixed parts too.
struct CostModel {
  double fixed = 0;
  double per_unit = 0;
  double queued_fixed = 0;
  double queued_per_unit = 0;
  std::vector<std::pair<double, double>> timed = {};  // (units, seconds)
  bool known() const { return per_unit > 0; }
  double Seconds(double units) const;
  double Drain(double units, double requests = 0) const {
    return requests * queued_fixed +
           units * (queued_per_unit > 0 ? queued_per_unit : per_unit);
  }
};

struct RouterConfig {
  Thresholds sort, transpose;
  // Calibrated costs; spill and overflow need both of an operation's.
  CostModel cpu_sort, gpu_sort, cpu_transpose, gpu_transpose;
  bool spill = true;
  absl::Duration max_batch_delay = absl::Microseconds(100);
};

// One request, as the router sees it.
struct RouteRequest {
  Op op = Op::kSort;
  size_t units = 0;
};

// The load at the moment of the decision.
struct RouteLoad {
  int devices = 0;     // device workers, healthy or not
  int devices_up = 0;  // healthy ones
  // Units waiting for or running on the healthy devices.
  size_t device_backlog_units = 0;
  // Units queued for the CPU path, and the requests that hold them.
  size_t cpu_queued_units = 0;
  size_t cpu_queued_requests = 0;
  // How much later than estimated the devices have lately answered this
  // operation's overflowed requests (1: on time; not a positive number:
  // taken as 1): device estimates are scaled by it. The
  // calibration times a device's runs with the host's cores idle; with the
  // CPU path busy, a batch's host stages (packing, copies) run several
  // times slower, and requests sent there on the idle-host estimate wait
  // for them (server/placement.h, Placement::Lateness).
  double device_late = 1;
};

// The router's estimates behind a decision, in seconds, before
// `device_late`: a request's answer on the CPU path behind its backlog,
// and on a device behind the devices' backlog (below solo_min, in a batch:
// its batching delay included). Zero where no estimate was made (costs not
// calibrated, spill and overflow off, or no device up).
struct RouteEstimate {
  double cpu = 0;
  double device = 0;
};

Route ChooseRoute(const RouterConfig& config, const RouteRequest& request,
                  const RouteLoad& load, RouteEstimate* estimate = nullptr);

}  // namespace sortd

#endif  // SORTD_SERVER_ROUTER_H_
