// Radix passes over picked digits and the settle of the runs they leave
// (gpu/passes/settle.h, radix_settle): short runs settled in place, long
// ones sorted by every digit, runs across tile edges.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"
#include "gpu/sort_plan.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

// Keys-only 64-bit sorts pass over the highest varying digits only
// (radix.picked_margin_bits_64; on the CPU device's policy, 4-bit digits,
// 20000 keys take five of sixteen, 200000 six). Here those digits (the
// keys' top bits) hold one of `groups` random values, and bits 0-15 are
// random: the passes leave runs of keys equal in the top bits in input
// order below.
// - n / 4 and n / 8 values: runs of about four and eight keys (the
//   longest past 16), sorted by radix_settle alone.
// - n values, but 100 (of 20000) or 1000 (of 200000) keys share one: a
//   run too long to settle, which the samples miss; sorted only if the
//   engine then sorts by every digit (after the download, for the shorter
//   array, which is then downloaded again).
// - 8 values and 4 values (runs of thousands): the host's samples see
//   them and the sort picks every digit that varies (the top ones and
//   those of the low 16 bits) from the start. Given as two parts
//   (the host does not sample those), the device sees them, by its samples
//   or by too few combinations of digit values (at most 4^5 < 20000 / 16
//   for 4 values on the CPU device): its passes take the lowest digits
//   instead, and the result is sorted only if the engine continues with
//   the others.
// The longer array (over 1 MiB) is downloaded after the check, the shorter
// one before it.
void CheckPickedDigits(OpenClEngine& engine) {
  for (size_t n : {size_t{20000}, size_t{200000}}) {
    const SortJob shape{.key_type = KeyType::kU64, .count = n};
    const size_t top_bits =
        PlanSort(engine.policy(), SortAlgorithm::kAuto, shape, n).picked_slots *
        static_cast<size_t>(engine.policy().radix.radix_bits);
    ASSERT_GT(top_bits, 0u) << n;
    ASSERT_LE(top_bits, 48u) << n;
    for (auto [groups, one_run] : {std::pair{n / 4, size_t{0}},
                                   {n / 8, size_t{0}},
                                   {n, n < 100000 ? size_t{100} : 1000},
                                   {size_t{8}, size_t{0}},
                                   {size_t{4}, size_t{0}}}) {
      for (bool descending : {false, true}) {
        // Signed keys one way, unsigned the other: both orders and both
        // encodings of the top digit, in half the sorts.
        for (KeyType type : {descending ? KeyType::kI64 : KeyType::kU64}) {
          std::mt19937_64 rng(groups * 2 + descending);
          std::vector<uint64_t> tops(groups);
          for (uint64_t& t : tops)
            t = rng() >> (64 - top_bits) << (64 - top_bits);
          std::vector<uint64_t> keys(n);
          for (size_t i = 0; i < n; ++i) {
            const uint64_t top = i < one_run ? tops[0] : tops[rng() % groups];
            keys[i] = top | (rng() & 0xFFFF);
          }
          std::vector<uint64_t> want = keys;
          auto less = [&](uint64_t a, uint64_t b) {
            if (type == KeyType::kI64) {
              return static_cast<int64_t>(a) < static_cast<int64_t>(b);
            }
            return a < b;
          };
          std::sort(want.begin(), want.end(), less);
          if (descending) std::reverse(want.begin(), want.end());
          const std::string what = absl::StrCat(
              n, " keys, ", groups, " values, ", one_run, " in one run, ",
              KeyTypeName(type), descending ? " descending" : " ascending");
          std::vector<uint64_t> out(n);
          SortJob job{
              .key_type = type,
              .order = descending ? Order::kDescending : Order::kAscending,
              .count = n,
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data())};
          // As the engine judges it, with its own policy.
          const SortPlan plan =
              PlanSort(engine.policy(), SortAlgorithm::kAuto, job, n);
          ASSERT_GT(plan.picked_slots, 0u) << what;
          // Where the host's samples show long runs it picks every digit
          // that varies among them (here the top ones and those of bits
          // 0-15), or every digit in turn where that is all of them.
          const size_t slots =
              PickedSlotsFor(job, plan, engine.policy().radix.radix_bits);
          if (groups <= 8) {
            EXPECT_GT(slots, plan.picked_slots) << what;
          } else {
            EXPECT_EQ(slots, plan.picked_slots) << what;
          }
          // Whole, then in two parts.
          SortJob halves[2];
          for (int h = 0; h < 2; ++h) {
            halves[h] = job;
            halves[h].count = n / 2;
            halves[h].keys = job.keys + h * (n / 2) * 8;
            halves[h].keys_out = job.keys_out + h * (n / 2) * 8;
          }
          const SortJob* parts[] = {&halves[0], &halves[1]};
          for (bool in_parts : {false, true}) {
            std::fill(out.begin(), out.end(), 0);
            StageTimes stages;
            double span = 0;
            SortJob run = job;
            run.stages = &stages;
            run.kernel_span_seconds = &span;
            if (in_parts) run.parts = parts;
            ASSERT_TRUE(engine.Sort(run).ok()) << what;
            EXPECT_EQ(out, want) << what << (in_parts ? " in parts" : "");
            std::vector<std::string> names;
            for (const StageTime& st : stages) names.push_back(st.stage);
            if (slots == 0 && !in_parts) {
              EXPECT_THAT(names, ::testing::Not(::testing::Contains("settle")))
                  << what;
            } else {
              EXPECT_THAT(names, ::testing::Contains("settle")) << what;
            }
            // Settled by radix_settle alone, or passes after the picked
            // ones (timed as `resort`): for a long run no samples see, or
            // where the device, judging parts, picked the lowest digits.
            const bool resorted = absl::c_linear_search(names, "resort");
            EXPECT_EQ(resorted, one_run > 0 || (in_parts && groups <= 8))
                << what;
          }
        }
      }
    }
  }
}

