#include "client/raw_call.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/compact_keys.h"
#include "core/key_fields.h"

namespace sortd::client_wire {
namespace {

constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads across the slices of a received message.
class SliceReader {
 public:
  explicit SliceReader(std::vector<grpc::Slice> slices)
      : slices_(std::move(slices)) {
    for (const grpc::Slice& s : slices_) remaining_ += s.size();
    Settle();
  }

  bool done() const { return slice_ == slices_.size(); }

  bool Byte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[slice_].begin()[at_++];
    --remaining_;
    Settle();
    return true;
  }
  bool Varint(uint64_t* v) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      value |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        *v = value;
        return true;
      }
    }
    return false;
  }
  // Copies `n` bytes to `out` (or skips them when `out` is null).
  bool Read(char* out, size_t n) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[slice_];
      const size_t take = std::min(n, s.size() - at_);
      if (out != nullptr) {
        std::memcpy(out, s.begin() + at_, take);
        out += take;
      }
      at_ += take;
      n -= take;
      remaining_ -= take;
      Settle();
    }
    return true;
  }
  size_t remaining() const { return remaining_; }
  // The next `n` bytes: a view into the slice when they lie in one, else
  // copied into `storage`.
  bool View(size_t n, std::string_view* out, std::string* storage) {
    if (!done() && slices_[slice_].size() - at_ >= n) {
      *out = std::string_view(
          reinterpret_cast<const char*>(slices_[slice_].begin()) + at_, n);
      at_ += n;
      remaining_ -= n;
      Settle();
      return true;
    }
    storage->resize(n);
    *out = *storage;
    return Read(storage->data(), n);
  }

 private:
  // Moves past finished (and empty) slices.
  void Settle() {
    while (slice_ < slices_.size() && at_ == slices_[slice_].size()) {
      ++slice_;
      at_ = 0;
    }
  }

  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0, at_ = 0, remaining_ = 0;
};

// Decodes a checked compact array into `out` (raw keys of `type`): in
// parts on several threads when it is large.
void DecodeCompact(const compact::Encoded& e, KeyType type, bool descending,
                   uint32_t* out) {
  constexpr size_t kKeysPerThread = size_t{2} << 20;
  const size_t blocks = compact::Blocks(e.count);
  const size_t threads = std::clamp<size_t>(
      e.count / kKeysPerThread, 1,
      std::max<size_t>(1, std::min(8u, std::thread::hardware_concurrency())));
  const auto* widths = reinterpret_cast<const uint8_t*>(e.widths.data());
  auto part = [&](size_t first, size_t last, size_t offset) {
    compact::UnpackBlocks(e, first, last, offset, out);
    const size_t begin = first * compact::kBlockKeys;
    const size_t end = std::min(e.count, last * compact::kBlockKeys);
    compact::FromOrderValues(type, descending, out + begin, end - begin);
  };
  if (threads == 1) return part(0, blocks, 0);
  std::vector<std::thread> workers;
  size_t offset = 0;
  for (size_t t = 0; t < threads; ++t) {
    const size_t first = blocks * t / threads,
                 last = blocks * (t + 1) / threads;
    if (t + 1 < threads) {
      workers.emplace_back(part, first, last, offset);
    } else {
      part(first, last, offset);
    }
    offset += compact::DeltaBytes(widths, first, last);
  }
  for (std::thread& w : workers) w.join();
}

// A CompactKeys message as read: its arrays are views into the received
// slices, or into the copies here when a field spans slices (so it stays
// where it was built: the views may point into it).
struct CompactMessage {
  compact::Encoded e;
  bool descending = false;
  std::string widths, bases, deltas;  // used when a field spans slices
};

