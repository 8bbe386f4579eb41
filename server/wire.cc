#include "server/wire.h"

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/key_fields.h"
#include "grpc/slice.h"

namespace sortd::wire {
namespace {

// Protocol Buffers wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kStartGroup = 3,
              kEndGroup = 4, kFixed32 = 5;

const char* WireTypeName(int type) {
  switch (type) {
    case kVarint:
      return "varint";
    case kFixed64:
      return "64-bit";
    case kLengthDelimited:
      return "length-delimited";
    case kStartGroup:
      return "start-group";
    case kEndGroup:
      return "end-group";
    case kFixed32:
      return "32-bit";
  }
  return "invalid";
}

// Reads one message's fields in order. Every error names the message, the
// byte offset and what was found there.
// Where `s` stops being well-formed UTF-8 (as protobuf checks a string
// field: no overlong forms, surrogates or code points past U+10FFFF);
// npos when it is.
size_t InvalidUtf8At(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
    const uint8_t c = b(0);
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xbf;  // the second byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + n > s.size() || b(1) < lo || b(1) > hi) return i;
    for (size_t k = 2; k < n; ++k) {
      if (b(k) < 0x80 || b(k) > 0xbf) return i;
    }
    i += n;
  }
  return std::string_view::npos;
}

class Reader {
 public:
  Reader(std::string_view bytes, const char* message)
      : bytes_(bytes), message_(message) {}

  bool done() const { return at_ == bytes_.size(); }

  // The next field's number and wire type.
  absl::Status Tag(int* field, int* type) {
    const size_t start = at_;
    uint64_t tag = 0;
    if (absl::Status s = Varint(&tag, "a field tag"); !s.ok()) return s;
    if (at_ - start > 5 || tag > 0xffffffffu) {
      return Error(start, "a field tag longer than 32 bits");
    }
    *type = static_cast<int>(tag & 7);
    const uint64_t number = tag >> 3;
    if (number == 0) {
      return Error(start, "field number 0, which no message has");
    }
    if (number > 536870911) {
      return Error(start, absl::StrCat("field number ", number,
                                       " is past the largest, 2^29-1"));
    }
    if (*type > kFixed32) {
      return Error(start, absl::StrCat("field ", number, " has wire type ",
                                       *type, ", which does not exist"));
    }
    *field = static_cast<int>(number);
    return absl::OkStatus();
  }

  absl::Status Varint(uint64_t* value, const char* what) {
    const size_t start = at_;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (at_ == bytes_.size()) {
        return Error(start, absl::StrCat("the message ends inside ", what,
                                         " (an unterminated varint)"));
      }
      const uint8_t byte = static_cast<uint8_t>(bytes_[at_++]);
      if (shift < 64) v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        *value = v;
        return absl::OkStatus();
      }
    }
    return Error(start,
                 absl::StrCat(what, " is a varint longer than 10 bytes"));
  }

  absl::Status Bytes(int field, std::string_view* out) {
    const size_t start = at_;
    uint64_t length = 0;
    if (absl::Status s = Varint(&length, "a length prefix"); !s.ok()) return s;
    // Protobuf reads a length as at most 5 bytes holding less than 2^31;
    // longer encodings, even of a small value, it refuses.
    if (at_ - start > 5 || length > 0x7fffffffu) {
      return Error(start, absl::StrCat("field ", field,
                                       "'s length prefix is longer than 31 "
                                       "bits (",
                                       at_ - start, " bytes)"));
    }
    const size_t left = bytes_.size() - at_;
    if (length > left) {
      return Error(start,
                   absl::StrCat("field ", field, " claims ", length,
                                " bytes but only ", left, " remain in the ",
                                bytes_.size(), "-byte message (truncated?)"));
    }
    *out = bytes_.substr(at_, length);
    at_ += length;
    return absl::OkStatus();
  }

  // Skips an unknown field's value.
  absl::Status Skip(int field, int type) {
    switch (type) {
      case kVarint: {
        uint64_t ignored;
        return Varint(&ignored, "a varint field");
      }
      case kFixed64:
      case kFixed32: {
        const size_t n = type == kFixed64 ? 8 : 4;
        if (bytes_.size() - at_ < n) {
          return Error(at_, absl::StrCat("the message ends inside field ",
                                         field, "'s ", n, "-byte value"));
        }
        at_ += n;
        return absl::OkStatus();
      }
      case kLengthDelimited: {
        std::string_view ignored;
        return Bytes(field, &ignored);
      }
      default:
        // Groups do not exist in proto3 messages.
        return Error(at_,
                     absl::StrCat("field ", field, " is a ", WireTypeName(type),
                                  ", which sortd.v1 messages never use"));
    }
  }

  absl::Status WrongType(size_t start, int field, const std::string& name,
                         int type, int expected) {
    return Error(start, absl::StrCat("field ", field, " (", name, ") has wire ",
                                     "type ", type, " (", WireTypeName(type),
                                     "); it is ", WireTypeName(expected)));
  }

  size_t at() const { return at_; }

 private:
  absl::Status Error(size_t offset, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", message_, " did not parse: at byte ", offset,
                     " of ", bytes_.size(), ", ", what));
  }

  std::string_view bytes_;
  const char* message_;
  size_t at_ = 0;
};

