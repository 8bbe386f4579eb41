// sortctl's parsing and its verifier; the verifier must reject wrong
// answers, or --verify would prove nothing. Also the bench's back-off and
// its exit decision.
#include "client/sortctl_lib.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <set>

#include "client/bench.h"
#include "tests/reference.h"

namespace sortd::cli {
namespace {

using ::testing::HasSubstr;

TEST(ParseKeys, ParsesEveryTypeAndRejectsGarbage) {
  auto f = ParseKeys(KeyType::kF32, " 1.5\n-2e3\tnan -inf +4 ");
  ASSERT_TRUE(f.ok()) << f.status();
  auto fv = testing::FromBytes<float>(*f);
  ASSERT_EQ(fv.size(), 5u);
  EXPECT_EQ(fv[0], 1.5f);
  EXPECT_EQ(fv[1], -2000.0f);
  EXPECT_TRUE(std::isnan(fv[2]));
  EXPECT_EQ(fv[3], -INFINITY);
  EXPECT_EQ(fv[4], 4.0f);

  auto i = ParseKeys(KeyType::kI64, "-9223372036854775808 0x10 7");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(testing::FromBytes<int64_t>(*i),
            (std::vector<int64_t>{INT64_MIN, 16, 7}));

  EXPECT_FALSE(ParseKeys(KeyType::kU32, "1 2 x").ok());
  EXPECT_FALSE(ParseKeys(KeyType::kU32, "4294967296").ok());  // overflow
  EXPECT_FALSE(ParseKeys(KeyType::kU32, "-1").ok());
  EXPECT_THAT(ParseKeys(KeyType::kI32, "1 2.5").status().message(),
              HasSubstr("number 2"));
}

v1::SortRequest MakeRequest(const std::vector<int32_t>& keys, bool desc) {
  v1::SortRequest r;
  r.set_i32_keys(testing::Bytes(keys));
  std::vector<uint32_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = 100 + i;
  r.set_u32_values(testing::Bytes(values));
  r.set_return_permutation(true);
  r.set_order(desc ? v1::ORDER_DESCENDING : v1::ORDER_ASCENDING);
  return r;
}

TEST(VerifySort, AcceptsTheStableAnswerAndRejectsOthers) {
  const v1::SortRequest req = MakeRequest({3, 1, 3, -2}, false);
  v1::SortResponse good;
  good.set_i32_keys(testing::Bytes(std::vector<int32_t>{-2, 1, 3, 3}));
  good.set_u32_values(
      testing::Bytes(std::vector<uint32_t>{103, 101, 100, 102}));
  good.set_permutation(testing::Bytes(std::vector<uint32_t>{3, 1, 0, 2}));
  EXPECT_TRUE(VerifySort(req, good).ok());

  v1::SortResponse unstable = good;  // equal keys swapped
  unstable.set_u32_values(
      testing::Bytes(std::vector<uint32_t>{103, 101, 102, 100}));
  unstable.set_permutation(testing::Bytes(std::vector<uint32_t>{3, 1, 2, 0}));
  EXPECT_THAT(VerifySort(req, unstable).message(), HasSubstr("position 2"));

  v1::SortResponse wrong_keys = good;
  wrong_keys.set_i32_keys(testing::Bytes(std::vector<int32_t>{1, -2, 3, 3}));
  EXPECT_FALSE(VerifySort(req, wrong_keys).ok());

  v1::SortResponse short_answer = good;
  short_answer.set_i32_keys(testing::Bytes(std::vector<int32_t>{-2, 1, 3}));
  EXPECT_FALSE(VerifySort(req, short_answer).ok());

  v1::SortResponse wrong_type = good;
  wrong_type.set_u32_keys(good.i32_keys());
  EXPECT_FALSE(VerifySort(req, wrong_type).ok());
}

TEST(VerifySort, DescendingIsStableNotReversed) {
  const v1::SortRequest req = MakeRequest({1, 5, 1}, true);
  v1::SortResponse good;
  good.set_i32_keys(testing::Bytes(std::vector<int32_t>{5, 1, 1}));
  good.set_u32_values(testing::Bytes(std::vector<uint32_t>{101, 100, 102}));
  good.set_permutation(testing::Bytes(std::vector<uint32_t>{1, 0, 2}));
  EXPECT_TRUE(VerifySort(req, good).ok());
  v1::SortResponse reversed = good;
  reversed.set_u32_values(testing::Bytes(std::vector<uint32_t>{101, 102, 100}));
  reversed.set_permutation(testing::Bytes(std::vector<uint32_t>{1, 2, 0}));
  EXPECT_FALSE(VerifySort(req, reversed).ok());
}

TEST(VerifyTranspose, RejectsAFlippedBit) {
  std::string in = RandomWords(64, 5);
  std::string out = in;  // transposed below by the definition
  auto rows = testing::FromBytes<uint32_t>(in);
  std::vector<uint32_t> t(rows.size(), 0);
  for (size_t m = 0; m < 2; ++m)
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        t[m * 32 + j] |= ((rows[m * 32 + i] >> j) & 1u) << i;
  out = testing::Bytes(t);
  EXPECT_TRUE(VerifyTranspose(in, out).ok());
  out[200] ^= 4;
  EXPECT_FALSE(VerifyTranspose(in, out).ok());
}

TEST(RandomKeys, DeterministicAndSized) {
  EXPECT_EQ(RandomKeys(KeyType::kF64, 100, 9),
            RandomKeys(KeyType::kF64, 100, 9));
  EXPECT_NE(RandomKeys(KeyType::kF64, 100, 9),
            RandomKeys(KeyType::kF64, 100, 8));
  EXPECT_EQ(RandomKeys(KeyType::kI32, 100, 9).size(), 400u);
}

TEST(JsonString, Escapes) {
  EXPECT_EQ(JsonString("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

TEST(PathText, NamesEveryPath) {
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_CPU), "cpu");
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_GPU), "gpu");
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_OPENCL_CPU), "opencl-cpu");
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_UNSPECIFIED), "unknown");
  EXPECT_STREQ(PathText(static_cast<v1::ExecutionPath>(77)), "unknown");
}

