#include "gpu/passes/onesweep.h"

#include "gpu/engine_run.h"
#include "gpu/kernels/sort_constants.h"

namespace sortd::gpu {

absl::Status OneLaunchPasses(const RadixPassJob& job, OnesweepKernels& k,
                             const cl::Buffer& totals) {
  const RadixPassPlan& plan = job.plan;
  SortArrays& a = job.arrays;
  absl::StatusOr<cl::Buffer> status =
      job.run.Allocate(plan.status_bytes, "look-back status");
  if (!status.ok()) return status.status();
  absl::StatusOr<cl::Buffer> starts =
      job.run.Allocate(plan.starts_bytes, "digit starts");
  if (!starts.ok()) return starts.status();
  if (plan.marked) {
    SORTD_RETURN_IF_ERROR(
        job.run.Zero(*status, plan.status_bytes, plan.Stage("scatter")));
  }
  // Where each digit starts in each pass's output, from the totals (and
  // which digits the passes sort, if picked).
  SORTD_RETURN_IF_ERROR(DigitStarts(job, totals, *starts));
  const cl::Buffer& picks =
      job.picked != nullptr ? job.picked->buffer : *starts;
  const cl_uint words = static_cast<cl_uint>(plan.tiles * plan.radix);
  cl_uint run_pass = 0;  // passes run so far (marked: the parity)
  for (size_t pass = 0; pass < job.skip.size(); ++pass) {
    if (job.skip[pass]) continue;
    if (!plan.marked) {
      SORTD_RETURN_IF_ERROR(
          job.run.Zero(*status, plan.status_bytes, plan.Stage("scatter")));
    }
    auto& kernel = job.order.unordered_first && pass == job.order.first
                       ? k.unordered
                   : plan.late_ranked ? k.late_ranked
                                      : k.ranked;
    kernel.Bind({
        .keys_in = job.order.KeysIn(pass, a),
        .keys_out = a.keys[1 - a.cur],
        .index_in = a.index[a.cur],
        .index_out = a.index[1 - a.cur],
        .n = static_cast<cl_uint>(plan.count),
        .shift = PassOrder::Shift(pass, job.policy, job.picked),
        .starts = *starts,
        .starts_at = static_cast<cl_uint>(pass * plan.radix),
        .status = *status,
        .tiles = static_cast<cl_uint>(plan.tiles),
        .mode = job.order.Mode(pass),
        .status_at = 0,
        .next_at = static_cast<cl_uint>(plan.status_bytes / 4),
        .zero_next = 0,
        .counter_at = plan.marked ? words + run_pass : words,
        .mark = plan.marked ? (run_pass & 1) << SORTD_STATUS_MARK_SHIFT : 0,
        .value_mask = plan.status_value_mask,
        .picks = picks,
    });
    ++run_pass;
    SORTD_RETURN_IF_ERROR(
        job.run.Launch(kernel, plan.tile_grid, plan.Stage("scatter")));
    a.cur = 1 - a.cur;
    SORTD_RETURN_IF_ERROR(job.order.Enqueued(job.run, pass, job.skip));
  }
  return absl::OkStatus();
}

}  // namespace sortd::gpu