// A field header: tag and length of a length-delimited field.
size_t PutVarint(uint8_t* out, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<uint8_t>(v);
  return n;
}

// The tag and length of a length-delimited field.
size_t PutHeader(uint8_t* out, int field, uint64_t length) {
  const size_t n =
      PutVarint(out, static_cast<uint64_t>(field) << 3 | kLengthDelimited);
  return n + PutVarint(out + n, length);
}

// Builds a message from headers and array slices.
class Writer {
 public:
  void Field(int field, const grpc::Slice& payload) {
    uint8_t header[20];
    const size_t n = PutHeader(header, field, payload.size());
    slices_.emplace_back(header, n);
    if (payload.size() > 0) slices_.push_back(payload);
  }
  // A CompactKeys message, its byte fields sent from their slices.
  void Compact(int field, const CompactArray& c) {
    uint8_t header[64];
    size_t n = PutHeader(header, field, c.MessageBytes());
    header[n++] = 1 << 3 | kVarint;
    n += PutVarint(header + n, c.count);
    if (c.descending) {
      header[n++] = 2 << 3 | kVarint;
      header[n++] = 1;
    }
    slices_.emplace_back(header, n);
    Field(3, c.widths);
    Field(4, c.bases);
    size_t deltas_bytes = 0;
    for (const grpc::Slice& s : c.deltas) deltas_bytes += s.size();
    n = PutHeader(header, 5, deltas_bytes);
    slices_.emplace_back(header, n);
    for (const grpc::Slice& s : c.deltas) {
      if (s.size() > 0) slices_.push_back(s);
    }
  }
  void Message(int field, const google::protobuf::MessageLite& message) {
    std::string bytes = message.SerializeAsString();
    uint8_t header[20];
    const size_t n = PutHeader(header, field, bytes.size());
    bytes.insert(0, reinterpret_cast<const char*>(header), n);
    slices_.emplace_back(bytes);
  }
  grpc::ByteBuffer Take() {
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  std::vector<grpc::Slice> slices_;
};

// SharedArrays.region (field 1 of the message in `bytes`, field 11 of the
// request at byte `at`) in every occurrence, checked for UTF-8. Anything
// else wrong with the message is left to its parser.
absl::Status CheckRegionUtf8(std::string_view bytes, size_t at) {
  Reader in(bytes, "SharedArrays");
  while (!in.done()) {
    int field = 0, type = 0;
    if (!in.Tag(&field, &type).ok()) return absl::OkStatus();
    if (field != 1 || type != kLengthDelimited) {
      if (!in.Skip(field, type).ok()) return absl::OkStatus();
      continue;
    }
    std::string_view region;
    if (!in.Bytes(field, &region).ok()) return absl::OkStatus();
    if (const size_t bad = InvalidUtf8At(region); bad != region.npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the SortRequest did not parse: at byte ", at,
          ", field 11 (shared): shared.region is not UTF-8 (at its byte ", bad,
          " of ", region.size(), ")"));
    }
  }
  return absl::OkStatus();
}

// ParseSortRequest's fields, each read from `in` (its tag, of `field` and
// wire `type`, began at byte `start`) into `request`.

// A key array (fields 1 to 6, by key type).
absl::Status ReadKeys(Reader& in, size_t start, int field, int type,
                      KeyType key, SortRequest& request) {
  if (type != kLengthDelimited) {
    return in.WrongType(start, field, KeyFieldName(key), type,
                        kLengthDelimited);
  }
  if (absl::Status s = in.Bytes(field, &request.keys); !s.ok()) return s;
  request.key_type = key;
  return absl::OkStatus();
}

