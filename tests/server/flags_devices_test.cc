// sortd's flags on the devices and their engines (server/flags_devices.cc):
// tuning policies by name, fault injection only as the flag says, and every
// such flag out of range refused naming itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "server/flags.h"
#include "server/flags_internal.h"
#include "tests/server/flag_checks.h"

namespace sortd {
namespace {

TEST(DeviceFlags, AnUnknownPolicyIsRefusedListingTheKnownOnes) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_kernel_policy, "no-such-policy");
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_FALSE(o.ok());
  for (const std::string& name : gpu::EnginePolicy::Names()) {
    EXPECT_THAT(o.status().message(), ::testing::HasSubstr(name));
  }
}

TEST(DeviceFlags, FaultInjectionIsOnlyWhatTheFlagSays) {
  absl::FlagSaver saver;
  absl::StatusOr<gpu::OpenClEngine::Options> base = EngineBase();
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_FALSE(base->faults.any());
  absl::SetFlag(&FLAGS_inject_faults, "enqueue=2,stage=upload");
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->engines.base.faults.any());
  EXPECT_EQ(o->inject_faults, "enqueue=2,stage=upload");
}

TEST(DeviceFlags, EveryFlagOutOfRangeIsRefusedNamingIt) {
  testing::ExpectEachRefused({
      {"--pipeline_depth", [] { absl::SetFlag(&FLAGS_pipeline_depth, 0); }},
      {"--full_pipeline_depth",
       [] { absl::SetFlag(&FLAGS_full_pipeline_depth, 17); }},
      {"--device_memory_bytes",
       [] { absl::SetFlag(&FLAGS_device_memory_bytes, -1); }},
      {"--kernel_profile_interval",
       [] {
         absl::SetFlag(&FLAGS_kernel_profile_interval, absl::Seconds(-1));
       }},
      {"--host_pinned_max_bytes",
       [] { absl::SetFlag(&FLAGS_host_pinned_max_bytes, int64_t{-1}); }},
      {"--warm_up_keys", [] { absl::SetFlag(&FLAGS_warm_up_keys, -1); }},
      {"--kernel_policy",
       [] { absl::SetFlag(&FLAGS_kernel_policy, "no-such-policy"); }},
      {"--kernel_policy_overrides",
       [] { absl::SetFlag(&FLAGS_kernel_policy_overrides, "no.such=1"); }},
      {"enqueue", [] { absl::SetFlag(&FLAGS_inject_faults, "enqueue=x"); }},
  });
}

}  // namespace
}  // namespace sortd
