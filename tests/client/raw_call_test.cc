// The C++ client's decoding of answers (client/raw_call.h): arrays land in
// the caller's buffers; an answer whose arrays do not fit what was asked
// for is DATA_LOSS, never a write past a buffer.
#include "client/raw_call.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "client/client.h"
#include "server/request.h"
#include "tests/byte_buffer.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using testing::Flatten;

grpc::ByteBuffer Message(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(DecodeSortResponse, FillsTheCallersArrays) {
  v1::SortResponse r;
  r.set_u64_keys(std::string(16, '\x01'));
  r.set_u32_values(std::string(8, '\x02'));
  r.set_permutation(std::string(8, '\x03'));
  r.mutable_served_by()->set_route("solo");
  SortResult<uint64_t, uint32_t> result;
  SortResultSink<uint64_t, uint32_t> sink(&result);
  ASSERT_TRUE(
      client_wire::DecodeSortResponse(Message(r.SerializeAsString()), sink)
          .ok());
  EXPECT_EQ(result.keys, (std::vector<uint64_t>(2, 0x0101010101010101ull)));
  EXPECT_EQ(result.values, (std::vector<uint32_t>(2, 0x02020202u)));
  EXPECT_EQ(result.permutation, (std::vector<uint32_t>(2, 0x03030303u)));
  EXPECT_EQ(result.served_by.route(), "solo");
}

TEST(DecodeSortResponse, ArraysThatDoNotFitAreDataLoss) {
  struct Case {
    const char* name;
    v1::SortResponse response;
  };
  std::vector<Case> cases(3);
  cases[0].name = "12 bytes of u64 keys";
  cases[0].response.set_u64_keys(std::string(12, 'k'));
  cases[1].name = "u32 keys for a u64 sort";
  cases[1].response.set_u32_keys(std::string(8, 'k'));
  cases[2].name = "u64 values for u32 ones";
  cases[2].response.set_u64_keys(std::string(8, 'k'));
  cases[2].response.set_u64_values(std::string(8, 'v'));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SortResult<uint64_t, uint32_t> result;
    SortResultSink<uint64_t, uint32_t> sink(&result);
    const absl::Status s = client_wire::DecodeSortResponse(
        Message(c.response.SerializeAsString()), sink);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  // Truncated: a length past the end.
  SortResult<uint32_t> result;
  SortResultSink<uint32_t, uint32_t> sink(&result);
  EXPECT_EQ(
      client_wire::DecodeSortResponse(Message("\x0a\x10\x01\x02"), sink).code(),
      absl::StatusCode::kDataLoss);
}

// Sorted keys of type K in compact form, encoded by the server's code
// (SortOutputs::CompactSlices), sent, and decoded by the client's.
template <typename K>
void CompactRoundTrip(KeyType type) {
  for (bool descending : {false, true}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{129}, size_t{3000},
                     (size_t{1} << 20) + 77}) {
      SCOPED_TRACE(::testing::Message() << KeyTypeName(type) << " n=" << n
                                        << (descending ? " desc" : " asc"));
      std::vector<K> keys = testing::Generate<K>(testing::Shape::kRandom, n, n);
      std::stable_sort(keys.begin(), keys.end(), [&](K a, K b) {
        return descending ? testing::RefLess(b, a) : testing::RefLess(a, b);
      });
      SortJob job;
      job.key_type = type;
      job.order = descending ? Order::kDescending : Order::kAscending;
      job.count = n;
      SortOutputs out = AllocateSortOutputs(job, false);
      if (n > 0) std::memcpy(job.keys_out, keys.data(), n * sizeof(K));
      const wire::SortArrays arrays = out.CompactSlices(job, 0, n, nullptr);
      ASSERT_TRUE(arrays.compact.has_value());
      const std::string bytes =
          Flatten(wire::EncodeSortResponse(arrays, nullptr));
      v1::SortResponse parsed;  // what protobuf makes of it
      ASSERT_TRUE(parsed.ParseFromString(bytes));
      ASSERT_EQ(static_cast<int>(parsed.keys_case()),
                key_fields::Compact(type));
      SortResult<K> result;
      SortResultSink<K, uint32_t> sink(&result);
      const absl::Status s =
          client_wire::DecodeSortResponse(Message(bytes), sink);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(result.keys.size(), n);
      if (n > 0) {
        EXPECT_EQ(std::memcmp(result.keys.data(), keys.data(), n * sizeof(K)),
                  0);
      }
    }
  }
}

