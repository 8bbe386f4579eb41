// The radix sort's device steps, enqueued on a Run: key encoding and digit
// counting, and the LSD passes of one array (or of one segment), either as
// one launch per pass with a decoupled look-back or as histogram, scan and
// scatter launches (RadixPassPlan decides).
//
//   RadixPassPlan plan = PlanRadixPasses(policy, 32, false, n, true);
//   status = RadixPasses(run, policy, plan, arrays, skip, &totals, &raw_ends);
#ifndef SORTD_GPU_PASSES_RADIX_PASSES_H_
#define SORTD_GPU_PASSES_RADIX_PASSES_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/sorter.h"
#include "gpu/engine_run.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

// The kernel code of a key kind (gpu/kernels/sort_constants.h).
cl_uint KindCode(KeyType type);

// Radix passes whose first reads the raw keys (ordering them and making the
// indices as it loads) and whose last stores raw keys, so that no encode or
// decode pass runs over the array.
struct RawEnds {
  cl::Buffer keys;     // the raw keys
  cl_uint kind_order;  // key kind | SORTD_MODE_DESCENDING
  // The raw keys are in no order the passes must keep (a sort from
  // scratch, not one continuing earlier passes): where the plan allows it
  // (RadixPassPlan::unordered_first), the first pass does not rank.
  bool unordered = false;
};

// Raw keys (a.raw) -> ordered keys and indices in keys[0] and index[0]
// (`encode`), and/or every pass's digit counts over the job's keys into
// `totals` (`count_digits`), in one launch of k.encode.
absl::Status EncodeKeys(Run& run, const RadixSortPolicy& policy,
                        RadixKernels& k, const SortJob& job, SortArrays& a,
                        cl::Buffer& totals, bool count_digits, bool encode);

// Passes over picked digits: pass s of `slots` sorts the digit that
// radix_digit_starts picks for slot s into `buffer` (SORTD_PICKS_WORDS
// words): the highest digits in which the keys differ, so that after the
// passes only runs of keys equal in those digits are out of order below
// them (radix_settle).
struct PickedDigits {
  cl::Buffer buffer;
  size_t slots = 0;
};

// Called once the first pass is enqueued, to mark later passes in `skip`
// (it may wait for the device meanwhile).
using SkipLater = std::function<absl::Status(std::vector<bool>& skip)>;

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
