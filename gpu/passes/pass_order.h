// Which of a sort's radix passes run and how each reads and stores its
// keys: shared by the one-launch and the three-launch passes
// (onesweep.h, three_launch.h), which take their `shift`, `mode` and input
// keys from it; set up by the dispatch (radix_passes.h).
#ifndef SORTD_GPU_PASSES_PASS_ORDER_H_
#define SORTD_GPU_PASSES_PASS_ORDER_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

class Run;
struct SortArrays;

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

// Which passes run, and how each reads and stores its keys.
struct PassOrder {
  size_t first, last;  // the first and last pass that run
  const RawEnds* raw_ends;
  const SkipLater* later;  // null: `skip` is final
  bool unordered_first;    // the first pass places keys unranked

  static PassOrder Of(const std::vector<bool>& skip, const RawEnds* raw_ends,
                      const SkipLater* later, const RadixPassPlan& plan);
  // After pass `pass` was enqueued: the first time, submits it and asks
  // `later` (which may wait) which passes still run.
  absl::Status Enqueued(Run& run, size_t pass, std::vector<bool>& skip);

  // The kernels' `shift` argument of `pass`: its digit's first bit, or its
  // slot of the picked digits.
  static cl_uint Shift(size_t pass, const RadixSortPolicy& p,
                       const PickedDigits* picked);

  // radix_digit_starts's keys to sample and their kind and order, as the
  // first pass reads them.
  const cl::Buffer& Sampled(const SortArrays& a) const;
  cl_uint SampledKindOrder() const {
    return raw_ends != nullptr ? raw_ends->kind_order : 0;
  }

  // The kernels' `mode` argument of `pass`.
  cl_uint Mode(size_t pass) const;
  // The keys pass `pass` reads.
  const cl::Buffer& KeysIn(size_t pass, const SortArrays& a) const;
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_PASS_ORDER_H_
