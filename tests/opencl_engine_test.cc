// The OpenCL engine against the reference, on the OpenCL CPU device (PoCL in
// CI): every key type and order, payloads, permutations, stability, every
// tile and scan-level boundary, each algorithm and pass variant, segmented
// sorts, transposes and the warm-up's check.
#include "gpu/opencl_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/transpose.h"
#include "cpu/cpu_sorter.h"
#include "gpu/sort_plan.h"
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

TEST(OpenClEngine, SixtyFourBitKeysThatDifferOnlyInTheHighWord) {
  std::vector<uint64_t> keys(5000);
  std::mt19937_64 rng(3);
  for (uint64_t& k : keys) k = (rng() & 0xFFFF00000000ull) | 0x12345678u;
  CheckSort(Engine(), keys, false, Extra::kPermutation, "high word");
  std::vector<int64_t> signed_keys(keys.begin(), keys.end());
  for (int64_t& k : signed_keys) k = (rng() & 1) ? -k : k;
  CheckSort(Engine(), signed_keys, true, Extra::kU32Values, "signed high word");
}

TEST(OpenClEngine, EveryScanLevelWithTinyTiles) {
  OpenClEngine::Options options = CpuDevice();
  options.policy = TinyPolicy();
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // 32-key tiles, 16 digits: 40'000 keys give 20'000 counters, scanned in
  // blocks of 32 -> 625 sums -> 20 -> 1: three levels.
  for (size_t n :
       {size_t{31}, size_t{32}, size_t{33}, size_t{1025}, size_t{40'000}}) {
    CheckSort(**engine,
              sortd::testing::Generate<uint32_t>(Shape::kRandom, n, 6), false,
              Extra::kPermutation, "tiny tiles n=" + std::to_string(n));
    CheckSort(**engine, sortd::testing::Generate<double>(Shape::kSpecial, n, 6),
              true, Extra::kU64ValuesAndPermutation,
              "tiny tiles f64 n=" + std::to_string(n));
  }
}

// Sorts u32 keys on `engine` asking for its stage times (and its kernel
// span where `span` is set), checks the answer, and returns the stages.
StageTimes TimedSort(sortd::Sorter& engine, std::vector<uint32_t> keys,
                     double* span = nullptr) {
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .stages = &stages,
              .kernel_span_seconds = span};
  EXPECT_TRUE(engine.Sort(job).ok());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(out, keys);
  return stages;
}

// A run is timed by the device when none of its kind was within the
// profile interval; the others report only their host times, and sort as
// well. A run asked for its kernel span is always timed.
TEST(OpenClEngine, ProfilesOneRunAnInterval) {
  const int runs = 5;
  for (auto [interval, want] :
       {std::pair{absl::ZeroDuration(), runs},  // every run
        {absl::Hours(1), 1},                    // the first alone
        {absl::InfiniteDuration(), 0}}) {       // none
    OpenClEngine::Options options = CpuDevice();
    options.profile_interval = interval;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    int profiled = 0;
    for (int r = 0; r < runs; ++r) {
      SCOPED_TRACE(absl::StrCat(absl::FormatDuration(interval), " run ", r));
      // A radix sort on every policy (its passes report "scatter").
      const StageTimes stages = TimedSort(
          **engine,
          sortd::testing::Generate<uint32_t>(Shape::kRandom, 50000, 10 + r));
      std::map<std::string, int> seen;
      for (const StageTime& st : stages) ++seen[st.stage];
      EXPECT_EQ(seen["host_enqueue"], 1);
      EXPECT_EQ(seen["host_wait"], 1);
      const bool timed = seen.count("device_span") > 0;
      EXPECT_EQ(timed, seen.count("scatter") > 0) << "run " << r;
      EXPECT_EQ(timed, seen.count("upload") > 0) << "run " << r;
      profiled += timed;
    }
    EXPECT_EQ(profiled, want) << interval;

    // Asked for a span: timed whatever the interval.
    double span = -1;
    TimedSort(**engine,
              sortd::testing::Generate<uint32_t>(Shape::kRandom, 5000, 99),
              &span);
    EXPECT_GT(span, 0.0) << interval;
  }
}

// Each algorithm reports its own stages, from profiling events.
TEST(OpenClEngine, ReportsStageTimes) {
  using A = sortd::gpu::SortAlgorithm;
  // Radix keys-only sorts have no transform stage: the first pass orders
  // the raw keys as it reads them and the last stores them raw.
  for (auto [algorithm, kernel_stages] :
       {std::pair{A::kRadix,
                  std::vector<std::string>{"histogram", "scan", "scatter"}},
        {A::kBitonic,
         std::vector<std::string>{"transform", "local_sort", "merge"}}}) {
    OpenClEngine::Options options = CpuDevice();
    options.algorithm = algorithm;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const StageTimes stages = TimedSort(
        **engine, sortd::testing::Generate<uint32_t>(Shape::kRandom, 10000, 1));
    std::vector<std::string> names;
    for (const StageTime& st : stages) {
      names.push_back(st.stage);
      EXPECT_GE(st.seconds, 0.0);
    }
    std::vector<std::string> want = {"upload", "download"};
    want.insert(want.end(), kernel_stages.begin(), kernel_stages.end());
    EXPECT_THAT(names, ::testing::IsSupersetOf(want));
    if (algorithm == A::kRadix) {
      EXPECT_THAT(names, ::testing::Not(::testing::Contains("transform")));
    }
    // The run's own times: the host's wall time encloses the device's span
    // of every command, which encloses the commands of one in-order queue.
    std::map<std::string, double> t;
    for (const StageTime& st : stages) t[st.stage] += st.seconds;
    ASSERT_TRUE(t.count("host_enqueue") && t.count("host_wait") &&
                t.count("device_span"));
    double commands = 0;
    for (const auto& [name, secs] : t) {
      if (name.rfind("host_", 0) != 0 && name != "device_span") {
        commands += secs;
      }
    }
    EXPECT_GT(t["device_span"], 0.0);
    EXPECT_GE(t["device_span"] * 1.01, commands);
    EXPECT_GE((t["host_enqueue"] + t["host_wait"]) * 1.01, t["device_span"]);
  }
}

// The kernel span runs from the first kernel's start to the last one's
// end: at least the kernels' summed durations on an in-order queue, at
// most the call's wall time; left alone without stage times.
TEST(OpenClEngine, ReportsKernelSpan) {
  const auto keys =
      sortd::testing::Generate<uint32_t>(Shape::kRandom, 200000, 3);
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  double span = -1;
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .kernel_span_seconds = &span};
  ASSERT_TRUE(Engine().Sort(job).ok());
  EXPECT_EQ(span, -1);
  job.stages = &stages;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Engine().Sort(job).ok());
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  double kernels = 0;
  for (const StageTime& st : stages) {
    // The commands other than transfers (not the run's host times or its
    // span of every command).
    if (st.stage != "upload" && st.stage != "download" &&
        st.stage.rfind("host_", 0) != 0 && st.stage != "device_span") {
      kernels += st.seconds;
    }
  }
  EXPECT_GT(kernels, 0);
  EXPECT_GE(span, kernels * 0.999);
  EXPECT_LE(span, wall);
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
}

