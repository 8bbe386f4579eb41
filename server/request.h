// Validation of wire requests and the bridge from protobuf messages to
// engine jobs. Everything a client can get wrong is caught here, before any
// engine work, with a status whose message names the field and the numbers.
//
//   absl::StatusOr<SortJob> job = PrepareSort(request, limits, &response);
//   if (job.ok()) status = sorter->Sort(*job);  // writes into `response`
#ifndef SORTD_SERVER_REQUEST_H_
#define SORTD_SERVER_REQUEST_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "server/sorter.h"
#include "sortd/v1/sortd.pb.h"

namespace sortd {

struct RequestLimits {
  // Largest serialized request accepted, in bytes (--max_request_bytes);
  // for SortStream, the largest message.
  size_t max_request_bytes = size_t{64} << 20;
  // Largest array (keys and values) one SortStream call may send, in
  // bytes (--max_stream_bytes).
  size_t max_stream_bytes = size_t{4} << 30;
  // Array bytes (keys, values and permutation) per SortStream response
  // message (--stream_chunk_bytes).
  size_t stream_chunk_bytes = size_t{2} << 20;
};

// Checks `request` and sizes the arrays of `response` to receive the
// answer. The job borrows from both; they must outlive it.
absl::StatusOr<SortJob> PrepareSort(const v1::SortRequest& request,
                                    const RequestLimits& limits,
                                    v1::SortResponse* response);

// The checks of PrepareSort alone: the job's inputs point into `request`,
// its outputs are unset.
absl::StatusOr<SortJob> ParseSort(const v1::SortRequest& request,
                                  const RequestLimits& limits);
// Sizes the arrays of `response` for `job` (parsed from `request`) and
// points the job's outputs at them.
void SizeSortOutputs(const v1::SortRequest& request, SortJob& job,
                     v1::SortResponse* response);

absl::StatusOr<TransposeJob> PrepareTranspose(
    const v1::TransposeRequest& request, const RequestLimits& limits,
    v1::TransposeResponse* response);

// Scheduler units of a request, known before validation: its keys (whole
// ones), or for transposes its 32-bit rows (32 per matrix).
size_t SortRequestUnits(const v1::SortRequest& request);
size_t TransposeRequestUnits(const v1::TransposeRequest& request);

// The key type of a request whose keys are set (for labels and logs).
KeyType RequestKeyType(const v1::SortRequest& request);

}  // namespace sortd

#endif  // SORTD_SERVER_REQUEST_H_