TEST(CompactKeys, ServerEncodingDecodesInTheClientU32) {
  CompactRoundTrip<uint32_t>(KeyType::kU32);
}
TEST(CompactKeys, ServerEncodingDecodesInTheClientI32) {
  CompactRoundTrip<int32_t>(KeyType::kI32);
}
TEST(CompactKeys, ServerEncodingDecodesInTheClientF32) {
  CompactRoundTrip<float>(KeyType::kF32);
}

TEST(CompactKeys, StreamChunksDecodeOnTheirOwn) {
  const size_t n = 1000;
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = static_cast<uint32_t>(i * i);
  SortJob job;
  job.key_type = KeyType::kU32;
  job.count = n;
  SortOutputs out = AllocateSortOutputs(job, false);
  std::memcpy(job.keys_out, keys.data(), n * 4);
  std::vector<uint32_t> joined;
  for (size_t at = 0; at < n; at += 256) {
    const size_t m = std::min<size_t>(256, n - at);
    const std::string bytes = Flatten(wire::EncodeSortResponse(
        out.CompactSlices(job, at, m, nullptr), nullptr));
    SortResult<uint32_t> chunk;
    SortResultSink<uint32_t, uint32_t> sink(&chunk);
    ASSERT_TRUE(client_wire::DecodeSortResponse(Message(bytes), sink).ok());
    joined.insert(joined.end(), chunk.keys.begin(), chunk.keys.end());
  }
  EXPECT_EQ(joined, keys);
}

TEST(CompactKeys, MalformedOrMisfitCompactKeysAreDataLoss) {
  v1::SortResponse r;
  v1::CompactKeys* c = r.mutable_compact_u32_keys();
  c->set_count(3);
  c->set_widths(std::string(1, '\x02'));
  c->set_bases(std::string(4, '\0'));
  c->set_deltas(std::string(32, '\0'));
  {
    SortResult<uint32_t> result;
    SortResultSink<uint32_t, uint32_t> sink(&result);
    ASSERT_TRUE(
        client_wire::DecodeSortResponse(Message(r.SerializeAsString()), sink)
            .ok());
    EXPECT_EQ(result.keys, std::vector<uint32_t>(3, 0));
  }
  struct Case {
    const char* name;
    v1::SortResponse response;
  };
  std::vector<Case> cases(4, Case{"", r});
  cases[0].name = "a width over 32";
  cases[0].response.mutable_compact_u32_keys()->set_widths("\x21");
  cases[1].name = "differences shorter than the widths need";
  cases[1].response.mutable_compact_u32_keys()->set_deltas(std::string(31, 0));
  cases[2].name = "more keys than the blocks hold";
  cases[2].response.mutable_compact_u32_keys()->set_count(129);
  cases[3].name = "compact i32 keys for a u32 sort";
  *cases[3].response.mutable_compact_i32_keys() = *c;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    SortResult<uint32_t> result;
    SortResultSink<uint32_t, uint32_t> sink(&result);
    const absl::Status s = client_wire::DecodeSortResponse(
        Message(k.response.SerializeAsString()), sink);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  // A compact message of one byte whose field tag runs past its end into
  // the next bytes, which claim a field of 2^56 bytes: refused before
  // anything is sized by that length.
  std::string past = {0x62, 0x01, static_cast<char>(0x9a), 0x00};
  uint64_t v = uint64_t{1} << 56;
  for (; v >= 0x80; v >>= 7) past.push_back(static_cast<char>(v | 0x80));
  past.push_back(static_cast<char>(v));
  past += std::string(16, 'x');
  SortResult<uint32_t> result;
  SortResultSink<uint32_t, uint32_t> sink(&result);
  const absl::Status s = client_wire::DecodeSortResponse(Message(past), sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("past the message's end"));
}

}  // namespace
}  // namespace sortd
