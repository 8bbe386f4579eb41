// End to end, the real sortd: one array sent as several Sort calls at once
// (SortRequest.part) is sorted as one and each call gets its slice of the
// answer; the C++ client splits large sorts over its connections by
// itself. Parts that do not come together in time, or contradict each
// other, fail every call of the array with a status that says why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/http_get.h"
#include "tests/raw_grpc.h"
#include "tests/reference.h"
#include "tests/server_fixture.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::U32Bytes;
using testing::Unary;
using testing::UnaryResult;

class PartsTest : public testing::SharedServerTest<PartsTest> {
 public:
  static std::vector<std::string> ServerArgs() {
    return {"--device=cpu", "--cpu_threads=2", "--metrics_listen=127.0.0.1:0",
            "--part_timeout=2s"};
  }

 protected:
  // Sorted Sort calls answered OK, from the metrics.
  static std::string OkSorts() {
    const std::string m = HttpGet(server_->metrics_address(), "/metrics");
    const std::string key =
        "sortd_requests_total{code=\"OK\",method=\"Sort\",path=\"cpu\"} ";
    const size_t at = m.find(key);
    return at == std::string::npos
               ? "0"
               : m.substr(at + key.size(), m.find('\n', at) - at - key.size());
  }

  // A Sort call carrying part `index` of `count` of array `group` (a
  // short name padded to the 16 bytes a name needs; an empty one kept).
  static std::string PartMessage(const std::string& keys,
                                 const std::string& group, uint32_t index,
                                 uint32_t count, bool permutation = true) {
    v1::SortRequest r;
    r.set_u32_keys(keys);
    r.set_return_permutation(permutation);
    r.mutable_part()->set_group(group.empty() || group.size() >= 16
                                    ? group
                                    : group +
                                          std::string(16 - group.size(), '.'));
    r.mutable_part()->set_index(index);
    r.mutable_part()->set_count(count);
    return r.SerializeAsString();
  }
};

template <typename K>
void ExpectSplitSortIsRight(Client& client, size_t n, bool descending,
                            bool compact) {
  SCOPED_TRACE(::testing::Message()
               << n << " keys of " << sizeof(K) << " bytes"
               << (descending ? " desc" : "") << (compact ? " compact" : ""));
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kRandom, n, n + descending);
  std::vector<uint32_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<uint32_t>(i);
  auto r = client.SortPairs<K, uint32_t>(keys, values,
                                         {.descending = descending,
                                          .return_permutation = true,
                                          .compact_keys = compact});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->permutation, testing::RefPermutation(keys, descending));
  EXPECT_EQ(r->values, r->permutation);
  ASSERT_EQ(r->keys.size(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&r->keys[i], &keys[r->permutation[i]], sizeof(K)), 0)
        << i;
  }
}

