// The router thresholds sortd starts with (Scheduler::Options::sort,
// transpose and in_place_min_keys): calibrated on the first device unless
// every one is pinned by a flag; pinned ones override calibrated ones.
// Without a calibration (it failed) the defaults are conservative: small
// sorts on the CPU, sorts of a million keys and more alone.
//
//   SetRouterThresholds(options.router, cpu, *engines.front().engine,
//                       &options.scheduler);
#ifndef SORTD_SERVER_ROUTER_SETUP_H_
#define SORTD_SERVER_ROUTER_SETUP_H_

#include <cstddef>
#include <cstdint>

#include "core/sorter.h"
#include "server/scheduler.h"

namespace sortd {

struct RouterPins {
  // --cpu_max_keys, --solo_min_keys, --transpose_cpu_max_matrices,
  // --transpose_solo_min_matrices and --batch_in_place_min_keys; negative:
  // calibrated.
  int64_t cpu_max_keys = -1;
  int64_t solo_min_keys = -1;
  int64_t transpose_cpu_max_matrices = -1;
  int64_t transpose_solo_min_matrices = -1;
  int64_t batch_in_place_min_keys = -1;
  // Largest sort the calibration times (--calibrate_max_keys; at least
  // 1024 are).
  int64_t calibrate_max_keys = int64_t{1} << 20;
  // Arrays of at least this many bytes lie in page-locked memory (the host
  // buffer pool's, --host_pool_pinned) and are batched where they lie, as
  // the calibration times them; 0: none do.
  size_t pinned_min_bytes = 0;
};

// Sets the thresholds of `options` (whose batch bounds, CPU workers and
// spill are set already) from `pins`, calibrating `cpu` against `device`
// when any is not pinned, and logs them.
void SetRouterThresholds(const RouterPins& pins, Sorter& cpu, Sorter& device,
                         Scheduler::Options* options);

}  // namespace sortd

#endif  // SORTD_SERVER_ROUTER_SETUP_H_
