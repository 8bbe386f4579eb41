// The server's own reader and writer of sortd.v1 messages (server/wire.h),
// checked against the generated protobuf classes: what protobuf encodes
// parses to the same fields; what is malformed is refused with a message
// that says where and why; responses parse back with protobuf.
#include "server/wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tests/byte_buffer.h"

namespace sortd::wire {
namespace {

using testing::Flatten;

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST(ParseSortRequest, ReadsWhatProtobufWrites) {
  v1::SortRequest req;
  req.set_f64_keys(std::string(24, 'k'));
  req.set_u64_values(std::string(24, 'v'));
  req.set_order(v1::ORDER_DESCENDING);
  req.set_return_permutation(true);
  req.set_response_key_coding(v1::KEY_CODING_COMPACT);
  const std::string bytes = req.SerializeAsString();
  auto parsed = ParseSortRequest(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->key_type, KeyType::kF64);
  EXPECT_EQ(parsed->keys, req.f64_keys());
  EXPECT_EQ(parsed->value_type, ValueType::kU64);
  EXPECT_EQ(parsed->values, req.u64_values());
  EXPECT_EQ(parsed->order, 1);
  EXPECT_TRUE(parsed->return_permutation);
  EXPECT_EQ(parsed->key_coding, v1::KEY_CODING_COMPACT);
  // The arrays are views into the message, not copies.
  EXPECT_GE(parsed->keys.data(), bytes.data());
  EXPECT_LT(parsed->keys.data(), bytes.data() + bytes.size());
}

TEST(ParseSortRequest, EmptyMessageAndEmptyKeys) {
  auto none = ParseSortRequest("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->key_type.has_value());
  v1::SortRequest req;
  req.set_i32_keys("");
  auto empty = ParseSortRequest(req.SerializeAsString());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->key_type, KeyType::kI32);
  EXPECT_TRUE(empty->keys.empty());
}

TEST(ParseSortRequest, LastOneofMemberWinsAndUnknownFieldsAreSkipped) {
  // u32_keys, then an unknown varint, fixed64, fixed32 and bytes field,
  // then u64_keys: the last key field is the one set.
  const std::string bytes =
      Bytes({0x0a, 4, 1, 2, 3, 4}) + Bytes({0x78, 0x96, 0x01}) +
      Bytes({0x81, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}) +
      Bytes({0x8d, 0x01, 1, 2, 3, 4}) + Bytes({0x92, 0x01, 2, 9, 9}) +
      Bytes({0x22, 8, 1, 2, 3, 4, 5, 6, 7, 8});
  auto parsed = ParseSortRequest(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->key_type, KeyType::kU64);
  EXPECT_EQ(parsed->keys.size(), 8u);
  v1::SortRequest reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  EXPECT_EQ(reference.keys_case(), v1::SortRequest::kU64Keys);
}

struct Malformed {
  const char* name;
  std::string bytes;
  const char* says;
};

TEST(ParseSortRequest, MalformedInputsAreRefusedWithWhereAndWhy) {
  const Malformed cases[] = {
      {"sixteen 0xff bytes", std::string(16, '\xff'), "longer than 10 bytes"},
      {"a length prefix past the end", Bytes({0x0a, 0x0c, 5, 0, 0, 0}),
       "field 1 claims 12 bytes but only 4 remain"},
      {"field number 0", Bytes({0x02, 0x00}), "field number 0"},
      {"an unterminated varint", Bytes({0x0a, 0x80}),
       "ends inside a length prefix"},
      {"an unterminated tag", Bytes({0x0a, 0x00, 0x80}),
       "ends inside a field tag"},
      {"a truncated fixed64", Bytes({0x79, 1, 2}), "8-byte value"},
      {"wire type 7", Bytes({0x0f}), "wire type 7, which does not exist"},
      {"a start-group", Bytes({0x7b}), "never use"},
      {"keys sent as a varint", Bytes({0x08, 0x05}),
       "field 1 (u32_keys) has wire type 0 (varint); it is "
       "length-delimited"},
      {"order sent as bytes", Bytes({0x3a, 0x00}), "field 7 (order)"},
      {"a tag of 6 bytes", Bytes({0xd8, 0xff, 0xf7, 0xfc, 0x8c, 0x00, 0x00}),
       "a field tag longer than 32 bits"},
      {"a zero length in 9 bytes",
       Bytes({0x32, 0x00, 0x32, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
              0x00}),
       "field 6's length prefix is longer than 31 bits (9 bytes)"},
      {"a length of 2^31", Bytes({0x0a, 0x80, 0x80, 0x80, 0x80, 0x08}),
       "field 1's length prefix is longer than 31 bits (5 bytes)"},
      {"a region that is not UTF-8",
       Bytes({0x0a, 0x00, 0x5a, 0x03, 0x0a, 0x01, 0xff}),
       "field 11 (shared): shared.region is not UTF-8 (at its byte 0 of 1)"},
      {"a region with a surrogate",
       Bytes({0x5a, 0x06, 0x0a, 0x04, 'a', 0xed, 0xa0, 0x80}),
       "shared.region is not UTF-8 (at its byte 1 of 4)"},
      {"shared that is not a SharedArrays", Bytes({0x5a, 0x02, 0x0a, 0x05}),
       "field 11 (shared) is not a SharedArrays message"},
  };
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.name);
    auto parsed = ParseSortRequest(c.bytes);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("the SortRequest did not parse: at byte"));
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.says));
  }
}