TEST(OpenClEngine, SkipsPassesWhoseDigitIsShared) {
  // Keys below 16 differ only in the lowest 4-bit digit: one pass runs.
  std::vector<uint32_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i * 7) % 16;
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  std::vector<uint32_t> perm(keys.size());
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
  ASSERT_TRUE(Engine().Sort(job).ok());
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == out[i - 1]) {
      ASSERT_LT(perm[i - 1], perm[i]);
    }
  }
  CheckSort(Engine(), keys, true, Extra::kU32Values, "shared digits, desc");
}

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

// One-launch passes that walk back over earlier tiles only after placing
// their keys (the unranked first pass and radix_late_onesweep), here for
// every pass from the first tile on (and every size by radix), with and
// without picked digits, with statuses zeroed before every pass and with
// marked ones: the same answers as the reference, across partial and many
// tiles and with runs of equal digits.
TEST(OpenClEngine, LateLookbackPassesSortLikeTheEarlyOnes) {
  EnginePolicy base = Engine().policy();
  std::string overrides =
      "radix.pass=one-launch-early-counts,"
      "radix.late_lookback_unordered_32=1,radix.late_lookback_tiles_32=1,"
      "bitonic.max_keys=0,bitonic.max_keys_64=0,bitonic.max_keys_32_keys=0";
  // Warp-level ranking where the device's policy ranks by work-item (its
  // portable form, warp-emulated, on the CPU device).
  if (base.radix.ranking == TileRanking::kWorkItemCounters) {
    absl::StrAppend(&overrides,
                    ",radix.ranking=warp-emulated,radix.radix_bits=8");
  }
  for (auto [picked, marked] : {std::pair{"1", "0"}, std::pair{"0", "0"},
                                std::pair{"1", "536870912"}}) {
    EnginePolicy p = base;
    const absl::Status s = ApplyPolicyOverrides(
        absl::StrCat(overrides, ",radix.picked_digits=", picked,
                     ",radix.marked_status_max=", marked),
        &p);
    ASSERT_TRUE(s.ok()) << s;
    const size_t tile = p.radix.Tile(32, false, size_t{1} << 20);
    const RadixPassPlan plan = PlanRadixPasses(p.radix, 32, false, 3 * tile,
                                               /*has_totals=*/true);
    ASSERT_TRUE(plan.late_ranked && plan.unordered_first);
    ASSERT_EQ(plan.marked, std::string(marked) != "0");
    OpenClEngine::Options options = CpuDevice();
    options.policy = p;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n : {tile - 1, tile + 1, 3 * tile + 17, 40 * tile + 5}) {
      for (Shape shape :
           {Shape::kRandom, Shape::kFewDistinct, Shape::kSorted}) {
        CheckSort(
            **engine, sortd::testing::Generate<uint32_t>(shape, n, 9), false,
            Extra::kNone,
            absl::StrCat("late look-back, picked ", picked, ", marked ", marked,
                         ", n=", n, " ", sortd::testing::ShapeName(shape)));
      }
    }
  }
}

