// Validation of parsed requests (server/wire.h) and the bridge to engine
// jobs. Everything a client can get wrong is caught here, before any engine
// work, with a status whose message names the field and the numbers.
//
//   absl::StatusOr<SortJob> job = ParseSort(request, limits, bytes.size());
//   SortOutputs out = AllocateSortOutputs(*job, request.return_permutation);
//   status = sorter->Sort(*job);             // writes into `out`
//   response = wire::EncodeSortResponse(out.Slices(*job, 0, job->count), ...);
#ifndef SORTD_SERVER_REQUEST_H_
#define SORTD_SERVER_REQUEST_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "core/sorter.h"
#include "server/shared_memory.h"
#include "server/wire.h"

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

// Checks a parsed sort request (message_bytes: its serialized size). The
// job's inputs point into the request's bytes; its outputs are unset.
absl::StatusOr<SortJob> ParseSort(const wire::SortRequest& request,
                                  const RequestLimits& limits,
                                  size_t message_bytes);

// The answer's arrays, allocated for a job and sent as they are.
struct SortOutputs {
  wire::OutputArray keys, values, permutation;
  bool with_permutation = false;
  // Elements [first, first + n) of each array, as a response's slices.
  wire::SortArrays Slices(const SortJob& job, size_t first, size_t n) const;
  // The same with the keys in compact form where their type has one
  // (wire::CompactArray): the keys are encoded in place, so elements
  // [first, first + n) cannot be asked for again. `first` is a multiple of
  // compact::kBlockKeys, and so is `n` unless the range ends the array.
  // Large ranges are encoded by several threads.
  wire::SortArrays CompactSlices(const SortJob& job, size_t first, size_t n,
                                 HostBufferPool* pool);
};

// Allocates the outputs `job` writes (uninitialised: the sort writes every
// byte; from `pool` when given) and points the job at them.
SortOutputs AllocateSortOutputs(SortJob& job, bool permutation,
                                HostBufferPool* pool = nullptr);

// Points `job` (from ParseSort of a request with SortRequest.shared, its
// key and value fields empty) at its arrays in `region`: every range is
// checked to lie inside the region, and the outputs not to overlap one
// another or the inputs. The keys and values are bounded as a stream's are
// (limits.max_stream_bytes).
absl::Status PlaceInRegion(const v1::SharedArrays& shared, bool permutation,
                           const Region& region, const RequestLimits& limits,
                           SortJob& job);

absl::StatusOr<TransposeJob> ParseTranspose(
    const wire::TransposeRequest& request, const RequestLimits& limits,
    size_t message_bytes);

// Scheduler units of a request, known before validation: its keys (whole
// ones), or for transposes its 32-bit rows (32 per matrix).
size_t SortRequestUnits(const wire::SortRequest& request);
// The same for a request whose arrays are in a shared region of
// `region_bytes`: its shared.count, but no more keys than the region
// holds (a larger count is refused once validated, and should not weigh
// on admission as if it were real).
size_t SharedRequestUnits(const wire::SortRequest& request, uint64_t count,
                          size_t region_bytes);
size_t TransposeRequestUnits(const wire::TransposeRequest& request);

}  // namespace sortd

#endif  // SORTD_SERVER_REQUEST_H_
