// Admission: the bounds on requests and units, the lone request always
// admitted, one call's charge capped, release and the idle wait.
#include "server/admission.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/status/status.h"

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

}  // namespace
}  // namespace sortd
