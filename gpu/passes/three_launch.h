// The three-launch radix pass: per pass a histogram of each tile's digits,
// an exclusive scan of those counts (scan_blocks and scan_add, level by
// level) and a stable scatter (radix_sort.cl; arguments in
// gpu/kernels/three_launch_args.h). Runs where the one-launch pass does
// not (RadixPassPlan::one_launch false): no digit totals, or a device that
// may not keep started work-groups running.
//
//   status = ThreeLaunchPasses(run, policy, plan, k, settle_k, arrays,
//                              skip, totals, order, picked);
#ifndef SORTD_GPU_PASSES_THREE_LAUNCH_H_
#define SORTD_GPU_PASSES_THREE_LAUNCH_H_

#include <vector>

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/three_launch_args.h"
#include "gpu/passes/pass_order.h"
#include "gpu/passes/settle.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

SORTD_KERNEL_ARGS(HistogramArgs, SORTD_HISTOGRAM_ARGS);
SORTD_KERNEL_ARGS(ScanBlocksArgs, SORTD_SCAN_BLOCKS_ARGS);
SORTD_KERNEL_ARGS(ScanAddArgs, SORTD_SCAN_ADD_ARGS);
SORTD_KERNEL_ARGS(ScatterArgs, SORTD_SCATTER_ARGS);

// One build's three-launch kernels.
struct ThreeLaunchKernels {
  ArgsKernel<HistogramArgs> histogram;  // radix_histogram
  ArgsKernel<ScanBlocksArgs> scan_blocks;
  ArgsKernel<ScanAddArgs> scan_add;
  ArgsKernel<ScatterArgs> scatter;  // radix_scatter
};

// The passes of `plan` not marked in `skip`, three launches each (the scan
// one or more), over a.keys[a.cur] (and indices). With `picked` (which
// needs `totals`), radix_digit_starts (`settle_k`) first picks the digits.
absl::Status ThreeLaunchPasses(Run& run, const RadixSortPolicy& policy,
                               const RadixPassPlan& plan, ThreeLaunchKernels& k,
                               SettleKernels& settle_k, SortArrays& a,
                               std::vector<bool>& skip,
                               const cl::Buffer* totals, PassOrder& order,
                               const PickedDigits* picked);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_THREE_LAUNCH_H_
