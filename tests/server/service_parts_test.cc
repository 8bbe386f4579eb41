// One array sent as several Sort calls (server/service_parts.cc), served in
// process: parts that arrive at once, of any key type, with values and the
// permutation, are sorted as one array, each call answered with its slice;
// once answered, nothing of them waits any more.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// One raw Sort call; its status and answer.
std::pair<grpc::Status, v1::SortResponse> SortPart(
    const testing::InProcessService& sortd, const v1::SortRequest& request) {
  auto [status, bytes] = sortd.RawCall("Sort", request.SerializeAsString());
  v1::SortResponse answer;
  if (status.ok()) {
    EXPECT_TRUE(answer.ParseFromString(bytes));
  }
  return {status, answer};
}

TEST(ServiceParts, PartsOfOneArrayAreSortedAsOneAndAnsweredInSlices) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  const std::vector<double> keys =
      testing::Generate<double>(testing::Shape::kSpecial, 9000, 6);
  std::vector<uint64_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = i * 3 + 1;
  // Parts of 2000, 4500 and 2500 keys, each a call of its own, all at once.
  const std::vector<size_t> first = {0, 2000, 6500, 9000};
  std::vector<std::future<std::pair<grpc::Status, v1::SortResponse>>> calls;
  for (uint32_t p = 0; p < 3; ++p) {
    v1::SortRequest r;
    r.set_f64_keys(
        std::string(reinterpret_cast<const char*>(keys.data() + first[p]),
                    (first[p + 1] - first[p]) * sizeof(double)));
    r.set_u64_values(
        std::string(reinterpret_cast<const char*>(values.data() + first[p]),
                    (first[p + 1] - first[p]) * sizeof(uint64_t)));
    r.set_order(v1::ORDER_DESCENDING);
    r.set_return_permutation(true);
    r.mutable_part()->set_group("parts-of-array-1");
    r.mutable_part()->set_index(p);
    r.mutable_part()->set_count(3);
    calls.push_back(std::async(std::launch::async,
                               [&sortd, r] { return SortPart(sortd, r); }));
  }
  // The whole array's order; each answer is its slice of it, by position
  // in the array: the first part's answer the first 2000 keys of the whole.
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, true);
  for (uint32_t p = 0; p < 3; ++p) {
    const auto [status, answer] = calls[p].get();
    ASSERT_TRUE(status.ok()) << p << ": " << status.error_message();
    const std::vector<double> got = UnpackArray<double>(answer.f64_keys());
    const std::vector<uint64_t> got_values =
        UnpackArray<uint64_t>(answer.u64_values());
    const std::vector<uint32_t> got_perm =
        UnpackArray<uint32_t>(answer.permutation());
    const size_t n = first[p + 1] - first[p];
    ASSERT_EQ(got.size(), n) << p;
    ASSERT_EQ(got_values.size(), n) << p;
    ASSERT_EQ(got_perm.size(), n) << p;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t from = perm[first[p] + i];
      ASSERT_EQ(got_perm[i], from) << p << " at " << i;
      ASSERT_EQ(0, std::memcmp(&got[i], &keys[from], sizeof(double)));
      ASSERT_EQ(got_values[i], values[from]);
    }
  }
  const std::string metrics = sortd.MetricsText();
  EXPECT_THAT(metrics, HasSubstr("sortd_waiting_parts 0\n"));
  EXPECT_THAT(metrics, HasSubstr("sortd_waiting_part_bytes 0\n"));
}

// A part alone waits --part_timeout for the others, then fails naming what
// came; the service serves on.
TEST(ServiceParts, APartAloneFailsOnceItsTimeIsUp) {
  testing::InProcessService::Options options;
  options.service.part_timeout = absl::Milliseconds(200);
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  v1::SortRequest r;
  r.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{3, 2}));
  r.mutable_part()->set_group("a-lonely-part-00");
  r.mutable_part()->set_index(1);
  r.mutable_part()->set_count(2);
  const auto [status, answer] = SortPart(sortd, r);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("part(s) 1 of 2 came"));
  r.clear_part();
  EXPECT_TRUE(SortPart(sortd, r).first.ok());
  EXPECT_THAT(sortd.MetricsText(), HasSubstr("sortd_waiting_parts 0\n"));
}

}  // namespace
}  // namespace sortd
