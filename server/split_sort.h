// Sorting one large array on every device at once: the array is cut into
// as many contiguous parts as there are devices, each device sorts its part
// (Sorter::Sort, all at once) into a host scratch copy, and the sorted
// parts are merged on the CPU into the job's outputs (MergeRuns,
// server/runs.h: every core merges a piece of the output found by
// multi-sequence selection). The result is the stable sort one device would
// give: ties are taken from the earlier part first.
//
// Nothing is written to the job's outputs until every part has sorted: a
// part that fails leaves them untouched, so the caller may sort the whole
// array again elsewhere (docs/decisions/019-split-sort.md).
//
// Host memory: one scratch copy of the output arrays (SplitScratchBytes),
// mapped before the parts start and faulted in by a few cores while the
// devices upload, so that the devices' downloads do not stall on first
// touches of fresh pages.
//
//   std::vector<Sorter*> engines = {gpu0, gpu1};
//   if (SplitScratchBytes(job) <= admitted) {
//     SplitReport report;
//     absl::Status s = SplitSort(engines, job, &report);
//   }
#ifndef SORTD_SERVER_SPLIT_SORT_H_
#define SORTD_SERVER_SPLIT_SORT_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/sorter.h"

namespace sortd {

// Host scratch bytes SplitSort holds for `job`: one copy of its outputs
// (keys, values, permutation).
size_t SplitScratchBytes(const SortJob& job);

// Where part i of `count` keys cut into `parts` begins (i = parts: count).
// Parts differ in length by at most one key.
size_t SplitBound(size_t count, size_t parts, size_t i);

struct SplitReport {
  // By engine, the stages of its part (when the job asks for stages).
  std::vector<StageTimes> stages;
  // The merge on the host, wall time.
  double merge_seconds = 0;
  // Parts that sorted; the others failed or never ran.
  size_t parts_sorted = 0;
};

// Sorts `job` across `engines` (at least one; each must take its part in
// one Sort call: Sorter::max_sort_keys). On error the job's outputs are as
// they were, and the first part's error is returned; an engine that failed
// says so through Sorter::healthy() as after any run.
absl::Status SplitSort(absl::Span<Sorter* const> engines, const SortJob& job,
                       SplitReport* report);

}  // namespace sortd

#endif  // SORTD_SERVER_SPLIT_SORT_H_
