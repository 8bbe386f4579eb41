// The kernels around the radix passes' digits (radix_sort.cl, arguments
// in gpu/kernels/settle_args.h): radix_digit_starts, every pass's digit
// starts from the digit totals (and the digits picked, for passes over
// picked digits), and radix_settle, which sorts the runs such passes leave
// below the picked digits.
//
//   status = DigitStarts(job, totals, starts);
#ifndef SORTD_GPU_PASSES_SETTLE_H_
#define SORTD_GPU_PASSES_SETTLE_H_

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/settle_args.h"
#include "gpu/passes/pass_order.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

struct RadixPassJob;

SORTD_KERNEL_ARGS(DigitStartsArgs, SORTD_DIGIT_STARTS_ARGS);
SORTD_KERNEL_ARGS(SettleArgs, SORTD_SETTLE_ARGS);

// One build's kernels (kernel objects hold their arguments: each lane has
// its own).
struct SettleKernels {
  ArgsKernel<DigitStartsArgs> digit_starts;  // radix_digit_starts
  ArgsKernel<SettleArgs> settle;             // radix_settle
};

// Every pass's digit starts of `job` into `starts` from the digit
// `totals`, and, with `job.picked`, the digits its passes sort, picked
// from the keys the first pass of `job.order` reads (`job.settle`).
absl::Status DigitStarts(const RadixPassJob& job, const cl::Buffer& totals,
                         const cl::Buffer& starts);

// The `count` keys of `keys` (raw, of kind and order `kind_order`) that
// passes over picked digits left in runs, sorted in place or flagged in
// `picks` (radix_settle).
absl::Status Settle(Run& run, const RadixSortPolicy& policy, SettleKernels& k,
                    const cl::Buffer& keys, size_t count, cl_uint kind_order,
                    const cl::Buffer& picks);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_SETTLE_H_
