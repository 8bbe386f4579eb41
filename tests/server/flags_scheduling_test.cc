// sortd's flags on scheduling (server/flags_scheduling.cc): the bounds one
// call and one client take by default from the queue's, limits and router
// pins given taken as given, and every such flag out of range refused
// naming itself.
#include <gtest/gtest.h>

#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "server/flags.h"
#include "server/flags_internal.h"
#include "tests/server/flag_checks.h"

namespace sortd {
namespace {

TEST(SchedulingFlags, ACallAndAClientTakeShareOfTheQueueByDefault) {
  absl::FlagSaver saver;
  const Scheduler::Options o = SchedulerOptions();
  EXPECT_EQ(o.max_call_units, o.max_queued_units / 4);
  EXPECT_EQ(o.max_client_queued_units, o.max_queued_units / 2);
  EXPECT_EQ(o.max_client_queued_requests, o.max_queued_requests / 2);
  // Every router threshold is calibrated unless pinned.
  const RouterPins pins = RouterPinsFromFlags();
  EXPECT_LT(pins.cpu_max_keys, 0);
  EXPECT_LT(pins.solo_min_keys, 0);
}

TEST(SchedulingFlags, LimitsAndPinsGivenAreTakenAsGiven) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_max_client_queued_requests, 7);
  absl::SetFlag(&FLAGS_max_batch_delay, absl::Microseconds(250));
  absl::SetFlag(&FLAGS_cpu_threads, 3);
  absl::SetFlag(&FLAGS_cpu_max_keys, int64_t{5000});
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->scheduler.max_client_queued_requests, 7u);
  EXPECT_EQ(o->scheduler.max_batch_delay, absl::Microseconds(250));
  EXPECT_EQ(o->cpu.threads, 3);
  EXPECT_EQ(o->router.cpu_max_keys, 5000);
}

TEST(SchedulingFlags, EveryFlagOutOfRangeIsRefusedNamingIt) {
  testing::ExpectEachRefused({
      {"--cpu_threads", [] { absl::SetFlag(&FLAGS_cpu_threads, -1); }},
      {"--request_threads", [] { absl::SetFlag(&FLAGS_request_threads, -1); }},
      {"--max_batch_keys", [] { absl::SetFlag(&FLAGS_max_batch_keys, 0); }},
      {"--max_batch_keys",
       [] { absl::SetFlag(&FLAGS_max_batch_keys, (int64_t{1} << 31) + 1); }},
      {"--max_client_queued_requests",
       [] { absl::SetFlag(&FLAGS_max_client_queued_requests, 5000); }},
      {"--max_client_queued_keys",
       [] { absl::SetFlag(&FLAGS_max_client_queued_keys, int64_t{-1}); }},
      {"--max_batch_delay",
       [] { absl::SetFlag(&FLAGS_max_batch_delay, absl::Microseconds(-1)); }},
  });
}

}  // namespace
}  // namespace sortd
