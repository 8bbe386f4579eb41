// The plan of one sort on the OpenCL engine, on the host alone: which
// algorithm and pass form it takes, how many passes and picked digits, and
// the device bytes it holds (what admission counts), for the shipped
// policies and for hand-made ones.
#include "gpu/sort_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/keys.h"
#include "gpu/buffers.h"
#include "gpu/kernels/sort_constants.h"
#include "gpu/policy.h"
#include "tests/fake_devices.h"

namespace sortd::gpu {
namespace {

std::vector<EnginePolicy> ShippedPolicies() {
  std::vector<EnginePolicy> out;
  for (const std::string& name : EnginePolicy::Names()) {
    absl::StatusOr<EnginePolicy> p = EnginePolicy::Named(name, H100Info());
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) out.push_back(*p);
  }
  return out;
}

SortJob Shape(KeyType key, ValueType value = ValueType::kNone) {
  return SortJob{.key_type = key, .value_type = value};
}

size_t Class(size_t bytes) { return BufferPool::SizeClass(bytes); }

TEST(SortPlan, AutoTakesTheBitonicNetworkUpToItsLimitThenRadix) {
  for (const EnginePolicy& p : ShippedPolicies()) {
    for (KeyType key : {KeyType::kU32, KeyType::kF64}) {
      for (ValueType value : {ValueType::kNone, ValueType::kU32}) {
        const SortJob shape = Shape(key, value);
        const int bits = KeyBits(shape);
        const size_t max = p.bitonic.MaxKeys(bits, !WithIndex(shape));
        const SortPlan at = PlanSort(p, SortAlgorithm::kAuto, shape, max);
        EXPECT_TRUE(at.bitonic) << p.name << " " << bits;
        // A power of two, at least one block, that holds every key.
        EXPECT_GE(at.padded, max);
        EXPECT_GE(at.padded, static_cast<size_t>(p.bitonic.Block(bits)));
        EXPECT_EQ(at.padded & (at.padded - 1), 0u);
        EXPECT_EQ(at.keys_bytes, at.padded * bits / 8);
        EXPECT_EQ(at.raw_bytes, max * bits / 8);
        const SortPlan above =
            PlanSort(p, SortAlgorithm::kAuto, shape, max + 1);
        EXPECT_FALSE(above.bitonic) << p.name << " " << bits;
        EXPECT_EQ(above.padded, max + 1);
        // Forced either way, whatever the size.
        EXPECT_TRUE(
            PlanSort(p, SortAlgorithm::kBitonic, shape, max + 1).bitonic);
        EXPECT_FALSE(PlanSort(p, SortAlgorithm::kRadix, shape, 3).bitonic);
      }
    }
  }
}

TEST(SortPlan, RadixPassesCoverTheKeyInDigitsAndTheArrayInTiles) {
  for (const EnginePolicy& p : ShippedPolicies()) {
    const RadixSortPolicy& r = p.radix;
    for (int bits : {32, 64}) {
      for (size_t n : {size_t{1000}, size_t{1} << 20, (size_t{1} << 20) + 7}) {
        const RadixPassPlan plan = PlanRadixPasses(r, bits, true, n, true);
        EXPECT_EQ(plan.passes, DivUp(bits, r.radix_bits)) << p.name;
        EXPECT_EQ(plan.radix, size_t{1} << r.radix_bits);
        EXPECT_EQ(plan.tile, static_cast<size_t>(r.Tile(bits, true, n)));
        EXPECT_GE(plan.tiles * plan.tile, n);
        EXPECT_LT((plan.tiles - 1) * plan.tile, n);
        EXPECT_EQ(plan.tile_grid.groups, plan.tiles);
        EXPECT_EQ(plan.one_launch, r.OneLaunch()) << p.name;
        EXPECT_GT(plan.Footprint(), 0u);
      }
    }
  }
}

TEST(SortPlan, OneLaunchNeedsTheTotalsAndCountsThatFitTheStatusWord) {
  RadixSortPolicy r;
  r.pass = RadixPass::kOneLaunchEarlyCounts;
  r.radix_bits = 8;
  r.ranking = TileRanking::kWarpEmulated;
  r.status_count_bits = 12;
  const size_t limit = size_t{1} << r.status_count_bits;
  const RadixPassPlan at = PlanRadixPasses(r, 32, false, limit, true);
  ASSERT_TRUE(at.one_launch);
  EXPECT_EQ(at.starts_bytes, at.passes * at.radix * 4);
  // One status area and one tile counter, zeroed before every pass.
  EXPECT_EQ(at.status_bytes, (at.tiles * at.radix + 1) * 4);
  EXPECT_EQ(at.status_value_mask, (uint32_t{1} << 12) - 1);
  EXPECT_EQ(at.Footprint(), Class(at.starts_bytes) + Class(at.status_bytes));
  EXPECT_FALSE(PlanRadixPasses(r, 32, false, limit + 1, true).one_launch);
  EXPECT_FALSE(PlanRadixPasses(r, 32, false, limit, false).one_launch);

  // Marked statuses: an area for every pass, each with its own counter.
  r.marked_status_max = limit;
  const RadixPassPlan marked = PlanRadixPasses(r, 32, false, limit, true);
  ASSERT_TRUE(marked.marked);
  EXPECT_EQ(marked.status_bytes,
            (marked.tiles * marked.radix + marked.passes) * 4);
}

TEST(SortPlan, ThreeLaunchScansItsOffsetsInLevelsDownToOneBlock) {
  RadixSortPolicy r;  // three launches, 4-bit digits
  ASSERT_FALSE(r.OneLaunch());
  const size_t n = size_t{1} << 24;
  const RadixPassPlan plan = PlanRadixPasses(r, 32, false, n, true);
  EXPECT_FALSE(plan.one_launch);
  EXPECT_EQ(plan.status_bytes, 0u);
  EXPECT_EQ(plan.offsets_bytes, plan.tiles * plan.radix * 4);
  ASSERT_GE(plan.sums_bytes.size(), 2u);
  EXPECT_EQ(plan.sums_bytes.back(), 4u);  // one block: one sum
  size_t entries = plan.tiles * plan.radix, total = Class(plan.offsets_bytes);
  for (size_t bytes : plan.sums_bytes) {
    entries = DivUp(entries, plan.tile);
    EXPECT_EQ(bytes, entries * 4);
    total += Class(bytes);
  }
  EXPECT_EQ(plan.Footprint(), total);
}

TEST(SortPlan, KeysOnlySortsPickTheDigitsThatCoverTheCountAndMargin) {
  EnginePolicy p;
  p.radix.radix_bits = 8;
  p.radix.picked_digits = true;
  p.radix.picked_margin_bits_32 = 4;
  p.radix.picked_margin_bits_64 = 4;
  const size_t n = size_t{1} << 20;  // 20 bits + 4 of margin: three digits
  const SortPlan u64 =
      PlanSort(p, SortAlgorithm::kRadix, Shape(KeyType::kU64), n);
  EXPECT_EQ(u64.picked_slots, 3u);
  EXPECT_EQ(u64.picks_bytes, size_t{SORTD_PICKS_WORDS} * 4);
  EXPECT_EQ(u64.passes.starts_bytes, u64.passes.passes * u64.passes.radix * 4);
  // 32-bit keys: three of four digits still saves a pass.
  EXPECT_EQ(
      PlanSort(p, SortAlgorithm::kRadix, Shape(KeyType::kU32), n).picked_slots,
      3u);
  // Not where they would cover every digit, with an index, or when off.
  EXPECT_EQ(PlanSort(p, SortAlgorithm::kRadix, Shape(KeyType::kU32), n << 4)
                .picked_slots,
            0u);
  EXPECT_EQ(PlanSort(p, SortAlgorithm::kRadix,
                     Shape(KeyType::kU64, ValueType::kU32), n)
                .picked_slots,
            0u);
  p.radix.picked_digits = false;
  const SortPlan every =
      PlanSort(p, SortAlgorithm::kRadix, Shape(KeyType::kU64), n);
  EXPECT_EQ(every.picked_slots, 0u);
  EXPECT_EQ(every.picks_bytes, 0u);
  // Picked passes may be followed by a sort by every digit: their pass
  // buffers count twice. Arrays a sort has no use for (no index, no
  // values) still hold the smallest size class: the engine binds a buffer
  // to every kernel argument.
  const size_t unused = 4 * Class(0);
  EXPECT_EQ(u64.Footprint(), Class(u64.raw_bytes) + 2 * Class(u64.keys_bytes) +
                                 Class(u64.totals_bytes) + unused +
                                 2 * u64.passes.Footprint() +
                                 Class(u64.picks_bytes));
  EXPECT_EQ(every.Footprint(),
            Class(every.raw_bytes) + 2 * Class(every.keys_bytes) +
                Class(every.totals_bytes) + unused + every.passes.Footprint());
}

// The footprint is every array's size class: raw keys once, keys, indices
// and values twice (ping-pong), the totals, the passes.
TEST(SortPlan, FootprintIsTheSumOfEveryArraysSizeClass) {
  for (const EnginePolicy& p : ShippedPolicies()) {
    const SortJob shape = Shape(KeyType::kI64, ValueType::kU32);
    for (size_t n : {size_t{100}, size_t{1} << 22}) {
      const SortPlan plan = PlanSort(p, SortAlgorithm::kAuto, shape, n);
      size_t want = Class(plan.raw_bytes) + 2 * Class(plan.keys_bytes) +
                    2 * Class(plan.index_bytes) + 2 * Class(plan.values_bytes) +
                    Class(plan.totals_bytes);
      if (!plan.bitonic) want += plan.passes.Footprint();
      EXPECT_EQ(plan.picked_slots, 0u);  // with an index: every digit
      EXPECT_EQ(plan.Footprint(), want) << p.name << " " << n;
      EXPECT_EQ(plan.values_bytes, n * 4);
      EXPECT_EQ(plan.index_bytes, plan.padded * 4);
    }
    // More keys never hold less.
    EXPECT_LE(PlanSort(p, SortAlgorithm::kAuto, shape, 1 << 20).Footprint(),
              PlanSort(p, SortAlgorithm::kAuto, shape, 1 << 21).Footprint());
  }
}

// The host's look at 512 sampled keys: uniform keys keep the plan's
// picked digits; where the picked digits would leave long runs, the sort
// takes every digit that varies, or every digit in turn when all vary.
template <typename T>
size_t PickedSlotsOf(const std::vector<T>& keys) {
  EnginePolicy p;
  p.radix.radix_bits = 8;
  p.radix.picked_digits = true;
  SortJob job{.key_type = sizeof(T) == 8 ? KeyType::kU64 : KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data())};
  const SortPlan plan = PlanSort(p, SortAlgorithm::kRadix, job, keys.size());
  EXPECT_EQ(plan.picked_slots, 3u);  // 2^16 keys: 16 bits + 4 of margin
  return PickedSlotsFor(job, plan, 8);
}

