// Checks the OpenCL engine's test files share: a transpose and a
// segmented sort against the reference, and segment lengths around a block.
#ifndef SORTD_TESTS_ENGINE_CHECKS_H_
#define SORTD_TESTS_ENGINE_CHECKS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/transpose.h"
#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {

// `count` random matrices transposed by `engine`, against the reference.
inline void CheckTranspose(OpenClEngine& engine, size_t count, unsigned seed,
                           StageTimes* stages = nullptr) {
  std::vector<uint32_t> in(count * 32), out(count * 32, 0xDEADBEEF);
  std::mt19937 rng(seed);
  for (uint32_t& w : in) w = rng();
  ASSERT_TRUE(
      engine
          .Transpose({.count = count,
                      .in = reinterpret_cast<const std::byte*>(in.data()),
                      .out = reinterpret_cast<std::byte*>(out.data()),
                      .stages = stages})
          .ok());
  for (size_t m = 0; m < count; ++m) {
    uint32_t want[32];
    std::copy(in.begin() + m * 32, in.begin() + m * 32 + 32, want);
    TransposeBits32(want);
    ASSERT_TRUE(std::equal(want, want + 32, out.begin() + m * 32))
        << engine.transpose_kernel() << " matrix " << m << " of " << count;
  }
}

// Segmented sort against the reference applied segment by segment;
// permutation entries are indices into the whole array.
template <typename K>
void CheckSegmented(Sorter& sorter, const std::vector<K>& keys,
                    const std::vector<uint32_t>& offsets, bool desc,
                    bool with_payload, bool with_permutation = true) {
  const size_t n = keys.size();
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = i * 31 + 7;
  std::vector<K> out(n);
  std::vector<uint64_t> vout(n);
  std::vector<uint32_t> perm(n, 0xFFFFFFFF);
  SortJob job{.key_type = sortd::testing::KeyTypeOf<K>(),
              .order = desc ? Order::kDescending : Order::kAscending,
              .count = n,
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
  if (!with_permutation) job.permutation_out = nullptr;
  if (with_payload) {
    job.value_type = ValueType::kU64;
    job.values = reinterpret_cast<const std::byte*>(values.data());
    job.values_out = reinterpret_cast<std::byte*>(vout.data());
  }
  ASSERT_TRUE(sorter.SortSegments(job, offsets).ok());
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const size_t begin = offsets[s], end = offsets[s + 1];
    std::vector<K> part(keys.begin() + begin, keys.begin() + end);
    const std::vector<uint32_t> ref =
        sortd::testing::RefPermutation(part, desc);
    for (size_t i = 0; i < ref.size(); ++i) {
      if (with_permutation) {
        ASSERT_EQ(perm[begin + i], begin + ref[i])
            << "segment " << s << " [" << begin << "," << end << ") at " << i;
      }
      ASSERT_EQ(0, std::memcmp(&out[begin + i], &part[ref[i]], sizeof(K)))
          << "segment " << s << " [" << begin << "," << end << ") at " << i;
      if (with_payload) {
        ASSERT_EQ(vout[begin + i], values[begin + ref[i]]);
      }
    }
  }
}

// Lengths 0 and 1, around the local-sort block, and longer than it (radix).
inline std::vector<uint32_t> MixedOffsets(size_t block, uint64_t seed,
                                          size_t* total) {
  std::mt19937_64 rng(seed);
  std::vector<size_t> lengths = {
      0,        1, 2, 0, 1, 3, 17, block - 1, block, block + 1, 2 * block + 5,
      5 * block};
  for (int i = 0; i < 200; ++i) lengths.push_back(rng() % (block + 1));
  std::shuffle(lengths.begin(), lengths.end(), rng);
  std::vector<uint32_t> offsets = {0};
  for (size_t len : lengths) offsets.push_back(offsets.back() + len);
  *total = offsets.back();
  return offsets;
}

}  // namespace sortd::gpu

#endif  // SORTD_TESTS_ENGINE_CHECKS_H_
