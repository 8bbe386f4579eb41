// CpuSorter against the reference stable sort, for every key type, both
// orders, with and without payload and permutation, over every input shape
// and boundary length, up to millions of keys.
#include "server/cpu_sorter.h"

#include <gtest/gtest.h>

#include <tuple>

#include "tests/sort_check.h"

namespace sortd {
namespace {

using testing::CheckSort;
using testing::Extra;
using testing::ExtraName;
using testing::KeyOf;
using testing::Shape;

class CpuSorterTest
    : public ::testing::TestWithParam<std::tuple<KeyType, bool, Extra>> {
 protected:
  CpuSorter sorter_{CpuSorter::Options{.threads = 4}};
};

TEST_P(CpuSorterTest, MatchesStableReferenceOnEveryShapeAndBoundaryLength) {
  const auto [type, desc, extra] = GetParam();
  DispatchKeyType(type, [&]<KeyType T>() {
    using K = KeyOf<T>;
    for (Shape shape : testing::kAllShapes) {
      for (size_t n : testing::BoundaryLengths()) {
        CheckSort(
            sorter_, testing::Generate<K>(shape, n, 1), desc, extra,
            std::string(testing::ShapeName(shape)) + " n=" + std::to_string(n));
      }
    }
    // Millions of keys, where every block of the parallel sort is busy.
    if (extra == Extra::kNone || extra == Extra::kU64ValuesAndPermutation) {
      for (size_t n : {size_t{1} << 20, size_t{3'000'017}}) {
        CheckSort(sorter_, testing::Generate<K>(Shape::kRandom, n, 2), desc,
                  extra, "random n=" + std::to_string(n));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, CpuSorterTest,
    ::testing::Combine(::testing::ValuesIn(kAllKeyTypes), ::testing::Bool(),
                       ::testing::Values(Extra::kNone, Extra::kU32Values,
                                         Extra::kU64ValuesAndPermutation,
                                         Extra::kPermutation)),
    [](const auto& info) {
      return std::string(KeyTypeName(std::get<0>(info.param))) +
             (std::get<1>(info.param) ? "_desc_" : "_asc_") +
             ExtraName(std::get<2>(info.param));
    });

TEST(CpuSorterStability, EqualKeysKeepInputOrderInBothOrders) {
  CpuSorter sorter({.threads = 2});
  // Two keys, many copies each, spread over several parallel blocks.
  const size_t n = 200'000;
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = (i * 7) % 3 == 0 ? 5 : 9;
  for (bool desc : {false, true}) {
    const std::string in = testing::Bytes(keys);
    std::string out(in.size(), 0), perm(n * 4, 0);
    SortJob job{.key_type = KeyType::kU32,
                .order = desc ? Order::kDescending : Order::kAscending,
                .count = n,
                .keys = reinterpret_cast<const std::byte*>(in.data()),
                .keys_out = reinterpret_cast<std::byte*>(out.data()),
                .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
    ASSERT_TRUE(sorter.Sort(job).ok());
    std::vector<uint32_t> p = testing::FromBytes<uint32_t>(perm);
    std::vector<uint32_t> k = testing::FromBytes<uint32_t>(out);
    EXPECT_EQ(k.front(), desc ? 9u : 5u);
    for (size_t i = 1; i < n; ++i) {
      if (k[i] == k[i - 1]) {
        ASSERT_LT(p[i - 1], p[i]) << "at " << i;
      }
    }
  }
}

TEST(CpuSorterFloats, TotalOrderOfSpecialValues) {
  CpuSorter sorter({.threads = 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Expected ascending order, given shuffled.
  const std::vector<float> want = {-nan,   -inf, -1.0f, -0.0f, 0.0f,
                                   1e-45f, 1.0f, inf,   nan};
  const std::vector<float> in = {1.0f, nan,  -0.0f,  inf,  -nan,
                                 0.0f, -inf, 1e-45f, -1.0f};
  const std::string bytes = testing::Bytes(in);
  std::string out(bytes.size(), 0);
  SortJob job{.key_type = KeyType::kF32,
              .count = in.size(),
              .keys = reinterpret_cast<const std::byte*>(bytes.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data())};
  ASSERT_TRUE(sorter.Sort(job).ok());
  EXPECT_EQ(out, testing::Bytes(want));
}

TEST(CpuSorterTranspose, BatchMatchesBitByBitReference) {
  CpuSorter sorter({.threads = 2});
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{10'001}}) {
    std::mt19937 rng(static_cast<unsigned>(count));
    std::vector<uint32_t> in(count * 32);
    for (uint32_t& w : in) w = rng();
    std::vector<uint32_t> out(in.size(), 0xDEADBEEF);
    TransposeJob job{.count = count,
                     .in = reinterpret_cast<const std::byte*>(in.data()),
                     .out = reinterpret_cast<std::byte*>(out.data())};
    ASSERT_TRUE(sorter.Transpose(job).ok());
    for (size_t m = 0; m < count; ++m) {
      for (int i = 0; i < 32; ++i) {
        for (int j = 0; j < 32; ++j) {
          ASSERT_EQ((in[m * 32 + i] >> j) & 1, (out[m * 32 + j] >> i) & 1)
              << "matrix " << m << " row " << i << " col " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sortd
