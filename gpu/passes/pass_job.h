// The state that the one-launch and the three-launch radix passes
// (onesweep.h, three_launch.h) share: the run they enqueue on, the plan and
// order of their passes, the arrays they sort and the kernels that find
// the digit starts; set up by the dispatch (radix_passes.h).
//
//   const RadixPassJob job{.run = run, .policy = policy, .plan = plan,
//                          .settle = k.settling, .arrays = a, .skip = skip,
//                          .order = order, .picked = picked};
//   status = OneLaunchPasses(job, k.onesweep, *totals);
#ifndef SORTD_GPU_PASSES_PASS_JOB_H_
#define SORTD_GPU_PASSES_PASS_JOB_H_

#include <vector>

#include "gpu/passes/pass_order.h"
#include "gpu/passes/settle.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

class Run;
struct SortArrays;

// One call's radix passes: those of `plan` not marked in `skip`, over
// arrays.keys[arrays.cur] (and indices), in the way `order` says. The
// passes advance `arrays.cur` and `order` may mark more of `skip` as they
// are enqueued. `picked` (may be null): the passes are its slots, their
// digits picked by radix_digit_starts (`settle`).
struct RadixPassJob {
  Run& run;
  const RadixSortPolicy& policy;
  const RadixPassPlan& plan;
  SettleKernels& settle;
  SortArrays& arrays;
  std::vector<bool>& skip;
  PassOrder& order;
  const PickedDigits* picked = nullptr;
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_PASS_JOB_H_
