// The sort service (server/service.h) on the CPU path, served in process:
// every key type sorted against the reference, matrices transposed, each
// call counted by method and status, bounds on what a call may hold, and
// the drain refusing new calls while the server keeps serving.
#include "server/service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/transpose.h"
#include "tests/client_checks.h"
#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

TEST(Service, SortsEveryKeyTypeAgainstTheReference) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  for (size_t n : {size_t{0}, size_t{1}, size_t{777}, size_t{70000}}) {
    for (bool desc : {false, true}) {
      ExpectSorted<uint32_t>(*client, n, desc);
      ExpectSorted<int32_t>(*client, n, desc);
      ExpectSorted<float>(*client, n, desc);
      ExpectSorted<uint64_t>(*client, n, desc);
      ExpectSorted<int64_t>(*client, n, desc);
      ExpectSorted<double>(*client, n, desc);
    }
  }
}

TEST(Service, TransposesMatricesAgainstTheReference) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<uint32_t> rows =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 32 * 300, 5);
  absl::StatusOr<std::vector<uint32_t>> got = client->Transpose(rows);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<uint32_t> want = rows;
  for (size_t m = 0; m < want.size(); m += 32) TransposeBits32(&want[m]);
  EXPECT_EQ(*got, want);
  // Rows that are not whole matrices.
  got = client->Transpose(std::vector<uint32_t>(33, 1));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
}

// Every call is counted once, by its method and the status it ended with.
TEST(Service, CountsEachCallByMethodAndStatus) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->Sort<uint32_t>(std::vector<uint32_t>{2, 1}).ok());
  }
  v1::SortRequest bad;
  bad.set_u32_keys("abc");
  EXPECT_FALSE(client->Sort(bad).ok());
  const std::string text = sortd.MetricsText();
  EXPECT_THAT(text, HasSubstr("sortd_requests_total{code=\"OK\",method="
                              "\"Sort\",path=\"cpu\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("sortd_requests_total{code=\"INVALID_ARGUMENT\","
                              "method=\"Sort\",path=\"none\"} 1\n"));
}

// A call that would hold more than max_call_bytes is refused before it
// holds them; a smaller one after it is served.
TEST(Service, ACallOverItsBoundIsRefusedAndTheNextServed) {
  testing::InProcessService::Options options;
  options.service.max_call_bytes = 256 << 10;
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<SortResult<uint32_t>> refused =
      client->Sort<uint32_t>(std::vector<uint32_t>(200000, 3));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_call_bytes"));
  EXPECT_TRUE(client->Sort<uint32_t>(std::vector<uint32_t>(1000, 3)).ok());
}

// Once the drain starts, new calls are refused UNAVAILABLE with where to go
// instead; health and the server itself are the drain's caller's to stop.
TEST(Service, TheDrainRefusesNewCalls) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Sort<uint32_t>(std::vector<uint32_t>{2, 1}).ok());
  sortd.service().StartDrain();
  absl::StatusOr<SortResult<uint32_t>> refused =
      client->Sort<uint32_t>(std::vector<uint32_t>{2, 1});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("shutting down"));
  EXPECT_THAT(refused.status().message(), HasSubstr("another replica"));
  // Health stays as it was: turning it NOT_SERVING is the drain's caller's.
  EXPECT_TRUE(client->CheckHealth().ok());
}

}  // namespace
}  // namespace sortd
