// CpuSorter against the reference stable sort, for every key type, both
// orders, with and without payload and permutation, over every input shape
// and boundary length, up to millions of keys.
#include "cpu/cpu_sorter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/sort_check.h"

namespace sortd {
namespace {

using testing::CheckSort;
using testing::Extra;
using testing::ExtraName;
using testing::KeyOf;
using testing::Shape;

using Case = std::tuple<KeyType, bool, Extra>;

// Every key type, both orders, with and without payload and permutation.
auto AllCases() {
  return ::testing::Combine(
      ::testing::ValuesIn(kAllKeyTypes), ::testing::Bool(),
      ::testing::Values(Extra::kNone, Extra::kU32Values,
                        Extra::kU64ValuesAndPermutation, Extra::kPermutation));
}
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(KeyTypeName(std::get<0>(info.param))) +
         (std::get<1>(info.param) ? "_desc_" : "_asc_") +
         ExtraName(std::get<2>(info.param));
}

// The case's sorts of every shape at `lengths`, and random ones at `large`
// (with no payload or the widest), against the reference.
void CheckCase(CpuSorter& sorter, const Case& c,
               const std::vector<size_t>& lengths,
               const std::vector<size_t>& large, uint64_t seed) {
  const auto [type, desc, extra] = c;
  DispatchKeyType(type, [&]<KeyType T>() {
    using K = KeyOf<T>;
    for (Shape shape : testing::kAllShapes) {
      for (size_t n : lengths) {
        CheckSort(
            sorter, testing::Generate<K>(shape, n, seed), desc, extra,
            std::string(testing::ShapeName(shape)) + " n=" + std::to_string(n));
      }
    }
    if (extra == Extra::kNone || extra == Extra::kU64ValuesAndPermutation) {
      for (size_t n : large) {
        CheckSort(sorter, testing::Generate<K>(Shape::kRandom, n, seed + 1),
                  desc, extra, "random n=" + std::to_string(n));
      }
    }
  });
}

class CpuSorterTest : public ::testing::TestWithParam<Case> {};

TEST_P(CpuSorterTest, MatchesStableReferenceOnEveryShapeAndBoundaryLength) {
  // Four threads, one sort at a time: from 32K keys in blocks, from 1 MiB of
  // keys split by their highest digits first; millions of keys keep every
  // block busy.
  CpuSorter sorter({.threads = 4});
  CheckCase(sorter, GetParam(), testing::BoundaryLengths(),
            {size_t{1} << 20, size_t{2'000'003}}, 1);
}

// With one thread (and, on any host, when as many sorts run at once as
// half its threads) arrays of up to a million keys are sorted whole on the
// calling thread, 11 bits a pass.
TEST_P(CpuSorterTest, OnOneThreadMatchesStableReferenceUpToAMillion) {
  CpuSorter sorter({.threads = 1});
  CheckCase(sorter, GetParam(),
            {size_t{1} << 15, size_t{65'537}, size_t{262'147}},
            {(size_t{1} << 20) - 1}, 3);
}

// Large sorts split by their highest digits first, here from 1 MiB of keys:
// into buckets of at most 1024 keys (random keys take two levels of
// buckets, a skewed input whose one bucket holds 90% of the keys more) and
// into buckets of up to 2^20 (the whole array one bucket: 11- and 12-bit
// digits); every shape, and keys that differ only in their low bits (the
// first digit found below the top), in both orders, with and without
// payload.
TEST_P(CpuSorterTest, LargeSortsOfEveryShapeAndSkewMatchTheReference) {
  const auto [type, desc, extra] = GetParam();
  for (size_t bucket : {size_t{1024}, size_t{1} << 20}) {
    CpuSorter sorter({.threads = 4,
                      .msd_from_bytes = size_t{1} << 20,
                      .bucket_keys = bucket});
    const std::string with = " buckets " + std::to_string(bucket);
    DispatchKeyType(type, [&]<KeyType T>() {
      using K = KeyOf<T>;
      const size_t n = 300'007;
      for (Shape shape : testing::kAllShapes) {
        CheckSort(sorter, testing::Generate<K>(shape, n, 21), desc, extra,
                  std::string(testing::ShapeName(shape)) + with);
      }
      std::vector<K> narrow = testing::Generate<K>(Shape::kRandom, n, 22);
      const std::vector<K> bits = testing::Generate<K>(Shape::kRandom, n, 23);
      for (size_t i = 0; i < n; ++i) {
        uint64_t r = 0;
        std::memcpy(&r, &bits[i], sizeof(K));
        narrow[i] = static_cast<K>(r % 3000);
      }
      CheckSort(sorter, narrow, desc, extra, "keys under 3000" + with);
      // Keys below 2^24 (2^48 for 8-byte keys): two (four) 12-bit passes
      // in one bucket.
      std::vector<K> wide = testing::Generate<K>(Shape::kRandom, n, 25);
      for (size_t i = 0; i < n; ++i) {
        uint64_t r = 0;
        std::memcpy(&r, &bits[i], sizeof(K));
        wide[i] = static_cast<K>(r % (uint64_t{1} << (sizeof(K) * 6)));
      }
      CheckSort(sorter, wide, desc, extra, "keys under 2^24 or 2^48" + with);
      // Two values that differ in their top bits, alternating: each ends in
      // a bucket of one value, sorted in place of the split's output.
      std::vector<K> two = testing::Generate<K>(Shape::kRandom, n, 26);
      const K a = two[0], b = two[1];
      for (size_t i = 0; i < n; ++i) two[i] = i % 2 ? a : b;
      CheckSort(sorter, two, desc, extra, "two values" + with);
      if (bucket > 1024) return;
      const size_t big = size_t{1} << 20;
      std::vector<K> skewed = testing::Generate<K>(Shape::kRandom, big, 24);
      for (size_t i = 0; i < big; ++i) {
        if (i % 10 != 0) skewed[i] = static_cast<K>(5000 + i % 997);
      }
      CheckSort(sorter, skewed, desc, extra,
                "90% in one bucket, n=2^20" + with);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CpuSorterTest, AllCases(), CaseName);

TEST(CpuSorterLoad, MidSizeSortsRunWholeOnlyWhenHalfTheThreadsAreBusy) {
  // One block or less: always whole; a million keys or more: never.
  EXPECT_TRUE(CpuSorter::SortsWhole(32767, 1, 16));
  EXPECT_FALSE(CpuSorter::SortsWhole(size_t{1} << 20, 16, 16));
  // 32K keys up to a million: whole from eight sorts at once on 16
  // threads, always with up to three threads.
  EXPECT_FALSE(CpuSorter::SortsWhole(32768, 1, 16));
  EXPECT_FALSE(CpuSorter::SortsWhole(65536, 7, 16));
  EXPECT_TRUE(CpuSorter::SortsWhole(65536, 8, 16));
  EXPECT_TRUE(CpuSorter::SortsWhole((size_t{1} << 20) - 1, 8, 16));
  EXPECT_FALSE(CpuSorter::SortsWhole(65536, 1, 4));
  EXPECT_TRUE(CpuSorter::SortsWhole(65536, 2, 4));
  EXPECT_TRUE(CpuSorter::SortsWhole(65536, 1, 3));
  EXPECT_TRUE(CpuSorter::SortsWhole(65536, 1, 1));
}

// Concurrent sorts on four threads: some run whole on their callers, some
// in blocks across the arena, depending on how many run at once.
TEST(CpuSorterConcurrency, ConcurrentSortsOfEverySizeMatchTheReference) {
  CpuSorter sorter({.threads = 4});
  std::vector<std::thread> clients;
  std::vector<std::string> failures(8);
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      for (size_t n : {size_t{40'000}, size_t{150'001}, size_t{500'000}}) {
        const std::vector<uint64_t> keys =
            testing::Generate<uint64_t>(Shape::kRandom, n + c, 10 + c);
        std::vector<uint64_t> want = keys;
        std::stable_sort(want.begin(), want.end());
        const std::string in = testing::Bytes(keys);
        std::string out(in.size(), 0);
        SortJob job{.key_type = KeyType::kU64,
                    .count = keys.size(),
                    .keys = reinterpret_cast<const std::byte*>(in.data()),
                    .keys_out = reinterpret_cast<std::byte*>(out.data())};
        const absl::Status s = sorter.Sort(job);
        if (!s.ok()) {
          failures[c] = s.ToString();
        } else if (out != testing::Bytes(want)) {
          failures[c] = "wrong order at n=" + std::to_string(keys.size());
        }
        if (!failures[c].empty()) return;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < 8; ++c) EXPECT_EQ(failures[c], "") << "client " << c;
}

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