TEST(Backoff, DoublesFromTheInitialWaitUpToTheCapWithJitter) {
  const BackoffPolicy policy{.initial = absl::Milliseconds(10),
                             .max = absl::Seconds(1),
                             .multiplier = 2};
  Backoff b(policy, 7);
  absl::Duration nominal = absl::Milliseconds(10);
  std::set<int64_t> capped;
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE(i);
    const absl::Duration wait = b.Next();
    EXPECT_GE(wait, nominal / 2);
    EXPECT_LE(wait, nominal);
    if (nominal == absl::Seconds(1))
      capped.insert(absl::ToInt64Nanoseconds(wait));
    nominal = std::min(nominal * 2, absl::Seconds(1));
  }
  // 10 ms doubled reaches the cap at the 8th wait: 13 capped waits, jittered
  // (not all the same).
  EXPECT_GT(capped.size(), 1u);

  b.Reset();  // after a success: back to about 10 ms
  const absl::Duration first = b.Next();
  EXPECT_GE(first, absl::Milliseconds(5));
  EXPECT_LE(first, absl::Milliseconds(10));
  const absl::Duration second = b.Next();
  EXPECT_GE(second, absl::Milliseconds(10));
  EXPECT_LE(second, absl::Milliseconds(20));
}

TEST(Backoff, WorkersWithOtherSeedsWaitDifferently) {
  Backoff a({}, 1), b({}, 2);
  bool differ = false;
  for (int i = 0; i < 4; ++i) differ |= a.Next() != b.Next();
  EXPECT_TRUE(differ);
}

TEST(Backoff, ZeroInitialWaitTurnsItOff) {
  Backoff b({.initial = absl::ZeroDuration()}, 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.Next(), absl::ZeroDuration());
}

