// The daemon's memory set-up (server/memory_setup.h): the budget line at
// start says what one call may send; the trimmer gives idle host buffers
// back once the service is quiet and counts the trim; the stop line counts
// the buffers reused and allocated.
#include "server/memory_setup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "grpcpp/support/slice.h"
#include "tests/in_process_service.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MemorySetup, TheBudgetLineSaysWhatOneCallMaySend) {
  SortServiceImpl::Options o;
  o.max_held_bytes = size_t{1} << 30;
  o.max_call_bytes = 900;
  ::testing::internal::CaptureStderr();
  LogMemoryBudget(o);
  std::string line = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(line,
              HasSubstr("at most 1073741824 bytes, one call at most 900"));
  EXPECT_THAT(line, HasSubstr("arrays of 100 bytes"));
  EXPECT_THAT(line, HasSubstr("--max_stream_bytes"));
  // Streams no larger than what a call admits in any shape: no caveat.
  o.limits.max_stream_bytes = 100;
  ::testing::internal::CaptureStderr();
  LogMemoryBudget(o);
  line = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(line, Not(HasSubstr("--max_stream_bytes")));
}

// Waits (up to 30 s) until `done` holds, looking every 5 ms; whether it
// did. (The trimmer has no hook of its own: what it did shows in the pool
// and the metrics.)
template <typename Done>
bool WaitUntil(Done done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// The value of sortd_heap_trims_total; -1 when it is not exported.
double HeapTrims(const testing::InProcessService& sortd) {
  const std::string text = sortd.MetricsText();
  const std::string key = "\nsortd_heap_trims_total ";
  const size_t at = text.find(key);
  return at == std::string::npos
             ? -1
             : std::strtod(text.c_str() + at + key.size(), nullptr);
}

TEST(MemorySetup, TheTrimmerGivesIdleBuffersBackOnceTheServiceIsQuiet) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  HostBufferPool pool({.min_bytes = 4096, .max_idle_bytes = size_t{64} << 20});
  { grpc::Slice idle = pool.Allocate(size_t{1} << 20); }
  ASSERT_GT(pool.stats().idle_bytes, 0u);
  std::unique_ptr<IdleTrimmer> trimmer =
      StartIdleTrimmer(absl::Milliseconds(10), pool, sortd.cpu(),
                       sortd.scheduler(), sortd.service(), &sortd.metrics());
  EXPECT_TRUE(WaitUntil([&] { return pool.stats().idle_bytes == 0; }));
  EXPECT_TRUE(WaitUntil([&] { return HeapTrims(sortd) > 0; }))
      << sortd.MetricsText();
}

TEST(MemorySetup, TheStopLineCountsReuse) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  HostBufferPool pool({.min_bytes = 4096});
  { grpc::Slice first = pool.Allocate(size_t{1} << 20); }
  { grpc::Slice again = pool.Allocate(size_t{1} << 20); }
  ::testing::internal::CaptureStderr();
  LogStopped(pool, sortd.cpu());
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("stopped (host buffers: 1 reused, 1 allocated; CPU "
                        "scratch: 0 reused, 0 allocated)"));
}

}  // namespace
}  // namespace sortd
