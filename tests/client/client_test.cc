// The client library's typed calls (client/client.h) against the service
// served in process: keys alone, keys with values, the permutation, both
// orders and compact keys give the reference's answer; a refused call
// carries the server's code and message; health names a service.
#include "client/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sortd_.Start().ok());
    client_ = sortd_.Connect();
    ASSERT_NE(client_, nullptr);
  }

  testing::InProcessService sortd_;
  std::unique_ptr<Client> client_;
};

// Keys alone and with values, each way they can be asked for.
template <typename K>
void ExpectEveryOption(Client& client) {
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kSpecial, 5000, 3);
  std::vector<uint32_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = ~uint32_t(i);
  for (const SortOptions& o :
       {SortOptions{}, SortOptions{.descending = true},
        SortOptions{.return_permutation = true},
        SortOptions{.descending = true, .compact_keys = true}}) {
    SCOPED_TRACE(::testing::Message()
                 << sizeof(K) << "-byte keys, descending=" << o.descending
                 << " permutation=" << o.return_permutation
                 << " compact=" << o.compact_keys);
    const std::vector<uint32_t> perm =
        testing::RefPermutation(keys, o.descending);
    absl::StatusOr<SortResult<K>> alone = client.Sort<K>(keys, o);
    ASSERT_TRUE(alone.ok()) << alone.status();
    absl::StatusOr<SortResult<K, uint32_t>> pairs =
        client.SortPairs<K, uint32_t>(keys, values, o);
    ASSERT_TRUE(pairs.ok()) << pairs.status();
    ASSERT_EQ(alone->keys.size(), keys.size());
    ASSERT_EQ(pairs->values.size(), keys.size());
    EXPECT_TRUE(alone->values.empty());
    EXPECT_EQ(alone->permutation.empty(), !o.return_permutation);
    if (o.return_permutation) {
      EXPECT_EQ(alone->permutation, perm);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(&alone->keys[i], &keys[perm[i]], sizeof(K)));
      ASSERT_EQ(0, std::memcmp(&pairs->keys[i], &keys[perm[i]], sizeof(K)));
      ASSERT_EQ(pairs->values[i], values[perm[i]]);
    }
    EXPECT_EQ(alone->served_by.path(), v1::EXECUTION_PATH_CPU);
  }
}

TEST_F(ClientTest, TypedSortsGiveTheReferencesAnswer) {
  ExpectEveryOption<uint32_t>(*client_);
  ExpectEveryOption<int32_t>(*client_);
  ExpectEveryOption<float>(*client_);
  ExpectEveryOption<uint64_t>(*client_);
  ExpectEveryOption<int64_t>(*client_);
  ExpectEveryOption<double>(*client_);
}

TEST_F(ClientTest, ValuesThatDoNotMatchTheKeysAreRefusedByTheServer) {
  absl::StatusOr<SortResult<uint32_t, uint32_t>> r =
      client_->SortPairs<uint32_t, uint32_t>(std::vector<uint32_t>{3, 2, 1},
                                             std::vector<uint32_t>{1, 2});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("values"));
}

TEST_F(ClientTest, HealthNamesAService) {
  EXPECT_TRUE(client_->CheckHealth().ok());
  EXPECT_TRUE(client_->CheckHealth("sortd.v1.SortService").ok());
  const absl::Status unknown = client_->CheckHealth("no.such.Service");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
}

}  // namespace
}  // namespace sortd
