// One-launch radix passes (gpu/passes/onesweep.h): the late look-back,
// streaming key loads, warp-level ranking in every form the device builds,
// marked look-back statuses and the status word's count limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"
#include "gpu/sort_plan.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;
using ::testing::HasSubstr;

// One-launch passes that walk back over earlier tiles only after placing
// their keys (the unranked first pass and radix_late_onesweep), here for
// every pass from the first tile on (and every size by radix), with and
// without picked digits, with statuses zeroed before every pass and with
// marked ones: the same answers as the reference, across partial and many
// tiles and with runs of equal digits.
TEST(OpenClEngine, LateLookbackPassesSortLikeTheEarlyOnes) {
  EnginePolicy base = Engine().policy();
  std::string overrides =
      "radix.pass=one-launch-early-counts,"
      "radix.late_lookback_unordered_32=1,radix.late_lookback_tiles_32=1,"
      "bitonic.max_keys=0,bitonic.max_keys_64=0,bitonic.max_keys_32_keys=0";
  // Warp-level ranking where the device's policy ranks by work-item (its
  // portable form, warp-emulated, on the CPU device).
  if (base.radix.ranking == TileRanking::kWorkItemCounters) {
    absl::StrAppend(&overrides,
                    ",radix.ranking=warp-emulated,radix.radix_bits=8");
  }
  for (auto [picked, marked] : {std::pair{"1", "0"}, std::pair{"0", "0"},
                                std::pair{"1", "536870912"}}) {
    EnginePolicy p = base;
    const absl::Status s = ApplyPolicyOverrides(
        absl::StrCat(overrides, ",radix.picked_digits=", picked,
                     ",radix.marked_status_max=", marked),
        &p);
    ASSERT_TRUE(s.ok()) << s;
    const size_t tile = p.radix.Tile(32, false, size_t{1} << 20);
    const RadixPassPlan plan = PlanRadixPasses(p.radix, 32, false, 3 * tile,
                                               /*has_totals=*/true);
    ASSERT_TRUE(plan.late_ranked && plan.unordered_first);
    ASSERT_EQ(plan.marked, std::string(marked) != "0");
    OpenClEngine::Options options = CpuDevice();
    options.policy = p;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n : {tile - 1, tile + 1, 3 * tile + 17, 40 * tile + 5}) {
      for (Shape shape :
           {Shape::kRandom, Shape::kFewDistinct, Shape::kSorted}) {
        CheckSort(
            **engine, sortd::testing::Generate<uint32_t>(shape, n, 9), false,
            Extra::kNone,
            absl::StrCat("late look-back, picked ", picked, ", marked ", marked,
                         ", n=", n, " ", sortd::testing::ShapeName(shape)));
      }
    }
  }
}

// The build of streaming key loads (PTX) sorts what the plain build sorts,
// on a device that runs PTX, its limit lowered so that short arrays take
// it (the warm-up already sorted through it once); elsewhere the policy is
// refused. The portable twin is the plain build every other test runs.
TEST(OpenClEngine, StreamingKeyLoadsSortLikePlainLoads) {
  EnginePolicy p = Engine().policy();
  p.radix.stream_keys_32_min = p.radix.small_max + 1;
  if (!NvidiaPtxRuns(Engine().info())) {
    EXPECT_THAT(p.CheckFits(Engine().info()).message(),
                HasSubstr("stream_keys_32_min needs an NVIDIA GPU"));
    GTEST_SKIP() << "streaming key loads are PTX: not on "
                 << Engine().info().name;
  }
  const size_t tile = p.radix.Tile(32, false, p.radix.stream_keys_32_min);
  const size_t first = p.radix.stream_keys_32_min;
  ASSERT_TRUE(PlanRadixPasses(p.radix, 32, false, first, true).stream);
  ASSERT_FALSE(PlanRadixPasses(p.radix, 32, false, first - 1, true).stream);
  ASSERT_FALSE(PlanRadixPasses(p.radix, 32, true, first, true).stream);
  ASSERT_FALSE(PlanRadixPasses(p.radix, 64, false, first, true).stream);
  for (const char* picked : {"1", "0"}) {
    EnginePolicy q = p;
    ASSERT_TRUE(
        ApplyPolicyOverrides(absl::StrCat("radix.picked_digits=", picked), &q)
            .ok());
    OpenClEngine::Options options = CpuDevice();
    options.policy = q;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n : {first, first + tile + 1, 3 * first + 17}) {
      for (Shape shape :
           {Shape::kRandom, Shape::kFewDistinct, Shape::kReversed}) {
        const std::string what =
            absl::StrCat("streaming loads, picked ", picked, ", n=", n, " ",
                         sortd::testing::ShapeName(shape));
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 21),
                  false, Extra::kNone, "u32 " + what);
        CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 22), true,
                  Extra::kNone, "f32 desc " + what);
      }
    }
  }
}

