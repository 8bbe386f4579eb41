// End to end, the real sortd: sorted keys asked for in compact form
// (SortRequest.response_key_coding) come back as the same keys, by Sort and
// by SortStream, for every 32-bit key type and both orders; 64-bit keys come
// back raw; served_by and the metrics count the bytes saved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/server_fixture.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

class CompactTest : public testing::SharedServerTest<CompactTest> {
 public:
  static std::vector<std::string> ServerArgs() {
    return {"--device=cpu", "--cpu_threads=2", "--metrics_listen=127.0.0.1:0"};
  }

 protected:
  void SetUp() override {
    SharedServerTest::SetUp();
    ClientOptions options;
    // Small enough that a 300k-key array goes through SortStream in chunks.
    options.max_unary_bytes = 1 << 20;
    options.stream_chunk_bytes = 100000;
    auto client = Client::Create(server_->address(), options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Sorts `keys` with compact keys asked for and without; both must give
  // the reference answer, and the compact one must say what it saved.
  template <typename K>
  void ExpectSameAnswer(size_t n, bool descending, bool saves) {
    SCOPED_TRACE(::testing::Message()
                 << n << " keys of " << sizeof(K) << " bytes"
                 << (descending ? ", descending" : ", ascending"));
    const std::vector<K> keys =
        testing::Generate<K>(testing::Shape::kRandom, n, n + descending);
    std::vector<K> want = keys;
    std::stable_sort(want.begin(), want.end(), [&](K a, K b) {
      return descending ? testing::RefLess(b, a) : testing::RefLess(a, b);
    });
    std::vector<uint32_t> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = static_cast<uint32_t>(i);
    auto compact = client_->SortPairs<K, uint32_t>(keys, values,
                                                   {.descending = descending,
                                                    .return_permutation = true,
                                                    .compact_keys = true});
    ASSERT_TRUE(compact.ok()) << compact.status();
    ASSERT_EQ(compact->keys.size(), n);
    EXPECT_EQ(std::memcmp(compact->keys.data(), want.data(), n * sizeof(K)), 0);
    // Payloads and permutation are untouched by the key coding.
    EXPECT_EQ(compact->values, compact->permutation);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(
          std::memcmp(&keys[compact->permutation[i]], &want[i], sizeof(K)), 0)
          << i;
    }
    if (saves) {
      EXPECT_GT(compact->served_by.key_bytes_saved(),
                static_cast<int64_t>(n * sizeof(K) / 3));
    } else {
      EXPECT_EQ(compact->served_by.key_bytes_saved(), 0);
    }
  }

  std::unique_ptr<Client> client_;
};

TEST_F(CompactTest, SortGivesTheSameKeysForEvery32BitType) {
  for (bool descending : {false, true}) {
    ExpectSameAnswer<uint32_t>(20000, descending, true);
    ExpectSameAnswer<int32_t>(20000, descending, true);
    ExpectSameAnswer<float>(20000, descending, true);
  }
}

TEST_F(CompactTest, SortStreamChunksComeCompactAndJoinUp) {
  // 300k keys with values: beyond the client's 1 MiB unary limit.
  ExpectSameAnswer<uint32_t>(300000, false, true);
  ExpectSameAnswer<float>(300000, true, true);
}

TEST_F(CompactTest, SixtyFourBitKeysComeRaw) {
  ExpectSameAnswer<uint64_t>(5000, false, false);
  ExpectSameAnswer<double>(5000, true, false);
}

TEST_F(CompactTest, TheResponseIsSmallerAndMetricsCountTheSaving) {
  std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 200000, 9);
  v1::SortRequest request;
  request.set_u32_keys(
      std::string(reinterpret_cast<const char*>(keys.data()), keys.size() * 4));
  v1::SortResponse raw, compact;
  ASSERT_TRUE(client_->Sort(request, &raw).ok());
  request.set_response_key_coding(v1::KEY_CODING_COMPACT);
  ASSERT_TRUE(client_->Sort(request, &compact).ok());
  // The client decodes the compact form into the raw field.
  EXPECT_EQ(compact.u32_keys(), raw.u32_keys());
  EXPECT_EQ(raw.served_by().key_bytes_saved(), 0);
  // 200k evenly spread keys: ~18 bits a key where raw takes 32.
  EXPECT_GT(compact.served_by().key_bytes_saved(), 200000 * 4 / 3);
  const std::string metrics = HttpGet(server_->metrics_address(), "/metrics");
  EXPECT_THAT(
      metrics,
      HasSubstr("sortd_response_key_bytes_saved_total{method=\"Sort\"}"));
}

TEST_F(CompactTest, AnUnknownKeyCodingIsRefused) {
  v1::SortRequest request;
  request.set_u32_keys(std::string(8, 'k'));
  request.set_response_key_coding(static_cast<v1::KeyCoding>(9));
  v1::SortResponse response;
  const absl::Status s = client_->Sort(request, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("response_key_coding"));
}

}  // namespace
}  // namespace sortd