// The build of streaming key loads (PTX) sorts what the plain build sorts,
// on a device that runs PTX, its limit lowered so that short arrays take
// it (the warm-up already sorted through it once); elsewhere the policy is
// refused. The portable twin is the plain build every other test runs.
TEST(OpenClEngine, StreamingKeyLoadsSortLikePlainLoads) {
  EnginePolicy p = Engine().policy();
  p.radix.stream_keys_32_min = p.radix.small_max + 1;
  if (!NvidiaPtxRuns(Engine().info())) {
    EXPECT_THAT(p.CheckFits(Engine().info()).message(),
                HasSubstr("stream_keys_32_min needs an NVIDIA GPU"));
    GTEST_SKIP() << "streaming key loads are PTX: not on "
                 << Engine().info().name;
  }
  const size_t tile = p.radix.Tile(32, false, p.radix.stream_keys_32_min);
  const size_t first = p.radix.stream_keys_32_min;
  ASSERT_TRUE(PlanRadixPasses(p.radix, 32, false, first, true).stream);
  ASSERT_FALSE(PlanRadixPasses(p.radix, 32, false, first - 1, true).stream);
  ASSERT_FALSE(PlanRadixPasses(p.radix, 32, true, first, true).stream);
  ASSERT_FALSE(PlanRadixPasses(p.radix, 64, false, first, true).stream);
  for (const char* picked : {"1", "0"}) {
    EnginePolicy q = p;
    ASSERT_TRUE(
        ApplyPolicyOverrides(absl::StrCat("radix.picked_digits=", picked), &q)
            .ok());
    OpenClEngine::Options options = CpuDevice();
    options.policy = q;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n : {first, first + tile + 1, 3 * first + 17}) {
      for (Shape shape :
           {Shape::kRandom, Shape::kFewDistinct, Shape::kReversed}) {
        const std::string what =
            absl::StrCat("streaming loads, picked ", picked, ", n=", n, " ",
                         sortd::testing::ShapeName(shape));
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 21),
                  false, Extra::kNone, "u32 " + what);
        CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 22), true,
                  Extra::kNone, "f32 desc " + what);
      }
    }
  }
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

