// libFuzzer target: sequences of SortStream messages, as clients, careless
// or hostile, send them, through the server's StreamAssembler
// (server/stream_assembler.h) under a budget of a few MiB. The input is cut
// into messages: each is either raw bytes or a SortRequest built from the
// input (any key and value type, the stream's own or another, any count,
// order, permutation and key coding) and then left whole or broken (a
// byte flipped, cut short, a field added: shared, part, another key or
// value field, an unknown one), and handed over in one slice or several.
// Checked for every input: the budget's charge never passes it, and every
// refusal has a code and a message, leaves the charge and the stream as
// they were, and ends the stream (a later message gets the same refusal);
// an accepted message parses on its own (wire::ParseSortRequest) with the
// stream's fields and is charged at least its bytes and its keys and
// values; when every message was accepted, Join gives exactly the
// concatenation of their keys and values; once the call's hold is gone the
// budget is back to 0. Any crash, sanitizer report or broken rule is a
// finding.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/key_fields.h"
#include "server/stream_assembler.h"

namespace {

void Finding(const char* what, const absl::Status& s = absl::OkStatus()) {
  std::fprintf(stderr, "fuzz_stream: %s %s\n", what, s.ToString().c_str());
  std::abort();
}

// FUZZ_STREAM_TRACE=1: each message's fate on stderr (to read a finding).
bool Trace() {
  static const bool trace = std::getenv("FUZZ_STREAM_TRACE") != nullptr;
  return trace;
}

// The input, read from the front; past its end, zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | Byte() << 8); }
  // Up to `n` bytes (fewer at the end).
  std::string Take(size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// `bytes` bytes: what the input gives, then a pattern from `seed`.
std::string Array(Input& in, size_t bytes, uint8_t seed) {
  std::string s = in.Take(std::min<size_t>(bytes, 64));
  for (size_t i = s.size(); i < bytes; ++i) {
    s.push_back(static_cast<char>(seed + i * 31 + (i >> 8)));
  }
  return s;
}

constexpr sortd::ValueType kValueTypes[] = {
    sortd::ValueType::kNone, sortd::ValueType::kU32, sortd::ValueType::kU64};

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}

// The next message's bytes. `first` is the stream's first built key and
// value type (which most built messages keep, so that streams of several
// accepted messages are common).
std::string NextMessage(Input& in, sortd::KeyType& first_key,
                        sortd::ValueType& first_value, bool& have_first) {
  const uint8_t op = in.Byte();
  const int kind = op % 8;
  if (kind == 0) return in.Take(in.U16() % 8192);  // raw bytes
  const uint8_t terms = in.Byte();
  sortd::KeyType key_type = sortd::kAllKeyTypes[(op >> 4) % 6];
  sortd::ValueType value_type = kValueTypes[terms % 3];
  if (have_first && (op & 8) == 0) {
    key_type = first_key;
    value_type = first_value;
  }
  if (!have_first) {
    first_key = key_type;
    first_value = value_type;
    have_first = true;
  }
  const size_t n = in.U16() % 2048;
  sortd::v1::SortRequest r;
  *sortd::key_fields::MutableKeys(&r, key_type) =
      Array(in, n * sortd::KeySize(key_type), op);
  if (value_type == sortd::ValueType::kU32) {
    r.set_u32_values(Array(in, n * 4, terms));
  } else if (value_type == sortd::ValueType::kU64) {
    r.set_u64_values(Array(in, n * 8, terms));
  }
  if (terms & 4) r.set_order(sortd::v1::ORDER_DESCENDING);
  if (terms & 8) r.set_return_permutation(true);
  if (terms & 16) r.set_response_key_coding(sortd::v1::KEY_CODING_COMPACT);
  std::string bytes = r.SerializeAsString();
  switch (kind) {
    case 5: {  // a byte flipped
      const size_t at = in.U16();
      const uint8_t flip = in.Byte() | 1;
      if (!bytes.empty()) bytes[at % bytes.size()] ^= flip;
      break;
    }
    case 6:  // cut short
      bytes.resize(bytes.empty() ? 0 : in.U16() % bytes.size());
      break;
    case 7: {  // a field added
      const uint8_t field = in.Byte();
      switch (field % 6) {
        case 0:  // shared: an empty SharedArrays
          bytes += std::string("\x5a\x00", 2);
          break;
        case 1:  // part, with a group name
          bytes += "\x6a\x12\x0a\x10" + std::string(16, 'g');
          break;
        case 2: {  // another key field (the oneof's last wins)
          const int number = 1 + field / 6 % 6;
          bytes += Varint(number << 3 | 2) + Varint(8) + in.Take(8);
          break;
        }
        case 3:  // a values field of another width
          bytes += Varint(8 << 3 | 2) + Varint(4) + std::string(4, 'v');
          break;
        case 4:  // an unknown field
          bytes += Varint(99 << 3) + Varint(field);
          break;
        case 5:  // an order or key coding out of range
          bytes += Varint((field & 64 ? 12 : 7) << 3) + Varint(field);
          break;
      }
      break;
    }
    default:  // whole
      break;
  }
  return bytes;
}

// `bytes` in `slices` slices, as gRPC may hand a message over.
grpc::ByteBuffer Buffer(const std::string& bytes, size_t slices) {
  std::vector<grpc::Slice> parts;
  const size_t step = bytes.size() / slices + 1;
  for (size_t at = 0; at < bytes.size(); at += step) {
    parts.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
  }
  if (parts.empty()) parts.emplace_back("", 0);
  return grpc::ByteBuffer(parts.data(), parts.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const uint8_t config = in.Byte(), neighbour = in.Byte();
  const size_t budget_bytes = (size_t{1} + config % 4) << 20;  // 1-4 MiB
  // One call may hold the whole budget, or half of it.
  const size_t call_bytes = neighbour & 0x80 ? budget_bytes / 2 : budget_bytes;
  const sortd::RequestLimits limits{
      .max_request_bytes = size_t{1} << 16,
      .max_stream_bytes = config & 4 ? size_t{1} << 14 : size_t{4} << 30,
      .stream_chunk_bytes = size_t{1} << (10 + (config >> 3) % 12)};
  sortd::Admission budget({.max_units = budget_bytes,
                           .max_requests = SIZE_MAX,
                           .max_call_units = call_bytes,
                           .strict = true,
                           .unit = "bytes",
                           .units_flag = "--max_held_bytes",
                           .call_flag = "--max_call_bytes",
                           .on_change = [budget_bytes](size_t units) {
                             if (units > budget_bytes) {
                               Finding("the charge passed the budget");
                             }
                           }});
  {
    // Another call holds up to 2 MiB of the budget (when there is room).
    sortd::Admission::Hold other(&budget);
    (void)other.Grow(
        std::min(static_cast<size_t>(neighbour & 0x3f) << 15, call_bytes));
    sortd::Admission::Hold hold(&budget);
    {
      sortd::StreamAssembler stream(limits, nullptr, &hold);
      std::string keys, values;  // the accepted messages', parsed apart
      size_t held = 0;           // the accepted messages' bytes
      sortd::KeyType first_key = sortd::KeyType::kU32;
      sortd::ValueType first_value = sortd::ValueType::kNone;
      bool have_first = false, refused = false;
      while (!in.empty() && !refused) {
        const std::string bytes =
            NextMessage(in, first_key, first_value, have_first);
        const size_t slices = 1 + in.Byte() % 4;
        const size_t charged = hold.charged(), messages = stream.messages(),
                     count = stream.count();
        grpc::ByteBuffer buffer = Buffer(bytes, slices);
        absl::Status s;
        if (slices == 4) {
          s = stream.Append(sortd::wire::Received::Copy(bytes));
        } else {
          s = stream.Append(buffer);
        }
        if (Trace()) {
          std::fprintf(stderr, "message %zu: %zu bytes in %zu slices: %s\n",
                       messages + 1, bytes.size(), slices,
                       s.ToString().c_str());
        }
        if (budget.units() != hold.charged() + other.charged()) {
          Finding("the budget and the calls' charges disagree");
        }
        if (hold.charged() > call_bytes) {
          Finding("the call's charge passed what one call may hold");
        }
        if (!s.ok()) {
          if (s.message().empty()) Finding("a refusal without a message", s);
          if (s.code() != absl::StatusCode::kInvalidArgument &&
              s.code() != absl::StatusCode::kResourceExhausted) {
            Finding("a refusal of an unexpected code", s);
          }
          if (hold.charged() != charged) {
            Finding("a refused message left a charge", s);
          }
          if (stream.messages() != messages || stream.count() != count) {
            Finding("a refused message changed the stream", s);
          }
          // The stream is over: the next message gets the same refusal.
          grpc::ByteBuffer next =
              Buffer(NextMessage(in, first_key, first_value, have_first), 1);
          if (stream.Append(next) != s) {
            Finding("a message after a refusal was not refused the same", s);
          }
          if (hold.charged() != charged) {
            Finding("a message after a refusal was charged", s);
          }
          refused = true;
          break;
        }
        absl::StatusOr<sortd::wire::SortRequest> parsed =
            sortd::wire::ParseSortRequest(bytes);
        if (!parsed.ok()) Finding("an accepted message does not parse");
        if (stream.messages() != messages + 1) {
          Finding("an accepted message not counted");
        }
        if (parsed->key_type != stream.key_type() ||
            parsed->value_type != stream.value_type()) {
          Finding("an accepted message with other fields than the stream's");
        }
        const size_t ks = sortd::KeySize(stream.key_type());
        const size_t vs = sortd::ValueSize(stream.value_type());
        if (parsed->keys.size() % ks != 0 ||
            stream.count() != count + parsed->keys.size() / ks ||
            parsed->values.size() != parsed->keys.size() / ks * vs) {
          Finding("an accepted message's keys miscounted");
        }
        keys.append(parsed->keys);
        values.append(parsed->values);
        held += bytes.size();
        if (hold.charged() < held + keys.size() + values.size()) {
          Finding("the stream holds more than it was charged");
        }
        if (stream.count() * (ks + vs) > limits.max_stream_bytes) {
          Finding("the stream passed --max_stream_bytes");
        }
      }
      if (!refused && stream.messages() > 0) {
        const size_t charged = hold.charged();
        sortd::SortJob job{.key_type = stream.key_type(),
                           .order = stream.order(),
                           .count = stream.count(),
                           .value_type = stream.value_type()};
        stream.Join(job);
        if (Trace()) {
          std::fprintf(stderr, "joined %zu messages, %zu keys, charged %zu\n",
                       stream.messages(), stream.count(), charged);
        }
        if (job.keys == nullptr ||
            std::memcmp(job.keys, keys.data(), keys.size()) != 0) {
          Finding("the joined keys are not the messages' keys");
        }
        if ((stream.value_type() == sortd::ValueType::kNone) !=
                (job.values == nullptr) ||
            (job.values != nullptr &&
             std::memcmp(job.values, values.data(), values.size()) != 0)) {
          Finding("the joined values are not the messages' values");
        }
        if (hold.charged() != charged) Finding("joining changed the charge");
      }
    }  // the stream's messages and arrays go
    if (budget.units() != hold.charged() + other.charged()) {
      Finding("the budget and the calls' charges disagree at the end");
    }
  }  // the calls' holds go
  if (budget.units() != 0 || budget.requests() != 0) {
    Finding("the budget is not back to 0");
  }
  return 0;
}