// Warp-level ranking: the portable twin (warp operations through local
// memory) everywhere, with warps of 32 and of 16 work-items (the Intel
// policy's); NVIDIA's PTX version where the device is one; the sub-group
// version where the device has sub-group ranking's extensions, with each
// kind of sub-group built-ins it has and sub-groups of 16 (and 8 and 32
// once); with three-launch passes and one-launch passes with early counts
// (keys placed as ranked), 8-bit digits (the only width warp ranking builds
// with), and sizes that end mid-warp and mid-tile (the padding keys must
// rank last). One test per ranking and pass, so that they run at once.
struct WarpRankingCase {
  std::string name;
  TileRanking ranking;
  int warp_size;
  // Sub-group ranking's built-ins: unset, the device's best
  // (BestSubgroupOps); set, these where the device has them and they are
  // not its best. Other rankings take none (the policy's default).
  std::optional<SubgroupOps> ops;
  RadixPass pass;
};

std::vector<WarpRankingCase> WarpRankingCases() {
  constexpr RadixPass kThree = RadixPass::kThreeLaunch;
  constexpr RadixPass kEarly = RadixPass::kOneLaunchEarlyCounts;
  const std::vector<RadixPass> both = {kThree, kEarly};
  // The Intel policy's form.
  const std::vector<RadixPass> intel = {kEarly};
  struct Ranking {
    const char* name;
    TileRanking ranking;
    int warp_size;
    std::optional<SubgroupOps> ops;
    const std::vector<RadixPass>& passes;
  };
  const Ranking rankings[] = {
      {"Emulated32", TileRanking::kWarpEmulated, 32, std::nullopt, both},
      {"Emulated16", TileRanking::kWarpEmulated, 16, std::nullopt, both},
      {"PtxBallots", TileRanking::kWarpBallots, 32, std::nullopt, both},
      {"Subgroup16", TileRanking::kSubgroup, 16, std::nullopt, both},
      {"Subgroup16KhrBallot", TileRanking::kSubgroup, 16,
       SubgroupOps::kKhrBallot, intel},
      {"Subgroup16Khr", TileRanking::kSubgroup, 16, SubgroupOps::kKhr, intel},
      {"Subgroup16Intel", TileRanking::kSubgroup, 16, SubgroupOps::kIntel,
       intel},
      {"Subgroup32", TileRanking::kSubgroup, 32, std::nullopt, intel},
      {"Subgroup8", TileRanking::kSubgroup, 8, std::nullopt, intel}};
  std::vector<WarpRankingCase> cases;
  for (const Ranking& r : rankings) {
    for (RadixPass pass : r.passes) {
      cases.push_back(
          {absl::StrCat(r.name, "_",
                        pass == kThree ? "ThreeLaunch" : "EarlyCounts"),
           r.ranking, r.warp_size, r.ops, pass});
    }
  }
  return cases;
}

// Test lists name the case (gtest prints parameters it cannot name as bytes).
void PrintTo(const WarpRankingCase& c, std::ostream* os) { *os << c.name; }

class WarpRanking : public ::testing::TestWithParam<WarpRankingCase> {};

