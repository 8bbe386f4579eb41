// The policy's knobs by name (gpu/policy_knobs.cc): what ToString prints
// reads back as overrides, and knobs a policy's pass form leaves unused
// are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gpu/opencl_engine.h"
#include "gpu/policy.h"
#include "tests/fake_devices.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

using ::testing::HasSubstr;

// ToString prints every knob as key=value; ApplyPolicyOverrides reads them
// back, and refuses unknown keys and bad values.
TEST(Policy, OverridesReadWhatToStringPrints) {
  DeviceInfo nvidia = Engine().info();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.is_gpu = true;
  nvidia.nv_compute_major = 9;
  const EnginePolicy base = EnginePolicy::For(nvidia);
  EXPECT_EQ(base.name, "nvidia-ptx");
  // Every knob of one policy applied to another gives the first back.
  EnginePolicy other = EnginePolicy::For(Engine().info());
  const std::string text = base.ToString();
  std::string spec = text.substr(text.find(' ') + 1);
  std::replace(spec.begin(), spec.end(), ' ', ',');
  ASSERT_TRUE(ApplyPolicyOverrides(spec, &other).ok());
  EXPECT_EQ(other.ToString().substr(other.ToString().find(" radix.")),
            text.substr(text.find(" radix.")));
  EXPECT_THAT(other.name, HasSubstr("+ overrides"));
  EnginePolicy p = base;
  ASSERT_TRUE(
      ApplyPolicyOverrides("radix.pass=three-launch, "
                           "radix.ranking=warp-emulated,bitonic.max_keys=0",
                           &p)
          .ok());
  EXPECT_EQ(p.radix.pass, RadixPass::kThreeLaunch);
  EXPECT_EQ(p.radix.ranking, TileRanking::kWarpEmulated);
  EXPECT_EQ(p.bitonic.max_keys, 0u);
  for (const char* bad :
       {"radix.nonsense=1", "radix.pass=two-launch", "radix.lookback=-1",
        "radix.bank_pad=1", "radix.ranking_64=same", "radix.local_bits=4",
        "radix.ranking=warp-masks", "radix.pass=one-launch",
        "radix.lookback"}) {
    EnginePolicy q = base;
    const absl::Status s = ApplyPolicyOverrides(bad, &q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(q.ToString(), base.ToString()) << bad;  // untouched
  }
  // Pass forms, rankings and knobs that no policy has: refused by name.
  EnginePolicy q = base;
  EXPECT_THAT(ApplyPolicyOverrides("radix.pass=one-launch", &q).message(),
              HasSubstr("not a value of radix.pass"));
  EXPECT_THAT(ApplyPolicyOverrides("radix.ranking=warp-masks", &q).message(),
              HasSubstr("not a value of radix.ranking"));
  for (const char* knob : {"radix.bank_pad", "radix.local_bits",
                           "radix.ranking_64", "radix.count_groups_per_cu"}) {
    EXPECT_THAT(ApplyPolicyOverrides(absl::StrCat(knob, "=1"), &q).message(),
                HasSubstr(absl::StrCat("no knob named '", knob, "'")));
  }
  // The build options are made from the policy alone.
  EXPECT_THAT(RadixBuildOptions(base.radix, 32, false, 32),
              HasSubstr("-DITEMS=32 -DHAS_INDEX=0"));
  EXPECT_THAT(RadixBuildOptions(base.radix, 32, false, 32),
              HasSubstr("-DRANKING=2 -DEARLY_COUNTS=1"));  // ballots
  EXPECT_THAT(RadixBuildOptions(base.radix, 64, true, 8),
              HasSubstr("-DRANKING=2 -DEARLY_COUNTS=1"));
  EXPECT_THAT(RadixBuildOptions(base.radix, 64, true, 8),
              HasSubstr("-DSTATUS_PREFETCH=1"));
}

// The knobs an override left on but idle are named (the startup log and
// the benchmark print them); the device's own policies leave none idle.
TEST(Policy, IdleKnobsAreNamed) {
  const DeviceInfo nvidia = H100Info();
  const EnginePolicy np = EnginePolicy::For(nvidia);
  EXPECT_THAT(np.radix.IdleKnobs(), ::testing::IsEmpty());
  for (const std::string& name : EnginePolicy::Names()) {
    absl::StatusOr<EnginePolicy> named = EnginePolicy::Named(name, nvidia);
    ASSERT_TRUE(named.ok()) << name;
    EXPECT_THAT(named->radix.IdleKnobs(), ::testing::IsEmpty()) << name;
  }

  EnginePolicy three = np;
  ASSERT_TRUE(ApplyPolicyOverrides("radix.pass=three-launch", &three).ok());
  EXPECT_THAT(three.radix.IdleKnobs(),
              ::testing::UnorderedElementsAre(
                  "radix.status_prefetch=1",
                  absl::StrCat("radix.marked_status_max=",
                               RadixSortPolicy::kMarkedStatusLimit),
                  "radix.late_lookback_unordered_32=1",
                  "radix.late_lookback_tiles_32=8192"));
  // Work-item ranking has no work-group segment sort either.
  EnginePolicy counters = three;
  ASSERT_TRUE(ApplyPolicyOverrides("radix.ranking=work-item", &counters).ok());
  EXPECT_THAT(counters.radix.IdleKnobs(),
              ::testing::Contains("radix.segment_radix_above=2048"));
  EXPECT_THAT(three.radix.IdleKnobs(),
              ::testing::Not(::testing::Contains(
                  ::testing::HasSubstr("segment_radix_above"))));

  // Status prefetch is PTX, refused off NVIDIA only where it would act.
  DeviceInfo other = nvidia;
  other.vendor = "Another Vendor";
  other.nv_compute_major = 0;
  EnginePolicy portable = EnginePolicy::For(other);
  ASSERT_TRUE(portable.CheckFits(other).ok()) << portable.CheckFits(other);
  EnginePolicy prefetch = portable;
  ASSERT_TRUE(ApplyPolicyOverrides("radix.pass=one-launch-early-counts,"
                                   "radix.ranking=warp-emulated,"
                                   "radix.radix_bits=8,"
                                   "radix.status_prefetch=1",
                                   &prefetch)
                  .ok());
  EXPECT_THAT(prefetch.CheckFits(other).message(),
              HasSubstr("radix.status_prefetch needs"));
  ASSERT_TRUE(ApplyPolicyOverrides("radix.pass=three-launch", &prefetch).ok());
  EXPECT_TRUE(prefetch.CheckFits(other).ok()) << prefetch.CheckFits(other);
  EXPECT_THAT(prefetch.radix.IdleKnobs(),
              ::testing::Contains("radix.status_prefetch=1"));
}

}  // namespace
}  // namespace sortd::gpu
