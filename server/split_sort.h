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
// kept from one sort to the next in a SplitScratchCache (within its
// bound), or else mapped before the parts start and faulted in by a few
// cores while the devices upload, so that the devices' downloads do not
// stall on first touches of fresh pages.
//
//   std::vector<Sorter*> engines = {gpu0, gpu1};
//   if (SplitScratchBytes(job) <= admitted) {
//     SplitReport report;
//     absl::Status s = SplitSort(engines, job, &report);
//   }
#ifndef SORTD_SERVER_SPLIT_SORT_H_
#define SORTD_SERVER_SPLIT_SORT_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/mutex.h"
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

// One idle scratch mapping kept from one split sort to the next, at most
// `max_idle_bytes` (0: none kept): a fresh mapping's pages are faulted in
// and zeroed by the kernel on every sort (4 GiB at 2^30 u32 keys), a kept
// one's are there already. Thread-safe.
class SplitScratchCache {
 public:
  explicit SplitScratchCache(size_t max_idle_bytes)
      : max_idle_bytes_(max_idle_bytes) {}
  ~SplitScratchCache();
  SplitScratchCache(const SplitScratchCache&) = delete;
  SplitScratchCache& operator=(const SplitScratchCache&) = delete;

  // The idle mapping and its size when it holds `bytes` and is not more
  // than twice that; else {null, 0}.
  std::pair<std::byte*, size_t> Take(size_t bytes);
  // A mapping of `size` bytes that a sort is done with: kept idle when it
  // is within the bound and no smaller than the idle one, else unmapped.
  void Give(std::byte* data, size_t size);
  // Unmaps the idle mapping (sortd's idle trim).
  void Trim();
  size_t idle_bytes() const;
  uint64_t reused() const;  // mappings taken again

 private:
  const size_t max_idle_bytes_;
  mutable Mutex mu_;
  std::byte* idle_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t idle_size_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sorts `job` across `engines` (at least one; each must take its part in
// one Sort call: Sorter::max_sort_keys). On error the job's outputs are as
// they were, and the first part's error is returned; an engine that failed
// says so through Sorter::healthy() as after any run. The scratch comes
// from `cache` where it has one (null: always a fresh mapping).
absl::Status SplitSort(absl::Span<Sorter* const> engines, const SortJob& job,
                       SplitReport* report, SplitScratchCache* cache = nullptr);

// Tests: the next `count` threads SplitSort would start (its parts' and
// its scratch's) fail as if the system had no memory for them
// (std::bad_alloc); 0 ends that.
void SetSplitThreadFailuresForTesting(int count);

}  // namespace sortd

#endif  // SORTD_SERVER_SPLIT_SORT_H_
