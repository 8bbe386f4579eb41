// Admission: the bounds on requests and units, the lone request always
// admitted, one call's charge capped, each client's share of the queue,
// release and the idle wait; strict
// (a budget of memory): every call charged all it holds, one over the call
// cap refused up front, nothing admitted past the budget, holds that grow.
#include "server/admission.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/held_bytes.h"

namespace sortd {
namespace {

TEST(Admission, RefusesPastEitherBoundWithAMessageThatSaysWhich) {
  Admission a({.max_units = 100, .max_requests = 2, .max_call_units = 80});
  absl::StatusOr<size_t> first = a.Admit(60);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 60u);
  absl::StatusOr<size_t> too_many_units = a.Admit(50);
  EXPECT_EQ(too_many_units.status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_many_units.status().message().find("--max_queued_keys"),
            std::string::npos);
  ASSERT_TRUE(a.Admit(40).ok());
  absl::StatusOr<size_t> too_many_requests = a.Admit(0);
  EXPECT_EQ(too_many_requests.status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_many_requests.status().message().find("--max_queued_requests"),
            std::string::npos);
  EXPECT_EQ(a.requests(), 2u);
  const Admission::Counts c = a.counts();
  EXPECT_EQ(c.admitted, 2u);
  EXPECT_EQ(c.refused, 2u);
}

TEST(Admission, ALoneRequestIsAlwaysAdmittedAndChargedAtMostTheCallCap) {
  Admission a({.max_units = 100, .max_requests = 8, .max_call_units = 80});
  absl::StatusOr<size_t> huge = a.Admit(1000);
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(*huge, 80u);
  // 80 + 30 > 100: a second one waits for the first.
  EXPECT_FALSE(a.Admit(30).ok());
  a.Release(*huge);
  EXPECT_TRUE(a.Admit(30).ok());
}

TEST(Admission, ClosedRefusesUnavailable) {
  Admission a({});
  a.Close();
  EXPECT_EQ(a.Admit(1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(Admission, WaitIdleReturnsOnceTheLastIsReleased) {
  Admission a({});
  const size_t charged = *a.Admit(5);
  // A deadline already past: not idle, no wait.
  const absl::Time t0 = absl::FromUnixSeconds(1);
  EXPECT_FALSE(a.WaitIdle(t0, [&] { return t0; }));
  std::thread releaser([&] { a.Release(charged); });
  a.WaitIdle();
  releaser.join();
  EXPECT_EQ(a.requests(), 0u);
  EXPECT_TRUE(a.WaitIdle(t0, [&] { return t0; }));
  EXPECT_EQ(a.counts().released, 1u);
}

Admission::Limits Bytes(size_t max, size_t call) {
  return {.max_units = max,
          .max_requests = SIZE_MAX,
          .max_call_units = call,
          .strict = true,
          .unit = "bytes",
          .units_flag = "--max_held_bytes",
          .call_flag = "--max_call_bytes"};
}

// What let several capped calls run beyond the budget: strict, a call is
// charged what it holds, and one larger than the cap is refused up front,
// even alone, rather than charged less.
TEST(Admission, StrictChargesAllAndRefusesACallOverTheCapUpFront) {
  Admission a(Bytes(100, 80));
  absl::StatusOr<size_t> huge = a.Admit(81);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("--max_call_bytes"),
            std::string::npos);
  EXPECT_EQ(a.units(), 0u);
  absl::StatusOr<size_t> first = a.Admit(80);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 80u);
  // 80 + 30 > 100, however small the second: refused, saying which bound.
  absl::StatusOr<size_t> second = a.Admit(30);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("--max_held_bytes"),
            std::string::npos);
  ASSERT_TRUE(a.Admit(20).ok());
  EXPECT_EQ(a.units(), 100u);
  EXPECT_EQ(a.counts().refused, 2u);
}

// Many calls together never hold more than the budget, whatever each asks.
TEST(Admission, StrictCallsTogetherNeverPassTheBudget) {
  Admission a(Bytes(1000, 300));
  std::vector<size_t> charged;
  for (size_t want : {300, 299, 301, 250, 200, 150, 100, 50, 1}) {
    absl::StatusOr<size_t> c = a.Admit(want);
    if (c.ok()) charged.push_back(*c);
    EXPECT_LE(a.units(), 1000u) << want;
  }
  size_t sum = 0;
  for (size_t c : charged) sum += c;
  EXPECT_EQ(sum, a.units());
  EXPECT_EQ(a.units(), 1000u);  // 300 299 250 150 1
  for (size_t c : charged) a.Release(c);
  EXPECT_EQ(a.units(), 0u);
  EXPECT_EQ(a.requests(), 0u);
}

// One client's calls together hold at most max_client_units, so that
// another client finds room in the budget; a call without a client is not
// counted for any.
TEST(Admission, OneClientCannotTakeTheWholeBudget) {
  Admission::Limits limits = Bytes(1000, 400);
  limits.max_client_units = 500;
  limits.client_flag = "--max_client_held_bytes";
  Admission a(limits);
  std::vector<Admission::Hold> hostile;
  for (int i = 0; i < 3; ++i) {
    hostile.emplace_back(&a);
    hostile.back().SetClient("x509:hostile");
  }
  EXPECT_TRUE(hostile[0].Grow(400).ok());
  EXPECT_TRUE(hostile[1].Grow(100).ok());
  absl::Status refused = hostile[2].Grow(1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("--max_client_held_bytes"));
  EXPECT_EQ(a.client_units("x509:hostile"), 500u);
  Admission::Hold neighbour(&a);
  neighbour.SetClient("x509:neighbour");
  EXPECT_TRUE(neighbour.Grow(400).ok());
  EXPECT_EQ(a.units(), 900u);
  hostile[1].Shrink(60);
  EXPECT_EQ(a.client_units("x509:hostile"), 440u);
  EXPECT_TRUE(hostile[2].Grow(60).ok());
  Admission::Hold anonymous(&a);
  EXPECT_EQ(anonymous.Grow(101).code(), absl::StatusCode::kResourceExhausted)
      << "the budget as a whole still binds";
  EXPECT_TRUE(anonymous.Grow(100).ok());
  anonymous.Reset();
  hostile.clear();
  neighbour.Reset();
  EXPECT_EQ(a.client_units("x509:hostile"), 0u);
  EXPECT_EQ(a.client_units("x509:neighbour"), 0u);
  EXPECT_EQ(a.units(), 0u);
}

// The queue's share per client: one client's requests beyond
// max_client_requests are refused naming its flag while another client's
// are admitted; the budget's own bound is checked first, so a refusal
// names the bound that binds; a request without a client counts for none.
Admission::Limits Queue(size_t max_requests, size_t client_requests) {
  return {.max_units = 1000,
          .max_requests = max_requests,
          .max_call_units = 500,
          .max_client_requests = client_requests,
          .client_flag = "--max_client_queued_keys",
          .client_requests_flag = "--max_client_queued_requests"};
}

TEST(Admission, OneClientCannotFillTheQueue) {
  Admission a(Queue(/*max_requests=*/6, /*client_requests=*/3));
  std::vector<size_t> hostile;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<size_t> c = a.Admit(1, "x509:hostile");
    ASSERT_TRUE(c.ok()) << c.status();
    hostile.push_back(*c);
  }
  absl::StatusOr<size_t> refused = a.Admit(1, "x509:hostile");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("--max_client_queued_requests"));
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("has 3 requests"));
  EXPECT_EQ(a.client_requests("x509:hostile"), 3u);
  // Another client, and calls without one, have the rest of the queue.
  ASSERT_TRUE(a.Admit(1, "x509:neighbour").ok());
  ASSERT_TRUE(a.Admit(1, "x509:neighbour").ok());
  ASSERT_TRUE(a.Admit(1).ok());
  EXPECT_EQ(a.requests(), 6u);
  // The queue is full: the budget's bound binds, and says so, for every
  // client alike.
  absl::StatusOr<size_t> full = a.Admit(1, "x509:neighbour");
  ASSERT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.status().message()),
              ::testing::HasSubstr("--max_queued_requests"));
  EXPECT_THAT(std::string(full.status().message()),
              ::testing::Not(::testing::HasSubstr("--max_client")));
  // Answered, a request makes room in its client's share.
  a.Release(hostile.back(), "x509:hostile");
  hostile.pop_back();
  EXPECT_EQ(a.client_requests("x509:hostile"), 2u);
  absl::StatusOr<size_t> again = a.Admit(1, "x509:hostile");
  ASSERT_TRUE(again.ok()) << again.status();
  a.Release(*again, "x509:hostile");
  for (size_t c : hostile) a.Release(c, "x509:hostile");
  EXPECT_EQ(a.client_requests("x509:hostile"), 0u);
  EXPECT_EQ(a.client_units("x509:hostile"), 0u);
  EXPECT_EQ(a.counts().refused, 2u);
}

