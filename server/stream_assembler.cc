#include "server/stream_assembler.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "server/held_bytes.h"
#include "server/out_of_memory.h"

namespace sortd {

StreamAssembler::StreamAssembler(const RequestLimits& limits,
                                 HostBufferPool* buffers, Admission::Hold* hold)
    : limits_(limits), buffers_(buffers), hold_(hold) {}

template <typename Step>
absl::Status StreamAssembler::Admit(Step&& step) {
  if (ended_) return refusal_;
  const size_t before = hold_->charged();
  absl::Status s = CatchOutOfMemory("this stream's arrays",
                                    [&]() -> absl::Status { return step(); });
  if (!s.ok()) {
    // Nothing of the refused message is held: neither is it charged.
    if (hold_->charged() > before) hold_->Shrink(hold_->charged() - before);
    ended_ = true;
    refusal_ = s;
  }
  return s;
}

absl::Status StreamAssembler::Numbered(const absl::Status& s) const {
  return absl::Status(s.code(), absl::StrCat("stream message ", messages_ + 1,
                                             ": ", s.message()));
}

absl::Status StreamAssembler::Append(grpc::ByteBuffer& message) {
  absl::Status appended = Admit([&]() -> absl::Status {
    const size_t message_bytes = message.Length();
    // gRPC's copy and sortd's (joined from its slices), admitted before
    // sortd copies a byte; gRPC's goes once read.
    if (absl::Status s = hold_->Grow(2 * message_bytes); !s.ok()) {
      return Numbered(s);
    }
    absl::StatusOr<wire::Received> received =
        wire::Received::From(message, buffers_);
    message.Clear();
    hold_->Shrink(message_bytes);
    if (!received.ok()) return Numbered(received.status());
    // On the heap: a small message's bytes lie in the Received itself, and
    // the arrays parsed from them must stay where they are.
    return Keep(std::make_unique<wire::Received>(*std::move(received)));
  });
  message.Clear();  // gRPC's copy goes, the message kept or refused
  return appended;
}

absl::Status StreamAssembler::Append(wire::Received message) {
  return Admit([&]() -> absl::Status {
    if (absl::Status s = hold_->Grow(message.data().size()); !s.ok()) {
      return Numbered(s);
    }
    return Keep(std::make_unique<wire::Received>(std::move(message)));
  });
}

absl::StatusOr<wire::SortRequest> StreamAssembler::ParseMessage(
    std::string_view data) const {
  absl::StatusOr<wire::SortRequest> parsed = wire::ParseSortRequest(data);
  if (!parsed.ok()) return Numbered(parsed.status());
  if (parsed->shared.has_value()) {
    return Numbered(absl::InvalidArgumentError(
        "`shared` is for Sort and Echo: a stream carries its arrays"));
  }
  if (parsed->part.has_value()) {
    return Numbered(absl::InvalidArgumentError(
        "`part` is for Sort: a stream carries its whole array"));
  }
  // `order` and `return_permutation` are read from the first message and
  // ignored in later ones (the contract, sortd.proto).
  if (messages_ > 0) {
    parsed->order = first_order_;
    parsed->key_coding = first_key_coding_;
  }
  return parsed;
}

absl::Status StreamAssembler::CheckFields(const SortJob& part) const {
  if (messages_ > 0 &&
      (part.key_type != key_type_ || part.value_type != value_type_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream message ", messages_ + 1, " sets ",
                     wire::KeyFieldName(part.key_type), " with ",
                     wire::ValueFieldName(part.value_type),
                     "; the first message set ", wire::KeyFieldName(key_type_),
                     " with ", wire::ValueFieldName(value_type_),
                     ": every message of a stream uses the same fields"));
  }
  return absl::OkStatus();
}

absl::Status StreamAssembler::CheckGrowth(size_t count,
                                          size_t pair_bytes) const {
  if ((count_ + count) * pair_bytes > limits_.max_stream_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the stream's array has grown past ", limits_.max_stream_bytes,
        " bytes of keys and values, the most this server sorts in one "
        "stream (--max_stream_bytes)"));
  }
  if (count_ + count > std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError(
        "the stream's array has grown past 2^32-1 keys, the most one sort "
        "takes");
  }
  return absl::OkStatus();
}

