// The dispatch of radix passes (gpu/passes/radix_passes.h): passes whose
// digit every key shares are skipped, and 8-bit digits sort like 4-bit ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

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

TEST(OpenClEngine, SkipsPassesWhoseDigitIsShared) {
  // Keys below 16 differ only in the lowest 4-bit digit: one pass runs.
  std::vector<uint32_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i * 7) % 16;
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  std::vector<uint32_t> perm(keys.size());
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
  ASSERT_TRUE(Engine().Sort(job).ok());
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == out[i - 1]) {
      ASSERT_LT(perm[i - 1], perm[i]);
    }
  }
  CheckSort(Engine(), keys, true, Extra::kU32Values, "shared digits, desc");
}

// 8-bit passes, each tile ranked by work-item counters in one 8-bit step.
TEST(Algorithms, EightBitDigits) {
  OpenClEngine::Options options = CpuDevice();
  EnginePolicy p = EnginePolicy::For(Engine().info());
  p.radix = {.radix_bits = 8, .work_group = 64, .items_32 = 8, .items_64 = 8};
  options.policy = p;
  options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (size_t n :
       {size_t{3}, size_t{511}, size_t{512}, size_t{513}, size_t{100'000}}) {
    for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kSpecial}) {
      CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 3), false,
                Extra::kU64ValuesAndPermutation, "8-bit f32");
      CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 3), true,
                Extra::kPermutation, "8-bit i64");
    }
  }
  size_t total = 0;
  const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
  CheckSegmented(**engine,
                 sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                 offsets, true, true);
}

}  // namespace
}  // namespace sortd::gpu