// The share of queued units: beyond it a client's request is refused
// naming its flag, but a client's lone request is admitted whatever its
// size (refused, it would be refused forever), as the budget's is.
TEST(Admission, AClientsQueuedUnitsAreBoundedButItsLoneRequestGoesAhead) {
  Admission::Limits limits = Queue(/*max_requests=*/100, SIZE_MAX);
  limits.max_client_units = 300;
  Admission a(limits);
  absl::StatusOr<size_t> lone = a.Admit(450, "ipv4:10.0.0.7");
  ASSERT_TRUE(lone.ok()) << lone.status();
  EXPECT_EQ(*lone, 450u);
  absl::StatusOr<size_t> more = a.Admit(10, "ipv4:10.0.0.7");
  ASSERT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(more.status().message()),
              ::testing::HasSubstr("--max_client_queued_keys"));
  ASSERT_TRUE(a.Admit(300, "ipv4:10.0.0.8").ok());
  a.Release(*lone, "ipv4:10.0.0.7");
  ASSERT_TRUE(a.Admit(200, "ipv4:10.0.0.7").ok());
  ASSERT_TRUE(a.Admit(100, "ipv4:10.0.0.7").ok());
  EXPECT_EQ(a.client_units("ipv4:10.0.0.7"), 300u);
  EXPECT_FALSE(a.Admit(1, "ipv4:10.0.0.7").ok());
}

