// The policy's constraints (gpu/policy_checks.cc): each broken one is
// refused with its own sentence, the settle's local memory included.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_join.h"
#include "gpu/opencl_engine.h"
#include "gpu/policy.h"
#include "tests/fake_devices.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

using ::testing::HasSubstr;

// Each constraint a policy can break is refused with its own sentence.
TEST(Policy, ViolationsNameEachBrokenConstraint) {
  // PTX needs NVIDIA: anywhere else the policy is refused, not built.
  DeviceInfo other = Engine().info();
  other.vendor = "Some Vendor";
  other.nv_compute_major = 0;
  EnginePolicy p = EnginePolicy::For(other);
  EXPECT_TRUE(p.Violations(other).empty()) << p.ToString();
  p.radix.ranking = TileRanking::kWarpBallots;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("warp-ballots ranking needs an NVIDIA"));
  p.radix.ranking = TileRanking::kWarpEmulated;
  p.radix.radix_bits = 4;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("warp-level ranking needs radix.radix_bits=8"));
  p.radix.radix_bits = 8;
  p.radix.work_group = 48;
  EXPECT_THAT(p.CheckFits(other).message(), HasSubstr("% 32 == 0"));
  p.radix.work_group = 64;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  // Early counts build with warp ranking; three launches without them.
  p.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  EXPECT_THAT(RadixBuildOptions(p.radix, 32, false, 16),
              HasSubstr("-DEARLY_COUNTS=1"));
  p.radix.pass = RadixPass::kThreeLaunch;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  EXPECT_THAT(RadixBuildOptions(p.radix, 32, false, 16),
              ::testing::Not(HasSubstr("-DEARLY_COUNTS")));
  // Early counts need warp-level ranking.
  p.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  p.radix.ranking = TileRanking::kWorkItemCounters;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("one-launch-early-counts needs warp-level ranking"));
  // Several broken constraints: each is named.
  EnginePolicy q = EnginePolicy::For(other);
  q.radix.count_unroll = 5;
  q.radix.lookback = 0;
  q.bitonic.block_32 = 3000;
  q.radix.segment_group_max = size_t{1} << 40;
  const std::vector<std::string> broken = q.Violations(other);
  EXPECT_EQ(broken.size(), 4u) << absl::StrJoin(broken, "; ");
  EXPECT_THAT(q.CheckFits(other).message(),
              HasSubstr("segment_group_max is at most 2^30"));
  EXPECT_THAT(q.CheckFits(other).message(), HasSubstr("count_unroll is 1-4"));
  EXPECT_THAT(q.CheckFits(other).message(), HasSubstr("lookback is 1-64"));
  EXPECT_THAT(q.CheckFits(other).message(),
              HasSubstr("bitonic.block_32 is a power of two"));
  // An empty radix tile would divide the array into zero-key tiles.
  EnginePolicy e = EnginePolicy::For(other);
  ASSERT_TRUE(ApplyPolicyOverrides("radix.items_32=0", &e).ok());
  EXPECT_THAT(e.CheckFits(other).message(),
              HasSubstr("at least one key per work-item (32-bit keys with an "
                        "index)"));
}

// radix_settle's window grows with the work-group: a policy whose settle
// does not fit the device's local memory is refused, whatever its scatter
// needs, and the device's own policy fits it.
TEST(Policy, TheSettlesLocalMemoryIsChecked) {
  DeviceInfo d = Engine().info();
  d.local_mem_bytes = 48 * 1024;
  d.max_work_group = 1024;
  EnginePolicy p = EnginePolicy::For(d);
  ASSERT_TRUE(p.CheckFits(d).ok()) << p.CheckFits(d);
  EXPECT_LE(p.radix.SettleLocalBytes(64), 48u * 1024);
  p.radix.work_group = 512;
  p.radix.items_32 = p.radix.items_64 = 1;
  p.radix.items_32_keys = p.radix.items_64_keys = 1;
  p.radix.small_items = 0;
  EXPECT_LE(p.radix.ScatterLocalBytes(64, true), 48u * 1024);
  EXPECT_GT(p.radix.SettleLocalBytes(64), 48u * 1024);
  const absl::Status fits = p.CheckFits(d);
  EXPECT_FALSE(fits.ok());
  EXPECT_THAT(fits.message(), HasSubstr("the settle of 64-bit keys needs"));
}

}  // namespace
}  // namespace sortd::gpu