TEST(ParseSortRequest, RegionsInUtf8AreReadAsProtobufReadsThem) {
  v1::SortRequest req;
  req.mutable_shared()->set_region(
      "r\xc3\xa9gion-\xf0\x9d\x84\x9e-\xe2\x82\xac");
  req.mutable_shared()->set_count(5);
  const std::string bytes = req.SerializeAsString();
  auto parsed = ParseSortRequest(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->shared.has_value());
  EXPECT_EQ(parsed->shared->region(), req.shared().region());
  EXPECT_EQ(parsed->shared->count(), 5u);
}

TEST(ParseTransposeRequest, ReadsAndRefuses) {
  v1::TransposeRequest req;
  req.set_matrices(std::string(128, 'm'));
  const std::string bytes = req.SerializeAsString();
  auto parsed = ParseTransposeRequest(bytes);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->matrices, req.matrices());
  auto bad = ParseTransposeRequest(Bytes({0x0a, 0x81, 0x01, 0}));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("the TransposeRequest did not parse"));
  EXPECT_THAT(bad.status().message(), HasSubstr("claims 129 bytes"));
}

// Random corruptions of valid messages: whatever this parser accepts,
// protobuf accepts too, with the same fields; whatever protobuf refuses,
// this parser refuses.
TEST(ParseSortRequest, AgreesWithProtobufOnCorruptedMessages) {
  std::mt19937_64 rng(7);
  v1::SortRequest base;
  base.set_u32_keys(std::string(40, 'k'));
  base.set_u32_values(std::string(40, 'v'));
  base.set_order(v1::ORDER_DESCENDING);
  base.set_return_permutation(true);
  const std::string valid = base.SerializeAsString();
  int accepted = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0:
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
          break;
        case 1:
          bytes.resize(rng() % (bytes.size() + 1));
          break;
        default:
          bytes.insert(rng() % (bytes.size() + 1), 1, static_cast<char>(rng()));
      }
      if (bytes.empty()) bytes = valid;
    }
    v1::SortRequest reference;
    const bool protobuf_ok = reference.ParseFromString(bytes);
    auto ours = ParseSortRequest(bytes);
    if (!ours.ok()) {
      ++refused;
      continue;
    }
    ++accepted;
    ASSERT_TRUE(protobuf_ok)
        << "accepted what protobuf refuses, round " << round;
    ASSERT_EQ(ours->key_type.has_value(),
              reference.keys_case() != v1::SortRequest::KEYS_NOT_SET);
    ASSERT_EQ(ours->order, static_cast<int32_t>(reference.order()));
    ASSERT_EQ(ours->return_permutation, reference.return_permutation());
    ASSERT_EQ(ours->value_type == ValueType::kNone,
              reference.values_case() == v1::SortRequest::VALUES_NOT_SET);
    if (reference.keys_case() == v1::SortRequest::kU32Keys) {
      ASSERT_EQ(ours->keys, reference.u32_keys());
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
}

