// The C++ client's decoding of answers (client/raw_call.h): arrays land in
// the caller's buffers; an answer whose arrays do not fit what was asked
// for is DATA_LOSS, never a write past a buffer.
#include "client/raw_call.h"

#include <gtest/gtest.h>

#include "client/client.h"

namespace sortd {
namespace {

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

}  // namespace
}  // namespace sortd
