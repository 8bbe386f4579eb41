// The OpenCL engine against the reference, on the OpenCL CPU device (PoCL in
// CI; a GPU with SORTD_TEST_DEVICE=gpu): every key type and order, payloads,
// permutations and stability at every tile boundary.
//
// This program also holds the tests of the engine's other units, a file
// each beside this one (engine_init_test.cc, engine_run_test.cc,
// engine_warm_up_test.cc, segmented_sort_test.cc, policy_vendors_test.cc,
// passes/*_test.cc), so that one program runs the
// whole kernel suite on a device.
#include "gpu/opencl_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gpu/sort_plan.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::KeyOf;
using sortd::testing::Shape;
using ::testing::HasSubstr;

class OpenClSortTest
    : public ::testing::TestWithParam<std::tuple<KeyType, bool, Extra>> {};

TEST_P(OpenClSortTest, MatchesStableReferenceOnEveryShapeAndBoundaryLength) {
  const auto [type, desc, extra] = GetParam();
  OpenClEngine& engine = Engine();
  const size_t tile =
      engine.policy().radix.Tile(KeySize(type) * 8, extra != Extra::kNone);
  std::vector<size_t> lengths = sortd::testing::BoundaryLengths();
  for (size_t t : {tile - 1, tile, tile + 1, 3 * tile + 1})
    lengths.push_back(t);
  DispatchKeyType(type, [&]<KeyType T>() {
    using K = KeyOf<T>;
    for (Shape shape : sortd::testing::kAllShapes) {
      for (size_t n : lengths) {
        CheckSort(engine, sortd::testing::Generate<K>(shape, n, 1), desc, extra,
                  std::string(sortd::testing::ShapeName(shape)) +
                      " n=" + std::to_string(n));
      }
    }
    if (extra == Extra::kU64ValuesAndPermutation) {
      CheckSort(engine, sortd::testing::Generate<K>(Shape::kRandom, 1 << 20, 2),
                desc, extra, "random n=2^20");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, OpenClSortTest,
    ::testing::Combine(::testing::ValuesIn(kAllKeyTypes), ::testing::Bool(),
                       ::testing::Values(Extra::kNone, Extra::kU32Values,
                                         Extra::kU64ValuesAndPermutation)),
    [](const auto& info) {
      return std::string(KeyTypeName(std::get<0>(info.param))) +
             (std::get<1>(info.param) ? "_desc_" : "_asc_") +
             sortd::testing::ExtraName(std::get<2>(info.param));
    });

}  // namespace
}  // namespace sortd::gpu
