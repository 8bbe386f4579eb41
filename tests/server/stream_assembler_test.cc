// StreamAssembler: a SortStream's messages join to the concatenation of
// their arrays, for every key and value type; a message that contradicts
// the first, passes the stream's bounds or the budget, or carries what a
// stream does not take is refused with a status that says which message
// and why, and leaves the charge as it was.
#include "server/stream_assembler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/key_fields.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::Shape;

// The service's budget of held bytes, as server/service.cc sets it up.
Admission::Limits HeldBytes(size_t max_bytes, size_t max_call_bytes) {
  return {.max_units = max_bytes,
          .max_requests = SIZE_MAX,
          .max_call_units = max_call_bytes,
          .strict = true,
          .unit = "bytes",
          .units_flag = "--max_held_bytes",
          .call_flag = "--max_call_bytes"};
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// `n` generated keys of `type`, as bytes.
std::string Keys(KeyType type, Shape shape, size_t n, uint64_t seed) {
  switch (type) {
    case KeyType::kU32:
      return Bytes(testing::Generate<uint32_t>(shape, n, seed));
    case KeyType::kI32:
      return Bytes(testing::Generate<int32_t>(shape, n, seed));
    case KeyType::kF32:
      return Bytes(testing::Generate<float>(shape, n, seed));
    case KeyType::kU64:
      return Bytes(testing::Generate<uint64_t>(shape, n, seed));
    case KeyType::kI64:
      return Bytes(testing::Generate<int64_t>(shape, n, seed));
    case KeyType::kF64:
      return Bytes(testing::Generate<double>(shape, n, seed));
  }
  return "";
}

std::string Values(ValueType type, size_t n, uint64_t seed) {
  switch (type) {
    case ValueType::kNone:
      return "";
    case ValueType::kU32:
      return Bytes(testing::Generate<uint32_t>(Shape::kRandom, n, seed));
    case ValueType::kU64:
      return Bytes(testing::Generate<uint64_t>(Shape::kRandom, n, seed));
  }
  return "";
}

v1::SortRequest Request(KeyType key_type, const std::string& keys,
                        ValueType value_type = ValueType::kNone,
                        const std::string& values = "") {
  v1::SortRequest r;
  *key_fields::MutableKeys(&r, key_type) = keys;
  if (value_type == ValueType::kU32) r.set_u32_values(values);
  if (value_type == ValueType::kU64) r.set_u64_values(values);
  return r;
}

// A message as gRPC hands it over: in `slices` slices (a message of
// several is joined by the assembler).
grpc::ByteBuffer Buffer(const std::string& bytes, size_t slices = 1) {
  std::vector<grpc::Slice> parts;
  const size_t step = bytes.size() / slices + 1;
  for (size_t at = 0; at < bytes.size(); at += step) {
    parts.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
  }
  if (parts.empty()) parts.emplace_back("", 0);
  return grpc::ByteBuffer(parts.data(), parts.size());
}

absl::Status Append(StreamAssembler& stream, const v1::SortRequest& r,
                    size_t slices = 1) {
  grpc::ByteBuffer b = Buffer(r.SerializeAsString(), slices);
  return stream.Append(b);
}

std::string Joined(const std::byte* p, size_t bytes) {
  return std::string(reinterpret_cast<const char*>(p), bytes);
}

constexpr ValueType kValueTypes[] = {ValueType::kNone, ValueType::kU32,
                                     ValueType::kU64};

TEST(StreamAssemblerTest, MessagesJoinToTheirConcatenation) {
  const size_t kSizes[] = {300, 0, 1, 1000, 17};
  for (KeyType kt : kAllKeyTypes) {
    for (ValueType vt : kValueTypes) {
      SCOPED_TRACE(absl::StrCat(KeyTypeName(kt), " with ", ValueTypeName(vt)));
      Admission budget(HeldBytes(64 << 20, 64 << 20));
      Admission::Hold hold(&budget);
      {
        StreamAssembler stream({}, nullptr, &hold);
        std::string keys, values;
        size_t i = 0;
        for (size_t n : kSizes) {
          const std::string k = Keys(kt, testing::kAllShapes[i % 6], n, i);
          const std::string v = Values(vt, n, i + 100);
          v1::SortRequest r = Request(kt, k, vt, v);
          // Only the first message's order and permutation count.
          r.set_order(i == 0 ? v1::ORDER_DESCENDING : v1::ORDER_ASCENDING);
          r.set_return_permutation(i == 0);
          // Several slices (joined) and one (taken as it is), and bytes
          // handed over already contiguous.
          if (i == 3) {
            ASSERT_TRUE(
                stream.Append(wire::Received::Copy(r.SerializeAsString()))
                    .ok());
          } else {
            ASSERT_TRUE(Append(stream, r, 1 + i % 3).ok());
          }
          keys += k;
          values += v;
          ++i;
        }
        EXPECT_EQ(stream.messages(), std::size(kSizes));
        EXPECT_EQ(stream.count(), 1318u);
        EXPECT_EQ(stream.key_type(), kt);
        EXPECT_EQ(stream.value_type(), vt);
        EXPECT_EQ(stream.order(), Order::kDescending);
        EXPECT_TRUE(stream.permutation());
        const size_t charged = hold.charged();
        EXPECT_GE(charged, keys.size() + values.size());
        EXPECT_EQ(budget.units(), charged);
        SortJob job{.count = stream.count()};
        stream.Join(job);
        EXPECT_EQ(Joined(job.keys, keys.size()), keys);
        if (vt == ValueType::kNone) {
          EXPECT_EQ(job.values, nullptr);
        } else {
          EXPECT_EQ(Joined(job.values, values.size()), values);
        }
        // Joining charges nothing more: it was charged with each message.
        EXPECT_EQ(hold.charged(), charged);
      }
      hold.Reset();
      EXPECT_EQ(budget.units(), 0u);
    }
  }
}

TEST(StreamAssemblerTest, OneMessageIsSortedWhereItLies) {
  Admission budget(HeldBytes(64 << 20, 64 << 20));
  Admission::Hold hold(&budget);
  StreamAssembler stream({}, nullptr, &hold);
  const std::string k = Keys(KeyType::kF64, Shape::kSpecial, 40, 7);
  const std::string v = Values(ValueType::kU32, 40, 8);
  ASSERT_TRUE(
      Append(stream, Request(KeyType::kF64, k, ValueType::kU32, v)).ok());
  SortJob job;
  stream.Join(job);
  EXPECT_EQ(Joined(job.keys, k.size()), k);
  EXPECT_EQ(Joined(job.values, v.size()), v);
}

TEST(StreamAssemblerTest, AnEmptyMessageSortsAnEmptyArray) {
  Admission budget(HeldBytes(64 << 20, 64 << 20));
  Admission::Hold hold(&budget);
  StreamAssembler stream({}, nullptr, &hold);
  ASSERT_TRUE(Append(stream, Request(KeyType::kI64, "")).ok());
  EXPECT_EQ(stream.messages(), 1u);
  EXPECT_EQ(stream.count(), 0u);
  EXPECT_EQ(stream.key_type(), KeyType::kI64);
  SortJob job;
  stream.Join(job);
  EXPECT_NE(job.keys, nullptr);  // readable, though nothing is read
  EXPECT_EQ(job.values, nullptr);
}

// Checks that `s` refuses message `number` of `stream` with `code`,
// naming `words`, and leaves the charge at `charged`; and that the stream
// is over (a later message gets the same refusal).
void ExpectRefused(StreamAssembler& stream, Admission::Hold& hold,
                   const absl::Status& s, absl::StatusCode code,
                   const std::string& words, size_t charged, size_t messages) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(s.message(), HasSubstr(words));
  EXPECT_EQ(hold.charged(), charged);
  EXPECT_EQ(stream.messages(), messages);
  const absl::Status again =
      Append(stream, Request(stream.key_type(),
                             std::string(4 * KeySize(stream.key_type()), 'a')));
  EXPECT_EQ(again, s);
  EXPECT_EQ(hold.charged(), charged);
  EXPECT_EQ(stream.messages(), messages);
}

