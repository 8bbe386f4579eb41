#include "gpu/passes/settle.h"

#include "gpu/engine_run.h"
#include "gpu/passes/pass_job.h"

namespace sortd::gpu {

absl::Status DigitStarts(const RadixPassJob& job, const cl::Buffer& totals,
                         const cl::Buffer& starts) {
  const RadixPassPlan& plan = job.plan;
  const PickedDigits* picked = job.picked;
  // Without picked digits the kernel only writes the starts; `picks` then
  // names a buffer it does not touch.
  job.settle.digit_starts.Bind({
      .totals = totals,
      .starts = starts,
      .n = static_cast<cl_uint>(plan.count),
      .slots = static_cast<cl_uint>(picked != nullptr ? picked->slots : 0),
      .picks = picked != nullptr ? picked->buffer : starts,
      .keys = job.order.Sampled(job.arrays),
      .kind_order = job.order.SampledKindOrder(),
  });
  return job.run.Launch(
      job.settle.digit_starts,
      {.groups = plan.passes, .group_size = job.policy.WorkGroupSize()},
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
  return run.Launch(k.settle,
                    {.groups = DivUp(count, policy.SettleTileKeys()),
                     .group_size = policy.WorkGroupSize()},
                    "settle");
}

}  // namespace sortd::gpu