// `count` random matrices transposed by `engine`, against the reference.
void CheckTranspose(OpenClEngine& engine, size_t count, unsigned seed,
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

TEST(OpenClEngine, TransposeMatchesReference) {
  for (size_t count :
       {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{5000}}) {
    StageTimes stages;
    CheckTranspose(Engine(), count, static_cast<unsigned>(count), &stages);
    ASSERT_FALSE(stages.empty());
    EXPECT_EQ(stages[1].stage, "transpose");
  }
}

// Each transpose kernel the device can run, against the reference; the
// sub-group one is skipped (and says so) where the device has no sub-group
// shuffles, as on PoCL 3 in CI.
TEST(OpenClEngine, EveryTransposeVariantMatchesReference) {
  using T = OpenClEngine::Options::Transpose;
  for (T variant : {T::kPortable, T::kSubgroup}) {
    OpenClEngine::Options options = CpuDevice();
    options.transpose = variant;
    auto engine = OpenClEngine::Create(options);
    if (variant == T::kSubgroup && !engine.ok()) {
      EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
      std::printf("sub-group transpose not available here: %s\n",
                  std::string(engine.status().message()).c_str());
      continue;
    }
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::printf("transpose kernel under test: %s\n",
                (*engine)->transpose_kernel());
    EXPECT_STREQ((*engine)->transpose_kernel(),
                 variant == T::kSubgroup ? "subgroup" : "portable");
    for (size_t count : {size_t{1}, size_t{2}, size_t{63}, size_t{64},
                         size_t{65}, size_t{3001}}) {
      CheckTranspose(**engine, count, static_cast<unsigned>(count) + 77);
    }
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
std::vector<uint32_t> MixedOffsets(size_t block, uint64_t seed, size_t* total) {
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

// Runs from several threads at once share the engine's lanes (queues,
// staging rings, kernel objects): every answer is still right.
TEST(OpenClEngine, ConcurrentRunsOnSeveralLanesAreIndependent) {
  OpenClEngine::Options options = CpuDevice();
  options.lanes = 3;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        const size_t n = 1000 + 3001 * ((t + i) % 4);
        const auto keys =
            testing::Generate<float>(testing::Shape::kRandom, n, t * 10 + i);
        CheckSort(**engine, keys, (t + i) % 2, Extra::kU64ValuesAndPermutation,
                  absl::StrCat("thread ", t, " run ", i));
        const auto wide =
            testing::Generate<int64_t>(testing::Shape::kFewDistinct, n, t + i);
        CheckSegmented(**engine, wide,
                       {0, static_cast<uint32_t>(n / 5),
                        static_cast<uint32_t>(n / 2), static_cast<uint32_t>(n)},
                       t % 2, true);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(SegmentedSort, MixedLengthsEveryTypeBothOrders) {
  OpenClEngine& engine = Engine();
  for (KeyType type : kAllKeyTypes) {
    DispatchKeyType(type, [&]<KeyType T>() {
      using K = KeyOf<T>;
      const size_t block = engine.policy().bitonic.Block(sizeof(K) * 8);
      for (bool desc : {false, true}) {
        size_t total;
        const auto offsets = MixedOffsets(block, desc + 10, &total);
        const Shape shape = desc ? Shape::kFewDistinct : Shape::kSpecial;
        SCOPED_TRACE(KeyTypeName(type));
        CheckSegmented(engine, sortd::testing::Generate<K>(shape, total, 4),
                       offsets, desc, /*with_payload=*/!desc);
      }
    });
  }
}

// Segments longer than a block sort the whole array as one: by key, then
// by segment in as many passes as the number of segments needs (several
// here, with 4-bit digits more); keys only, the index made for the run.
// Segments that all fit a block take the one-work-group kernels instead.
TEST(SegmentedSort, ManySegmentsAsOneArrayAndShortOnes) {
  OpenClEngine& engine = Engine();
  std::mt19937 rng(21);
  for (bool with_long : {true, false}) {
    for (size_t segments : {size_t{2}, size_t{300}, size_t{5000}}) {
      std::vector<uint32_t> offsets = {0};
      for (size_t s = 0; s < segments; ++s) {
        const size_t len =
            with_long && s == segments / 2 ? 3 * 4096 + 7 : rng() % 40;
        offsets.push_back(offsets.back() + static_cast<uint32_t>(len));
      }
      const size_t total = offsets.back();
      SCOPED_TRACE(absl::StrCat(segments, " segments, long: ", with_long));
      CheckSegmented(
          engine,
          sortd::testing::Generate<uint32_t>(Shape::kFewDistinct, total, 6),
          offsets, false, false, /*with_permutation=*/false);
      CheckSegmented(
          engine, sortd::testing::Generate<double>(Shape::kSpecial, total, 7),
          offsets, true, false, /*with_permutation=*/false);
      CheckSegmented(
          engine, sortd::testing::Generate<int32_t>(Shape::kRandom, total, 8),
          offsets, true, true);
    }
  }
}

// Segments longer than a tile, up to segment_group_max keys, are sorted by
// one work-group each (every pass in one launch, through scratch arrays);
// with the knob at 0, or a segment longer, the whole array is sorted as
// one. Both agree with the reference: lengths around the tile, a segment
// of exactly the maximum, every key width, both orders, payloads and
// permutations.
TEST(SegmentedSort, LongSegmentsOneWorkGroupEachOrAsOneArray) {
  for (const char* overrides : {"", "radix.segment_group_max=0"}) {
    OpenClEngine::Options options = CpuDevice();
    options.policy_overrides = overrides;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const RadixSortPolicy& rp = (*engine)->policy().radix;
    const bool groups = rp.segment_group_max > 0;
    EXPECT_EQ(groups, std::string(overrides).empty());
    std::mt19937 rng(5);
    for (int bits : {32, 64}) {
      const size_t tile = rp.Tile(bits, true);
      const size_t block = (*engine)->policy().bitonic.Block(bits);
      // The default's maximum, or (with the knob at 0) as long.
      const size_t longest = groups ? rp.segment_group_max : size_t{1} << 14;
      ASSERT_GT(longest, 3 * tile + 5);
      std::vector<size_t> lengths = {
          tile - 1, tile, tile + 1, 3 * tile + 5, block + 1, 0, 1, 40, longest};
      for (int i = 0; i < 6; ++i) {
        lengths.push_back(block + 1 + rng() % (longest - block));
      }
      std::shuffle(lengths.begin(), lengths.end(), rng);
      std::vector<uint32_t> offsets = {0};
      for (size_t len : lengths) {
        offsets.push_back(offsets.back() + static_cast<uint32_t>(len));
      }
      const size_t total = offsets.back();
      SCOPED_TRACE(absl::StrCat(overrides, " ", bits, "-bit keys"));
      if (bits == 32) {
        CheckSegmented(**engine,
                       testing::Generate<float>(Shape::kSpecial, total, 3),
                       offsets, true, true);
        CheckSegmented(**engine,
                       testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                       offsets, false, false, /*with_permutation=*/false);
      } else {
        CheckSegmented(
            **engine, testing::Generate<int64_t>(Shape::kFewDistinct, total, 5),
            offsets, false, true);
        CheckSegmented(**engine,
                       testing::Generate<double>(Shape::kRandom, total, 6),
                       offsets, true, false, /*with_permutation=*/false);
      }
      // Which way it went: one work-group per segment launches no radix
      // pass over the whole array.
      const auto keys = testing::Generate<uint32_t>(Shape::kRandom, total, 7);
      std::vector<uint32_t> out(total);
      StageTimes stages;
      SortJob job{.key_type = KeyType::kU32,
                  .count = total,
                  .keys = reinterpret_cast<const std::byte*>(keys.data()),
                  .keys_out = reinterpret_cast<std::byte*>(out.data()),
                  .stages = &stages};
      ASSERT_TRUE((*engine)->SortSegments(job, offsets).ok());
      bool scatter = false;
      for (const StageTime& st : stages) scatter |= st.stage == "scatter";
      EXPECT_EQ(scatter, !groups);
    }
  }
}

TEST(SegmentedSort, DefaultImplementationOnTheCpuPathAgrees) {
  CpuSorter cpu({.threads = 2});
  size_t total;
  const auto offsets = MixedOffsets(300, 3, &total);
  CheckSegmented(cpu,
                 sortd::testing::Generate<float>(Shape::kSpecial, total, 5),
                 offsets, true, true);
}

TEST(SegmentedSort, RejectsBadOffsets) {
  std::vector<uint32_t> keys(10);
  std::vector<uint32_t> out(10);
  SortJob job{.key_type = KeyType::kU32,
              .count = 10,
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data())};
  std::vector<uint32_t> decreasing = {0, 6, 4, 10};
  std::vector<uint32_t> short_end = {0, 5, 9};
  EXPECT_EQ(Engine().SortSegments(job, decreasing).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Engine().SortSegments(job, short_end).code(),
            absl::StatusCode::kInvalidArgument);
}

// Both algorithms, forced, across the bitonic block and global-merge sizes.
TEST(Algorithms, BitonicAndRadixBothMatchTheReference) {
  for (auto algorithm : {sortd::gpu::SortAlgorithm::kBitonic,
                         sortd::gpu::SortAlgorithm::kRadix}) {
    OpenClEngine::Options options = CpuDevice();
    options.algorithm = algorithm;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const size_t block = (*engine)->policy().bitonic.Block(32);
    for (size_t n : {size_t{1}, size_t{2}, size_t{5}, block - 1, block,
                     block + 1, 4 * block + 3, 9 * block}) {
      CheckSort(**engine,
                sortd::testing::Generate<int32_t>(Shape::kFewDistinct, n, 2),
                n % 2, Extra::kU32Values, "i32 n=" + std::to_string(n));
      CheckSort(**engine,
                sortd::testing::Generate<double>(Shape::kSpecial, n, 2),
                !(n % 2), Extra::kPermutation, "f64 n=" + std::to_string(n));
      CheckSort(**engine,
                sortd::testing::Generate<uint64_t>(Shape::kReversed, n, 2),
                false, Extra::kNone, "u64 n=" + std::to_string(n));
    }
  }
}

// 8-bit passes, each tile ranked by work-item counters in one 8-bit step.
TEST(Algorithms, EightBitDigits) {
  OpenClEngine::Options options = CpuDevice();
  EnginePolicy p = EnginePolicy::For(Engine().info());
  p.radix = {.radix_bits = 8, .work_group = 64, .items_32 = 8, .items_64 = 8};
  options.policy = p;
  options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (size_t n :
       {size_t{3}, size_t{511}, size_t{512}, size_t{513}, size_t{100'000}}) {
    for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kSpecial}) {
      CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 3), false,
                Extra::kU64ValuesAndPermutation, "8-bit f32");
      CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 3), true,
                Extra::kPermutation, "8-bit i64");
    }
  }
  size_t total = 0;
  const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
  CheckSegmented(**engine,
                 sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                 offsets, true, true);
}