TEST(Backoff, OnlyOnUnavailableAndResourceExhausted) {
  EXPECT_TRUE(ShouldBackOff(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(ShouldBackOff(absl::StatusCode::kResourceExhausted));
  for (absl::StatusCode c :
       {absl::StatusCode::kOk, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented,
        absl::StatusCode::kCancelled, absl::StatusCode::kInternal}) {
    EXPECT_FALSE(ShouldBackOff(c)) << absl::StatusCodeToString(c);
  }
}

BenchReport Ended(uint64_t ok, uint64_t errors) {
  BenchReport r;
  r.all.ok = ok;
  r.all.errors = errors;
  r.started = r.ended = ok + errors;
  if (errors > 0) r.errors_by_code["UNAVAILABLE"] = errors;
  return r;
}

TEST(JudgeBench, ExitsOneWhenMoreThanHalfOfTheCallsFailed) {
  EXPECT_EQ(JudgeBench(Ended(10, 0)).exit_code, 0);
  EXPECT_EQ(JudgeBench(Ended(10, 0)).reason, "");
  EXPECT_EQ(JudgeBench(Ended(5, 4)).exit_code, 0);
  EXPECT_EQ(JudgeBench(Ended(4, 4)).exit_code, 0);  // half is not most

  const BenchVerdict most = JudgeBench(Ended(4, 5));
  EXPECT_EQ(most.exit_code, 1);
  EXPECT_THAT(most.reason, HasSubstr("5 of 9 calls failed"));
  EXPECT_THAT(most.reason, HasSubstr("UNAVAILABLE 5"));

  const BenchVerdict none = JudgeBench(Ended(0, 3));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.reason, HasSubstr("no request was answered"));
  EXPECT_THAT(none.reason, HasSubstr("all 3 calls failed"));
  EXPECT_EQ(JudgeBench(Ended(0, 0)).exit_code, 1);
}

TEST(JudgeBench, AWrongAnswerIsThreeBeforeFailures) {
  BenchReport r = Ended(2, 10);
  r.verified = 2;
  r.mismatches = 1;
  r.first_mismatch = "1k keys: keys differ at position 3";
  const BenchVerdict v = JudgeBench(r);
  EXPECT_EQ(v.exit_code, 3);
  EXPECT_THAT(v.reason, HasSubstr("1 of 2 sampled answers were wrong"));
  EXPECT_THAT(v.reason, HasSubstr("position 3"));
}

// A loopback port with nothing listening: bound, read, closed.
int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// Against a dead port every call fails UNAVAILABLE at once, and each worker
// then waits 10 s: one call each, and the run still ends with its 200 ms
// duration, the waits cut short.
TEST(RunBench, BacksOffOnUnavailableAndTheRunsEndCutsTheWaitShort) {
  auto client = Client::Create("127.0.0.1:" + std::to_string(DeadPort()), {});
  ASSERT_TRUE(client.ok()) << client.status();
  BenchOptions o;
  o.concurrency = 3;
  o.duration = absl::Milliseconds(200);
  o.warmup = absl::ZeroDuration();
  o.backoff = {.initial = absl::Seconds(10), .max = absl::Seconds(10)};
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<BenchReport> r = RunBench(**client, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->started, 3u);
  EXPECT_EQ(r->ended, 3u);
  EXPECT_EQ(r->all.errors, 3u);
  EXPECT_EQ(r->errors_by_code["UNAVAILABLE"], 3u);
  EXPECT_LT(seconds, 4.0);  // a wait is at least 5 s
  EXPECT_EQ(JudgeBench(*r).exit_code, 1);
}

// sortctl's restart with malloc on huge pages: added to what the caller
// set, never over a choice of the caller's own.
TEST(TunablesWithHugePages, AddsTheTunableUnlessTheCallerChose) {
  EXPECT_EQ(TunablesWithHugePages(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.hugetlb=0"), std::nullopt);
  EXPECT_EQ(
      TunablesWithHugePages("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"),
      std::nullopt);
  // A name that only ends like the tunable's is another tunable.
  EXPECT_EQ(TunablesWithHugePages("x.glibc.malloc.hugetlb=0"),
            "x.glibc.malloc.hugetlb=0:glibc.malloc.hugetlb=1");
}

}  // namespace
}  // namespace sortd::cli