// A value array (field 8: 32-bit, 9: 64-bit).
absl::Status ReadValues(Reader& in, size_t start, int field, int type,
                        SortRequest& request) {
  const ValueType value = field == 8 ? ValueType::kU32 : ValueType::kU64;
  if (type != kLengthDelimited) {
    return in.WrongType(start, field, ValueFieldName(value), type,
                        kLengthDelimited);
  }
  if (absl::Status s = in.Bytes(field, &request.values); !s.ok()) return s;
  request.value_type = value;
  return absl::OkStatus();
}

// `shared` (field 11); occurrences merge, as protobuf merges them.
absl::Status ReadShared(Reader& in, size_t start, int field, int type,
                        SortRequest& request) {
  if (type != kLengthDelimited) {
    return in.WrongType(start, field, "shared", type, kLengthDelimited);
  }
  std::string_view bytes;
  if (absl::Status s = in.Bytes(field, &bytes); !s.ok()) return s;
  // Its region names a file: protobuf refuses a string that is not
  // UTF-8 (and logs it); said here, where in the region it breaks.
  if (absl::Status s = CheckRegionUtf8(bytes, start); !s.ok()) return s;
  if (!request.shared.has_value()) request.shared.emplace();
  if (!request.shared->MergeFromString(std::string(bytes))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the SortRequest did not parse: at byte ", start,
                     ", field 11 (shared) is not a SharedArrays message"));
  }
  return absl::OkStatus();
}

// `part` (field 13); occurrences merge, as protobuf merges them.
absl::Status ReadPart(Reader& in, size_t start, int field, int type,
                      SortRequest& request) {
  if (type != kLengthDelimited) {
    return in.WrongType(start, field, "part", type, kLengthDelimited);
  }
  std::string_view bytes;
  if (absl::Status s = in.Bytes(field, &bytes); !s.ok()) return s;
  if (!request.part.has_value()) request.part.emplace();
  if (!request.part->MergeFromString(std::string(bytes))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the SortRequest did not parse: at byte ", start,
                     ", field 13 (part) is not a Part message"));
  }
  return absl::OkStatus();
}

// The varint fields: order (7), return_permutation (10) and
// response_key_coding (12).
absl::Status ReadScalar(Reader& in, size_t start, int field, int type,
                        SortRequest& request) {
  const char* name = field == 7    ? "order"
                     : field == 10 ? "return_permutation"
                                   : "response_key_coding";
  if (type != kVarint) return in.WrongType(start, field, name, type, kVarint);
  uint64_t v = 0;
  if (absl::Status s = in.Varint(&v, name); !s.ok()) return s;
  if (field == 7) {
    request.order = static_cast<int32_t>(static_cast<uint32_t>(v));
  } else if (field == 12) {
    request.key_coding = static_cast<int32_t>(static_cast<uint32_t>(v));
  } else {
    request.return_permutation = v != 0;
  }
  return absl::OkStatus();
}

}  // namespace

int ValueFieldNumber(ValueType type) { return type == ValueType::kU64 ? 9 : 8; }

std::string KeyFieldName(KeyType type) {
  return absl::StrCat(KeyTypeName(type), "_keys");
}

std::string ValueFieldName(ValueType type) {
  if (type == ValueType::kNone) return "no values";
  return absl::StrCat(ValueTypeName(type), "_values");
}

absl::StatusOr<Received> Received::From(const grpc::ByteBuffer& buffer,
                                        HostBufferPool* pool) {
  Received r;
  if (buffer.TrySingleSlice(&r.slice_).ok()) return r;
  std::vector<grpc::Slice> parts;
  grpc::Status s = buffer.Dump(&parts);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot read the received message: ", s.error_message()));
  }
  size_t bytes = 0;
  for (const grpc::Slice& part : parts) bytes += part.size();
  OutputArray joined(bytes, pool);
  std::byte* at = joined.data();
  for (const grpc::Slice& part : parts) {
    std::memcpy(at, part.begin(), part.size());
    at += part.size();
  }
  r.slice_ = joined.Share();
  return r;
}

