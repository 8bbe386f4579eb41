// The client's parts (client/client_parts.cc): a sort of split_bytes or
// more goes out as parts over several connections to the same server,
// which sorts them as one array; each part's answer is its slice of the
// whole. With splitting off, or a single connection, it goes whole.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// 20 MiB of keys and 20 MiB of values: five of the client's 8 MiB parts,
// cut to the two connections it keeps for large calls (of three, the first
// is kept for small ones), so two parts when splitting is on.
constexpr size_t kKeys = size_t{5} << 20;

void ExpectSortedPairs(Client& client) {
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, kKeys, 21);
  std::vector<uint32_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = keys[i] ^ 0x5a5a5a5a;
  absl::StatusOr<SortResult<uint32_t, uint32_t>> sorted =
      client.SortPairs<uint32_t, uint32_t>(keys, values);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  std::vector<uint32_t> want = keys;
  std::sort(want.begin(), want.end());
  ASSERT_EQ(sorted->keys, want);
  for (size_t i = 0; i < kKeys; ++i) {
    ASSERT_EQ(sorted->values[i], sorted->keys[i] ^ 0x5a5a5a5a) << i;
  }
}

// How many Sort calls of 1M to 16M keys the service answered on the CPU
// path (not the empty sorts the client asks which server a connection
// reached with).
std::string LargeSorts(testing::InProcessService& sortd) {
  const std::string text = sortd.MetricsText();
  const std::string key =
      "sortd_request_duration_seconds_count{method=\"Sort\",path=\"cpu\","
      "size=\"16m\"} ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return "none";
  return text.substr(at + key.size(), text.find('\n', at) - at - key.size());
}

TEST(ClientParts, ALargeSortGoesOutInPartsAndComesBackWhole) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  ClientOptions three = testing::OneAttempt();
  three.connections = 3;
  std::unique_ptr<Client> client = sortd.Connect(three);
  ASSERT_NE(client, nullptr);
  ExpectSortedPairs(*client);
  EXPECT_EQ(LargeSorts(sortd), "2");
}

TEST(ClientParts, WithSplittingOffOrOneConnectionItGoesWhole) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  ClientOptions off = testing::OneAttempt();
  off.connections = 3;
  off.split_bytes = 0;
  std::unique_ptr<Client> client = sortd.Connect(off);
  ASSERT_NE(client, nullptr);
  ExpectSortedPairs(*client);
  EXPECT_EQ(LargeSorts(sortd), "1");
  ClientOptions one = testing::OneAttempt();
  one.connections = 1;
  client = sortd.Connect(one);
  ASSERT_NE(client, nullptr);
  ExpectSortedPairs(*client);
  EXPECT_EQ(LargeSorts(sortd), "2");
}

}  // namespace
}  // namespace sortd
