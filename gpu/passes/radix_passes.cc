#include "gpu/passes/radix_passes.h"

#include "gpu/passes/onesweep.h"
#include "gpu/passes/three_launch.h"

namespace sortd::gpu {
namespace {

// The kernels of `plan`'s build: the short-array one below small_max, the
// streaming-load one for long arrays of 32-bit keys.
RadixKernels& KernelsFor(Run& run, const RadixPassPlan& plan) {
  if (plan.stream) return run.lane().radix_stream;
  const int wide = plan.key_bits == 64 ? 1 : 0;
  const int index = plan.with_index ? 1 : 0;
  return plan.small ? run.lane().radix_small[wide][index]
                    : run.lane().radix[wide][index];
}

}  // namespace

absl::Status RadixPasses(Run& run, const RadixSortPolicy& policy,
                         const RadixPassPlan& plan, SortArrays& a,
                         std::vector<bool> skip, const cl::Buffer* totals,
                         const RawEnds* raw_ends, const SkipLater& later,
                         const PickedDigits* picked) {
  PassOrder order =
      PassOrder::Of(skip, raw_ends, later ? &later : nullptr, plan);
  if (raw_ends != nullptr && order.first == skip.size()) {
    return absl::InternalError("radix passes with raw ends but no pass to run");
  }
  if ((plan.one_launch || picked != nullptr) && totals == nullptr) {
    return absl::InternalError("radix passes without the digit totals");
  }
  RadixKernels& k = KernelsFor(run, plan);
  const RadixPassJob job{.run = run,
                         .policy = policy,
                         .plan = plan,
                         .settle = k.settling,
                         .arrays = a,
                         .skip = skip,
                         .order = order,
                         .picked = picked};
  SORTD_RETURN_IF_ERROR(plan.one_launch
                            ? OneLaunchPasses(job, k.onesweep, *totals)
                            : ThreeLaunchPasses(job, k.three_launch, totals));
  // Raw keys stored, unless the first pass, run as not the last, was the
  // only one.
  if (raw_ends != nullptr) a.keys_raw = order.last != order.first || !later;
  return absl::OkStatus();
}

}  // namespace sortd::gpu
