// The three-launch radix pass: per pass a histogram of each tile's digits,
// an exclusive scan of those counts (scan_blocks and scan_add, level by
// level) and a stable scatter (radix_sort.cl; arguments in
// gpu/kernels/three_launch_args.h). Runs where the one-launch pass does
// not (RadixPassPlan::one_launch false): no digit totals, or a device that
// may not keep started work-groups running.
//
//   status = ThreeLaunchPasses(job, k, totals);  // job: pass_job.h
#ifndef SORTD_GPU_PASSES_THREE_LAUNCH_H_
#define SORTD_GPU_PASSES_THREE_LAUNCH_H_

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/three_launch_args.h"
#include "gpu/passes/pass_job.h"

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

// The passes of `job`, three launches each (the scan one or more). With
// `job.picked` (which needs `totals`), radix_digit_starts (`job.settle`)
// first picks the digits.
absl::Status ThreeLaunchPasses(const RadixPassJob& job, ThreeLaunchKernels& k,
                               const cl::Buffer* totals);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_THREE_LAUNCH_H_