TEST_P(WarpRanking, SortsEveryShape) {
  const WarpRankingCase& c = GetParam();
  const DeviceInfo& info = Engine().info();
  SubgroupOps ops = SubgroupOps::kKhrBallot;
  if (c.ranking == TileRanking::kWarpBallots) {
    if (!absl::StrContains(info.vendor, "NVIDIA")) {
      GTEST_SKIP() << "PTX ranking is for NVIDIA devices: " << info.ToString();
    }
  }
  if (c.ranking == TileRanking::kSubgroup) {
    const std::optional<SubgroupOps> best = BestSubgroupOps(info);
    if (!best.has_value()) {
      GTEST_SKIP() << "sub-group ranking not available here: "
                   << info.ToString();
    }
    ops = c.ops.value_or(*best);
    if (c.ops.has_value() && (ops == *best || !SubgroupOpsRun(info, ops))) {
      GTEST_SKIP() << "these sub-group built-ins are the device's best "
                      "(tested as such) or missing";
    }
  }
  OpenClEngine::Options options = CpuDevice();
  EnginePolicy p = EnginePolicy::For(info);
  p.radix = {.radix_bits = 8,
             .work_group = 64,
             .items_32 = 8,
             .items_64 = 4,
             .items_32_keys = 16,  // keys-only tiles twice as long
             .items_64_keys = 8,
             .pass = c.pass,
             .ranking = c.ranking,
             .warp_size = c.warp_size,
             .subgroup_ops = ops,
             // Up to 512 keys: tiles of 2 keys per work-item.
             .small_items = 2,
             .small_max = 512,
             // Segments of 2 keys up to a tile: radix_segments.
             .segment_radix_above = 1};
  options.policy = p;
  options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
  SCOPED_TRACE(p.ToString());
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->policy().radix.ranking, c.ranking);
  if (c.ranking == TileRanking::kSubgroup) {
    // The size the kernels saw on the device (radix_sub_group_probe).
    EXPECT_EQ((*engine)->radix_sub_group_size(), c.warp_size);
    std::printf("sub-group ranking: sub-groups of %d seen on the device (%s)\n",
                (*engine)->radix_sub_group_size(),
                RadixBuildOptions(p.radix, 32, true, 8).c_str());
  }
  for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{511}, size_t{512},
                   size_t{513}, size_t{70'001}}) {
    for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kSorted,
                        Shape::kReversed, Shape::kSpecial, Shape::kAllEqual}) {
      const std::string what = absl::StrCat("n=", n);
      CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 5),
                false, Extra::kNone, "warp u32 " + what);
      CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 6), true,
                Extra::kU64ValuesAndPermutation, "warp f32 " + what);
      CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 7), false,
                Extra::kPermutation, "warp i64 " + what);
    }
  }
  // Segment lengths from 0 to 5 blocks: all three routes (radix_segments
  // up to a tile of 512 keys with payloads, 512 for 64-bit keys alone;
  // bitonic; radix passes).
  size_t total = 0;
  const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
  CheckSegmented(**engine,
                 sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                 offsets, true, true);
  CheckSegmented(
      **engine,
      sortd::testing::Generate<int64_t>(Shape::kFewDistinct, total, 5), offsets,
      false, false);
  // radix_segments gives each work-item as many keys as cover its segment:
  // lengths on both sides of every step of that number, from one key a
  // work-item (and segments of 2 and 3 keys) up to a whole keys-only tile
  // and past it.
  const RadixSortPolicy& rp = (*engine)->policy().radix;
  for (int bits : {32, 64}) {
    const size_t wg = rp.work_group, tile = rp.Tile(bits, false);
    std::vector<uint32_t> steps = {0, 2, 5};
    for (size_t len = wg - 1; len <= tile + 1; len += wg) {
      for (size_t l : {len, len + 1, len + 2}) {
        steps.push_back(steps.back() + static_cast<uint32_t>(l));
      }
    }
    SCOPED_TRACE(absl::StrCat(bits, "-bit keys only, segments by step"));
    if (bits == 32) {
      CheckSegmented(
          **engine,
          sortd::testing::Generate<uint32_t>(Shape::kRandom, steps.back(), 11),
          steps, true, false, /*with_permutation=*/false);
    } else {
      CheckSegmented(
          **engine,
          sortd::testing::Generate<int64_t>(Shape::kSpecial, steps.back(), 12),
          steps, false, false, /*with_permutation=*/false);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, WarpRanking, ::testing::ValuesIn(WarpRankingCases()),
    [](const ::testing::TestParamInfo<WarpRankingCase>& p) {
      return p.param.name;
    });

// A radix policy of small tiles (8-bit digits, 64 work-items) with one-
// launch passes of the given form: the CPU device's tests of look-back
// statuses set their knobs on it.
RadixSortPolicy SmallOneLaunchTiles(RadixPass pass, TileRanking ranking) {
  return {.radix_bits = 8,
          .work_group = 64,
          .items_32 = 8,
          .items_64 = 4,
          .items_32_keys = 16,
          .items_64_keys = 8,
          .pass = pass,
          .ranking = ranking};
}

// Marked look-back statuses (one area zeroed once per sort, each pass's
// words marked with its parity) and the digit count's unrolled loads (3: a
// remainder loop too). Keys whose odd digits are all equal skip those passes,
// so a pass's parity must follow the passes that ran, not the pass number; each
// engine sorts several sizes in turn, so status areas come back from the pool
// holding another sort's words. On NVIDIA the status lines' L2 prefetch (PTX)
// runs too.
TEST(Algorithms, MarkedLookBackStatuses) {
  const bool nvidia = absl::StrContains(Engine().info().vendor, "NVIDIA");
  struct Config {
    RadixPass pass;
    TileRanking ranking;
    int count_unroll;
    bool prefetch;
  };
  for (auto [pass, ranking, count_unroll, prefetch] :
       {Config{RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 3,
               false},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 2,
         nvidia},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 4,
         false}}) {
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = SmallOneLaunchTiles(pass, ranking);
    p.radix.count_unroll = count_unroll;
    p.radix.marked_status_max = size_t{1} << 28;
    p.radix.status_prefetch = prefetch;
    options.policy = p;
    options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
    SCOPED_TRACE(p.ToString());
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_THAT((*engine)->policy().ToString(),
                HasSubstr("radix.marked_status_max=268435456"));
    EXPECT_TRUE((*engine)->policy().radix.MarkedStatus(size_t{1} << 20));
    for (size_t n : {size_t{1}, size_t{513}, size_t{100'003}, size_t{4097},
                     size_t{150'001}}) {
      const std::string what = absl::StrCat("n=", n);
      for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kReversed,
                          Shape::kAllEqual}) {
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 5),
                  false, Extra::kNone, "marked u32 " + what);
        CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 6), true,
                  Extra::kU64ValuesAndPermutation, "marked f32 " + what);
      }
      std::vector<uint64_t> gaps =
          sortd::testing::Generate<uint64_t>(Shape::kRandom, n, 7);
      for (uint64_t& k : gaps) k &= 0x00FF00FF00FF00FFull;
      CheckSort(**engine, gaps, false, Extra::kPermutation,
                "marked u64, odd digits shared, " + what);
      CheckSort(**engine, gaps, true, Extra::kNone,
                "marked u64, odd digits shared, desc, " + what);
    }
  }
  // Marks take a bit from the counts: only arrays of fewer than 2^29 keys.
  RadixSortPolicy r;
  r.marked_status_max = size_t{1} << 30;
  EXPECT_TRUE(r.MarkedStatus((size_t{1} << 29) - 1));
  EXPECT_FALSE(r.MarkedStatus(size_t{1} << 29));
  r.marked_status_max = 1000;
  EXPECT_FALSE(r.MarkedStatus(1001));
  // The prefetch is PTX: refused anywhere but NVIDIA.
  DeviceInfo other = Engine().info();
  other.vendor = "Some Vendor";
  EnginePolicy portable = EnginePolicy::For(other);
  EXPECT_FALSE(portable.radix.status_prefetch);
  EXPECT_TRUE(portable.CheckFits(other).ok()) << portable.ToString();
  portable.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  portable.radix.ranking = TileRanking::kWarpEmulated;
  portable.radix.radix_bits = 8;
  portable.radix.status_prefetch = true;
  EXPECT_THAT(portable.CheckFits(other).message(),
              HasSubstr("status_prefetch needs an NVIDIA GPU"));
}

