// Sorting arrays larger than a device holds: the array is cut into runs the
// device can sort, each run is sorted there, and the sorted runs are merged
// on the CPU with oneTBB. The result is the same stable sort a single run
// would give: equal keys keep their input order because the merge takes
// ties from the earlier run first.
//
//   size_t limit = engine.max_sort_keys(job);         // 0: no bound
//   if (limit > 0 && job.count > limit) {
//     int runs = 0;
//     absl::Status s = SortInRuns(engine, job, limit, &runs);
//   }
//
// Host memory: besides the job's own input and output buffers, one scratch
// copy of the sorted runs (keys, values and permutation: the size of the
// output). The merge is split into independent pieces of the output found
// by multi-sequence selection, so every core merges at once.
#ifndef SORTD_SERVER_RUNS_H_
#define SORTD_SERVER_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/sorter.h"

namespace sortd {

// Sorts `job` on `engine` in runs of at most `run_keys` keys, then merges.
// `runs` (optional) receives the number of runs. `concurrent_runs` runs are
// handed to the engine at once (an engine with several lanes overlaps one
// run's transfers with another's kernels).
absl::Status SortInRuns(Sorter& engine, const SortJob& job, size_t run_keys,
                        int* runs = nullptr, int concurrent_runs = 2);

// Sorts keys [b, e) of `job` on `engine` into the scratch arrays `keys`,
// `values` and `perm` at the same offsets (values and permutation where the
// job has them); the run's permutation is made to index the whole array.
absl::Status SortRunInto(Sorter& engine, const SortJob& job, size_t b, size_t e,
                         std::byte* keys, std::byte* values, std::byte* perm,
                         StageTimes* stages);

// Stable k-way merge of the sorted runs `in` (cut at `bounds`: k + 1
// nondecreasing positions from 0 to in.count) into job-style outputs. `in`
// holds keys, optional values and optional permutation entries (in
// `in_permutation`, already indices into the whole array); the order is
// in.order. Exposed for tests and benchmarks. A run that is not sorted
// (a device's wrong answer) never makes the merge read or write outside
// the arrays: where the runs' cuts show it, INTERNAL with the outputs
// untouched; else the outputs hold the inputs' elements in some order.
absl::Status MergeRuns(const SortJob& in, const std::byte* in_permutation,
                       const std::vector<size_t>& bounds, const SortJob& out);

}  // namespace sortd

#endif  // SORTD_SERVER_RUNS_H_
