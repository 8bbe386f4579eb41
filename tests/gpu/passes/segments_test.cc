// The segmented sort's kernels (gpu/passes/segments.cc): segments longer
// than a tile, up to segment_group_max keys, sorted by one work-group each
// through scratch arrays, against the whole array sorted as one.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::Shape;

// Segments longer than a tile, up to segment_group_max keys, are sorted by
// one work-group each (every pass in one launch, through scratch arrays);
// with the knob at 0, or a segment longer, the whole array is sorted as
// one. Both agree with the reference: lengths around the tile, a segment
// of exactly the maximum, every key width, both orders, payloads and
// permutations.
TEST(SegmentedSort, LongSegmentsOneWorkGroupEachOrAsOneArray) {
  for (const char* overrides : {"", "radix.segment_group_max=0"}) {
    OpenClEngine::Options options = CpuDevice();
    options.policy_overrides = overrides;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const RadixSortPolicy& rp = (*engine)->policy().radix;
    const bool groups = rp.segment_group_max > 0;
    EXPECT_EQ(groups, std::string(overrides).empty());
    std::mt19937 rng(5);
    for (int bits : {32, 64}) {
      const size_t tile = rp.Tile(bits, true);
      const size_t block = (*engine)->policy().bitonic.Block(bits);
      // The default's maximum, or (with the knob at 0) as long.
      const size_t longest = groups ? rp.segment_group_max : size_t{1} << 14;
      ASSERT_GT(longest, 3 * tile + 5);
      std::vector<size_t> lengths = {
          tile - 1, tile, tile + 1, 3 * tile + 5, block + 1, 0, 1, 40, longest};
      for (int i = 0; i < 6; ++i) {
        lengths.push_back(block + 1 + rng() % (longest - block));
      }
      std::shuffle(lengths.begin(), lengths.end(), rng);
      std::vector<uint32_t> offsets = {0};
      for (size_t len : lengths) {
        offsets.push_back(offsets.back() + static_cast<uint32_t>(len));
      }
      const size_t total = offsets.back();
      SCOPED_TRACE(absl::StrCat(overrides, " ", bits, "-bit keys"));
      if (bits == 32) {
        CheckSegmented(**engine,
                       testing::Generate<float>(Shape::kSpecial, total, 3),
                       offsets, true, true);
        CheckSegmented(**engine,
                       testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                       offsets, false, false, /*with_permutation=*/false);
      } else {
        CheckSegmented(
            **engine, testing::Generate<int64_t>(Shape::kFewDistinct, total, 5),
            offsets, false, true);
        CheckSegmented(**engine,
                       testing::Generate<double>(Shape::kRandom, total, 6),
                       offsets, true, false, /*with_permutation=*/false);
      }
      // Which way it went: one work-group per segment launches no radix
      // pass over the whole array.
      const auto keys = testing::Generate<uint32_t>(Shape::kRandom, total, 7);
      std::vector<uint32_t> out(total);
      StageTimes stages;
      SortJob job{.key_type = KeyType::kU32,
                  .count = total,
                  .keys = reinterpret_cast<const std::byte*>(keys.data()),
                  .keys_out = reinterpret_cast<std::byte*>(out.data()),
                  .stages = &stages};
      ASSERT_TRUE((*engine)->SortSegments(job, offsets).ok());
      bool scatter = false;
      for (const StageTime& st : stages) scatter |= st.stage == "scatter";
      EXPECT_EQ(scatter, !groups);
    }
  }
}

}  // namespace
}  // namespace sortd::gpu
