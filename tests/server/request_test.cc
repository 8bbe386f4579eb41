// Validation of requests: every malformed request gets the right code and a
// message that names what was wrong; valid ones get correctly sized outputs.
// Requests are built with the generated protobuf classes, serialized, and
// read back through the server's own parser (server/wire.h).
#include "server/request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sortd {
namespace {

using ::testing::HasSubstr;

constexpr RequestLimits kLimits{.max_request_bytes = 1 << 20};

// A request as the server sees it: its bytes and what was parsed from them.
struct Parsed {
  explicit Parsed(const google::protobuf::MessageLite& message)
      : bytes(wire::Received::Copy(message.SerializeAsString())) {}
  absl::StatusOr<SortJob> Sort() {
    auto request = wire::ParseSortRequest(bytes.data());
    EXPECT_TRUE(request.ok()) << request.status();
    sort = *request;
    return ParseSort(sort, kLimits, bytes.data().size());
  }
  absl::StatusOr<TransposeJob> Transpose() {
    auto request = wire::ParseTransposeRequest(bytes.data());
    EXPECT_TRUE(request.ok()) << request.status();
    return ParseTranspose(*request, kLimits, bytes.data().size());
  }
  wire::Received bytes;
  wire::SortRequest sort;
};

TEST(ParseSort, NoKeysIsInvalid) {
  v1::SortRequest req;
  auto job = Parsed(req).Sort();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("no keys set"));
}

TEST(ParseSort, EmptyKeysAreValid) {
  v1::SortRequest req;
  req.set_f64_keys("");
  auto job = Parsed(req).Sort();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->count, 0u);
  EXPECT_EQ(job->key_type, KeyType::kF64);
}

TEST(ParseSort, PartialKeyIsInvalid) {
  v1::SortRequest req;
  req.set_u64_keys(std::string(12, 'x'));
  auto job = Parsed(req).Sort();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("u64_keys holds 12 bytes"));
}

TEST(ParseSort, PayloadLengthMustMatchKeyCount) {
  v1::SortRequest req;
  req.set_u32_keys(std::string(40, 'k'));    // 10 keys
  req.set_u64_values(std::string(72, 'v'));  // 9 values
  auto job = Parsed(req).Sort();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("u64_values holds 72 bytes (9 values)"));
  EXPECT_THAT(job.status().message(), HasSubstr("10 values, 80 bytes"));
}

TEST(ParseSort, UnknownOrderIsInvalid) {
  v1::SortRequest req;
  req.set_i32_keys(std::string(8, 'k'));
  req.set_order(static_cast<v1::Order>(7));
  auto job = Parsed(req).Sort();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("order: unknown value 7"));
  req.set_order(static_cast<v1::Order>(-3));
  job = Parsed(req).Sort();
  EXPECT_THAT(job.status().message(), HasSubstr("order: unknown value -3"));
}

TEST(ParseSort, UnknownKeyCodingIsInvalid) {
  v1::SortRequest req;
  req.set_u32_keys(std::string(8, 'k'));
  req.set_response_key_coding(static_cast<v1::KeyCoding>(7));
  auto job = Parsed(req).Sort();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("response_key_coding: unknown value 7"));
  req.set_response_key_coding(v1::KEY_CODING_COMPACT);
  EXPECT_TRUE(Parsed(req).Sort().ok());
}

TEST(ParseSort, OversizeIsResourceExhaustedAndStatesTheLimit) {
  v1::SortRequest req;
  req.set_u32_keys(std::string((1 << 20) + 4, 'k'));
  auto job = Parsed(req).Sort();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(job.status().message(), HasSubstr("at most 1048576 bytes"));
}

TEST(ParseSort, SizesEveryOutput) {
  v1::SortRequest req;
  req.set_i64_keys(std::string(5 * 8, 'k'));
  req.set_u32_values(std::string(5 * 4, 'v'));
  req.set_order(v1::ORDER_DESCENDING);
  req.set_return_permutation(true);
  Parsed parsed(req);
  auto job = parsed.Sort();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->count, 5u);
  EXPECT_EQ(job->order, Order::kDescending);
  EXPECT_EQ(job->value_type, ValueType::kU32);
  SortOutputs out = AllocateSortOutputs(*job, parsed.sort.return_permutation);
  EXPECT_EQ(out.keys.size(), 40u);
  EXPECT_EQ(out.values.size(), 20u);
  EXPECT_EQ(out.permutation.size(), 20u);
  EXPECT_EQ(job->keys_out, out.keys.data());
  EXPECT_EQ(job->values_out, out.values.data());
  EXPECT_EQ(job->permutation_out, out.permutation.data());
}

TEST(ParseTranspose, WordCountMustBeAMultipleOf32) {
  v1::TransposeRequest req;
  req.set_matrices(std::string(31 * 4, 'm'));
  auto job = Parsed(req).Transpose();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("31 words"));
  req.set_matrices(std::string(130, 'm'));
  job = Parsed(req).Transpose();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("130 bytes"));
}

TEST(ParseTranspose, ValidBatchAndEmptyBatch) {
  v1::TransposeRequest req;
  auto job = Parsed(req).Transpose();
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->count, 0u);
  req.set_matrices(std::string(3 * 128, 'm'));
  job = Parsed(req).Transpose();
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->count, 3u);
}

}  // namespace
}  // namespace sortd
