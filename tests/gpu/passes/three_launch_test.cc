// Three-launch radix passes (histogram, scan, scatter): every level of the
// tiles' offset scan, with tiles small enough that short arrays need them.
#include <gtest/gtest.h>

#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;

TEST(OpenClEngine, EveryScanLevelWithTinyTiles) {
  OpenClEngine::Options options = CpuDevice();
  options.policy = TinyPolicy();
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // 32-key tiles, 16 digits: 40'000 keys give 20'000 counters, scanned in
  // blocks of 32 -> 625 sums -> 20 -> 1: three levels.
  for (size_t n :
       {size_t{31}, size_t{32}, size_t{33}, size_t{1025}, size_t{40'000}}) {
    CheckSort(**engine,
              sortd::testing::Generate<uint32_t>(Shape::kRandom, n, 6), false,
              Extra::kPermutation, "tiny tiles n=" + std::to_string(n));
    CheckSort(**engine, sortd::testing::Generate<double>(Shape::kSpecial, n, 6),
              true, Extra::kU64ValuesAndPermutation,
              "tiny tiles f64 n=" + std::to_string(n));
  }
}

}  // namespace
}  // namespace sortd::gpu