TEST(SortPlan, PickedSlotsFollowTheSampledKeys) {
  const size_t n = size_t{1} << 16;
  std::mt19937_64 rng(7);
  std::vector<uint32_t> u32(n);
  for (uint32_t& k : u32) k = static_cast<uint32_t>(rng());
  EXPECT_EQ(PickedSlotsOf(u32), 3u);
  // The top three digits take four values each: runs of about a thousand
  // keys below them, and all four digits vary.
  for (uint32_t& k : u32) k = static_cast<uint32_t>(rng() & 0x030303ff);
  EXPECT_EQ(PickedSlotsOf(u32), 0u);
  // Only the lowest digit varies: picking it alone sorts the keys.
  for (uint32_t& k : u32) k = 0xabcdef00u | static_cast<uint32_t>(rng() & 0xff);
  EXPECT_EQ(PickedSlotsOf(u32), 3u);
  // 64-bit keys of which four digits vary, three with four values: those
  // four digits, not all eight.
  std::vector<uint64_t> u64(n);
  for (uint64_t& k : u64)
    k = (uint64_t{0xabcdef12} << 32) | (rng() & 0x030303ff);
  EXPECT_EQ(PickedSlotsOf(u64), 4u);

  // A job of parts is judged on the device.
  EnginePolicy p;
  p.radix.radix_bits = 8;
  SortJob part{.key_type = KeyType::kU32,
               .count = n,
               .keys = reinterpret_cast<const std::byte*>(u32.data())};
  const SortJob* parts[] = {&part};
  SortJob batch = part;
  batch.parts = parts;
  const SortPlan plan = PlanSort(p, SortAlgorithm::kRadix, batch, n);
  for (uint32_t& k : u32) k = static_cast<uint32_t>(rng() & 0x030303ff);
  EXPECT_EQ(PickedSlotsFor(part, plan, 8), 0u);
  EXPECT_EQ(PickedSlotsFor(batch, plan, 8), 3u);
}

