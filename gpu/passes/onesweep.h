// The one-launch radix pass ("onesweep"): each pass one launch that ranks
// its tiles and finds where each digit goes by a decoupled look-back over
// the tiles before them (gpu/kernels/radix_onesweep.clt; arguments in
// gpu/kernels/onesweep_args.h). Chosen by RadixPassPlan::one_launch.
//
//   status = OneLaunchPasses(run, policy, plan, k, settle_k, arrays, skip,
//                            totals, order, picked);
#ifndef SORTD_GPU_PASSES_ONESWEEP_H_
#define SORTD_GPU_PASSES_ONESWEEP_H_

#include <vector>

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/onesweep_args.h"
#include "gpu/passes/pass_order.h"
#include "gpu/passes/settle.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

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

// The passes of `plan` not marked in `skip`, one launch each, over
// a.keys[a.cur] (and indices), after radix_digit_starts (`settle_k`) has
// turned `totals` into every pass's digit starts. The look-back status
// words and tile counter must be zero (or, marked, of another pass's
// parity) when a pass starts: marked statuses are zeroed once, each pass
// marking its words with its parity; otherwise they are zeroed before
// every pass.
absl::Status OneLaunchPasses(Run& run, const RadixSortPolicy& policy,
                             const RadixPassPlan& plan, OnesweepKernels& k,
                             SettleKernels& settle_k, SortArrays& a,
                             std::vector<bool>& skip, const cl::Buffer& totals,
                             PassOrder& order, const PickedDigits* picked);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_ONESWEEP_H_