// Warp-level ranking: the portable twin (warp operations through local
// memory) everywhere, with warps of 32 and of 16 work-items (the Intel
// policy's); NVIDIA's PTX version where the device is one; the sub-group
// version where the device has sub-group ranking's extensions, with each
// kind of sub-group built-ins it has and sub-groups of 16 (and 8 and 32
// once); with three-launch passes and one-launch passes with early counts
// (keys placed as ranked), 8-bit digits (the only width warp ranking builds
// with), and sizes that end mid-warp and mid-tile (the padding keys must
// rank last). One test per ranking and pass, so that they run at once.
struct WarpRankingCase {
  std::string name;
  TileRanking ranking;
  int warp_size;
  // Sub-group ranking's built-ins: unset, the device's best
  // (BestSubgroupOps); set, these where the device has them and they are
  // not its best. Other rankings take none (the policy's default).
  std::optional<SubgroupOps> ops;
  RadixPass pass;
};

std::vector<WarpRankingCase> WarpRankingCases() {
  constexpr RadixPass kThree = RadixPass::kThreeLaunch;
  constexpr RadixPass kEarly = RadixPass::kOneLaunchEarlyCounts;
  const std::vector<RadixPass> both = {kThree, kEarly};
  // The Intel policy's form.
  const std::vector<RadixPass> intel = {kEarly};
  struct Ranking {
    const char* name;
    TileRanking ranking;
    int warp_size;
    std::optional<SubgroupOps> ops;
    const std::vector<RadixPass>& passes;
  };
  const Ranking rankings[] = {
      {"Emulated32", TileRanking::kWarpEmulated, 32, std::nullopt, both},
      {"Emulated16", TileRanking::kWarpEmulated, 16, std::nullopt, both},
      {"PtxBallots", TileRanking::kWarpBallots, 32, std::nullopt, both},
      {"Subgroup16", TileRanking::kSubgroup, 16, std::nullopt, both},
      {"Subgroup16KhrBallot", TileRanking::kSubgroup, 16,
       SubgroupOps::kKhrBallot, intel},
      {"Subgroup16Khr", TileRanking::kSubgroup, 16, SubgroupOps::kKhr, intel},
      {"Subgroup16Intel", TileRanking::kSubgroup, 16, SubgroupOps::kIntel,
       intel},
      {"Subgroup32", TileRanking::kSubgroup, 32, std::nullopt, intel},
      {"Subgroup8", TileRanking::kSubgroup, 8, std::nullopt, intel}};
  std::vector<WarpRankingCase> cases;
  for (const Ranking& r : rankings) {
    for (RadixPass pass : r.passes) {
      cases.push_back(
          {absl::StrCat(r.name, "_",
                        pass == kThree ? "ThreeLaunch" : "EarlyCounts"),
           r.ranking, r.warp_size, r.ops, pass});
    }
  }
  return cases;
}

// Test lists name the case (gtest prints parameters it cannot name as bytes).
void PrintTo(const WarpRankingCase& c, std::ostream* os) { *os << c.name; }

class WarpRanking : public ::testing::TestWithParam<WarpRankingCase> {};

