// The client's side of the wire without protobuf copies: requests are sent
// from the caller's own arrays, answers are read from gRPC's slices straight
// into the caller's buffers.
//
// A request is its field headers (a few bytes each, copied) and its arrays,
// borrowed: slices that point at the caller's memory. A Lease counts the
// borrowed slices gRPC still holds; the call returns only once gRPC has let
// go of all of them, so the caller may free its arrays as soon as it
// returns.
//
//   Lease lease;
//   OutgoingMessage m;
//   m.Bytes(1, keys.data(), keys.size() * 4, &lease);  // u32_keys, no copy
//   m.Varint(10, 1);                                   // return_permutation
//   ... call with m.Take(), then destroy the buffer, then lease.Wait() ...
//   absl::Status s = DecodeSortResponse(response, sink);
#ifndef SORTD_CLIENT_RAW_CALL_H_
#define SORTD_CLIENT_RAW_CALL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/compact_keys.h"
#include "core/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace sortd::client_wire {

// Counts the caller's memory that gRPC holds.
class Lease {
 public:
  Lease() = default;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { Wait(); }

  // A slice of `size` bytes at `data`, not copied; counted until released.
  grpc::Slice Borrow(const void* data, size_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every borrowed slice has been released.
  void Wait() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static void Release(void* self);

  Mutex mu_;
  CondVar cv_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

// A message built field by field in wire order.
class OutgoingMessage {
 public:
  // A length-delimited field borrowed from the caller's memory.
  void Bytes(int field, const void* data, size_t size, Lease* lease);
  void Varint(int field, uint64_t value);
  // Serialized size so far.
  size_t size() const { return size_; }
  grpc::ByteBuffer Take();

 private:
  void Header(uint64_t tag, const uint64_t* length);

  std::vector<grpc::Slice> slices_;
  std::string pending_;  // header and varint bytes not yet in a slice
  size_t size_ = 0;
};

// Where the arrays of a SortResponse go: each call returns a buffer of
// exactly `bytes` bytes for the field's contents, or null to refuse the
// field (a length that is not a whole number of elements, a type other
// than the one asked for): the answer is then DATA_LOSS.
class SortResponseSink {
 public:
  virtual ~SortResponseSink() = default;
  // `field`: 1-6, the key field (u32, i32, f32, u64, i64, f64); compact
  // keys (fields 12-14) arrive decoded, through their raw field.
  virtual char* Keys(int field, size_t bytes) = 0;
  // `field`: 8 (u32_values) or 9 (u64_values).
  virtual char* Values(int field, size_t bytes) = 0;
  virtual char* Permutation(size_t bytes) = 0;
  // The serialized ServedBy message.
  virtual void ServedBy(const std::string& bytes) = 0;
};

// Reads a SortResponse from gRPC's slices into `sink`, one copy per array
// (compact keys are decoded straight into the sink's buffer).
// DATA_LOSS if the bytes are not a well-formed SortResponse.
absl::Status DecodeSortResponse(const grpc::ByteBuffer& response,
                                SortResponseSink& sink);

// Checks a compact key array (a CompactKeys message's fields) and appends
// its keys, raw, to `out`; DATA_LOSS if it is malformed.
absl::Status AppendCompactKeys(const compact::Encoded& encoded, KeyType type,
                               bool descending, std::string* out);

// A gRPC status as an absl::Status of the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace sortd::client_wire

#endif  // SORTD_CLIENT_RAW_CALL_H_
