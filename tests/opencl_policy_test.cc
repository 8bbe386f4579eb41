// The engine's tuning: the named policy of each kind of device, each broken
// constraint named, and the policy's text read back as overrides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/transpose.h"
#include "gpu/opencl_engine.h"
#include "server/cpu_sorter.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::KeyOf;
using sortd::testing::Shape;
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
              HasSubstr("warp-ballots and warp-masks ranking need an NVIDIA"));
  p.radix.ranking = TileRanking::kWarpEmulated;
  p.radix.work_group = 48;
  EXPECT_THAT(p.CheckFits(other).message(), HasSubstr("% 32 == 0"));
  p.radix.work_group = 64;
  p.radix.local_bits = 2;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("local_bits applies only to work-item ranking"));
  p.radix.local_bits = 0;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  // Direct placement needs early counts and ballots or their twin.
  p.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  p.radix.direct_place_32 = p.radix.direct_place_64 = true;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  p.radix.pass = RadixPass::kOneLaunch;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("direct_place needs one-launch-early-counts"));
  // Early counts need warp-level ranking for both key widths.
  p.radix.direct_place_32 = p.radix.direct_place_64 = false;
  p.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  p.radix.ranking_64 = TileRanking::kWorkItemCounters;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("one-launch-early-counts needs warp-level ranking"));
  // Several broken constraints: each is named.
  EnginePolicy q = EnginePolicy::For(other);
  q.radix.count_unroll = 5;
  q.radix.lookback = 0;
  q.bitonic.block_32 = 3000;
  const std::vector<std::string> broken = q.Violations(other);
  EXPECT_EQ(broken.size(), 3u) << absl::StrJoin(broken, "; ");
  EXPECT_THAT(q.CheckFits(other).message(), HasSubstr("count_unroll is 1-4"));
  EXPECT_THAT(q.CheckFits(other).message(), HasSubstr("lookback is 1-64"));
  EXPECT_THAT(q.CheckFits(other).message(),
              HasSubstr("bitonic.block_32 is a power of two"));
}

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
      ApplyPolicyOverrides("radix.pass=three-launch, radix.ranking_64=same,"
                           "radix.ranking=warp-emulated,bitonic.max_keys=0",
                           &p)
          .ok());
  EXPECT_EQ(p.radix.pass, RadixPass::kThreeLaunch);
  EXPECT_EQ(p.radix.Ranking(64), TileRanking::kWarpEmulated);
  EXPECT_EQ(p.bitonic.max_keys, 0u);
  for (const char* bad :
       {"radix.nonsense=1", "radix.pass=two-launch", "radix.lookback=-1",
        "radix.bank_pad=2", "radix.lookback"}) {
    EnginePolicy q = base;
    const absl::Status s = ApplyPolicyOverrides(bad, &q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(q.ToString(), base.ToString()) << bad;  // untouched
  }
  // The build options are made from the policy alone.
  EXPECT_THAT(RadixBuildOptions(base.radix, 32, false, 24),
              HasSubstr("-DRANKING=3"));  // SORTD_RANK_WARP_MASKS
  EXPECT_THAT(RadixBuildOptions(base.radix, 64, true, 8),
              HasSubstr("-DRANKING=2 -DEARLY_COUNTS=1 -DDIRECT_PLACE=1"));
  EXPECT_THAT(RadixBuildOptions(base.radix, 64, true, 8),
              HasSubstr("-DSTATUS_PREFETCH=1"));
}

TEST(Policy, FitsTheDeviceAndPrints) {
  const EnginePolicy& p = Engine().policy();
  EXPECT_TRUE(p.CheckFits(Engine().info()).ok());
  EXPECT_THAT(p.ToString(), HasSubstr("radix.radix_bits="));
  EXPECT_THAT(p.ToString(), HasSubstr("radix.local_bits="));
  EXPECT_THAT(p.ToString(), HasSubstr("transpose.matrices_per_group="));
  // The NVIDIA entry (8-bit passes, each ranked in one warp-level step,
  // one launch per pass) fits an H100's limits.
  DeviceInfo nvidia = Engine().info();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.is_gpu = true;
  nvidia.local_mem_bytes = 48 * 1024;
  nvidia.max_work_group = 1024;
  const EnginePolicy np = EnginePolicy::For(nvidia);
  EXPECT_EQ(np.radix.radix_bits, 8);
  EXPECT_EQ(np.name, "nvidia-ptx");
  EXPECT_EQ(np.radix.Ranking(32), TileRanking::kWarpMasks);
  // 64-bit keys: ballots, keys placed as ranked.
  EXPECT_EQ(np.radix.Ranking(64), TileRanking::kWarpBallots);
  EXPECT_TRUE(np.radix.DirectPlace(64));
  EXPECT_FALSE(np.radix.DirectPlace(32));
  // Marked look-back statuses up to their limit, status lines prefetched.
  EXPECT_TRUE(np.radix.MarkedStatus((size_t{1} << 29) - 1));
  EXPECT_TRUE(np.radix.status_prefetch);
  EXPECT_EQ(np.radix.count_unroll, 2);
  // An NVIDIA GPU older than sm_70 cannot build the PTX: it gets the
  // portable policy, and a PTX policy does not fit it.
  DeviceInfo old_nvidia = nvidia;
  old_nvidia.nv_compute_major = 6;
  const EnginePolicy op = EnginePolicy::For(old_nvidia);
  EXPECT_EQ(op.radix.ranking, TileRanking::kWorkItemCounters);
  EXPECT_TRUE(op.CheckFits(old_nvidia).ok()) << op.ToString();
  EXPECT_FALSE(np.CheckFits(old_nvidia).ok());
  old_nvidia.nv_compute_major = 7;
  EXPECT_EQ(EnginePolicy::For(old_nvidia).radix.ranking,
            TileRanking::kWarpMasks);
  EXPECT_EQ(np.radix.LocalBits(), 8);
  EXPECT_GT(np.radix.Items(32, false), np.radix.Items(32, true));
  EXPECT_TRUE(np.CheckFits(nvidia).ok()) << np.ToString();
  // The same entry is refused by a device of another vendor (PTX).
  DeviceInfo not_nvidia = nvidia;
  not_nvidia.vendor = "Another Vendor";
  EXPECT_FALSE(np.CheckFits(not_nvidia).ok());
  DeviceInfo small = Engine().info();
  small.local_mem_bytes = 8 * 1024;
  small.max_work_group = 128;
  small.is_gpu = true;
  EnginePolicy fitted = EnginePolicy::For(small);
  EXPECT_TRUE(fitted.CheckFits(small).ok()) << fitted.ToString();
  EXPECT_FALSE(p.CheckFits(small).ok());
}

}  // namespace
}  // namespace sortd::gpu