// The GPU policies' pass form on this device: one launch per pass with
// early counts (and the first pass of a keys-only sort unranked), warps
// emulated through local memory (the portable twin).
OpenClEngine& EarlyCountsEngine() {
  static OpenClEngine* engine = [] {
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    const absl::Status s = ApplyPolicyOverrides(
        "radix.pass=one-launch-early-counts,radix.ranking=warp-emulated,"
        "radix.radix_bits=8",
        &p);
    EXPECT_TRUE(s.ok()) << s;
    options.policy = p;
    auto e = OpenClEngine::Create(options);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->release() : static_cast<OpenClEngine*>(nullptr);
  }();
  return *engine;
}

TEST(OpenClEngine, PickedDigitsSettleShortRunsAndSortLongOnesByEveryDigit) {
  CheckPickedDigits(Engine());
  // Where the first pass is unranked: a continuation of the lowest digits
  // must keep their order.
  ASSERT_TRUE(EarlyCountsEngine().policy().radix.unordered_first);
  CheckPickedDigits(EarlyCountsEngine());
  const size_t n = 20000;
  // With an index the passes take every digit: no runs to settle.
  std::vector<uint32_t> perm(n);
  std::vector<uint64_t> keys(n), out(n);
  std::mt19937_64 rng(5);
  for (uint64_t& k : keys) k = rng();
  StageTimes stages;
  double span = 0;
  SortJob job{.key_type = KeyType::kU64,
              .count = n,
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .permutation_out = reinterpret_cast<std::byte*>(perm.data()),
              .stages = &stages,
              .kernel_span_seconds = &span};
  ASSERT_TRUE(Engine().Sort(job).ok());
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
  for (const StageTime& st : stages) EXPECT_NE(st.stage, "settle");
}