// Reads the fields of a CompactKeys message of `length` bytes (field
// `field` of a SortResponse) into `m`, unchecked.
absl::Status ParseCompactKeys(SliceReader& in, size_t length, int field,
                              CompactMessage& m) {
  auto bad = [&](const char* what) {
    return absl::DataLossError(absl::StrCat("the server's compact keys (field ",
                                            field, ") did not parse: ", what));
  };
  const size_t end = in.remaining() - length;
  // Every read must end inside the message: a tag or varint that runs past
  // its end is refused before anything is sized by it.
  auto inside = [&] { return in.remaining() >= end; };
  while (in.remaining() > end) {
    uint64_t tag = 0, v = 0;
    if (!in.Varint(&tag)) return bad("a truncated field tag");
    if (!inside()) return bad("a field tag past the message's end");
    const int sub = static_cast<int>(tag >> 3), type = tag & 7;
    if (type == kVarint) {
      if (!in.Varint(&v)) return bad("a truncated varint");
      if (!inside()) return bad("a varint past the message's end");
      if (sub == 1) m.e.count = v;
      if (sub == 2) m.descending = v != 0;
      continue;
    }
    if (type != kLengthDelimited) return bad("an unexpected wire type");
    if (!in.Varint(&v) || !inside() || v > in.remaining() - end) {
      return bad("a length past the end");
    }
    std::string_view* view = sub == 3   ? &m.e.widths
                             : sub == 4 ? &m.e.bases
                             : sub == 5 ? &m.e.deltas
                                        : nullptr;
    std::string* storage = sub == 3   ? &m.widths
                           : sub == 4 ? &m.bases
                                      : &m.deltas;
    if (view == nullptr) {
      if (!in.Read(nullptr, v)) return bad("a truncated field");
    } else if (!in.View(v, view, storage)) {
      return bad("a truncated field");
    }
  }
  if (in.remaining() != end) return bad("a field past the message's end");
  return absl::OkStatus();
}

// Decodes the checked compact array `e` of compact field `field` into the
// sink's key buffer.
absl::Status DecodeIntoSink(const compact::Encoded& e, bool descending,
                            int field, SortResponseSink& sink) {
  const KeyType type = key_fields::TypeOfCompact(field).value_or(KeyType::kU32);
  char* out = sink.Keys(key_fields::Raw(type), e.count * 4);
  if (out == nullptr && e.count > 0) {
    return absl::DataLossError(absl::StrCat(
        "the server's SortResponse has ", e.count, " compact keys in field ",
        field, ", which does not fit the answer asked for"));
  }
  if (e.count > 0) {
    // The key buffer may be unaligned (a std::string's): decode in place
    // only when it is not.
    if (reinterpret_cast<uintptr_t>(out) % alignof(uint32_t) == 0) {
      DecodeCompact(e, type, descending, reinterpret_cast<uint32_t*>(out));
    } else {
      std::vector<uint32_t> aligned(e.count);
      DecodeCompact(e, type, descending, aligned.data());
      std::memcpy(out, aligned.data(), e.count * 4);
    }
  }
  return absl::OkStatus();
}

// Reads a CompactKeys message of `length` bytes (field `field` of a
// SortResponse) and decodes it into the sink's key buffer.
absl::Status ReadCompactKeys(SliceReader& in, size_t length, int field,
                             SortResponseSink& sink) {
  CompactMessage m;
  if (absl::Status s = ParseCompactKeys(in, length, field, m); !s.ok()) {
    return s;
  }
  if (absl::Status s = compact::Check(m.e); !s.ok()) return s;
  return DecodeIntoSink(m.e, m.descending, field, sink);
}

// A SortResponse that did not parse, for `what` reason.
absl::Status ResponseParseError(const char* what) {
  return absl::DataLossError(
      absl::StrCat("the server's SortResponse did not parse: ", what));
}

// Reads length-delimited field `field` (not compact keys) of `length`
// bytes: an array into the sink's buffer for it, the served_by message to
// the sink, anything else skipped.
absl::Status ReadLengthDelimited(SliceReader& in, int field, uint64_t length,
                                 SortResponseSink& sink) {
  char* out = nullptr;
  std::string served_by;
  bool array = true;
  if (field >= 1 && field <= 6) {
    out = sink.Keys(field, length);
  } else if (field == 8 || field == 9) {
    out = sink.Values(field, length);
  } else if (field == 10) {
    out = sink.Permutation(length);
  } else {
    array = false;
  }
  if (array && out == nullptr && length > 0) {
    return absl::DataLossError(absl::StrCat(
        "the server's SortResponse has field ", field, " of ", length,
        " bytes, which does not fit the answer asked for"));
  }
  if (field == 11) {
    served_by.resize(length);
    out = served_by.data();
  }
  if (!in.Read(out, length)) return ResponseParseError("a truncated field");
  if (field == 11) sink.ServedBy(served_by);
  return absl::OkStatus();
}

}  // namespace