grpc::Slice Received::Sub(std::string_view part) const {
  if (part.empty()) return grpc::Slice();
  const size_t offset = static_cast<size_t>(
      reinterpret_cast<const uint8_t*>(part.data()) - slice_.begin());
  return slice_.sub(offset, offset + part.size());
}

Received Received::Copy(std::string_view bytes) {
  Received r;
  r.slice_ = grpc::Slice(bytes.data(), bytes.size());
  return r;
}

absl::StatusOr<SortRequest> ParseSortRequest(std::string_view bytes) {
  SortRequest request;
  Reader in(bytes, "SortRequest");
  while (!in.done()) {
    const size_t start = in.at();
    int field = 0, type = 0;
    if (absl::Status s = in.Tag(&field, &type); !s.ok()) return s;
    absl::Status read;
    if (const std::optional<KeyType> raw = key_fields::TypeOfRaw(field)) {
      read = ReadKeys(in, start, field, type, *raw, request);
    } else if (field == 8 || field == 9) {
      read = ReadValues(in, start, field, type, request);
    } else if (field == 11) {
      read = ReadShared(in, start, field, type, request);
    } else if (field == 13) {
      read = ReadPart(in, start, field, type, request);
    } else if (field == 7 || field == 10 || field == 12) {
      read = ReadScalar(in, start, field, type, request);
    } else {
      read = in.Skip(field, type);
    }
    if (!read.ok()) return read;
  }
  return request;
}

absl::StatusOr<TransposeRequest> ParseTransposeRequest(std::string_view bytes) {
  TransposeRequest request;
  Reader in(bytes, "TransposeRequest");
  while (!in.done()) {
    const size_t start = in.at();
    int field = 0, type = 0;
    if (absl::Status s = in.Tag(&field, &type); !s.ok()) return s;
    if (field == 1) {
      if (type != kLengthDelimited) {
        return in.WrongType(start, field, "matrices", type, kLengthDelimited);
      }
      if (absl::Status s = in.Bytes(field, &request.matrices); !s.ok()) {
        return s;
      }
    } else if (absl::Status s = in.Skip(field, type); !s.ok()) {
      return s;
    }
  }
  return request;
}

OutputArray::OutputArray(size_t bytes, HostBufferPool* pool)
    // Always a reference-counted heap slice, never an inlined one (whose
    // bytes would move with every copy of the slice), so data() stays put.
    : slice_(pool != nullptr ? pool->Allocate(bytes)
                             : grpc::Slice(grpc_slice_malloc_large(bytes),
                                           grpc::Slice::STEAL_REF)) {
  // A fresh slice is ours alone until shared; gRPC reads it only once sent.
  data_ = reinterpret_cast<std::byte*>(const_cast<uint8_t*>(slice_.begin()));
}

grpc::Slice OutputArray::Sub(size_t offset, size_t length) const {
  return slice_.sub(offset, offset + length);
}

size_t CompactArray::MessageBytes() const {
  size_t deltas_bytes = 0;
  for (const grpc::Slice& s : deltas) deltas_bytes += s.size();
  uint8_t scratch[20];
  return 1 + PutVarint(scratch, count) + (descending ? 2 : 0) +
         PutHeader(scratch, 3, widths.size()) + widths.size() +
         PutHeader(scratch, 4, bases.size()) + bases.size() +
         PutHeader(scratch, 5, deltas_bytes) + deltas_bytes;
}

grpc::ByteBuffer EncodeSortResponse(const SortArrays& arrays,
                                    const v1::ServedBy* served_by) {
  Writer out;
  if (arrays.compact.has_value()) {
    out.Compact(key_fields::Compact(arrays.key_type), *arrays.compact);
  } else {
    out.Field(key_fields::Raw(arrays.key_type), arrays.keys);
  }
  if (arrays.value_type != ValueType::kNone) {
    out.Field(ValueFieldNumber(arrays.value_type), arrays.values);
  }
  if (arrays.permutation.has_value()) out.Field(10, *arrays.permutation);
  if (served_by != nullptr) out.Message(11, *served_by);
  return out.Take();
}

grpc::ByteBuffer EncodeTransposeResponse(const grpc::Slice& matrices,
                                         const v1::ServedBy& served_by) {
  Writer out;
  out.Field(1, matrices);
  out.Message(2, served_by);
  return out.Take();
}

}  // namespace sortd::wire
