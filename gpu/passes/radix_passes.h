// The radix sort's LSD passes of one array (or of one segment), enqueued on
// a Run: which passes run and in what order, each pass either one launch
// with a decoupled look-back (onesweep.h) or histogram, scan and scatter
// launches (three_launch.h), as RadixPassPlan decides. The keys enter and
// leave the ordered form in encode.h; picked digits are picked and their
// runs settled in settle.h.
//
//   RadixPassPlan plan = PlanRadixPasses(policy, 32, false, n, true);
//   status = RadixPasses(run, policy, plan, arrays, skip, &totals, &raw_ends);
#ifndef SORTD_GPU_PASSES_RADIX_PASSES_H_
#define SORTD_GPU_PASSES_RADIX_PASSES_H_

#include <vector>

#include "absl/status/status.h"
#include "gpu/engine_run.h"
#include "gpu/passes/encode.h"
#include "gpu/passes/pass_order.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

// The LSD passes of `plan` over a.keys[a.cur] (and indices), except the
// passes marked in `skip`; allocates the plan's pass buffers. `totals`:
// every pass's digit counts (from EncodeKeys), or null (then the passes
// take three launches). `raw_ends`: the first pass that runs reads
// raw_ends->keys and the last stores raw keys; at least one pass must run.
// Null: a.keys[a.cur] is in ordered form. `later` (may be empty) marks
// passes after the first as skipped while the first runs; the first pass
// then stores ordered keys, and they stay so (a.keys_raw false) if no
// later pass runs. `picked` (needs `totals`): the passes are its slots
// (`skip` has one entry a slot), their digits picked on the device.
absl::Status RadixPasses(Run& run, const RadixSortPolicy& policy,
                         const RadixPassPlan& plan, SortArrays& a,
                         std::vector<bool> skip, const cl::Buffer* totals,
                         const RawEnds* raw_ends,
                         const SkipLater& later = nullptr,
                         const PickedDigits* picked = nullptr);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_RADIX_PASSES_H_
