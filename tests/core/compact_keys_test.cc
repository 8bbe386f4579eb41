#include "core/compact_keys.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/reference.h"

namespace sortd {
namespace {

using testing::Generate;
using testing::RefLess;
using testing::Shape;

// An encoded array and views of it, as a receiver sees them.
struct Coded {
  size_t count = 0;
  std::string widths, bases, deltas;

  compact::Encoded View() const { return {count, widths, bases, deltas}; }
  size_t Bytes() const { return widths.size() + bases.size() + deltas.size(); }
};

// Encodes `keys` (raw bits of a 32-bit `type`, in any order) as the server
// does: order values in place, blocks encoded in `parts` separate ranges.
Coded Encode(KeyType type, bool descending, std::vector<uint32_t> keys,
             size_t parts = 1) {
  Coded c;
  c.count = keys.size();
  compact::ToOrderValues(type, descending, keys.data(), keys.size());
  const size_t blocks = compact::Blocks(keys.size());
  c.widths.resize(blocks);
  c.bases.resize(blocks * 4);
  std::vector<uint32_t> bases(blocks);
  for (size_t p = 0; p < parts; ++p) {
    const size_t first = blocks * p / parts, last = blocks * (p + 1) / parts;
    std::string out(blocks * compact::kBlockKeys * 4, '\0');
    const size_t n = compact::EncodeBlocks(
        keys.data(), keys.size(), first, last,
        reinterpret_cast<uint8_t*>(c.widths.data()), bases.data(),
        reinterpret_cast<uint8_t*>(out.data()));
    EXPECT_LE(n, (last - first) * compact::kBlockKeys * 4);
    EXPECT_EQ(
        n, compact::DeltaBytes(
               reinterpret_cast<const uint8_t*>(c.widths.data()), first, last));
    c.deltas.append(out, 0, n);
  }
  if (blocks > 0) std::memcpy(c.bases.data(), bases.data(), blocks * 4);
  return c;
}

// Decodes in `parts` ranges, as a receiver with several threads does.
std::vector<uint32_t> Decode(const Coded& c, KeyType type, bool descending,
                             size_t parts = 1) {
  const compact::Encoded e = c.View();
  EXPECT_TRUE(compact::Check(e).ok()) << compact::Check(e);
  std::vector<uint32_t> out(c.count, 0xdeadbeef);
  const size_t blocks = compact::Blocks(c.count);
  const auto* widths = reinterpret_cast<const uint8_t*>(c.widths.data());
  for (size_t p = 0; p < parts; ++p) {
    const size_t first = blocks * p / parts, last = blocks * (p + 1) / parts;
    compact::UnpackBlocks(e, first, last, compact::DeltaBytes(widths, 0, first),
                          out.data());
  }
  compact::FromOrderValues(type, descending, out.data(), out.size());
  return out;
}

template <typename K>
std::vector<uint32_t> Bits(const std::vector<K>& keys) {
  std::vector<uint32_t> bits(keys.size());
  if (!keys.empty()) std::memcpy(bits.data(), keys.data(), keys.size() * 4);
  return bits;
}

template <typename K>
void RoundTripsEveryShape(KeyType type) {
  for (bool descending : {false, true}) {
    for (Shape shape : testing::kAllShapes) {
      for (size_t n : {0, 1, 2, 127, 128, 129, 255, 256, 1000, 33333}) {
        std::vector<K> keys = Generate<K>(shape, n, n * 31 + 7);
        // Sorted as the server answers, and also as it came (Echo, and
        // any sequence: only the size depends on order).
        std::vector<K> sorted = keys;
        std::stable_sort(sorted.begin(), sorted.end(), [&](K a, K b) {
          return descending ? RefLess(b, a) : RefLess(a, b);
        });
        for (const auto& input : {sorted, keys}) {
          const std::vector<uint32_t> bits = Bits(input);
          for (size_t parts : {1, 3}) {
            const Coded c = Encode(type, descending, bits, parts);
            EXPECT_EQ(Decode(c, type, descending, parts), bits)
                << KeyTypeName(type) << (descending ? " desc " : " asc ")
                << testing::ShapeName(shape) << " n=" << n
                << " parts=" << parts;
          }
        }
      }
    }
  }
}

TEST(CompactKeys, RoundTripsU32) {
  RoundTripsEveryShape<uint32_t>(KeyType::kU32);
}
TEST(CompactKeys, RoundTripsI32) {
  RoundTripsEveryShape<int32_t>(KeyType::kI32);
}
TEST(CompactKeys, RoundTripsF32) { RoundTripsEveryShape<float>(KeyType::kF32); }

TEST(CompactKeys, EveryWidthRoundTrips) {
  // Block w's largest difference has exactly w bits.
  std::vector<uint32_t> keys;
  uint32_t v = 0;
  std::mt19937 rng(3);
  for (int w = 0; w <= 32; ++w) {
    for (size_t j = 0; j < compact::kBlockKeys; ++j) {
      uint32_t d = 0;
      if (j > 0 && w > 0) {
        const uint32_t top = w == 32 ? ~0u : (1u << w) - 1;
        d = j == 1 ? top : rng() & top;
      }
      keys.push_back(v += d);
    }
  }
  const Coded c = Encode(KeyType::kU32, false, keys);
  for (int w = 0; w <= 32; ++w) EXPECT_EQ(uint8_t(c.widths[w]), w);
  EXPECT_EQ(Decode(c, KeyType::kU32, false), keys);
}

TEST(CompactKeys, SortedEvenKeysTakeUnderHalfTheBytes) {
  // 4M evenly spread keys differ by ~1024: 12-13 bits a key where raw
  // takes 32.
  std::vector<uint32_t> keys(size_t{4} << 20);
  std::mt19937 rng(5);
  for (uint32_t& k : keys) k = rng();
  std::sort(keys.begin(), keys.end());
  const Coded c = Encode(KeyType::kU32, false, keys);
  EXPECT_LT(c.Bytes(), keys.size() * 4 * 45 / 100);
  EXPECT_EQ(Decode(c, KeyType::kU32, false, 4), keys);
}

TEST(CompactKeys, CheckRefusesMalformedArrays) {
  std::vector<uint32_t> keys(300);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = uint32_t(i * 3);
  const Coded good = Encode(KeyType::kU32, false, keys);
  ASSERT_TRUE(compact::Check(good.View()).ok());

  Coded wide = good;
  wide.widths[1] = 33;
  EXPECT_EQ(compact::Check(wide.View()).code(), absl::StatusCode::kDataLoss);

  Coded short_widths = good;
  short_widths.widths.pop_back();
  EXPECT_FALSE(compact::Check(short_widths.View()).ok());

  Coded short_bases = good;
  short_bases.bases.pop_back();
  EXPECT_FALSE(compact::Check(short_bases.View()).ok());

  Coded short_deltas = good;
  short_deltas.deltas.pop_back();
  EXPECT_FALSE(compact::Check(short_deltas.View()).ok());

  Coded long_deltas = good;
  long_deltas.deltas += std::string(16, '\0');
  EXPECT_FALSE(compact::Check(long_deltas.View()).ok());

  // A count that would overflow the block arithmetic.
  Coded huge = good;
  huge.count = ~size_t{0};
  EXPECT_FALSE(compact::Check(huge.View()).ok());
  huge.widths.clear();
  huge.bases.clear();
  huge.deltas.clear();
  EXPECT_FALSE(compact::Check(huge.View()).ok());
}

}  // namespace
}  // namespace sortd