TEST(Admission, AHoldGrowsUntilACapAndGivesEverythingBack) {
  std::vector<size_t> seen;
  Admission::Limits limits = Bytes(100, 60);
  limits.on_change = [&](size_t units) { seen.push_back(units); };
  Admission a(limits);
  {
    Admission::Hold stream(&a);
    EXPECT_EQ(a.requests(), 0u);  // nothing until its first charge
    ASSERT_TRUE(stream.Grow(40).ok());
    EXPECT_EQ(a.requests(), 1u);
    // Past the call's cap: refused, the charge as it was.
    const absl::Status over = stream.Grow(21);
    EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(over.message().find("would hold 61 bytes"), std::string::npos);
    EXPECT_EQ(stream.charged(), 40u);
    // Another call's: the budget's bound.
    Admission::Hold other(&a);
    ASSERT_TRUE(other.Grow(55).ok());
    const absl::Status full = stream.Grow(10);
    EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(full.message().find("--max_held_bytes"), std::string::npos);
    stream.Shrink(15);  // a transient copy gone
    EXPECT_EQ(a.units(), 80u);
    ASSERT_TRUE(stream.Grow(20).ok());
    EXPECT_EQ(a.units(), 100u);
    // Moved, the charge goes with it, once.
    Admission::Hold moved = std::move(stream);
    EXPECT_EQ(stream.charged(), 0u);
    EXPECT_EQ(moved.charged(), 45u);
  }
  EXPECT_EQ(a.units(), 0u);
  EXPECT_EQ(a.requests(), 0u);
  EXPECT_EQ(a.counts().released, 2u);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 0u);
  // Without a budget a hold charges nothing and refuses nothing.
  Admission::Hold none;
  EXPECT_TRUE(none.Grow(size_t{1} << 40).ok());
}

TEST(Admission, AClosedBudgetRefusesNewHoldsButLetsRunningOnesGrow) {
  Admission a(Bytes(100, 100));
  Admission::Hold running(&a);
  ASSERT_TRUE(running.Grow(10).ok());
  a.Close();
  Admission::Hold fresh(&a);
  EXPECT_EQ(fresh.Grow(1).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(running.Grow(10).ok());
  EXPECT_EQ(a.units(), 20u);
}

// What the service charges a sort beyond its request: the answer's
// arrays, compact keys and the CPU path's radix scratch (two copies of the
// keys as ordered bits, and of their 4-byte indices when values or a
// permutation follow them); no arrays of its own for one in a region.
TEST(HeldBytes, ASortIsChargedItsAnswerAndScratch) {
  const size_t n = 1000;
  // u32 with a permutation: 8 B of answer, 16 of scratch a key.
  EXPECT_EQ(SortWorkBytes(KeyType::kU32, ValueType::kNone, true, false, n),
            24 * n);
  EXPECT_EQ(SortWorkBytes(KeyType::kU32, ValueType::kNone, true, true, n),
            28 * n);
  // Keys only: 4 B of answer, 8 of scratch.
  EXPECT_EQ(SortWorkBytes(KeyType::kU32, ValueType::kNone, false, false, n),
            12 * n);
  // u64 keys, u64 values and a permutation: 20 B of answer, 24 of scratch.
  EXPECT_EQ(SortWorkBytes(KeyType::kU64, ValueType::kU64, true, false, n),
            44 * n);
  // In a shared-memory region: the scratch alone.
  EXPECT_EQ(SortWorkBytes(KeyType::kU32, ValueType::kNone, true, false, n,
                          /*in_region=*/true),
            16 * n);
}

TEST(HeldBytes, AnEchoIsChargedWhatItsAnswerAddsAndNoScratch) {
  const size_t n = 1000;
  // Answered from the request's buffer: the permutation alone.
  EXPECT_EQ(EchoWorkBytes(KeyType::kU64, ValueType::kU64, true, false, n),
            4 * n);
  EXPECT_EQ(EchoWorkBytes(KeyType::kU32, ValueType::kNone, false, false, n),
            0u);
  // Compact: the arrays copied out (8 + 8 + 4 B) and the keys coded (8).
  EXPECT_EQ(EchoWorkBytes(KeyType::kU64, ValueType::kU64, true, true, n),
            28 * n);
  // Into a shared-memory region: nothing.
  EXPECT_EQ(EchoWorkBytes(KeyType::kU32, ValueType::kNone, true, true, n,
                          /*in_region=*/true),
            0u);
}

}  // namespace
}  // namespace sortd
