// The pieces of `sortctl bench` (client/bench.cc) that its load generator
// shares with the files beside it: the requests it sends, made once before
// the run (bench_inputs.cc), in memory or in a shared-memory region per
// worker, and the counting of each call's result into a report
// (bench_tally.cc). Not part of the client library's interface.
#ifndef SORTD_CLIENT_BENCH_INTERNAL_H_
#define SORTD_CLIENT_BENCH_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/bench.h"
#include "client/shared_memory.h"
#include "sortd/v1/sortd.pb.h"

namespace sortd::cli::bench_internal {

// The requests of one size: a few distinct random inputs.
struct Inputs {
  uint64_t size = 0;
  std::vector<v1::SortRequest> sorts;
  std::vector<v1::TransposeRequest> transposes;
};

// The requests of size class `class_index` (of `size` keys or matrices).
Inputs MakeInputs(const BenchOptions& o, uint64_t size, size_t class_index);

// A sort request's key bytes (empty when it has none).
const std::string& RequestKeys(const v1::SortRequest& r);

// The answer's key field (of the type it names) set to `bytes`.
void SetAnswerKeys(std::string bytes, v1::SortResponse* r);

// Shared memory: per worker, a region with every input and room for its
// answer, and the requests that name them.
struct WorkerRegion {
  std::unique_ptr<SharedRegion> region;
  std::vector<std::vector<v1::SortRequest>> sorts;  // [class][variant]
  std::vector<std::vector<uint64_t>> out_offsets;
};

// A worker's region: every input of `inputs` and room for its answer,
// registered over `o.shm_socket`.
absl::StatusOr<WorkerRegion> MakeRegion(const BenchOptions& o,
                                        const std::vector<Inputs>& inputs);

// What one call gave back.
struct CallResult {
  absl::Status status;
  v1::ServedBy served_by;
  uint64_t bytes = 0;    // on the wire, both ways
  absl::Status verdict;  // of the check, where one was made
};

// Adds a worker's counts to the run's, and clears them.
void MergeReport(BenchReport& local, BenchReport& r);

// Counts one measured call of `size` keys that took `seconds`.
void RecordCall(const CallResult& c, uint64_t size, bool checked,
                double seconds, BenchReport& local);

}  // namespace sortd::cli::bench_internal

#endif  // SORTD_CLIENT_BENCH_INTERNAL_H_
