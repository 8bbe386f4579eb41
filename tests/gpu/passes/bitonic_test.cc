// The bitonic network (gpu/passes/bitonic.h) and radix passes agree with
// the reference on every size either can take.
#include <gtest/gtest.h>

#include "gpu/opencl_engine.h"
#include "gpu/sort_plan.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;

// Both algorithms, forced, across the bitonic block and global-merge sizes.
TEST(Algorithms, BitonicAndRadixBothMatchTheReference) {
  for (auto algorithm : {sortd::gpu::SortAlgorithm::kBitonic,
                         sortd::gpu::SortAlgorithm::kRadix}) {
    OpenClEngine::Options options = CpuDevice();
    options.algorithm = algorithm;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const size_t block = (*engine)->policy().bitonic.Block(32);
    for (size_t n : {size_t{1}, size_t{2}, size_t{5}, block - 1, block,
                     block + 1, 4 * block + 3, 9 * block}) {
      CheckSort(**engine,
                sortd::testing::Generate<int32_t>(Shape::kFewDistinct, n, 2),
                n % 2, Extra::kU32Values, "i32 n=" + std::to_string(n));
      CheckSort(**engine,
                sortd::testing::Generate<double>(Shape::kSpecial, n, 2),
                !(n % 2), Extra::kPermutation, "f64 n=" + std::to_string(n));
      CheckSort(**engine,
                sortd::testing::Generate<uint64_t>(Shape::kReversed, n, 2),
                false, Extra::kNone, "u64 n=" + std::to_string(n));
    }
  }
}

}  // namespace
}  // namespace sortd::gpu
