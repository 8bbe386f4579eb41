// The bitonic network over a padded power-of-two array, enqueued on a Run:
// sentinels past the real keys, blocks sorted in local memory, then for
// each larger stage the strides of at least a block in global memory and
// the rest in local memory; and segments of up to a block sorted one
// work-group each (bitonic_sort.cl; arguments in
// gpu/kernels/bitonic_args.h).
//
//   status = BitonicSort(run, policy, plan, arrays);
#ifndef SORTD_GPU_PASSES_BITONIC_H_
#define SORTD_GPU_PASSES_BITONIC_H_

#include <cstddef>

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/bitonic_args.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

class Run;
struct SortArrays;

SORTD_KERNEL_ARGS(BitonicPadArgs, SORTD_BITONIC_PAD_ARGS);
SORTD_KERNEL_ARGS(BitonicSortBlocksArgs, SORTD_BITONIC_SORT_BLOCKS_ARGS);
SORTD_KERNEL_ARGS(BitonicMergeGlobalArgs, SORTD_BITONIC_MERGE_GLOBAL_ARGS);
SORTD_KERNEL_ARGS(BitonicMergeLocalArgs, SORTD_BITONIC_MERGE_LOCAL_ARGS);
SORTD_KERNEL_ARGS(BitonicSegmentsArgs, SORTD_BITONIC_SEGMENTS_ARGS);

// bitonic_sort.cl's kernels, one build (key width, index).
struct BitonicKernels {
  ArgsKernel<BitonicPadArgs> pad;                   // bitonic_pad
  ArgsKernel<BitonicSortBlocksArgs> sort_blocks;    // bitonic_sort_blocks
  ArgsKernel<BitonicMergeGlobalArgs> merge_global;  // bitonic_merge_global
  ArgsKernel<BitonicMergeLocalArgs> merge_local;    // bitonic_merge_local
  ArgsKernel<BitonicSegmentsArgs> segmented;        // segmented_local_sort
};

// Sorts plan.count ordered keys (and indices) of a.keys[a.cur]: pads them
// to plan.padded with sentinels, then runs the network.
absl::Status BitonicSort(Run& run, const BitonicPolicy& policy,
                         const SortPlan& plan, SortArrays& a);

// The `count` segments listed in `list` (of those starting at `offsets`),
// of up to a block each, each sorted by one work-group where it lies in
// a.keys[0] and a.index[0].
absl::Status BitonicSegments(Run& run, const BitonicPolicy& policy,
                             BitonicKernels& k, SortArrays& a,
                             const cl::Buffer& offsets, const cl::Buffer& list,
                             size_t count);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_BITONIC_H_