TEST_P(WarpRanking, SortsEveryShape) {
  const WarpRankingCase& c = GetParam();
  const DeviceInfo& info = Engine().info();
  SubgroupOps ops = SubgroupOps::kKhrBallot;
  if (c.ranking == TileRanking::kWarpBallots) {
    if (!absl::StrContains(info.vendor, "NVIDIA")) {
      GTEST_SKIP() << "PTX ranking is for NVIDIA devices: " << info.ToString();
    }
  }
  if (c.ranking == TileRanking::kSubgroup) {
    const std::optional<SubgroupOps> best = BestSubgroupOps(info);
    if (!best.has_value()) {
      GTEST_SKIP() << "sub-group ranking not available here: "
                   << info.ToString();
    }
    ops = c.ops.value_or(*best);
    if (c.ops.has_value() && (ops == *best || !SubgroupOpsRun(info, ops))) {
      GTEST_SKIP() << "these sub-group built-ins are the device's best "
                      "(tested as such) or missing";
    }
  }
  OpenClEngine::Options options = CpuDevice();
  EnginePolicy p = EnginePolicy::For(info);
  p.radix = {.radix_bits = 8,
             .work_group = 64,
             .items_32 = 8,
             .items_64 = 4,
             .items_32_keys = 16,  // keys-only tiles twice as long
             .items_64_keys = 8,
             .pass = c.pass,
             .ranking = c.ranking,
             .warp_size = c.warp_size,
             .subgroup_ops = ops,
             // Up to 512 keys: tiles of 2 keys per work-item.
             .small_items = 2,
             .small_max = 512,
             // Segments of 2 keys up to a tile: radix_segments.
             .segment_radix_above = 1};
  options.policy = p;
  options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
  SCOPED_TRACE(p.ToString());
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->policy().radix.ranking, c.ranking);
  if (c.ranking == TileRanking::kSubgroup) {
    // The size the kernels saw on the device (radix_sub_group_probe).
    EXPECT_EQ((*engine)->radix_sub_group_size(), c.warp_size);
    std::printf("sub-group ranking: sub-groups of %d seen on the device (%s)\n",
                (*engine)->radix_sub_group_size(),
                RadixBuildOptions(p.radix, 32, true, 8).c_str());
  }
  for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{511}, size_t{512},
                   size_t{513}, size_t{70'001}}) {
    for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kSorted,
                        Shape::kReversed, Shape::kSpecial, Shape::kAllEqual}) {
      const std::string what = absl::StrCat("n=", n);
      CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 5),
                false, Extra::kNone, "warp u32 " + what);
      CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 6), true,
                Extra::kU64ValuesAndPermutation, "warp f32 " + what);
      CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 7), false,
                Extra::kPermutation, "warp i64 " + what);
    }
  }
  // Segment lengths from 0 to 5 blocks: all three routes (radix_segments
  // up to a tile of 512 keys with payloads, 512 for 64-bit keys alone;
  // bitonic; radix passes).
  size_t total = 0;
  const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
  CheckSegmented(**engine,
                 sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                 offsets, true, true);
  CheckSegmented(
      **engine,
      sortd::testing::Generate<int64_t>(Shape::kFewDistinct, total, 5), offsets,
      false, false);
  // radix_segments gives each work-item as many keys as cover its segment:
  // lengths on both sides of every step of that number, from one key a
  // work-item (and segments of 2 and 3 keys) up to a whole keys-only tile
  // and past it.
  const RadixSortPolicy& rp = (*engine)->policy().radix;
  for (int bits : {32, 64}) {
    const size_t wg = rp.work_group, tile = rp.Tile(bits, false);
    std::vector<uint32_t> steps = {0, 2, 5};
    for (size_t len = wg - 1; len <= tile + 1; len += wg) {
      for (size_t l : {len, len + 1, len + 2}) {
        steps.push_back(steps.back() + static_cast<uint32_t>(l));
      }
    }
    SCOPED_TRACE(absl::StrCat(bits, "-bit keys only, segments by step"));
    if (bits == 32) {
      CheckSegmented(
          **engine,
          sortd::testing::Generate<uint32_t>(Shape::kRandom, steps.back(), 11),
          steps, true, false, /*with_permutation=*/false);
    } else {
      CheckSegmented(
          **engine,
          sortd::testing::Generate<int64_t>(Shape::kSpecial, steps.back(), 12),
          steps, false, false, /*with_permutation=*/false);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, WarpRanking, ::testing::ValuesIn(WarpRankingCases()),
    [](const ::testing::TestParamInfo<WarpRankingCase>& p) {
      return p.param.name;
    });

// The Intel policy as For() makes it for an Intel GPU, forced on the test
// device (EnginePolicy::Named): where the device has sub-group ranking's
// extensions, as it is; elsewhere (PoCL 3) with its portable twin
// (kWarpEmulated ranking of the same warps and tiles). Every key type and
// order, payloads and permutations, across its tile and small-tile
// lengths; segments of every route; transposes.
TEST(IntelPolicy, SortsSegmentsAndTransposes) {
  OpenClEngine::Options options = CpuDevice();
  const DeviceInfo& info = Engine().info();
  absl::StatusOr<EnginePolicy> p = EnginePolicy::Named("intel-subgroups", info);
  ASSERT_TRUE(p.ok()) << p.status();
  const bool subgroups = BestSubgroupOps(info).has_value();
  std::printf("device %s; extensions: %s\n", info.ToString().c_str(),
              info.extensions.c_str());
  if (!subgroups) {
    p->radix.ranking = TileRanking::kWarpEmulated;
    std::printf(
        "no sub-group ranking here: intel-subgroups with its twin, "
        "warp-emulated ranking\n");
  }
  options.policy = *p;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const EnginePolicy& policy = (*engine)->policy();
  std::printf("policy %s; radix sub-groups seen: %d; transpose kernel: %s\n",
              policy.ToString().c_str(), (*engine)->radix_sub_group_size(),
              (*engine)->transpose_kernel());
  EXPECT_EQ((*engine)->radix_sub_group_size(),
            subgroups ? policy.radix.warp_size : 0);
  EXPECT_EQ(policy.radix.warp_size, 16);
  if (subgroups) {
    EXPECT_STREQ((*engine)->transpose_kernel(), "subgroup");
  }
  const size_t small_max = policy.radix.small_max;
  for (KeyType type : kAllKeyTypes) {
    DispatchKeyType(type, [&]<KeyType T>() {
      using K = KeyOf<T>;
      const int bits = sizeof(K) * 8;
      for (Extra extra :
           {Extra::kNone, Extra::kU32Values, Extra::kU64ValuesAndPermutation}) {
        const size_t tile = policy.radix.Tile(bits, extra != Extra::kNone);
        for (size_t n : {size_t{4097}, tile - 1, tile + 1, 3 * tile + 5,
                         small_max, small_max + 1}) {
          for (bool desc : {false, true}) {
            // Either side of the small-array build's limit, one order per
            // payload kind (both orders run at the shorter lengths).
            if (n >= small_max && desc != (extra == Extra::kU32Values)) {
              continue;
            }
            const Shape shape = (n + desc) % 3 == 0   ? Shape::kRandom
                                : (n + desc) % 3 == 1 ? Shape::kSpecial
                                                      : Shape::kFewDistinct;
            CheckSort(**engine, sortd::testing::Generate<K>(shape, n, 8), desc,
                      extra,
                      absl::StrCat("intel ", KeyTypeName(type), " n=", n));
          }
        }
      }
      size_t total = 0;
      const std::vector<uint32_t> offsets =
          MixedOffsets(policy.bitonic.Block(bits), 12, &total);
      CheckSegmented(**engine,
                     sortd::testing::Generate<K>(Shape::kRandom, total, 9),
                     offsets, type == KeyType::kF32, true);
    });
  }
  for (size_t count : {size_t{1}, size_t{7}, size_t{9}, size_t{4001}}) {
    CheckTranspose(**engine, count, static_cast<unsigned>(count) + 5);
  }
}

// A named policy is forced through Options::policy_name; one that does not
// fit the device, or that does not exist, is refused before anything is
// built.
TEST(IntelPolicy, ForcedByNameOrRefused) {
  OpenClEngine::Options options = CpuDevice();
  options.policy_name = "cpu";
  auto cpu = OpenClEngine::Create(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->policy().name, "cpu");
  options.policy_name = "no-such-policy";
  EXPECT_EQ(OpenClEngine::Create(options).status().code(),
            absl::StatusCode::kNotFound);
  if (!absl::StrContains(Engine().info().vendor, "NVIDIA")) {
    options.policy_name = "nvidia-ptx";
    const absl::Status s = OpenClEngine::Create(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("policy nvidia-ptx does not fit"));
  }
  if (!BestSubgroupOps(Engine().info())) {
    options.policy_name = "intel-subgroups";
    const absl::Status s = OpenClEngine::Create(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("subgroup ranking"));
  }
}

// Knobs changed after the policy is chosen (sortd's
// --kernel_policy_overrides); a bad one stops the engine with its name.
TEST(OpenClEngine, PolicyOverridesApplyAfterThePolicyIsChosen) {
  OpenClEngine::Options options = CpuDevice();
  options.policy_name = "cpu";
  // Sorts below 100000 keys run every pass, shared digits or not.
  options.policy_overrides =
      "radix.lookback=3,radix.pass=three-launch,radix.skip_check_min=100000";
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->policy().radix.lookback, 3);
  EXPECT_EQ((*engine)->policy().radix.skip_check_min, 100000u);
  EXPECT_THAT((*engine)->policy().name, HasSubstr("cpu"));
  for (Shape shape : {Shape::kRandom, Shape::kAllEqual, Shape::kFewDistinct}) {
    CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, 5000, 4),
              true, Extra::kPermutation, "overridden policy");
    CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, 3000, 5),
              false, Extra::kU64ValuesAndPermutation, "overridden policy");
  }
  options.policy_overrides = "radix.no_such_knob=1";
  const absl::Status s = OpenClEngine::Create(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no_such_knob"));
}

