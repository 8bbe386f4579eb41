// The order-preserving bit transforms: they round-trip, and their unsigned
// order is the key order (ascending) or its reverse (descending).
#include "core/keys.h"

#include <gtest/gtest.h>

#include "core/transpose.h"
#include "tests/reference.h"

namespace sortd {
namespace {

template <KeyType T, typename K>
void CheckTransform() {
  std::vector<K> v = testing::SpecialValues<K>();
  std::vector<K> r = testing::Generate<K>(testing::Shape::kRandom, 200, 3);
  v.insert(v.end(), r.begin(), r.end());
  using U = KeyBits<T>;
  for (bool desc : {false, true}) {
    for (K a : v) {
      U ra = std::bit_cast<U>(a);
      EXPECT_EQ(RawBits<T>(OrderedBits<T>(ra, desc), desc), ra);
      for (K b : v) {
        U oa = OrderedBits<T>(ra, desc);
        U ob = OrderedBits<T>(std::bit_cast<U>(b), desc);
        bool want = desc ? testing::RefLess(b, a) : testing::RefLess(a, b);
        ASSERT_EQ(oa < ob, want) << +a << " vs " << +b << " desc=" << desc;
      }
    }
  }
}

TEST(Keys, TransformsPreserveOrderAndRoundTrip) {
  CheckTransform<KeyType::kU32, uint32_t>();
  CheckTransform<KeyType::kI32, int32_t>();
  CheckTransform<KeyType::kF32, float>();
  CheckTransform<KeyType::kU64, uint64_t>();
  CheckTransform<KeyType::kI64, int64_t>();
  CheckTransform<KeyType::kF64, double>();
}

TEST(Keys, SizesAndNames) {
  EXPECT_EQ(KeySize(KeyType::kF32), 4u);
  EXPECT_EQ(KeySize(KeyType::kI64), 8u);
  EXPECT_EQ(ValueSize(ValueType::kNone), 0u);
  EXPECT_EQ(ValueSize(ValueType::kU64), 8u);
  EXPECT_STREQ(KeyTypeName(KeyType::kF64), "f64");
}

// Reference: move each bit separately.
void NaiveTranspose(const uint32_t in[32], uint32_t out[32]) {
  for (int j = 0; j < 32; ++j) {
    out[j] = 0;
    for (int i = 0; i < 32; ++i) out[j] |= ((in[i] >> j) & 1u) << i;
  }
}

TEST(Transpose, MatchesBitByBitReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    uint32_t in[32], want[32], got[32];
    for (uint32_t& w : in) w = rng();
    if (trial % 4 == 1)
      for (uint32_t& w : in) w &= rng();  // sparse
    NaiveTranspose(in, want);
    std::copy(in, in + 32, got);
    TransposeBits32(got);
    ASSERT_TRUE(std::equal(got, got + 32, want)) << "trial " << trial;
  }
}

TEST(Transpose, SingleBitsMoveToMirroredPositions) {
  for (int i = 0; i < 32; ++i) {
    for (int j = 0; j < 32; ++j) {
      uint32_t m[32] = {};
      m[i] = 1u << j;
      TransposeBits32(m);
      for (int r = 0; r < 32; ++r) {
        ASSERT_EQ(m[r], r == j ? (1u << i) : 0u) << i << "," << j;
      }
    }
  }
}

TEST(Transpose, IsAnInvolution) {
  std::mt19937 rng(11);
  uint32_t m[32], orig[32];
  for (uint32_t& w : m) w = rng();
  std::copy(m, m + 32, orig);
  TransposeBits32(m);
  EXPECT_FALSE(std::equal(m, m + 32, orig));
  TransposeBits32(m);
  EXPECT_TRUE(std::equal(m, m + 32, orig));
}

}  // namespace
}  // namespace sortd
