// sortd.v1 messages read from and written to gRPC byte buffers directly,
// without a protobuf message in between.
//
// Reading: the request's bytes are parsed in place (gRPC's own slice when
// the message arrived in one piece, else one copy into a contiguous one);
// the arrays of the parsed view point into those bytes, so nothing is copied
// by parsing. Every malformed input gets INVALID_ARGUMENT with the byte
// offset and what was wrong there (an unterminated varint, a length past
// the end, field number 0, a known field with the wrong wire type...), where
// a generated handler could only fail the call without a word.
//
// Writing: the arrays of a response are allocated as gRPC slices that the
// engine writes into, and the response is those slices with a few bytes of
// field headers between them, so an answer is sent from the memory it was
// computed in.
//
//   absl::StatusOr<wire::Received> bytes = wire::Received::From(buffer);
//   absl::StatusOr<wire::SortRequest> request =
//       wire::ParseSortRequest(bytes->data());
//   wire::OutputArray keys(n * 4);          // the engine writes keys.data()
//   grpc::ByteBuffer response = wire::EncodeSortResponse(
//       {.key_type = KeyType::kU32, .keys = keys.Share()}, served_by);
#ifndef SORTD_SERVER_WIRE_H_
#define SORTD_SERVER_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/keys.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "server/host_buffers.h"
#include "sortd/v1/sortd.pb.h"

namespace sortd::wire {

// A received message as one contiguous run of bytes that stays valid while
// this object lives.
class Received {
 public:
  // Takes gRPC's single slice as it is, or joins several into one (a copy,
  // into a buffer of `pool` when given).
  static absl::StatusOr<Received> From(const grpc::ByteBuffer& buffer,
                                       HostBufferPool* pool = nullptr);
  // For tests and fuzzers: a copy of `bytes`.
  static Received Copy(std::string_view bytes);

  std::string_view data() const {
    return {reinterpret_cast<const char*>(slice_.begin()), slice_.size()};
  }
  // `part` (a view into data()) as a slice sharing these bytes.
  grpc::Slice Sub(std::string_view part) const;

 private:
  grpc::Slice slice_;
};

// A SortRequest as parsed: arrays point into the received bytes. Proto3
// rules: the last occurrence of a field wins, and setting one member of a
// oneof unsets the others. Unknown fields are skipped.
struct SortRequest {
  std::optional<KeyType> key_type;  // unset: no key field present
  std::string_view keys;
  ValueType value_type = ValueType::kNone;
  std::string_view values;
  int32_t order = 0;  // the enum's number, as sent (validated later)
  bool return_permutation = false;
  // Field 11, when present (occurrences merged, as protobuf does).
  std::optional<v1::SharedArrays> shared;
  int32_t key_coding = 0;  // response_key_coding, as sent (validated later)
  // Field 13, when present (occurrences merged).
  std::optional<v1::Part> part;
};

struct TransposeRequest {
  std::string_view matrices;
};

absl::StatusOr<SortRequest> ParseSortRequest(std::string_view bytes);
absl::StatusOr<TransposeRequest> ParseTransposeRequest(std::string_view bytes);

// An array of a response, allocated uninitialised as a gRPC slice: the
// engine writes into data(), and the response sends the slice itself.
class OutputArray {
 public:
  OutputArray() = default;
  // From `pool` when given, else from the allocator.
  explicit OutputArray(size_t bytes, HostBufferPool* pool = nullptr);

  std::byte* data() { return data_; }
  size_t size() const { return slice_.size(); }
  // The bytes [offset, offset + length) as a slice sharing this memory.
  grpc::Slice Sub(size_t offset, size_t length) const;
  grpc::Slice Share() const { return slice_; }

 private:
  grpc::Slice slice_;
  std::byte* data_ = nullptr;
};

// Sorted keys in their compact form (core/compact_keys.h): a CompactKeys
// message whose byte fields are slices.
struct CompactArray {
  size_t count = 0;
  bool descending = false;
  grpc::Slice widths{}, bases{};
  std::vector<grpc::Slice> deltas{};  // concatenated, in order

  // Serialized size of the CompactKeys message.
  size_t MessageBytes() const;
};

// The arrays of one SortResponse (or of one SortStream chunk of it). Key
// and value fields are written even when empty, so that the answer names
// its types; the permutation only when `permutation` is set.
struct SortArrays {
  KeyType key_type = KeyType::kU32;
  grpc::Slice keys{};
  // When set, sent instead of `keys` (in compact_*_keys).
  std::optional<CompactArray> compact{};
  ValueType value_type = ValueType::kNone;
  grpc::Slice values{};
  std::optional<grpc::Slice> permutation{};
};

// A SortResponse: the arrays and, when given, served_by.
grpc::ByteBuffer EncodeSortResponse(const SortArrays& arrays,
                                    const v1::ServedBy* served_by);
// A TransposeResponse.
grpc::ByteBuffer EncodeTransposeResponse(const grpc::Slice& matrices,
                                         const v1::ServedBy& served_by);

// Field numbers shared by request and response (sortd.proto); key fields:
// core/key_fields.h.
int ValueFieldNumber(ValueType type);
// The proto field name of a key or value array ("u32_keys", "u64_values").
std::string KeyFieldName(KeyType type);
std::string ValueFieldName(ValueType type);

}  // namespace sortd::wire

#endif  // SORTD_SERVER_WIRE_H_