TEST(EncodeSortResponse, ParsesBackWithProtobuf) {
  OutputArray keys(12), values(24), perm(12);
  for (size_t i = 0; i < 12; ++i) keys.data()[i] = std::byte(i);
  for (size_t i = 0; i < 24; ++i) values.data()[i] = std::byte(100 + i);
  for (size_t i = 0; i < 12; ++i) perm.data()[i] = std::byte(200 + i);
  v1::ServedBy by;
  by.set_route("batch");
  by.set_batch_requests(3);
  const grpc::ByteBuffer buffer =
      EncodeSortResponse({.key_type = KeyType::kF32,
                          .keys = keys.Share(),
                          .value_type = ValueType::kU64,
                          .values = values.Share(),
                          .permutation = perm.Share()},
                         &by);
  v1::SortResponse response;
  ASSERT_TRUE(response.ParseFromString(Flatten(buffer)));
  ASSERT_EQ(response.keys_case(), v1::SortResponse::kF32Keys);
  EXPECT_EQ(response.f32_keys(),
            std::string(reinterpret_cast<const char*>(keys.data()), 12));
  EXPECT_EQ(response.u64_values().size(), 24u);
  EXPECT_EQ(response.u64_values()[5], static_cast<char>(105));
  EXPECT_EQ(response.permutation().size(), 12u);
  EXPECT_EQ(response.served_by().route(), "batch");
  EXPECT_EQ(response.served_by().batch_requests(), 3);

  // A chunk: part of each array, no served_by; empty arrays keep their type.
  const grpc::ByteBuffer part = EncodeSortResponse(
      {.key_type = KeyType::kI64, .keys = keys.Sub(8, 0)}, nullptr);
  v1::SortResponse chunk;
  ASSERT_TRUE(chunk.ParseFromString(Flatten(part)));
  EXPECT_EQ(chunk.keys_case(), v1::SortResponse::kI64Keys);
  EXPECT_FALSE(chunk.has_served_by());
}

TEST(OutputArray, SmallArraysKeepTheirBytesWhenMovedAndShared) {
  OutputArray a;
  a = OutputArray(8);  // small enough for gRPC to inline, were it allowed
  std::byte* p = a.data();
  for (int i = 0; i < 8; ++i) p[i] = std::byte(i + 1);
  const grpc::Slice shared = a.Share();
  EXPECT_EQ(shared.begin(), reinterpret_cast<const uint8_t*>(p));
  EXPECT_EQ(shared.begin()[7], 8);
  EXPECT_EQ(a.Sub(4, 2).begin()[0], 5);
}

TEST(EncodeTransposeResponse, ParsesBackWithProtobuf) {
  OutputArray m(128);
  for (size_t i = 0; i < 128; ++i) m.data()[i] = std::byte(i);
  v1::ServedBy by;
  by.set_route("cpu");
  v1::TransposeResponse response;
  ASSERT_TRUE(response.ParseFromString(
      Flatten(EncodeTransposeResponse(m.Share(), by))));
  EXPECT_EQ(response.matrices().size(), 128u);
  EXPECT_EQ(response.matrices()[77], static_cast<char>(77));
  EXPECT_EQ(response.served_by().route(), "cpu");
}

}  // namespace
}  // namespace sortd::wire
