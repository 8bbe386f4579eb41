// Keys into and out of the radix passes' ordered form
// (gpu/passes/encode.cc): each key type's kernel code, and keys whose
// order lies in the bits the transforms touch (the sign, the high word).
#include "gpu/passes/encode.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gpu/kernels/sort_constants.h"
#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;

TEST(Encode, EachKindOfKeyHasItsOwnTransform) {
  EXPECT_EQ(KindCode(KeyType::kU32), KindCode(KeyType::kU64));
  EXPECT_EQ(KindCode(KeyType::kI32), KindCode(KeyType::kI64));
  EXPECT_EQ(KindCode(KeyType::kF32), KindCode(KeyType::kF64));
  const std::set<cl_uint> kinds = {KindCode(KeyType::kU32),
                                   KindCode(KeyType::kI32),
                                   KindCode(KeyType::kF32)};
  EXPECT_EQ(kinds.size(), 3u);
  EXPECT_EQ(KindCode(KeyType::kI32), cl_uint{SORTD_KIND_SIGNED});
  EXPECT_EQ(KindCode(KeyType::kF64), cl_uint{SORTD_KIND_FLOAT});
}

// Signed keys across zero, in both orders, at a length the radix passes
// sort (not the bitonic block).
TEST(Encode, SignedKeysAcrossZeroBothOrders) {
  std::mt19937 rng(11);
  std::vector<int32_t> keys(20000);
  for (int32_t& k : keys) k = static_cast<int32_t>(rng() % 2001) - 1000;
  CheckSort(Engine(), keys, false, Extra::kU32Values, "ascending");
  CheckSort(Engine(), keys, true, Extra::kPermutation, "descending");
}

TEST(Encode, SixtyFourBitKeysThatDifferOnlyInTheHighWord) {
  std::vector<uint64_t> keys(5000);
  std::mt19937_64 rng(3);
  for (uint64_t& k : keys) k = (rng() & 0xFFFF00000000ull) | 0x12345678u;
  CheckSort(Engine(), keys, false, Extra::kPermutation, "high word");
  std::vector<int64_t> signed_keys(keys.begin(), keys.end());
  for (int64_t& k : signed_keys) k = (rng() & 1) ? -k : k;
  CheckSort(Engine(), signed_keys, true, Extra::kU32Values, "signed high word");
}

}  // namespace
}  // namespace sortd::gpu