grpc::Slice Lease::Borrow(const void* data, size_t size) {
  {
    MutexLock lock(&mu_);
    ++outstanding_;
  }
  return grpc::Slice(const_cast<void*>(data), size, &Lease::Release, this);
}

void Lease::Release(void* self) {
  auto* lease = static_cast<Lease*>(self);
  MutexLock lock(&lease->mu_);
  if (--lease->outstanding_ == 0) lease->cv_.NotifyAll();
}

void Lease::Wait() {
  MutexLock lock(&mu_);
  while (outstanding_ != 0) cv_.Wait(&mu_);
}

void OutgoingMessage::Header(uint64_t tag, const uint64_t* length) {
  const size_t before = pending_.size();
  PutVarint(tag, &pending_);
  if (length != nullptr) PutVarint(*length, &pending_);
  size_ += pending_.size() - before;
}

void OutgoingMessage::Bytes(int field, const void* data, size_t size,
                            Lease* lease) {
  const uint64_t length = size;
  Header(static_cast<uint64_t>(field) << 3 | kLengthDelimited, &length);
  if (size == 0) return;
  slices_.emplace_back(pending_);
  pending_.clear();
  slices_.push_back(lease->Borrow(data, size));
  size_ += size;
}

void OutgoingMessage::Varint(int field, uint64_t value) {
  Header(static_cast<uint64_t>(field) << 3 | kVarint, nullptr);
  const size_t before = pending_.size();
  PutVarint(value, &pending_);
  size_ += pending_.size() - before;
}

grpc::ByteBuffer OutgoingMessage::Take() {
  if (!pending_.empty()) {
    slices_.emplace_back(pending_);
    pending_.clear();
  }
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  slices_.clear();
  return buffer;
}

absl::Status DecodeSortResponse(const grpc::ByteBuffer& response,
                                SortResponseSink& sink) {
  std::vector<grpc::Slice> slices;
  if (grpc::Status s = response.Dump(&slices); !s.ok()) {
    return absl::DataLossError(s.error_message());
  }
  SliceReader in(std::move(slices));
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.Varint(&tag)) return ResponseParseError("a truncated field tag");
    const int field = static_cast<int>(tag >> 3), type = tag & 7;
    if (type == kVarint) {
      uint64_t ignored;
      if (!in.Varint(&ignored)) return ResponseParseError("a truncated varint");
      continue;
    }
    if (type == kFixed64 || type == kFixed32) {
      if (!in.Read(nullptr, type == kFixed64 ? 8 : 4)) {
        return ResponseParseError("a truncated fixed-size field");
      }
      continue;
    }
    if (type != kLengthDelimited)
      return ResponseParseError("an unexpected wire type");
    uint64_t length = 0;
    if (!in.Varint(&length) || length > in.remaining()) {
      return ResponseParseError("a length past the end");
    }
    absl::Status s = key_fields::TypeOfCompact(field)
                         ? ReadCompactKeys(in, length, field, sink)
                         : ReadLengthDelimited(in, field, length, sink);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status AppendCompactKeys(const compact::Encoded& encoded, KeyType type,
                               bool descending, std::string* out) {
  if (absl::Status s = compact::Check(encoded); !s.ok()) return s;
  const size_t at = out->size();
  out->resize(at + encoded.count * 4);
  std::vector<uint32_t> keys(encoded.count);
  DecodeCompact(encoded, type, descending, keys.data());
  if (encoded.count > 0)
    std::memcpy(out->data() + at, keys.data(), encoded.count * 4);
  return absl::OkStatus();
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace sortd::client_wire