TEST_F(PartsTest, TheClientSplitsLargeSortsOverItsConnections) {
  ClientOptions options;
  options.connections = 4;
  options.split_bytes = 1 << 20;  // 8 MiB parts: the arrays below make 4
  auto client = Client::Create(server_->address(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  const int before = std::stoi(OkSorts());
  // 2.5M keys with values: 20 MB of u32 pairs, 30 MB of u64 ones. The
  // first split asks each of the 4 connections once which sortd it
  // reaches (an empty Sort), then sends 2 parts.
  ExpectSplitSortIsRight<uint32_t>(**client, 2500001, false, false);
  EXPECT_EQ(std::stoi(OkSorts()) - before, 4 + 2);
  ExpectSplitSortIsRight<float>(**client, 2500001, true, true);
  ExpectSplitSortIsRight<uint64_t>(**client, 2500001, true, false);
  EXPECT_EQ(std::stoi(OkSorts()) - before, 4 + 2 + 2 + 3);
}

// Small calls all go on the pool's first connection, and only they do:
// larger ones take the other connections in turn, and with
// small_call_bytes = 0 every call takes every connection in turn. Seen
// from the server: the peer address in each call's start line.
TEST(ClientPool, SmallCallsHaveAConnectionOfTheirOwn) {
  testing::ServerProcess server({"--device=cpu", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, 3);
  std::vector<uint32_t> expected = keys;
  std::sort(expected.begin(), expected.end());
  // 400 KB: above small_call_bytes.
  const std::vector<uint32_t> large =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 100000, 4);
  std::vector<uint32_t> large_expected = large;
  std::sort(large_expected.begin(), large_expected.end());
  // Peers of the first `calls` Sort calls the server logged, in order.
  auto peers = [&](size_t calls) {
    std::vector<std::string> lines =
        server.WaitForLines("start Sort", calls, std::chrono::seconds(30));
    std::vector<std::string> out;
    for (const std::string& l : lines) out.push_back(l.substr(l.rfind(' ')));
    return out;
  };
  auto distinct = [](std::vector<std::string> v, size_t from, size_t to) {
    std::sort(v.begin() + from, v.begin() + to);
    return std::unique(v.begin() + from, v.begin() + to) - (v.begin() + from);
  };
  ClientOptions options;
  options.connections = 4;
  options.split_bytes = 0;
  for (size_t small_call_bytes : {size_t{256} << 10, size_t{0}}) {
    options.small_call_bytes = small_call_bytes;
    auto client = Client::Create(server.address(), options);
    ASSERT_TRUE(client.ok()) << client.status();
    for (int i = 0; i < 8; ++i) {
      // Small and large calls in turn.
      auto sorted = (*client)->Sort<uint32_t>(keys);
      ASSERT_TRUE(sorted.ok()) << sorted.status();
      EXPECT_EQ(sorted->keys, expected);
      auto sorted_large = (*client)->Sort<uint32_t>(large);
      ASSERT_TRUE(sorted_large.ok()) << sorted_large.status();
      EXPECT_EQ(sorted_large->keys, large_expected);
    }
  }
  const std::vector<std::string> seen = peers(32);
  ASSERT_EQ(seen.size(), 32u) << server.Output();
  std::vector<std::string> small_peers, large_peers;
  for (size_t i = 0; i < 16; ++i) {
    (i % 2 == 0 ? small_peers : large_peers).push_back(seen[i]);
  }
  EXPECT_EQ(distinct(small_peers, 0, 8), 1) << server.Output();
  EXPECT_EQ(distinct(large_peers, 0, 8), 3) << server.Output();
  for (const std::string& peer : large_peers) {
    EXPECT_NE(peer, small_peers[0]) << server.Output();
  }
  EXPECT_EQ(distinct(seen, 16, 32), 4) << server.Output();
}

// The process's name comes back only to calls that ask for it, the same
// on every connection to it.
TEST_F(PartsTest, TheInstanceHeaderAnswersThoseWhoAsk) {
  grpc::GenericStub a(testing::Channel(*server_)),
      b(testing::Channel(*server_));
  const std::string empty_sort("\x0a\x00", 2);
  const UnaryResult plain = Unary(a, "Sort", empty_sort);
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_EQ(plain.initial_metadata.count("sortd-instance"), 0u);
  const UnaryResult asked_a =
      Unary(a, "Sort", empty_sort, {{"sortd-want-instance", "1"}});
  const UnaryResult asked_b =
      Unary(b, "Sort", empty_sort, {{"sortd-want-instance", "1"}});
  ASSERT_EQ(asked_a.initial_metadata.count("sortd-instance"), 1u);
  ASSERT_EQ(asked_b.initial_metadata.count("sortd-instance"), 1u);
  const std::string name =
      asked_a.initial_metadata.find("sortd-instance")->second;
  EXPECT_FALSE(name.empty());
  EXPECT_EQ(asked_b.initial_metadata.find("sortd-instance")->second, name);
}

TEST_F(PartsTest, EachPartGetsItsSliceOfTheWholeSortedArray) {
  auto channel = testing::Channel(*server_);
  grpc::GenericStub a(channel), b(testing::Channel(*server_));
  // Part 1 goes first and waits; part 0 completes the array.
  std::future<UnaryResult> second = std::async(std::launch::async, [&] {
    return Unary(b, "Sort", PartMessage(U32Bytes({9, 1, 8}), "array-1", 1, 2));
  });
  const UnaryResult first =
      Unary(a, "Sort", PartMessage(U32Bytes({5, 0, 7, 3}), "array-1", 0, 2));
  const UnaryResult last = second.get();
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_TRUE(last.status.ok()) << last.status.error_message();
  v1::SortResponse r0, r1;
  ASSERT_TRUE(r0.ParseFromString(first.response));
  ASSERT_TRUE(r1.ParseFromString(last.response));
  // The whole: 5 0 7 3 9 1 8 -> 0 1 3 5 | 7 8 9; indices into the whole.
  EXPECT_EQ(r0.u32_keys(), U32Bytes({0, 1, 3, 5}));
  EXPECT_EQ(r0.permutation(), U32Bytes({1, 5, 3, 0}));
  EXPECT_EQ(r1.u32_keys(), U32Bytes({7, 8, 9}));
  EXPECT_EQ(r1.permutation(), U32Bytes({2, 6, 4}));
  EXPECT_EQ(r0.served_by().route(), r1.served_by().route());
}

TEST_F(PartsTest, APartAloneFailsOnceItsTimeIsUp) {
  grpc::GenericStub stub(testing::Channel(*server_));
  const UnaryResult r =
      Unary(stub, "Sort", PartMessage(U32Bytes({3, 2}), "lonely", 0, 2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("part(s) 0 of 2 came"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("--part_timeout"));
}

TEST_F(PartsTest, ContradictingPartsFailTogether) {
  grpc::GenericStub a(testing::Channel(*server_)),
      b(testing::Channel(*server_));
  // One asks for the permutation, the other not. Whichever comes second is
  // refused for differing; the one waiting fails with it.
  std::future<UnaryResult> one = std::async(std::launch::async, [&] {
    return Unary(a, "Sort", PartMessage(U32Bytes({1}), "mixed", 0, 2, true));
  });
  const UnaryResult two =
      Unary(b, "Sort", PartMessage(U32Bytes({2}), "mixed", 1, 2, false));
  const std::string messages =
      one.get().status.error_message() + " | " + two.status.error_message();
  EXPECT_EQ(two.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(messages, HasSubstr("differs from the array's other parts"));
  EXPECT_THAT(messages, HasSubstr("another part of the array was refused"));
}

TEST_F(PartsTest, PartsAreForSortOnly) {
  grpc::GenericStub stub(testing::Channel(*server_));
  const UnaryResult echo =
      Unary(stub, "Echo", PartMessage(U32Bytes({1}), "e", 0, 1));
  EXPECT_EQ(echo.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(echo.status.error_message(), HasSubstr("`part` is for Sort"));
  const UnaryResult bad =
      Unary(stub, "Sort", PartMessage(U32Bytes({1}), "", 0, 1));
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), HasSubstr("part.group"));
}

}  // namespace
}  // namespace sortd
