// The client's SortStream path (client/client_stream.cc): a sort larger
// than one message may be goes through SortStream in chunks, without the
// caller asking, and comes back whole; a refusal on the stream reaches the
// caller with the server's code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "client/client.h"
#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Sorts of over 64 KiB go through SortStream, in messages of 16 KiB.
ClientOptions SmallMessages() {
  ClientOptions o = testing::OneAttempt();
  o.max_unary_bytes = 64 << 10;
  o.stream_chunk_bytes = 16 << 10;
  return o;
}

TEST(ClientStream, SortsOverTheUnaryLimitGoThroughSortStream) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect(SmallMessages());
  ASSERT_NE(client, nullptr);
  const std::vector<int64_t> keys =
      testing::Generate<int64_t>(testing::Shape::kRandom, 30000, 8);
  std::vector<uint64_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = i;
  absl::StatusOr<SortResult<int64_t, uint64_t>> sorted =
      client->SortPairs<int64_t, uint64_t>(keys, values, {.descending = true});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, true);
  ASSERT_EQ(sorted->keys.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(sorted->keys[i], keys[perm[i]]) << i;
    ASSERT_EQ(sorted->values[i], perm[i]) << i;
  }
  // Under the limit: one Sort call.
  ASSERT_TRUE(client->Sort<int64_t>(std::vector<int64_t>{3, -1}).ok());
  const std::string metrics = sortd.MetricsText();
  EXPECT_THAT(metrics,
              HasSubstr("code=\"OK\",method=\"SortStream\",path=\"cpu\"} 1\n"));
  EXPECT_THAT(metrics,
              HasSubstr("code=\"OK\",method=\"Sort\",path=\"cpu\"} 1\n"));
}

TEST(ClientStream, ARefusalOnTheStreamCarriesTheServersCode) {
  testing::InProcessService::Options options;
  options.service.max_call_bytes = 128 << 10;
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect(SmallMessages());
  ASSERT_NE(client, nullptr);
  absl::StatusOr<SortResult<uint32_t>> refused =
      client->Sort<uint32_t>(std::vector<uint32_t>(100000, 5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  const std::string metrics = sortd.MetricsText();
  EXPECT_THAT(metrics, HasSubstr("code=\"RESOURCE_EXHAUSTED\",method="
                                 "\"SortStream\""));
  EXPECT_THAT(metrics, Not(HasSubstr("code=\"OK\",method=\"SortStream\"")));
}

}  // namespace
}  // namespace sortd
