// The batch codec: several requests packed into one engine run, and the
// run's answer unpacked into each request's own buffers.
//
// Sorts of one class (same key width, value type and permutation request)
// become one segmented sort: each request's keys are mapped to the ordered
// unsigned bits of its type and order (core/keys.h), so that u32, i32
// and f32 keys, ascending and descending, sort together ascending; values
// are copied alongside; the answer's keys are mapped back, and permutation
// entries (indices into the whole batch) are rebased to each request's own
// array. Transposes are concatenated and cut apart again.
//
//   std::vector<const SortJob*> jobs = {&a, &b};
//   std::vector<std::byte> scratch;   // reused from batch to batch
//   absl::Status s = batch::SortTogether(engine, jobs, &stages, &scratch);
#ifndef SORTD_SERVER_BATCH_CODEC_H_
#define SORTD_SERVER_BATCH_CODEC_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/sorter.h"

namespace sortd::batch {

// Sorts `jobs`, one class, as one segmented sort on `engine`, writing each
// job's outputs. `stages` may be null.
absl::Status SortTogether(Sorter& engine, absl::Span<const SortJob* const> jobs,
                          StageTimes* stages, std::vector<std::byte>* scratch);

// Transposes `jobs` as one run on `engine`.
absl::Status TransposeTogether(Sorter& engine,
                               absl::Span<const TransposeJob* const> jobs,
                               StageTimes* stages,
                               std::vector<std::byte>* scratch);

// One transpose, in pieces of what the engine takes at once (matrices are
// independent); `device_runs` counts the pieces.
absl::Status TransposeInPieces(Sorter& engine, const TransposeJob& job,
                               StageTimes* stages, int* device_runs);

}  // namespace sortd::batch

#endif  // SORTD_SERVER_BATCH_CODEC_H_
