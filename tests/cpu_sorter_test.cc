// CpuSorter against the reference stable sort, for every key type, both
// orders, with and without payload and permutation, over every input shape
// and boundary length, up to millions of keys.
#include "server/cpu_sorter.h"

#include <gtest/gtest.h>

#include <tuple>

#include "tests/reference.h"

namespace sortd {
namespace {

using testing::Bytes;
using testing::FromBytes;
using testing::Shape;

enum class Extra { kNone, kU32Values, kU64ValuesAndPermutation, kPermutation };

const char* ExtraName(Extra e) {
  switch (e) {
    case Extra::kNone:
      return "keys";
    case Extra::kU32Values:
      return "u32values";
    case Extra::kU64ValuesAndPermutation:
      return "u64values_perm";
    case Extra::kPermutation:
      return "perm";
  }
  return "?";
}

template <typename K>
void CheckSort(Sorter& sorter, const std::vector<K>& keys, bool desc,
               Extra extra, const std::string& what) {
  SCOPED_TRACE(what);
  const size_t n = keys.size();
  const std::string in = Bytes(keys);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<uint32_t> values32(values.begin(), values.end());
  const std::string v32 = Bytes(values32), v64 = Bytes(values);

  std::string out(in.size(), '\xAB');
  std::string vout(n * 8, '\xAB');
  std::string pout(n * 4, '\xAB');
  SortJob job;
  job.key_type = sizeof(K) == 4 ? (std::is_floating_point_v<K> ? KeyType::kF32
                                   : std::is_signed_v<K>       ? KeyType::kI32
                                                               : KeyType::kU32)
                                : (std::is_floating_point_v<K> ? KeyType::kF64
                                   : std::is_signed_v<K>       ? KeyType::kI64
                                                               : KeyType::kU64);
  job.order = desc ? Order::kDescending : Order::kAscending;
  job.count = n;
  job.keys = reinterpret_cast<const std::byte*>(in.data());
  job.keys_out = reinterpret_cast<std::byte*>(out.data());
  if (extra == Extra::kU32Values) {
    job.value_type = ValueType::kU32;
    job.values = reinterpret_cast<const std::byte*>(v32.data());
    job.values_out = reinterpret_cast<std::byte*>(vout.data());
  } else if (extra == Extra::kU64ValuesAndPermutation) {
    job.value_type = ValueType::kU64;
    job.values = reinterpret_cast<const std::byte*>(v64.data());
    job.values_out = reinterpret_cast<std::byte*>(vout.data());
  }
  if (extra == Extra::kPermutation ||
      extra == Extra::kU64ValuesAndPermutation) {
    job.permutation_out = reinterpret_cast<std::byte*>(pout.data());
  }
  ASSERT_TRUE(sorter.Sort(job).ok());

  const std::vector<uint32_t> perm = testing::RefPermutation(keys, desc);
  const std::vector<K> got = FromBytes<K>(out);
  const std::vector<uint32_t> got_perm = FromBytes<uint32_t>(pout);
  for (size_t i = 0; i < n; ++i) {
    // Bit-exact: NaN payloads and the sign of zero must survive.
    ASSERT_EQ(0, std::memcmp(&got[i], &keys[perm[i]], sizeof(K)))
        << "key at " << i << " should be input[" << perm[i] << "]";
    if (extra == Extra::kU32Values) {
      uint32_t v;
      std::memcpy(&v, vout.data() + 4 * i, 4);
      ASSERT_EQ(v, values32[perm[i]]) << "value at " << i;
    } else if (extra == Extra::kU64ValuesAndPermutation) {
      uint64_t v;
      std::memcpy(&v, vout.data() + 8 * i, 8);
      ASSERT_EQ(v, values[perm[i]]) << "value at " << i;
    }
    if (job.permutation_out != nullptr) {
      ASSERT_EQ(got_perm[i], perm[i]) << "permutation at " << i;
    }
  }
}

class CpuSorterTest
    : public ::testing::TestWithParam<std::tuple<KeyType, bool, Extra>> {
 protected:
  CpuSorter sorter_{CpuSorter::Options{.threads = 4}};
};

TEST_P(CpuSorterTest, MatchesStableReferenceOnEveryShapeAndBoundaryLength) {
  const auto [type, desc, extra] = GetParam();
  DispatchKeyType(type, [&]<KeyType T>() {
    using K = std::conditional_t<
        T == KeyType::kU32, uint32_t,
        std::conditional_t<
            T == KeyType::kI32, int32_t,
            std::conditional_t<
                T == KeyType::kF32, float,
                std::conditional_t<
                    T == KeyType::kU64, uint64_t,
                    std::conditional_t<T == KeyType::kI64, int64_t, double>>>>>;
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
