#include "gpu/passes/settle.h"

#include "gpu/engine_run.h"

namespace sortd::gpu {

absl::Status DigitStarts(Run& run, const RadixSortPolicy& policy,
                         const RadixPassPlan& plan, SettleKernels& k,
                         const cl::Buffer& totals, const cl::Buffer& starts,
                         const PickedDigits* picked, const PassOrder& order,
                         const SortArrays& a) {
  // Without picked digits the kernel only writes the starts; `picks` then
  // names a buffer it does not touch.
  k.digit_starts.Bind({
      .totals = totals,
      .starts = starts,
      .n = static_cast<cl_uint>(plan.count),
      .slots = static_cast<cl_uint>(picked != nullptr ? picked->slots : 0),
      .picks = picked != nullptr ? picked->buffer : starts,
      .keys = order.Sampled(a),
      .kind_order = order.SampledKindOrder(),
  });
  return run.Launch(k.digit_starts, plan.passes, policy.work_group,
                    plan.Stage("scan"));
}

absl::Status Settle(Run& run, const RadixSortPolicy& policy, SettleKernels& k,
                    const cl::Buffer& keys, size_t count, cl_uint kind_order,
                    const cl::Buffer& picks) {
  k.settle.Bind({
      .keys = keys,
      .n = static_cast<cl_uint>(count),
      .kind_order = kind_order,
      .picks = picks,
  });
  return run.Launch(k.settle, DivUp(count, policy.SettleTileKeys()),
                    policy.work_group, "settle");
}

}  // namespace sortd::gpu