TEST(StreamAssemblerTest, ALaterMessageWithOtherFieldsIsRefused) {
  struct Case {
    KeyType key_type;
    ValueType value_type;
  } cases[] = {{KeyType::kU64, ValueType::kNone},   // other keys
               {KeyType::kU32, ValueType::kU64},    // other values
               {KeyType::kU32, ValueType::kNone}};  // values left out
  for (const Case& c : cases) {
    Admission budget(HeldBytes(64 << 20, 64 << 20));
    Admission::Hold hold(&budget);
    StreamAssembler stream({}, nullptr, &hold);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(
          Append(
              stream,
              Request(KeyType::kU32, Keys(KeyType::kU32, Shape::kRandom, 10, i),
                      ValueType::kU32, Values(ValueType::kU32, 10, i)))
              .ok());
    }
    const size_t charged = hold.charged();
    const absl::Status s = Append(
        stream, Request(c.key_type, Keys(c.key_type, Shape::kRandom, 10, 5),
                        c.value_type, Values(c.value_type, 10, 5)));
    ExpectRefused(stream, hold, s, absl::StatusCode::kInvalidArgument,
                  "stream message 3 sets ", charged, 2);
    EXPECT_THAT(s.message(),
                HasSubstr("the first message set u32_keys with u32_values: "
                          "every message of a stream uses the same fields"));
  }
}

TEST(StreamAssemblerTest, PastMaxStreamBytesIsRefused) {
  Admission budget(HeldBytes(64 << 20, 64 << 20));
  Admission::Hold hold(&budget);
  // 100 u64 keys with u32 values: 1200 bytes.
  StreamAssembler stream({.max_stream_bytes = 1200}, nullptr, &hold);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(
        Append(stream, Request(KeyType::kU64,
                               Keys(KeyType::kU64, Shape::kRandom, 50, i),
                               ValueType::kU32, Values(ValueType::kU32, 50, i)))
            .ok());
  }
  const size_t charged = hold.charged();
  const absl::Status s = Append(
      stream, Request(KeyType::kU64, Keys(KeyType::kU64, Shape::kRandom, 1, 3),
                      ValueType::kU32, Values(ValueType::kU32, 1, 3)));
  ExpectRefused(stream, hold, s, absl::StatusCode::kResourceExhausted,
                "the stream's array has grown past 1200 bytes of keys and "
                "values, the most this server sorts in one stream "
                "(--max_stream_bytes)",
                charged, 2);
  EXPECT_EQ(stream.count(), 100u);
}

