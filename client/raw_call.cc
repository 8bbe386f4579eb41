#include "client/raw_call.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

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

}  // namespace

grpc::Slice Lease::Borrow(const void* data, size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_;
  }
  return grpc::Slice(const_cast<void*>(data), size, &Lease::Release, this);
}

void Lease::Release(void* self) {
  auto* lease = static_cast<Lease*>(self);
  std::lock_guard<std::mutex> lock(lease->mu_);
  if (--lease->outstanding_ == 0) lease->cv_.notify_all();
}

void Lease::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return outstanding_ == 0; });
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
  auto bad = [&](const char* what) {
    return absl::DataLossError(
        absl::StrCat("the server's SortResponse did not parse: ", what));
  };
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.Varint(&tag)) return bad("a truncated field tag");
    const int field = static_cast<int>(tag >> 3), type = tag & 7;
    if (type == kVarint) {
      uint64_t ignored;
      if (!in.Varint(&ignored)) return bad("a truncated varint");
      continue;
    }
    if (type == kFixed64 || type == kFixed32) {
      if (!in.Read(nullptr, type == kFixed64 ? 8 : 4)) {
        return bad("a truncated fixed-size field");
      }
      continue;
    }
    if (type != kLengthDelimited) return bad("an unexpected wire type");
    uint64_t length = 0;
    if (!in.Varint(&length) || length > in.remaining()) {
      return bad("a length past the end");
    }
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
    if (!in.Read(out, length)) return bad("a truncated field");
    if (field == 11) sink.ServedBy(served_by);
  }
  return absl::OkStatus();
}

}  // namespace sortd::client_wire