absl::Status StreamAssembler::Keep(std::unique_ptr<wire::Received> bytes) {
  absl::StatusOr<wire::SortRequest> parsed = ParseMessage(bytes->data());
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<SortJob> part =
      ParseSort(*parsed, limits_, bytes->data().size());
  if (!part.ok()) return Numbered(part.status());
  if (absl::Status s = CheckFields(*part); !s.ok()) return s;
  // The first message's terms, taken only once it is accepted.
  const KeyType key_type = messages_ == 0 ? part->key_type : key_type_;
  const ValueType value_type = messages_ == 0 ? part->value_type : value_type_;
  const bool permutation =
      messages_ == 0 ? parsed->return_permutation : permutation_;
  const int32_t key_coding =
      messages_ == 0 ? parsed->key_coding : first_key_coding_;
  const size_t ks = KeySize(key_type), vs = ValueSize(value_type);
  if (absl::Status s = CheckGrowth(part->count, ks + vs); !s.ok()) return s;
  // What sorting these keys will hold: the whole array joined, its answer
  // and the sort's scratch (server/held_bytes.h); with the first message,
  // the answer chunk being encoded.
  const bool compact = key_coding == v1::KEY_CODING_COMPACT;
  size_t work =
      part->count * (ks + vs) +
      SortWorkBytes(key_type, value_type, permutation, compact, part->count);
  if (messages_ == 0) work += limits_.stream_chunk_bytes;
  if (absl::Status s = hold_->Grow(work); !s.ok()) return Numbered(s);
  if (part->count > 0) {
    pieces_.reserve(pieces_.size() + 1);
    messages_held_.reserve(messages_held_.size() + 1);
    pieces_.push_back({.keys = part->keys,
                       .values = vs > 0 ? part->values : nullptr,
                       .count = part->count});
    messages_held_.push_back(std::move(bytes));
  }
  if (messages_ == 0) {
    key_type_ = key_type;
    value_type_ = value_type;
    order_ = part->order;
    first_order_ = parsed->order;
    first_key_coding_ = key_coding;
    permutation_ = permutation;
  }
  ++messages_;
  count_ += part->count;
  return absl::OkStatus();
}

void StreamAssembler::Join(SortJob& job) {
  const size_t ks = KeySize(key_type_), vs = ValueSize(value_type_);
  if (pieces_.empty()) {  // no keys: nothing is read
    static const std::byte kNone[8] = {};
    job.keys = kNone;
    job.values = vs > 0 ? kNone : nullptr;
    return;
  }
  if (pieces_.size() == 1) {
    job.keys = pieces_[0].keys;
    job.values = pieces_[0].values;
    return;
  }
  joined_keys_ = wire::OutputArray(count_ * ks, buffers_);
  if (vs > 0) joined_values_ = wire::OutputArray(count_ * vs, buffers_);
  std::vector<size_t> first(pieces_.size());
  for (size_t i = 1; i < pieces_.size(); ++i) {
    first[i] = first[i - 1] + pieces_[i - 1].count;
  }
  parallel::For(size_t{0}, pieces_.size(), [&](size_t i) {
    const Piece& p = pieces_[i];
    std::memcpy(joined_keys_.data() + first[i] * ks, p.keys, p.count * ks);
    if (vs > 0) {
      std::memcpy(joined_values_.data() + first[i] * vs, p.values,
                  p.count * vs);
    }
  });
  pieces_.clear();
  messages_held_.clear();
  job.keys = joined_keys_.data();
  job.values = vs > 0 ? joined_values_.data() : nullptr;
}

void StreamAssembler::Release() {
  pieces_.clear();
  messages_held_.clear();
  joined_keys_ = wire::OutputArray();
  joined_values_ = wire::OutputArray();
}

}  // namespace sortd