TEST(SortPlan, SegmentsSortByIdsInAsManyPassesAsTheirCountNeeds) {
  EnginePolicy p;
  p.radix.radix_bits = 8;
  const SortJob shape = Shape(KeyType::kU32);
  const size_t n = 1 << 20;
  const SegmentedPlan one = PlanSegmentedSort(p, shape, n, 1);
  EXPECT_EQ(one.id_passes, 0u);
  EXPECT_EQ(one.ids_bytes, 0u);
  EXPECT_EQ(one.id_totals_bytes, 0u);
  EXPECT_FALSE(one.keys.bitonic);
  EXPECT_TRUE(one.keys.with_index);  // the gather needs the key order
  // The unused id arrays hold the smallest class each (four ids and
  // places, the totals), as every unused array of a sort does.
  EXPECT_EQ(one.Footprint(),
            one.keys.Footprint() + Class(one.offsets_bytes) + 5 * Class(0));
  for (auto [segments, passes] : {std::pair<size_t, size_t>{2, 1},
                                  {256, 1},
                                  {257, 2},
                                  {65536, 2},
                                  {65537, 3}}) {
    const SegmentedPlan plan = PlanSegmentedSort(p, shape, n, segments);
    EXPECT_EQ(plan.id_passes, passes) << segments;
    EXPECT_EQ(plan.offsets_bytes, (segments + 1) * 4);
    EXPECT_EQ(plan.ids_bytes, n * 4);
    EXPECT_EQ(plan.Footprint(),
              plan.keys.Footprint() + Class(plan.offsets_bytes) +
                  4 * Class(plan.ids_bytes) + Class(plan.id_totals_bytes) +
                  plan.ids.Footprint());
  }
}

}  // namespace
}  // namespace sortd::gpu
