// StreamAssembler: the messages of one SortStream call gathered into one
// array. Each message is charged to the call's Admission::Hold before its
// bytes are held (server/held_bytes.h says what a stream holds), parsed,
// checked against the first message's fields and the stream's bounds
// (--max_stream_bytes, 2^32-1 keys), and kept where it was received; Join
// gives the whole array to the sort. The SortStream reactor
// (server/sort_stream.cc) feeds it what it reads; gRPC plays no other part
// here, so tests and the fuzzer drive it directly.
//
// A refused message changes nothing: the charge is as it was before it,
// and nothing of it is kept. The stream ends with its first refusal: every
// later Append gives that refusal again.
//
//   Admission::Hold hold(&held_bytes);
//   StreamAssembler stream(limits, buffers, &hold);
//   if (absl::Status s = stream.Append(message); !s.ok()) return s;  // each
//   SortJob job{.key_type = stream.key_type(), .order = stream.order(),
//               .count = stream.count(), .value_type = stream.value_type()};
//   stream.Join(job);   // job.keys, job.values: the whole array
//
// Not thread-safe: one call's thread at a time.
#ifndef SORTD_SERVER_STREAM_ASSEMBLER_H_
#define SORTD_SERVER_STREAM_ASSEMBLER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/keys.h"
#include "core/sorter.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/admission.h"
#include "server/host_buffers.h"
#include "server/request.h"
#include "server/wire.h"

namespace sortd {

class StreamAssembler {
 public:
  // `hold` (the call's charge against the service's budget) outlives this
  // object; `buffers` (may be null) supplies joined messages and arrays.
  StreamAssembler(const RequestLimits& limits, HostBufferPool* buffers,
                  Admission::Hold* hold);
  StreamAssembler(const StreamAssembler&) = delete;
  StreamAssembler& operator=(const StreamAssembler&) = delete;

  // Admits, parses and keeps the next message as gRPC received it:
  // charged twice its size while it is read (gRPC's copy and sortd's),
  // then once while the stream gathers. `message` is cleared.
  absl::Status Append(grpc::ByteBuffer& message);
  // The same for a message already in contiguous bytes: charged once.
  absl::Status Append(wire::Received message);

  // Points `job`'s keys and values at the messages' arrays as one (the
  // only message's in place, else a copy, after which the messages go), in
  // bytes charged when they were appended. After the last Append.
  void Join(SortJob& job);
  // Drops everything held (messages, joined arrays); the hold's charge is
  // its owner's to give back.
  void Release();

  // Messages accepted, and the keys in them.
  size_t messages() const { return messages_; }
  size_t count() const { return count_; }
  // From the first message (when there is one).
  KeyType key_type() const { return key_type_; }
  ValueType value_type() const { return value_type_; }
  Order order() const { return order_; }
  bool permutation() const { return permutation_; }
  // The first message's response_key_coding, as sent.
  int32_t key_coding() const { return first_key_coding_; }

 private:
  // One message's arrays, in its received bytes.
  struct Piece {
    const std::byte* keys = nullptr;
    const std::byte* values = nullptr;
    size_t count = 0;
  };

  // Runs one Append's `step`: a refusal (or memory running out) leaves the
  // charge as it was and ends the stream.
  template <typename Step>
  absl::Status Admit(Step&& step);
  // Parses, checks and keeps a message whose bytes are charged once.
  absl::Status Keep(std::unique_ptr<wire::Received> bytes);
  // Keep's steps.
  // Parses a message's bytes, refusing the fields a stream does not carry;
  // a later message takes the first one's order and key coding. Its
  // errors are already Numbered.
  absl::StatusOr<wire::SortRequest> ParseMessage(std::string_view data) const;
  // Refuses a later message whose key or value field differs from the
  // first's.
  absl::Status CheckFields(const SortJob& part) const;
  // Refuses `count` more keys (of `pair_bytes` with their values) when the
  // stream would grow past --max_stream_bytes or 2^32-1 keys.
  absl::Status CheckGrowth(size_t count, size_t pair_bytes) const;
  // "stream message N: " before `s`'s message, N the message being added.
  absl::Status Numbered(const absl::Status& s) const;

  const RequestLimits limits_;
  HostBufferPool* const buffers_;
  Admission::Hold* const hold_;

  size_t messages_ = 0;
  size_t count_ = 0;
  KeyType key_type_ = KeyType::kU32;
  ValueType value_type_ = ValueType::kNone;
  Order order_ = Order::kAscending;
  int32_t first_order_ = 0;
  int32_t first_key_coding_ = 0;
  bool permutation_ = false;
  // Set at the first refusal, given again by every later Append.
  bool ended_ = false;
  absl::Status refusal_;

  // The messages received, and their arrays in them, until joined.
  std::vector<std::unique_ptr<wire::Received>> messages_held_;
  std::vector<Piece> pieces_;
  wire::OutputArray joined_keys_, joined_values_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_STREAM_ASSEMBLER_H_