// A radix policy of small tiles (8-bit digits, 64 work-items) with one-
// launch passes of the given form: the CPU device's tests of look-back
// statuses set their knobs on it.
RadixSortPolicy SmallOneLaunchTiles(RadixPass pass, TileRanking ranking) {
  return {.radix_bits = 8,
          .work_group = 64,
          .items_32 = 8,
          .items_64 = 4,
          .items_32_keys = 16,
          .items_64_keys = 8,
          .pass = pass,
          .ranking = ranking};
}

// Marked look-back statuses (one area zeroed once per sort, each pass's
// words marked with its parity) and the digit count's unrolled loads (3: a
// remainder loop too). Keys whose odd digits are all equal skip those passes,
// so a pass's parity must follow the passes that ran, not the pass number; each
// engine sorts several sizes in turn, so status areas come back from the pool
// holding another sort's words. On NVIDIA the status lines' L2 prefetch (PTX)
// runs too.
TEST(Algorithms, MarkedLookBackStatuses) {
  const bool nvidia = absl::StrContains(Engine().info().vendor, "NVIDIA");
  struct Config {
    RadixPass pass;
    TileRanking ranking;
    int count_unroll;
    bool prefetch;
  };
  for (auto [pass, ranking, count_unroll, prefetch] :
       {Config{RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 3,
               false},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 2,
         nvidia},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 4,
         false}}) {
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = SmallOneLaunchTiles(pass, ranking);
    p.radix.count_unroll = count_unroll;
    p.radix.marked_status_max = size_t{1} << 28;
    p.radix.status_prefetch = prefetch;
    options.policy = p;
    options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
    SCOPED_TRACE(p.ToString());
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_THAT((*engine)->policy().ToString(),
                HasSubstr("radix.marked_status_max=268435456"));
    EXPECT_TRUE((*engine)->policy().radix.MarkedStatus(size_t{1} << 20));
    for (size_t n : {size_t{1}, size_t{513}, size_t{100'003}, size_t{4097},
                     size_t{150'001}}) {
      const std::string what = absl::StrCat("n=", n);
      for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kReversed,
                          Shape::kAllEqual}) {
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 5),
                  false, Extra::kNone, "marked u32 " + what);
        CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 6), true,
                  Extra::kU64ValuesAndPermutation, "marked f32 " + what);
      }
      std::vector<uint64_t> gaps =
          sortd::testing::Generate<uint64_t>(Shape::kRandom, n, 7);
      for (uint64_t& k : gaps) k &= 0x00FF00FF00FF00FFull;
      CheckSort(**engine, gaps, false, Extra::kPermutation,
                "marked u64, odd digits shared, " + what);
      CheckSort(**engine, gaps, true, Extra::kNone,
                "marked u64, odd digits shared, desc, " + what);
    }
  }
  // Marks take a bit from the counts: only arrays of fewer than 2^29 keys.
  RadixSortPolicy r;
  r.marked_status_max = size_t{1} << 30;
  EXPECT_TRUE(r.MarkedStatus((size_t{1} << 29) - 1));
  EXPECT_FALSE(r.MarkedStatus(size_t{1} << 29));
  r.marked_status_max = 1000;
  EXPECT_FALSE(r.MarkedStatus(1001));
  // The prefetch is PTX: refused anywhere but NVIDIA.
  DeviceInfo other = Engine().info();
  other.vendor = "Some Vendor";
  EnginePolicy portable = EnginePolicy::For(other);
  EXPECT_FALSE(portable.radix.status_prefetch);
  EXPECT_TRUE(portable.CheckFits(other).ok()) << portable.ToString();
  portable.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  portable.radix.ranking = TileRanking::kWarpEmulated;
  portable.radix.radix_bits = 8;
  portable.radix.status_prefetch = true;
  EXPECT_THAT(portable.CheckFits(other).message(),
              HasSubstr("status_prefetch needs an NVIDIA GPU"));
}

