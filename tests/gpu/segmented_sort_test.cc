// Segmented sorts on the OpenCL engine (gpu/segmented_sort.cc) against the
// reference applied segment by segment: mixed lengths, many short segments
// (the one-work-group kernels' own cases are passes/segments_test.cc), the
// CPU path's default, and bad offsets refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu/cpu_sorter.h"
#include "gpu/opencl_engine.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::KeyOf;
using sortd::testing::Shape;

TEST(SegmentedSort, MixedLengthsEveryTypeBothOrders) {
  OpenClEngine& engine = Engine();
  for (KeyType type : kAllKeyTypes) {
    DispatchKeyType(type, [&]<KeyType T>() {
      using K = KeyOf<T>;
      const size_t block = engine.policy().bitonic.Block(sizeof(K) * 8);
      for (bool desc : {false, true}) {
        size_t total;
        const auto offsets = MixedOffsets(block, desc + 10, &total);
        const Shape shape = desc ? Shape::kFewDistinct : Shape::kSpecial;
        SCOPED_TRACE(KeyTypeName(type));
        CheckSegmented(engine, sortd::testing::Generate<K>(shape, total, 4),
                       offsets, desc, /*with_payload=*/!desc);
      }
    });
  }
}

// Segments longer than a block sort the whole array as one: by key, then
// by segment in as many passes as the number of segments needs (several
// here, with 4-bit digits more); keys only, the index made for the run.
// Segments that all fit a block take the one-work-group kernels instead.
TEST(SegmentedSort, ManySegmentsAsOneArrayAndShortOnes) {
  OpenClEngine& engine = Engine();
  std::mt19937 rng(21);
  for (bool with_long : {true, false}) {
    for (size_t segments : {size_t{2}, size_t{300}, size_t{5000}}) {
      std::vector<uint32_t> offsets = {0};
      for (size_t s = 0; s < segments; ++s) {
        const size_t len =
            with_long && s == segments / 2 ? 3 * 4096 + 7 : rng() % 40;
        offsets.push_back(offsets.back() + static_cast<uint32_t>(len));
      }
      const size_t total = offsets.back();
      SCOPED_TRACE(absl::StrCat(segments, " segments, long: ", with_long));
      CheckSegmented(
          engine,
          sortd::testing::Generate<uint32_t>(Shape::kFewDistinct, total, 6),
          offsets, false, false, /*with_permutation=*/false);
      CheckSegmented(
          engine, sortd::testing::Generate<double>(Shape::kSpecial, total, 7),
          offsets, true, false, /*with_permutation=*/false);
      CheckSegmented(
          engine, sortd::testing::Generate<int32_t>(Shape::kRandom, total, 8),
          offsets, true, true);
    }
  }
}

TEST(SegmentedSort, DefaultImplementationOnTheCpuPathAgrees) {
  CpuSorter cpu({.threads = 2});
  size_t total;
  const auto offsets = MixedOffsets(300, 3, &total);
  CheckSegmented(cpu,
                 sortd::testing::Generate<float>(Shape::kSpecial, total, 5),
                 offsets, true, true);
}

TEST(SegmentedSort, RejectsBadOffsets) {
  std::vector<uint32_t> keys(10);
  std::vector<uint32_t> out(10);
  SortJob job{.key_type = KeyType::kU32,
              .count = 10,
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data())};
  std::vector<uint32_t> decreasing = {0, 6, 4, 10};
  std::vector<uint32_t> short_end = {0, 5, 9};
  EXPECT_EQ(Engine().SortSegments(job, decreasing).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Engine().SortSegments(job, short_end).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sortd::gpu
