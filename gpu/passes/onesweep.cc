#include "gpu/passes/onesweep.h"

#include "gpu/engine_run.h"
#include "gpu/kernels/sort_constants.h"

namespace sortd::gpu {

absl::Status OneLaunchPasses(Run& run, const RadixSortPolicy& p,
                             const RadixPassPlan& plan, OnesweepKernels& k,
                             SettleKernels& settle_k, SortArrays& a,
                             std::vector<bool>& skip, const cl::Buffer& totals,
                             PassOrder& order, const PickedDigits* picked) {
  absl::StatusOr<cl::Buffer> status =
      run.Allocate(plan.status_bytes, "look-back status");
  if (!status.ok()) return status.status();
  absl::StatusOr<cl::Buffer> starts =
      run.Allocate(plan.starts_bytes, "digit starts");
  if (!starts.ok()) return starts.status();
  if (plan.marked) {
    SORTD_RETURN_IF_ERROR(
        run.Zero(*status, plan.status_bytes, plan.Stage("scatter")));
  }
  // Where each digit starts in each pass's output, from the totals (and
  // which digits the passes sort, if picked).
  SORTD_RETURN_IF_ERROR(
      DigitStarts(run, p, plan, settle_k, totals, *starts, picked, order, a));
  const cl::Buffer& picks = picked != nullptr ? picked->buffer : *starts;
  const cl_uint words = static_cast<cl_uint>(plan.tiles * plan.radix);
  cl_uint run_pass = 0;  // passes run so far (marked: the parity)
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    if (!plan.marked) {
      SORTD_RETURN_IF_ERROR(
          run.Zero(*status, plan.status_bytes, plan.Stage("scatter")));
    }
    auto& kernel = order.unordered_first && pass == order.first ? k.unordered
                   : plan.late_ranked                           ? k.late_ranked
                                                                : k.ranked;
    kernel.Bind({
        .keys_in = order.KeysIn(pass, a),
        .keys_out = a.keys[1 - a.cur],
        .index_in = a.index[a.cur],
        .index_out = a.index[1 - a.cur],
        .n = static_cast<cl_uint>(plan.count),
        .shift = PassOrder::Shift(pass, p, picked),
        .starts = *starts,
        .starts_at = static_cast<cl_uint>(pass * plan.radix),
        .status = *status,
        .tiles = static_cast<cl_uint>(plan.tiles),
        .mode = order.Mode(pass),
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
        run.Launch(kernel, plan.tiles, p.work_group, plan.Stage("scatter")));
    a.cur = 1 - a.cur;
    SORTD_RETURN_IF_ERROR(order.Enqueued(run, pass, skip));
  }
  return absl::OkStatus();
}

}  // namespace sortd::gpu