// One-launch passes take arrays of up to 2^status_count_bits keys, one
// more than the status word's count holds: the last tile of such an array
// can have a prefix that does not fit, and publishes none. Here the count
// is 12 bits wide so that 4096 keys reach it (production: 30 bits, 2^30
// keys); all-equal keys put every key in one digit, so the last tile's
// prefix is 4096. Unmarked and marked statuses.
TEST(Algorithms, LastTilePrefixWiderThanTheStatusCount) {
  constexpr int kBits = 12;
  constexpr size_t kMax = size_t{1} << kBits;
  struct Config {
    RadixPass pass;
    TileRanking ranking;
    size_t marked_max;
  };
  for (auto [pass, ranking, marked_max] :
       {Config{RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, 0},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated,
         size_t{1} << 28}}) {
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = SmallOneLaunchTiles(pass, ranking);
    p.radix.marked_status_max = marked_max;
    p.radix.status_count_bits = kBits;
    const RadixPassPlan at = PlanRadixPasses(p.radix, 32, false, kMax, true);
    ASSERT_TRUE(at.one_launch);
    EXPECT_EQ(at.status_value_mask, kMax - 1);
    EXPECT_EQ(at.marked, marked_max > 0);
    EXPECT_FALSE(
        PlanRadixPasses(p.radix, 32, false, kMax + 1, true).one_launch);
    options.policy = p;
    options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
    SCOPED_TRACE(p.ToString());
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n : {kMax, kMax + 1}) {
      const std::string what = absl::StrCat("n=", n);
      for (Shape shape : {Shape::kAllEqual, Shape::kRandom}) {
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 8),
                  true, Extra::kPermutation, "u32 desc " + what);
        CheckSort(**engine, sortd::testing::Generate<uint64_t>(shape, n, 10),
                  false, Extra::kNone, "u64 " + what);
      }
    }
  }
  // The count must hold a tile's own count.
  EnginePolicy narrow = EnginePolicy::For(Engine().info());
  narrow.radix.status_count_bits = 4;
  EXPECT_THAT(narrow.CheckFits(Engine().info()).message(),
              HasSubstr("status_count_bits"));
}

// An engine on the OpenCL CPU device says so: its work is not labelled as
// a GPU's.
TEST(OpenClEngine, PathNamesTheKindOfDevice) {
  EXPECT_EQ(Engine().path(), Engine().info().is_gpu
                                 ? ExecutionPath::kGpu
                                 : ExecutionPath::kOpenClCpu);
  if (!Engine().info().is_gpu) {
    EXPECT_STREQ(PathName(Engine().path()), "opencl-cpu");
  }
}

// Create() verifies every warm-up answer against the reference whatever the
// build options: kernels that leave keys unsorted (-DITEMS=2: tiles shorter
// than the host's, in every build, the small-array one too) or sort keys but
// not their permutation (-DHAS_INDEX=0) are refused. Under the test device's
// policy and under the Intel policy (where the device has no sub-groups,
// its portable twin), whose one-launch passes and small-array tiles differ.
TEST(WarmUp, KernelsThatDoNotSortAreRefused) {
  const DeviceInfo& info = Engine().info();
  absl::StatusOr<EnginePolicy> intel =
      EnginePolicy::Named("intel-subgroups", info);
  ASSERT_TRUE(intel.ok()) << intel.status();
  if (!BestSubgroupOps(info)) intel->radix.ranking = TileRanking::kWarpEmulated;
  for (const std::optional<EnginePolicy>& policy :
       {std::optional<EnginePolicy>(), std::optional<EnginePolicy>(*intel)}) {
    for (const char* extra : {"-DITEMS=2", "-DHAS_INDEX=0"}) {
      SCOPED_TRACE(policy ? policy->name : "the device's policy");
      OpenClEngine::Options options = CpuDevice();
      options.policy = policy;
      options.kernel_diagnostics.extra_options = extra;
      auto engine = OpenClEngine::Create(options);
      ASSERT_FALSE(engine.ok()) << extra;
      EXPECT_EQ(engine.status().code(), absl::StatusCode::kInternal) << extra;
      EXPECT_THAT(engine.status().message(), HasSubstr("warm-up")) << extra;
      EXPECT_THAT(engine.status().message(),
                  HasSubstr("differs from the reference"))
          << extra;
      EXPECT_THAT(engine.status().message(), HasSubstr(extra));
    }
  }
}

}  // namespace
}  // namespace sortd::gpu
