// sortd's flags on request sizes and memory (server/flags_memory.cc): the
// bounds one call and one client take by default from the whole budget,
// limits given taken as given, the host pools, and every such flag out of
// range refused naming itself.
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

TEST(MemoryFlags, ACallAndAClientHoldHalfTheBudgetByDefault) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_max_held_bytes, int64_t{1} << 30);
  const SortServiceImpl::Options o = ServiceOptions();
  EXPECT_EQ(o.max_held_bytes, size_t{1} << 30);
  EXPECT_EQ(o.max_call_bytes, size_t{1} << 29);
  EXPECT_EQ(o.max_client_bytes, o.max_call_bytes);
}

TEST(MemoryFlags, LimitsGivenAreTakenAsGiven) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_max_held_bytes, int64_t{1} << 30);
  absl::SetFlag(&FLAGS_max_call_bytes, int64_t{1} << 28);
  absl::SetFlag(&FLAGS_max_client_held_bytes, int64_t{1} << 27);
  absl::SetFlag(&FLAGS_stream_idle_timeout, absl::Seconds(7));
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->service.max_held_bytes, size_t{1} << 30);
  EXPECT_EQ(o->service.max_call_bytes, size_t{1} << 28);
  EXPECT_EQ(o->service.max_client_bytes, size_t{1} << 27);
  EXPECT_EQ(o->service.stream_idle_timeout, absl::Seconds(7));
}

TEST(MemoryFlags, PinnedPoolArraysAreBatchedWhereTheyLieOnlyWithAPool) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_host_pool_pinned, true);
  absl::SetFlag(&FLAGS_host_pool_bytes, int64_t{1} << 30);
  absl::SetFlag(&FLAGS_host_pool_min_bytes, int64_t{1} << 20);
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->router.pinned_min_bytes, size_t{1} << 20);
  absl::SetFlag(&FLAGS_host_pool_bytes, int64_t{0});
  o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->router.pinned_min_bytes, 0u);
}

TEST(MemoryFlags, EveryFlagOutOfRangeIsRefusedNamingIt) {
  testing::ExpectEachRefused({
      {"--max_request_bytes",
       [] { absl::SetFlag(&FLAGS_max_request_bytes, 0); }},
      {"--max_request_bytes",
       [] { absl::SetFlag(&FLAGS_max_request_bytes, int64_t{1} << 32); }},
      {"--stream_chunk_bytes",
       [] { absl::SetFlag(&FLAGS_stream_chunk_bytes, 8); }},
      {"--host_pool_min_bytes",
       [] { absl::SetFlag(&FLAGS_host_pool_min_bytes, 0); }},
      {"--max_call_bytes",
       [] {
         absl::SetFlag(&FLAGS_max_held_bytes, int64_t{1} << 20);
         absl::SetFlag(&FLAGS_max_call_bytes, int64_t{1} << 21);
       }},
      {"--max_client_held_bytes",
       [] { absl::SetFlag(&FLAGS_max_client_held_bytes, int64_t{-1}); }},
      {"--stream_idle_timeout",
       [] { absl::SetFlag(&FLAGS_stream_idle_timeout, absl::Seconds(-1)); }},
      {"--large_request_threads",
       [] { absl::SetFlag(&FLAGS_large_request_threads, 1025); }},
  });
}

}  // namespace
}  // namespace sortd
