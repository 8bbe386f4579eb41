// What a call holds in memory, in bytes, as the service charges it to its
// budget (--max_held_bytes; server/admission.h): every call is charged
// before it holds, at most what it holds at its peak.
//
//   unary request       2 x its message: gRPC's received copy, and sortd's
//                       (a message of several slices is joined into one)
//   sort                + SortWorkBytes: the answer's arrays (sent from
//                       where they lie: the encoded answer shares them),
//                       compact keys coded, the CPU path's scratch
//   SortStream message  2 x the message while it is read, then 1 x while
//                       the stream gathers; its keys and values once more
//                       (the whole array, joined at the sort) and
//                       SortWorkBytes; the answer chunk being encoded
//   transpose           + the answer's matrices
#ifndef SORTD_SERVER_HELD_BYTES_H_
#define SORTD_SERVER_HELD_BYTES_H_

#include <cstddef>

#include "core/keys.h"
#include "core/sorter.h"

namespace sortd {

// Bytes an answer of `n` keys holds beyond its request when placed apart
// from it: its arrays (none when they are written into a shared-memory
// region) and compact keys coded from them.
inline size_t AnswerBytes(KeyType key_type, ValueType value_type,
                          bool permutation, bool compact, size_t n,
                          bool in_region) {
  if (in_region) return 0;
  const size_t ks = KeySize(key_type), vs = ValueSize(value_type);
  return n * (ks + vs + (permutation ? 4 : 0)) + (compact ? n * ks : 0);
}

// Bytes a sort of `n` keys holds beyond its request: its answer
// (AnswerBytes) and the CPU path's radix scratch (the keys as ordered
// bits, twice, and their indices, twice, when values or a permutation
// follow them). The scratch is charged whatever the route: which path
// sorts a request is decided after it is admitted. A sort cut across the
// devices (server/split_sort.h) holds its scratch, one copy of the
// outputs, within the same charge instead (Task::host_scratch_bytes).
inline size_t SortWorkBytes(KeyType key_type, ValueType value_type,
                            bool permutation, bool compact, size_t n,
                            bool in_region = false) {
  const size_t ks = KeySize(key_type), vs = ValueSize(value_type);
  const size_t scratch = n * (2 * ks + (vs > 0 || permutation ? 8 : 0));
  return AnswerBytes(key_type, value_type, permutation, compact, n, in_region) +
         scratch;
}

// Bytes an Echo of `n` keys holds beyond its request: no scratch (nothing
// is sorted). Answered from the request's own buffer (neither compact nor
// in a region), the permutation alone; else its answer (AnswerBytes).
inline size_t EchoWorkBytes(KeyType key_type, ValueType value_type,
                            bool permutation, bool compact, size_t n,
                            bool in_region = false) {
  if (!compact && !in_region) return permutation ? 4 * n : 0;
  return AnswerBytes(key_type, value_type, permutation, compact, n, in_region);
}

}  // namespace sortd

#endif  // SORTD_SERVER_HELD_BYTES_H_