// Runs that meet radix_settle's tile edges (policy.radix.SettleTileKeys:
// 2048 keys on NVIDIA, 512 on the CPU device): at every edge of a keys-only
// sort by picked digits, one run of keys equal in the picked digits sits
// across it, ends just before it or starts on or just after it, each in
// random order below (runs of 2 to 64 keys, placed by their window and halo,
// and of lengths between), between runs of 1 to 8 keys. Sorted by the settle
// alone; with one disordered run of 65 across an edge, found long (by either
// work-group) and sorted by every digit (`resort`). Every picked digit
// varies, so the picks are the top digits and the runs are the ones built
// here.
TEST(OpenClEngine, PickedDigitsSettleRunsAcrossTileEdges) {
  for (OpenClEngine* e : {&Engine(), &EarlyCountsEngine()}) {
    OpenClEngine& engine = *e;
    const RadixSortPolicy& radix = engine.policy().radix;
    const size_t tile = radix.SettleTileKeys();
    const size_t n = 200000;
    ASSERT_GT(n, 8 * tile);
    struct Placed {
      long offset;  // the run's first place, from the edge
      size_t length;
    };
    const Placed patterns[] = {{-64, 64}, {-63, 64}, {-32, 64}, {-1, 64},
                               {0, 64},   {1, 64},   {-1, 2},   {-40, 50},
                               {-5, 12},  {-20, 30}, {3, 17},   {-2, 5}};
    for (KeyType type : {KeyType::kU32, KeyType::kU64}) {
      const size_t width = type == KeyType::kU64 ? 64 : 32;
      const SortJob shape{.key_type = type, .count = n};
      const SortPlan plan =
          PlanSort(engine.policy(), SortAlgorithm::kAuto, shape, n);
      const size_t top_bits =
          plan.picked_slots * static_cast<size_t>(radix.radix_bits);
      ASSERT_GE(top_bits, 16u) << width;
      ASSERT_LT(top_bits, width) << width;
      const size_t low_bits = width - top_bits;
      for (bool long_run : {false, true}) {
        const std::string what =
            absl::StrCat(width, "-bit keys", long_run ? ", a run of 65" : "");
        std::mt19937_64 rng(width + long_run);
        // Run lengths in sorted order.
        std::vector<size_t> runs;
        size_t pos = 0;
        for (size_t edge = 1; pos < n;) {
          const Placed p = patterns[(edge - 1) % std::size(patterns)];
          const bool longer = long_run && edge == 3;
          const size_t length = longer ? 65 : p.length;
          const size_t start = edge * tile + (longer ? -1 : p.offset);
          size_t next;  // a run of 1 to 8 keys, short of `start`
          if (start + length > n) {
            next = std::min<size_t>(1 + rng() % 8, n - pos);
          } else if (start <= pos + 8) {
            if (start > pos) runs.push_back(start - pos);
            next = length;
            pos = start;
            ++edge;
          } else {
            next = std::min<size_t>(1 + rng() % 8, start - pos);
          }
          runs.push_back(next);
          pos += next;
        }
        ASSERT_LE(runs.size(), size_t{1} << 16) << what;
        // Run g's top bits: g in the highest 16, random below, so that every
        // picked digit varies and the runs keep their order.
        std::vector<uint64_t> keys;
        keys.reserve(n);
        for (size_t g = 0; g < runs.size(); ++g) {
          const uint64_t below = top_bits - 16;
          const uint64_t top =
              g << below | (rng() & ((uint64_t{1} << below) - 1));
          for (size_t i = 0; i < runs[g]; ++i) {
            const uint64_t low = rng() & ((uint64_t{1} << low_bits) - 1);
            keys.push_back(top << low_bits | low);
          }
        }
        ASSERT_EQ(keys.size(), n);
        std::vector<uint64_t> want = keys;
        std::shuffle(keys.begin(), keys.end(), rng);
        std::vector<uint32_t> keys32(keys.begin(), keys.end()), out32(n);
        std::vector<uint64_t> got(n);
        StageTimes stages;
        SortJob job{.key_type = type, .count = n, .stages = &stages};
        if (width == 64) {
          job.keys = reinterpret_cast<const std::byte*>(keys.data());
          job.keys_out = reinterpret_cast<std::byte*>(got.data());
        } else {
          job.keys = reinterpret_cast<const std::byte*>(keys32.data());
          job.keys_out = reinterpret_cast<std::byte*>(out32.data());
        }
        // No pair of the host's samples falls in one run: the plan stands.
        ASSERT_EQ(PickedSlotsFor(job, plan, radix.radix_bits),
                  plan.picked_slots)
            << what;
        ASSERT_TRUE(engine.Sort(job).ok()) << what;
        if (width == 32) got.assign(out32.begin(), out32.end());
        std::sort(want.begin(), want.end());
        EXPECT_EQ(got, want) << what;
        std::vector<std::string> names;
        for (const StageTime& st : stages) names.push_back(st.stage);
        EXPECT_THAT(names, ::testing::Contains("settle")) << what;
        EXPECT_EQ(absl::c_linear_search(names, "resort"), long_run) << what;
      }
    }
  }
}

}  // namespace
}  // namespace sortd::gpu
