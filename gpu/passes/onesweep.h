// The one-launch radix pass ("onesweep"): each pass one launch that ranks
// its tiles and finds where each digit goes by a decoupled look-back over
// the tiles before them (gpu/kernels/radix_onesweep.clt; arguments in
// gpu/kernels/onesweep_args.h). Chosen by RadixPassPlan::one_launch.
//
//   status = OneLaunchPasses(job, k, totals);  // job: pass_job.h
#ifndef SORTD_GPU_PASSES_ONESWEEP_H_
#define SORTD_GPU_PASSES_ONESWEEP_H_

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/onesweep_args.h"
#include "gpu/passes/pass_job.h"

namespace sortd::gpu {

SORTD_KERNEL_ARGS(OnesweepArgs, SORTD_ONESWEEP_ARGS);

// One build's one-launch kernels, all with the same arguments.
struct OnesweepKernels {
  ArgsKernel<OnesweepArgs> ranked;  // radix_onesweep
  // radix_unordered_onesweep: the first pass of a keys-only sort from
  // scratch (keys-only builds with early counts only).
  ArgsKernel<OnesweepArgs> unordered;
  // radix_late_onesweep: the ranked pass walking back after ranking
  // (builds for which RadixSortPolicy::LateRanked holds).
  ArgsKernel<OnesweepArgs> late_ranked;
};

// The passes of `job`, one launch each, after radix_digit_starts
// (`job.settle`) has turned `totals` into every pass's digit starts. The
// look-back status words and tile counter must be zero (or, marked, of
// another pass's parity) when a pass starts: marked statuses are zeroed
// once, each pass marking its words with its parity; otherwise they are
// zeroed before every pass.
absl::Status OneLaunchPasses(const RadixPassJob& job, OnesweepKernels& k,
                             const cl::Buffer& totals);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_ONESWEEP_H_
