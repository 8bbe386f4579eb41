// Validation of requests: every malformed request gets the right code and a
// message that names what was wrong; valid ones get correctly sized outputs.
#include "server/request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sortd {
namespace {

using ::testing::HasSubstr;

constexpr RequestLimits kLimits{.max_request_bytes = 1 << 20};

TEST(PrepareSort, NoKeysIsInvalid) {
  v1::SortRequest req;
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("no keys set"));
}

TEST(PrepareSort, EmptyKeysAreValid) {
  v1::SortRequest req;
  req.set_f64_keys("");
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->count, 0u);
  EXPECT_EQ(job->key_type, KeyType::kF64);
  EXPECT_TRUE(resp.has_f64_keys());
}

TEST(PrepareSort, PartialKeyIsInvalid) {
  v1::SortRequest req;
  req.set_u64_keys(std::string(12, 'x'));
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("u64_keys holds 12 bytes"));
}

TEST(PrepareSort, PayloadLengthMustMatchKeyCount) {
  v1::SortRequest req;
  req.set_u32_keys(std::string(40, 'k'));    // 10 keys
  req.set_u64_values(std::string(72, 'v'));  // 9 values
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("u64_values holds 72 bytes (9 values)"));
  EXPECT_THAT(job.status().message(), HasSubstr("10 values, 80 bytes"));
}

TEST(PrepareSort, UnknownOrderIsInvalid) {
  v1::SortRequest req;
  req.set_i32_keys(std::string(8, 'k'));
  req.set_order(static_cast<v1::Order>(7));
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("order: unknown value 7"));
}

TEST(PrepareSort, OversizeIsResourceExhaustedAndStatesTheLimit) {
  v1::SortRequest req;
  req.set_u32_keys(std::string((1 << 20) + 4, 'k'));
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(job.status().message(), HasSubstr("at most 1048576 bytes"));
}

TEST(PrepareSort, SizesEveryOutput) {
  v1::SortRequest req;
  req.set_i64_keys(std::string(5 * 8, 'k'));
  req.set_u32_values(std::string(5 * 4, 'v'));
  req.set_order(v1::ORDER_DESCENDING);
  req.set_return_permutation(true);
  v1::SortResponse resp;
  auto job = PrepareSort(req, kLimits, &resp);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->count, 5u);
  EXPECT_EQ(job->order, Order::kDescending);
  EXPECT_EQ(job->value_type, ValueType::kU32);
  EXPECT_EQ(resp.i64_keys().size(), 40u);
  EXPECT_EQ(resp.u32_values().size(), 20u);
  EXPECT_EQ(resp.permutation().size(), 20u);
  EXPECT_NE(job->permutation_out, nullptr);
}

TEST(PrepareTranspose, WordCountMustBeAMultipleOf32) {
  v1::TransposeRequest req;
  req.set_matrices(std::string(31 * 4, 'm'));
  v1::TransposeResponse resp;
  auto job = PrepareTranspose(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("31 words"));
  req.set_matrices(std::string(130, 'm'));
  job = PrepareTranspose(req, kLimits, &resp);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("130 bytes"));
}

TEST(PrepareTranspose, ValidBatchAndEmptyBatch) {
  v1::TransposeRequest req;
  v1::TransposeResponse resp;
  auto job = PrepareTranspose(req, kLimits, &resp);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->count, 0u);
  req.set_matrices(std::string(3 * 128, 'm'));
  job = PrepareTranspose(req, kLimits, &resp);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->count, 3u);
  EXPECT_EQ(resp.matrices().size(), 384u);
}

}  // namespace
}  // namespace sortd