TEST(StreamAssemblerTest, PastTheBudgetIsRefused) {
  // A message of 1000 u32 keys is about 4 KB; it is charged twice that
  // while read, then once, and the work of sorting its keys (the array
  // joined, the answer, the scratch: about 16 KB); the first message also
  // the answer chunk.
  const RequestLimits limits{.stream_chunk_bytes = 1 << 10};
  const std::string k = Keys(KeyType::kU32, Shape::kRandom, 1000, 1);
  const size_t message = Request(KeyType::kU32, k).ByteSizeLong();
  constexpr size_t kBudget = 256 << 10;
  for (int refused_at : {0, 1, 3}) {
    // Room for the message while it is read, or not even that.
    for (size_t room : {size_t{100}, 2 * message + 100}) {
      // The whole budget taken by others, or by this call alone.
      for (bool per_call : {false, true}) {
        SCOPED_TRACE(absl::StrCat("refused at ", refused_at, ", room ", room,
                                  per_call ? ", per call" : ""));
        size_t need = 0;  // what `refused_at` messages are charged
        {
          Admission probe_budget(HeldBytes(64 << 20, 64 << 20));
          Admission::Hold probe(&probe_budget);
          StreamAssembler s2(limits, nullptr, &probe);
          for (int i = 0; i < refused_at; ++i) {
            ASSERT_TRUE(Append(s2, Request(KeyType::kU32, k)).ok());
          }
          need = probe.charged();
        }
        Admission budget(per_call ? HeldBytes(64 << 20, need + room)
                                  : HeldBytes(kBudget, 64 << 20));
        Admission::Hold hold(&budget);
        StreamAssembler stream(limits, nullptr, &hold);
        // Another call holds the rest of the budget but what this one
        // needs, and `room`.
        Admission::Hold other(&budget);
        if (!per_call) {
          ASSERT_TRUE(other.Grow(kBudget - need - room).ok());
        }
        for (int i = 0; i < refused_at; ++i) {
          ASSERT_TRUE(Append(stream, Request(KeyType::kU32, k)).ok());
        }
        ASSERT_EQ(hold.charged(), need);
        const absl::Status s = Append(stream, Request(KeyType::kU32, k));
        ExpectRefused(stream, hold, s, absl::StatusCode::kResourceExhausted,
                      absl::StrCat("stream message ", refused_at + 1, ": "),
                      need, refused_at);
        EXPECT_THAT(s.message(), HasSubstr(per_call ? "(--max_call_bytes)"
                                                    : "(--max_held_bytes)"));
        EXPECT_EQ(budget.units(), per_call ? need : kBudget - room);
      }
    }
  }
}

TEST(StreamAssemblerTest, SharedAndPartAreRefused) {
  for (int first : {0, 1}) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(
          absl::StrCat(shared ? "shared" : "part", " in message ", first + 1));
      Admission budget(HeldBytes(64 << 20, 64 << 20));
      Admission::Hold hold(&budget);
      StreamAssembler stream({}, nullptr, &hold);
      if (first == 1) {
        ASSERT_TRUE(Append(stream, Request(KeyType::kU32, "abcdabcd")).ok());
      }
      const size_t charged = hold.charged();
      v1::SortRequest r = Request(KeyType::kU32, "");
      if (shared) {
        r.mutable_shared()->set_region("r");
      } else {
        r.mutable_part()->set_group(std::string(16, 'g'));
        r.mutable_part()->set_count(2);
      }
      const absl::Status s = Append(stream, r);
      ExpectRefused(
          stream, hold, s, absl::StatusCode::kInvalidArgument,
          absl::StrCat("stream message ", first + 1, ": ",
                       shared ? "`shared` is for Sort and Echo: a stream "
                                "carries its arrays"
                              : "`part` is for Sort: a stream carries its "
                                "whole array"),
          charged, first);
    }
  }
}

TEST(StreamAssemblerTest, AMalformedMessageIsRefusedAndReleased) {
  Admission budget(HeldBytes(64 << 20, 64 << 20));
  Admission::Hold hold(&budget);
  StreamAssembler stream({}, nullptr, &hold);
  ASSERT_TRUE(Append(stream, Request(KeyType::kU32, "abcd")).ok());
  const size_t charged = hold.charged();
  grpc::ByteBuffer b = Buffer(std::string("\x0a\x7f", 2) + "abc", 2);
  const absl::Status s = stream.Append(b);
  ExpectRefused(stream, hold, s, absl::StatusCode::kInvalidArgument,
                "stream message 2: ", charged, 1);
}

}  // namespace
}  // namespace sortd
