// The bitonic network over a padded power-of-two array, enqueued on a Run:
// sentinels past the real keys, blocks sorted in local memory, then for
// each larger stage the strides of at least a block in global memory and
// the rest in local memory (bitonic_sort.cl).
//
//   status = BitonicSort(run, policy, plan, arrays);
#ifndef SORTD_GPU_PASSES_BITONIC_H_
#define SORTD_GPU_PASSES_BITONIC_H_

#include "absl/status/status.h"
#include "gpu/engine_run.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

// Sorts plan.count ordered keys (and indices) of a.keys[a.cur]: pads them
// to plan.padded with sentinels, then runs the network.
absl::Status BitonicSort(Run& run, const BitonicPolicy& policy,
                         const SortPlan& plan, SortArrays& a);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_BITONIC_H_
