// sortctl bench's load generator (client/bench.h): the size mix it reads,
// the back-off of a worker whose server is down, and runs against a server
// that is not there and against the service served in process, each call
// counted once and every sampled answer checked.
#include "client/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <vector>

#include "tests/held_port.h"
#include "tests/in_process_service.h"

namespace sortd::cli {
namespace {

using ::testing::HasSubstr;

TEST(ParseSizeMix, ReadsSizesWithUnitsAndWeights) {
  absl::StatusOr<std::vector<SizeClass>> mix =
      ParseSizeMix("1k:70,64k:25,16m:5");
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 3u);
  EXPECT_EQ((*mix)[0].size, 1024u);
  EXPECT_EQ((*mix)[0].weight, 70);
  EXPECT_EQ((*mix)[1].size, 64u << 10);
  EXPECT_EQ((*mix)[2].size, 16u << 20);
  mix = ParseSizeMix("4096");
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 1u);
  EXPECT_EQ((*mix)[0].size, 4096u);
  EXPECT_EQ((*mix)[0].weight, 1);
  for (const char* bad : {"", "1q", "1k:", "1k:-2", "k", "5g"}) {
    EXPECT_FALSE(ParseSizeMix(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatSize(1024), "1k");
  EXPECT_EQ(FormatSize(16u << 20), "16m");
  EXPECT_EQ(FormatSize(1000), "1000");
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

// Against a dead port every call fails UNAVAILABLE at once, and each worker
// then waits 10 s: one call each, and the run still ends with its 200 ms
// duration, the waits cut short.
TEST(RunBench, BacksOffOnUnavailableAndTheRunsEndCutsTheWaitShort) {
  const testing::HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  auto client = Client::Create(dead_port.target(), {});
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

// Against the service: a bounded closed-loop run of sorts of two sizes,
// every call answered and counted by size, each sampled answer right.
TEST(RunBench, EveryCallIsAnsweredCountedAndChecked) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  auto client = Client::Create(sortd.address(), {});
  ASSERT_TRUE(client.ok()) << client.status();
  BenchOptions o;
  o.mix = {{1000, 1}, {5000, 1}};
  o.concurrency = 2;
  o.duration = absl::Seconds(60);
  o.max_requests = 40;
  o.warmup = absl::ZeroDuration();
  o.verify_every = 1;
  absl::StatusOr<BenchReport> r = RunBench(**client, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->started, 40u);
  EXPECT_EQ(r->ended, 40u);
  EXPECT_EQ(r->all.ok, 40u);
  EXPECT_EQ(r->all.errors, 0u);
  EXPECT_EQ(r->verified, 40u);
  EXPECT_EQ(r->mismatches, 0u) << r->first_mismatch;
  ASSERT_EQ(r->by_size.size(), 2u);
  EXPECT_EQ(r->by_size[1000].ok + r->by_size[5000].ok, 40u);
  EXPECT_EQ(r->by_size[1000].keys, r->by_size[1000].ok * 1000);
  EXPECT_EQ(r->paths["cpu"], 40u);
  EXPECT_EQ(JudgeBench(*r).exit_code, 0);
}

}  // namespace
}  // namespace sortd::cli