// One-launch passes take arrays of up to 2^status_count_bits keys, one
// more than the status word's count holds: the last tile of such an array
// can have a prefix that does not fit, and publishes none. Here the count
// is 12 bits wide so that 4096 keys reach it (production: 30 bits, 2^30
// keys); all-equal keys put every key in one digit, so the last tile's
// prefix is 4096. Unmarked and marked statuses.
TEST(Algorithms, LastTilePrefixWiderThanTheStatusCount) {
  constexpr int kBits = 12;
  constexpr size_t kMax = size_t{1} << kBits;
  struct Config {
    RadixPass pass;
    TileRanking ranking;
    size_t marked_max;
  };
  for (auto [pass, ranking, marked_max] :
       {Config{RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 0},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated,
         size_t{1} << 28}}) {
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = SmallOneLaunchTiles(pass, ranking);
    p.radix.marked_status_max = marked_max;
    p.radix.status_count_bits = kBits;
    const RadixPassPlan at = PlanRadixPasses(p.radix, 32, false, kMax, true);
    ASSERT_TRUE(at.one_launch);
    EXPECT_EQ(at.status_value_mask, kMax - 1);
    EXPECT_EQ(at.marked, marked_max > 0);
    EXPECT_FALSE(
        PlanRadixPasses(p.radix, 32, false, kMax + 1, true).one_launch);
    options.policy = p;
    options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
    SCOPED_TRACE(p.ToString());
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n : {kMax, kMax + 1}) {
      const std::string what = absl::StrCat("n=", n);
      for (Shape shape : {Shape::kAllEqual, Shape::kRandom}) {
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 8),
                  true, Extra::kPermutation, "u32 desc " + what);
        CheckSort(**engine, sortd::testing::Generate<uint64_t>(shape, n, 10),
                  false, Extra::kNone, "u64 " + what);
      }
    }
  }
  // The count must hold a tile's own count.
  EnginePolicy narrow = EnginePolicy::For(Engine().info());
  narrow.radix.status_count_bits = 4;
  EXPECT_THAT(narrow.CheckFits(Engine().info()).message(),
              HasSubstr("status_count_bits"));
}

}  // namespace
}  // namespace sortd::gpu
