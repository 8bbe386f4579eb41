// The OpenCL engine against the reference, on the OpenCL CPU device (PoCL in
// CI): every key type and order, payloads, permutations, stability, every
// tile and scan-level boundary; the binary cache, including corruption; and
// injected faults travelling as Status.
#include "gpu/opencl_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/cpu_sorter.h"
#include "core/transpose.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::KeyOf;
using sortd::testing::Shape;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  std::string dir =
      ::testing::TempDir() + "/sortd_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// The OpenCL CPU device, or a GPU when SORTD_TEST_DEVICE=gpu (to run this
// suite on a GPU machine).
OpenClEngine::Options CpuDevice() {
  OpenClEngine::Options o;
  const char* d = std::getenv("SORTD_TEST_DEVICE");
  o.kind = d && std::string(d) == "gpu" ? DeviceKind::kGpu : DeviceKind::kCpu;
  o.preallocate_keys = 0;  // keep each test's warm-up short
  return o;
}

OpenClEngine::Options CpuDeviceWithCache(const std::string& dir) {
  OpenClEngine::Options o = CpuDevice();
  o.cache_dir = dir;
  return o;
}

// One engine per test process, on the CPU device, as CI has no GPU.
OpenClEngine& Engine() {
  static OpenClEngine* engine = [] {
    auto e = OpenClEngine::Create(CpuDevice());
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->release() : nullptr;
  }();
  return *engine;
}

// Tiny tiles (32 keys) so that a few thousand keys cross many tiles and a
// few tens of thousands need three levels of scan.
EnginePolicy TinyPolicy() {
  EnginePolicy p;
  p.radix = {.radix_bits = 4, .work_group = 16, .items_32 = 2, .items_64 = 2};
  p.transpose = {.matrices_per_group = 4};
  return p;
}

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
    std::vector<uint32_t> keys =
        sortd::testing::Generate<uint32_t>(Shape::kRandom, 10000, 1);
    std::vector<uint32_t> out(keys.size());
    StageTimes stages;
    SortJob job{.key_type = KeyType::kU32,
                .count = keys.size(),
                .keys = reinterpret_cast<const std::byte*>(keys.data()),
                .keys_out = reinterpret_cast<std::byte*>(out.data()),
                .stages = &stages};
    ASSERT_TRUE((*engine)->Sort(job).ok());
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
  }
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

TEST(OpenClEngine, TransposeMatchesReference) {
  for (size_t count :
       {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{5000}}) {
    std::vector<uint32_t> in(count * 32), out(count * 32);
    std::mt19937 rng(static_cast<unsigned>(count));
    for (uint32_t& w : in) w = rng();
    StageTimes stages;
    ASSERT_TRUE(
        Engine()
            .Transpose({.count = count,
                        .in = reinterpret_cast<const std::byte*>(in.data()),
                        .out = reinterpret_cast<std::byte*>(out.data()),
                        .stages = &stages})
            .ok());
    for (size_t m = 0; m < count; ++m) {
      uint32_t want[32];
      std::copy(in.begin() + m * 32, in.begin() + m * 32 + 32, want);
      TransposeBits32(want);
      ASSERT_TRUE(std::equal(want, want + 32, out.begin() + m * 32))
          << "matrix " << m << " of " << count;
    }
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
      std::vector<uint32_t> in(count * 32), out(count * 32, 0xDEADBEEF);
      std::mt19937 rng(static_cast<unsigned>(count) + 77);
      for (uint32_t& w : in) w = rng();
      ASSERT_TRUE(
          (*engine)
              ->Transpose({.count = count,
                           .in = reinterpret_cast<const std::byte*>(in.data()),
                           .out = reinterpret_cast<std::byte*>(out.data())})
              .ok());
      for (size_t m = 0; m < count; ++m) {
        uint32_t want[32];
        std::copy(in.begin() + m * 32, in.begin() + m * 32 + 32, want);
        TransposeBits32(want);
        ASSERT_TRUE(std::equal(want, want + 32, out.begin() + m * 32))
            << (*engine)->transpose_kernel() << " matrix " << m << " of "
            << count;
      }
    }
  }
}

TEST(ProgramCache, SecondEngineLoadsBinariesAndCorruptEntriesAreRebuilt) {
  const std::string dir = TempDir("kernel_cache");
  auto first = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(first.ok()) << first.status();
  const int programs = (*first)->cache_stats().built_from_source;
  EXPECT_GE(programs, 9);  // radix and bitonic per width and index, transpose
  EXPECT_EQ((*first)->cache_stats().loaded_from_disk, 0);

  auto second = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->cache_stats().built_from_source, 0);
  EXPECT_EQ((*second)->cache_stats().loaded_from_disk, programs);

  // Corrupt every entry in a different way: truncate, flip a byte, garbage.
  int i = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    const auto size = std::filesystem::file_size(path);
    if (i % 3 == 0) {
      std::filesystem::resize_file(path, size / 2);
    } else if (i % 3 == 1) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(size - 10);
      f.put('\x5a');
    } else {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
    }
    ++i;
  }
  ASSERT_EQ(i, programs);
  auto third = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->cache_stats().disk_entries_rejected, programs);
  EXPECT_EQ((*third)->cache_stats().built_from_source, programs);
  // It still sorts correctly, and the rewritten entries load again.
  CheckSort(**third, sortd::testing::Generate<float>(Shape::kSpecial, 3000, 3),
            false, Extra::kPermutation, "after corruption");
  auto fourth = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ((*fourth)->cache_stats().loaded_from_disk, programs);
  std::filesystem::remove_all(dir);
}

TEST(ProgramCache, BuildFailureCarriesTheBuildLog) {
  auto device = FindDevice(CpuDevice().kind);
  ASSERT_TRUE(device.ok()) << device.status();
  cl::Context context(device->device);
  ProgramCache cache(context, *device, "", {});
  // radix_sort.cl needs RADIX_BITS, WG, ITEMS and HAS_INDEX too.
  auto program = cache.Get("radix_sort", "-DKEY_BITS=32");
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(program.status().message(), HasSubstr("building radix_sort.cl"));
  EXPECT_THAT(program.status().message(), HasSubstr("RADIX_BITS"));
  EXPECT_EQ(cache.Get("no_such_kernel", "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(FaultInjection, EveryEnqueueFailureTravelsAsStatus) {
  // Count the enqueues of one sort with payload and permutation, then fail
  // each of them in turn on a fresh engine.
  const std::vector<int64_t> keys =
      sortd::testing::Generate<int64_t>(Shape::kRandom, 3000, 8);
  std::vector<uint64_t> values(keys.size(), 7);
  auto run = [&](OpenClEngine& engine) {
    std::vector<int64_t> out(keys.size());
    std::vector<uint64_t> vout(keys.size());
    std::vector<uint32_t> perm(keys.size());
    SortJob job{.key_type = KeyType::kI64,
                .count = keys.size(),
                .keys = reinterpret_cast<const std::byte*>(keys.data()),
                .value_type = ValueType::kU64,
                .values = reinterpret_cast<const std::byte*>(values.data()),
                .keys_out = reinterpret_cast<std::byte*>(out.data()),
                .values_out = reinterpret_cast<std::byte*>(vout.data()),
                .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
    return engine.Sort(job);
  };
  int failures = 0;
  for (long at = 1; at < 200; ++at) {
    OpenClEngine::Options options = CpuDevice();
    options.faults.enqueue = at;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    absl::Status s = run(**engine);
    if (s.ok()) break;  // past the last enqueue of this sort
    ++failures;
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("injected fault at enqueue"));
    // The engine stays usable after a failed run.
    EXPECT_TRUE(run(**engine).ok()) << "after fault at " << at;
  }
  EXPECT_GT(failures, 10);
}

// Segmented sort against the reference applied segment by segment;
// permutation entries are indices into the whole array.
template <typename K>
void CheckSegmented(Sorter& sorter, const std::vector<K>& keys,
                    const std::vector<uint32_t>& offsets, bool desc,
                    bool with_payload) {
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
      ASSERT_EQ(perm[begin + i], begin + ref[i])
          << "segment " << s << " [" << begin << "," << end << ") at " << i;
      ASSERT_EQ(0, std::memcmp(&out[begin + i], &part[ref[i]], sizeof(K)));
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

// 8-bit passes, ranked in one 8-bit step or in two stable 4-bit steps.
TEST(Algorithms, EightBitDigits) {
  // Both ranking widths, with and without the scatter's bank padding.
  for (auto [local_bits, bank_pad] : {std::pair{0, 1}, {4, 1}, {4, 0}}) {
    SCOPED_TRACE(
        absl::StrCat("local_bits=", local_bits, " bank_pad=", bank_pad));
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = {.radix_bits = 8,
               .local_bits = local_bits,
               .work_group = 64,
               .items_32 = 8,
               .items_64 = 8,
               .bank_pad = bank_pad != 0};
    options.policy = p;
    options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (size_t n :
         {size_t{3}, size_t{511}, size_t{512}, size_t{513}, size_t{100'000}}) {
      for (Shape shape :
           {Shape::kRandom, Shape::kFewDistinct, Shape::kSpecial}) {
        CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 3), false,
                  Extra::kU64ValuesAndPermutation, "8-bit f32");
        CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 3),
                  true, Extra::kPermutation, "8-bit i64");
      }
    }
    size_t total = 0;
    const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
    CheckSegmented(**engine,
                   sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                   offsets, true, true);
  }
}

// One launch per pass with a decoupled look-back (radix_onesweep), under
// 4-bit and 8-bit passes; sizes from one tile to hundreds of tiles, so that
// look-backs cross many tiles that publish aggregates and prefixes.
TEST(Algorithms, OnesweepPasses) {
  for (auto [radix_bits, local_bits] : {std::pair{4, 0}, {8, 4}}) {
    SCOPED_TRACE(absl::StrCat("radix_bits=", radix_bits));
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = {.radix_bits = radix_bits,
               .local_bits = local_bits,
               .work_group = 64,
               .items_32 = 8,
               .items_64 = 8,
               .bank_pad = true,
               .pass = RadixPass::kOneLaunch};
    options.policy = p;
    options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_THAT((*engine)->policy().ToString(),
                HasSubstr("radix.pass=one-launch "));
    for (size_t n :
         {size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{150'001}}) {
      for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kSorted,
                          Shape::kReversed, Shape::kSpecial}) {
        const std::string what = absl::StrCat("n=", n);
        CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 5),
                  false, Extra::kNone, "onesweep u32 " + what);
        CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 6), true,
                  Extra::kU64ValuesAndPermutation, "onesweep f32 " + what);
        CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 7),
                  false, Extra::kPermutation, "onesweep i64 " + what);
      }
    }
    // Segments keep the three-launch passes (no totals per segment).
    size_t total = 0;
    const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
    CheckSegmented(**engine,
                   sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4),
                   offsets, false, true);
  }
}

// Warp-level ranking: the portable twin (warp operations through local
// memory) everywhere, and NVIDIA's PTX version where the device is one;
// with three-launch and one-launch passes, 4-bit and 8-bit digits, and
// sizes that end mid-warp and mid-tile (the padding keys must rank last).
TEST(Algorithms, WarpRanking) {
  std::vector<TileRanking> rankings = {TileRanking::kWarpEmulated};
  if (absl::StrContains(Engine().info().vendor, "NVIDIA")) {
    rankings.insert(rankings.end(),
                    {TileRanking::kWarpBallots, TileRanking::kWarpMasks});
  }
  struct Config {
    int radix_bits;
    RadixPass pass;
    bool direct_place;
  };
  constexpr RadixPass kThree = RadixPass::kThreeLaunch;
  constexpr RadixPass kOne = RadixPass::kOneLaunch;
  constexpr RadixPass kEarly = RadixPass::kOneLaunchEarlyCounts;
  for (TileRanking ranking : rankings) {
    for (auto [radix_bits, pass, direct_place] : {Config{8, kThree, false},
                                                  {8, kOne, false},
                                                  {8, kEarly, false},
                                                  {8, kEarly, true},
                                                  {4, kThree, false},
                                                  {4, kEarly, false},
                                                  {4, kEarly, true}}) {
      // Keys placed as ranked: not with masks, which share the keys' local
      // memory.
      if (direct_place && ranking == TileRanking::kWarpMasks) continue;
      OpenClEngine::Options options = CpuDevice();
      EnginePolicy p = EnginePolicy::For(Engine().info());
      p.radix = {.radix_bits = radix_bits,
                 .work_group = 64,
                 .items_32 = 8,
                 .items_64 = 4,
                 .items_32_keys = 16,  // keys-only tiles twice as long
                 .items_64_keys = 8,
                 .bank_pad = true,
                 .pass = pass,
                 .ranking = ranking,
                 .direct_place_32 = direct_place,
                 .direct_place_64 = direct_place,
                 // Up to 512 keys: tiles of 2 keys per work-item.
                 .small_items = 2,
                 .small_max = 512,
                 // Segments of 65 keys up to a tile: radix_segments.
                 .segment_radix_above = 64};
      options.policy = p;
      options.algorithm = sortd::gpu::SortAlgorithm::kRadix;
      SCOPED_TRACE(p.ToString());
      auto engine = OpenClEngine::Create(options);
      ASSERT_TRUE(engine.ok()) << engine.status();
      EXPECT_EQ((*engine)->policy().radix.Ranking(64), ranking);
      EXPECT_EQ((*engine)->policy().radix.LocalBits(), radix_bits);
      for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{511},
                       size_t{512}, size_t{513}, size_t{70'001}}) {
        for (Shape shape :
             {Shape::kRandom, Shape::kFewDistinct, Shape::kSorted,
              Shape::kReversed, Shape::kSpecial, Shape::kAllEqual}) {
          const std::string what = absl::StrCat("n=", n);
          CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, n, 5),
                    false, Extra::kNone, "warp u32 " + what);
          CheckSort(**engine, sortd::testing::Generate<float>(shape, n, 6),
                    true, Extra::kU64ValuesAndPermutation, "warp f32 " + what);
          CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, n, 7),
                    false, Extra::kPermutation, "warp i64 " + what);
        }
      }
      // Segment lengths from 0 to 5 blocks: all three routes (radix_segments
      // up to a tile of 512 keys with payloads, 512 for 64-bit keys alone;
      // bitonic; radix passes).
      size_t total = 0;
      const std::vector<uint32_t> offsets = MixedOffsets(2048, 9, &total);
      CheckSegmented(
          **engine,
          sortd::testing::Generate<uint32_t>(Shape::kRandom, total, 4), offsets,
          true, true);
      CheckSegmented(
          **engine,
          sortd::testing::Generate<int64_t>(Shape::kFewDistinct, total, 5),
          offsets, false, false);
    }
  }
}

// Each constraint a policy can break is refused with its own sentence.
TEST(Policy, ViolationsNameEachBrokenConstraint) {
  // PTX needs NVIDIA: anywhere else the policy is refused, not built.
  DeviceInfo other = Engine().info();
  other.vendor = "Some Vendor";
  other.nv_compute_major = 0;
  EnginePolicy p = EnginePolicy::For(other);
  EXPECT_TRUE(p.Violations(other).empty()) << p.ToString();
  p.radix.ranking = TileRanking::kWarpBallots;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("warp-ballots and warp-masks ranking need an NVIDIA"));
  p.radix.ranking = TileRanking::kWarpEmulated;
  p.radix.work_group = 48;
  EXPECT_THAT(p.CheckFits(other).message(), HasSubstr("% 32 == 0"));
  p.radix.work_group = 64;
  p.radix.local_bits = 2;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("local_bits applies only to work-item ranking"));
  p.radix.local_bits = 0;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  // Direct placement needs early counts and ballots or their twin.
  p.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  p.radix.direct_place_32 = p.radix.direct_place_64 = true;
  EXPECT_TRUE(p.CheckFits(other).ok()) << p.CheckFits(other);
  p.radix.pass = RadixPass::kOneLaunch;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("direct_place needs one-launch-early-counts"));
  // Early counts need warp-level ranking for both key widths.
  p.radix.direct_place_32 = p.radix.direct_place_64 = false;
  p.radix.pass = RadixPass::kOneLaunchEarlyCounts;
  p.radix.ranking_64 = TileRanking::kWorkItemCounters;
  EXPECT_THAT(p.CheckFits(other).message(),
              HasSubstr("one-launch-early-counts needs warp-level ranking"));
  // Several broken constraints: each is named.
  EnginePolicy q = EnginePolicy::For(other);
  q.radix.count_unroll = 5;
  q.radix.lookback = 0;
  q.bitonic.block_32 = 3000;
  const std::vector<std::string> broken = q.Violations(other);
  EXPECT_EQ(broken.size(), 3u) << absl::StrJoin(broken, "; ");
  EXPECT_THAT(q.CheckFits(other).message(), HasSubstr("count_unroll is 1-4"));
  EXPECT_THAT(q.CheckFits(other).message(), HasSubstr("lookback is 1-64"));
  EXPECT_THAT(q.CheckFits(other).message(),
              HasSubstr("bitonic.block_32 is a power of two"));
}

// ToString prints every knob as key=value; ApplyPolicyOverrides reads them
// back, and refuses unknown keys and bad values.
TEST(Policy, OverridesReadWhatToStringPrints) {
  DeviceInfo nvidia = Engine().info();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.is_gpu = true;
  nvidia.nv_compute_major = 9;
  const EnginePolicy base = EnginePolicy::For(nvidia);
  EXPECT_EQ(base.name, "nvidia-ptx");
  // Every knob of one policy applied to another gives the first back.
  EnginePolicy other = EnginePolicy::For(Engine().info());
  const std::string text = base.ToString();
  std::string spec = text.substr(text.find(' ') + 1);
  std::replace(spec.begin(), spec.end(), ' ', ',');
  ASSERT_TRUE(ApplyPolicyOverrides(spec, &other).ok());
  EXPECT_EQ(other.ToString().substr(other.ToString().find(" radix.")),
            text.substr(text.find(" radix.")));
  EXPECT_THAT(other.name, HasSubstr("+ overrides"));
  EnginePolicy p = base;
  ASSERT_TRUE(
      ApplyPolicyOverrides("radix.pass=three-launch, radix.ranking_64=same,"
                           "radix.ranking=warp-emulated,bitonic.max_keys=0",
                           &p)
          .ok());
  EXPECT_EQ(p.radix.pass, RadixPass::kThreeLaunch);
  EXPECT_EQ(p.radix.Ranking(64), TileRanking::kWarpEmulated);
  EXPECT_EQ(p.bitonic.max_keys, 0u);
  for (const char* bad :
       {"radix.nonsense=1", "radix.pass=two-launch", "radix.lookback=-1",
        "radix.bank_pad=2", "radix.lookback"}) {
    EnginePolicy q = base;
    const absl::Status s = ApplyPolicyOverrides(bad, &q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(q.ToString(), base.ToString()) << bad;  // untouched
  }
  // The build options are made from the policy alone.
  EXPECT_THAT(RadixBuildOptions(base.radix, 32, false, 24),
              HasSubstr("-DRANKING=3"));  // SORTD_RANK_WARP_MASKS
  EXPECT_THAT(RadixBuildOptions(base.radix, 64, true, 8),
              HasSubstr("-DRANKING=2 -DEARLY_COUNTS=1 -DDIRECT_PLACE=1"));
  EXPECT_THAT(RadixBuildOptions(base.radix, 64, true, 8),
              HasSubstr("-DSTATUS_PREFETCH=1"));
}

// Marked look-back statuses (one area zeroed once per sort, each pass's
// words marked with its parity) under both one-launch pass forms, and the
// digit count's unrolled loads (3: a remainder loop too). Keys whose odd
// digits are all equal skip those passes, so a pass's parity must follow
// the passes that ran, not the pass number; each engine sorts several sizes
// in turn, so status areas come back from the pool holding another sort's
// words. On NVIDIA the status lines' L2 prefetch (PTX) runs too.
TEST(Algorithms, MarkedLookBackStatuses) {
  const bool nvidia = absl::StrContains(Engine().info().vendor, "NVIDIA");
  struct Config {
    RadixPass pass;
    TileRanking ranking;
    bool direct_place;
    int count_unroll;
    bool prefetch;
  };
  for (auto [pass, ranking, direct_place, count_unroll, prefetch] :
       {Config{RadixPass::kOneLaunch, TileRanking::kWorkItemCounters, false, 3,
               false},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, true, 2,
         nvidia},
        {RadixPass::kOneLaunchEarlyCounts, TileRanking::kWarpEmulated, false, 4,
         false}}) {
    OpenClEngine::Options options = CpuDevice();
    EnginePolicy p = EnginePolicy::For(Engine().info());
    p.radix = {.radix_bits = 8,
               .local_bits = ranking == TileRanking::kWorkItemCounters ? 4 : 0,
               .work_group = 64,
               .items_32 = 8,
               .items_64 = 4,
               .items_32_keys = 16,
               .items_64_keys = 8,
               .bank_pad = true,
               .pass = pass,
               .ranking = ranking,
               .direct_place_32 = direct_place,
               .direct_place_64 = direct_place,
               .count_unroll = count_unroll,
               .marked_status_max = size_t{1} << 28,
               .status_prefetch = prefetch};
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
  portable.radix.pass = RadixPass::kOneLaunch;
  portable.radix.status_prefetch = true;
  EXPECT_THAT(portable.CheckFits(other).message(),
              HasSubstr("status_prefetch needs an NVIDIA GPU"));
}

TEST(Buffers, SteadyStateAllocatesNothingAndUnpinnedTransfersWork) {
  for (bool pinned : {true, false}) {
    OpenClEngine::Options options = CpuDevice();
    options.pinned_staging = pinned;
    options.staging.chunk_bytes = 4096;  // many chunks through the ring
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const auto keys =
        sortd::testing::Generate<uint64_t>(Shape::kRandom, 50'000, 9);
    CheckSort(**engine, keys, false, Extra::kU64ValuesAndPermutation, "first");
    const size_t allocations = (*engine)->pool_stats().allocations;
    for (int i = 0; i < 3; ++i) {
      CheckSort(**engine, keys, i % 2, Extra::kU64ValuesAndPermutation,
                "again");
    }
    EXPECT_EQ((*engine)->pool_stats().allocations, allocations);
    EXPECT_GT((*engine)->pool_stats().reuses, 0u);
    EXPECT_EQ((*engine)->pool_stats().in_use_bytes, 0u);
  }
}

// Arrays in the engine's page-locked host memory are transferred straight;
// the same arrays in pageable memory go through the staging ring. Both sort
// alike.
TEST(Buffers, PinnedHostArraysSkipTheStagingRing) {
  OpenClEngine::Options options = CpuDevice();
  options.staging.chunk_bytes = 4096;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::shared_ptr<HostMemory> memory = (*engine)->host_memory();
  ASSERT_NE(memory, nullptr);
  auto* pinned = dynamic_cast<PinnedHostMemory*>(memory.get());
  ASSERT_NE(pinned, nullptr);

  const size_t n = 100'000;
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, n, 4);
  std::vector<uint32_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<uint32_t>(i);
  std::vector<std::pair<uint32_t, uint32_t>> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = {keys[i], values[i]};
  std::stable_sort(want.begin(), want.end(),
                   [](auto a, auto b) { return a.first < b.first; });

  const size_t bytes = n * 4;
  auto* block = static_cast<std::byte*>(memory->Allocate(4 * bytes));
  ASSERT_NE(block, nullptr);
  EXPECT_TRUE(pinned->Holds(block, 4 * bytes));
  EXPECT_TRUE(pinned->Holds(block + bytes, bytes));
  EXPECT_FALSE(pinned->Holds(block + bytes, 4 * bytes));  // runs past it
  EXPECT_FALSE(pinned->Holds(keys.data(), bytes));
  EXPECT_EQ(pinned->stats().bytes, 4 * bytes);

  // keys, values, keys out, values out: all pinned, then all pageable.
  for (bool in_pinned : {true, false}) {
    std::vector<std::byte> pageable(in_pinned ? 0 : 4 * bytes);
    std::byte* base = in_pinned ? block : pageable.data();
    std::memcpy(base, keys.data(), bytes);
    std::memcpy(base + bytes, values.data(), bytes);
    const OpenClEngine::TransferStats before = (*engine)->transfer_stats();
    SortJob job{.key_type = KeyType::kU32,
                .count = n,
                .keys = base,
                .value_type = ValueType::kU32,
                .values = base + bytes,
                .keys_out = base + 2 * bytes,
                .values_out = base + 3 * bytes};
    ASSERT_TRUE((*engine)->Sort(job).ok());
    const OpenClEngine::TransferStats after = (*engine)->transfer_stats();
    // Two arrays up, two down.
    if (in_pinned) {
      EXPECT_EQ(after.direct_bytes - before.direct_bytes, 4 * bytes);
      EXPECT_EQ(after.staged_bytes, before.staged_bytes);
    } else {
      EXPECT_EQ(after.staged_bytes - before.staged_bytes, 4 * bytes);
      EXPECT_EQ(after.direct_bytes, before.direct_bytes);
    }
    for (size_t i = 0; i < n; ++i) {
      uint32_t k, v;
      std::memcpy(&k, base + 2 * bytes + i * 4, 4);
      std::memcpy(&v, base + 3 * bytes + i * 4, 4);
      ASSERT_EQ(k, want[i].first) << i << (in_pinned ? " pinned" : "");
      ASSERT_EQ(v, want[i].second) << i << (in_pinned ? " pinned" : "");
    }
  }
  memory->Free(block, 4 * bytes);
  EXPECT_EQ(pinned->stats().bytes, 0u);
  EXPECT_FALSE(pinned->Holds(block, 1));

  // Without staging there is no pinned memory to offer.
  options.pinned_staging = false;
  auto plain = OpenClEngine::Create(options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->host_memory(), nullptr);
}

// The pool on its own, in a context of the test device.
class Pool : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = sortd::gpu::FindDevice(CpuDevice().kind);
    ASSERT_TRUE(device.ok()) << device.status();
    context_ = cl::Context(device->device);
  }
  static cl_mem Handle(sortd::gpu::PooledBuffer& b) { return b.buffer()(); }
  cl::Context context_;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST_F(Pool, BuffersReleasedInReverseComeBackInTheSameRoles) {
  sortd::gpu::BufferPool pool(context_, 64 * kMiB);
  cl_mem first[3];
  {
    auto a = pool.Acquire(kMiB, "a");
    auto b = pool.Acquire(kMiB, "b");
    auto c = pool.Acquire(kMiB / 4, "c");
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    first[0] = Handle(*a), first[1] = Handle(*b), first[2] = Handle(*c);
    // Released c, b, a: the reverse of acquiring, as the engine's runs do.
    *c = {};
    *b = {};
    *a = {};
  }
  for (int round = 0; round < 3; ++round) {
    auto a = pool.Acquire(kMiB, "a");
    auto b = pool.Acquire(kMiB, "b");
    auto c = pool.Acquire(kMiB / 4, "c");
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(Handle(*a), first[0]) << "round " << round;
    EXPECT_EQ(Handle(*b), first[1]) << "round " << round;
    EXPECT_EQ(Handle(*c), first[2]) << "round " << round;
    *c = {};
    *b = {};
    *a = {};
  }
  EXPECT_EQ(pool.stats().allocations, 3u);
  EXPECT_EQ(pool.stats().reuses, 9u);
  // Released in the order acquired, two buffers of one size swap roles:
  // what the engine's reverse release avoids.
  {
    auto a = pool.Acquire(kMiB, "a");
    auto b = pool.Acquire(kMiB, "b");
    *a = {};
    *b = {};
  }
  auto a = pool.Acquire(kMiB, "a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Handle(*a), first[1]);
}

TEST_F(Pool, AFullPoolFreesWhatHasBeenIdleLongest) {
  sortd::gpu::BufferPool pool(context_, 2 * kMiB);
  {
    auto x = pool.Acquire(kMiB, "x");
    auto y = pool.Acquire(kMiB / 2, "y");
    auto z = pool.Acquire(kMiB, "z");
    ASSERT_TRUE(x.ok() && y.ok() && z.ok());
    *x = {};  // idle longest: freed when z comes back
    *y = {};
    *z = {};
  }
  EXPECT_EQ(pool.stats().evictions, 1u);
  EXPECT_EQ(pool.stats().pooled_bytes, kMiB + kMiB / 2);
  const size_t allocations = pool.stats().allocations;
  auto z = pool.Acquire(kMiB, "z");
  auto y = pool.Acquire(kMiB / 2, "y");
  ASSERT_TRUE(z.ok() && y.ok());
  EXPECT_EQ(pool.stats().allocations, allocations);  // both kept
  auto x = pool.Acquire(kMiB, "x");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(pool.stats().allocations, allocations + 1);  // x was freed
  // A buffer larger than the whole idle budget is freed, evicting nothing.
  auto big = pool.Acquire(4 * kMiB, "big");
  ASSERT_TRUE(big.ok());
  *x = {};
  *big = {};
  EXPECT_EQ(pool.stats().pooled_bytes, kMiB);
  EXPECT_EQ(pool.stats().evictions, 1u);
}

TEST_F(Pool, NewBuffersFreeIdleOnesToStayWithinTheTotal) {
  sortd::gpu::BufferPool pool(context_, 8 * kMiB, 3 * kMiB);
  {
    auto a = pool.Acquire(kMiB, "a");
    auto b = pool.Acquire(kMiB, "b");
    ASSERT_TRUE(a.ok() && b.ok());
  }
  EXPECT_EQ(pool.stats().pooled_bytes, 2 * kMiB);
  // 2 MiB more would make 4 MiB in all: one idle MiB goes first.
  auto c = pool.Acquire(2 * kMiB, "c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pool.stats().evictions, 1u);
  EXPECT_EQ(pool.stats().pooled_bytes, kMiB);
  EXPECT_EQ(pool.stats().in_use_bytes, 2 * kMiB);
}

TEST(FaultInjection, LostDeviceMakesTheEngineUnhealthy) {
  OpenClEngine::Options options = CpuDevice();
  options.faults.device_lost = 2;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, 3000, 1);
  CheckSort(**engine, keys, false, Extra::kNone, "before the loss");
  EXPECT_TRUE((*engine)->healthy());
  std::vector<uint32_t> out(keys.size());
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data())};
  absl::Status s = (*engine)->Sort(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("CL_DEVICE_NOT_AVAILABLE"));
  EXPECT_FALSE((*engine)->healthy());
}

// Fault injection is set through Options (sortd: --inject_faults) only:
// the environment variables that once armed it do nothing.
TEST(FaultInjection, TheEnvironmentInjectsNothing) {
  const char* vars[] = {"SORTD_FAULT_ENQUEUE", "SORTD_FAULT_DEVICE_LOST",
                        "SORTD_FAULT_OOM"};
  for (const char* v : vars) setenv(v, "1", 1);
  setenv("SORTD_FAULT_ENQUEUE_STICKY", "1", 1);
  auto engine = OpenClEngine::Create(CpuDevice());
  setenv("SORTD_FAULT_BUILD", "1", 1);
  auto built = OpenClEngine::Create(CpuDevice());
  for (const char* v : vars) unsetenv(v);
  unsetenv("SORTD_FAULT_ENQUEUE_STICKY");
  unsetenv("SORTD_FAULT_BUILD");
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE(built.ok()) << built.status();
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, 3000, 2);
  for (int i = 0; i < 3; ++i) {
    CheckSort(**engine, keys, i == 1, Extra::kPermutation, "env faults");
  }
  EXPECT_TRUE((*engine)->healthy());
}

TEST(FaultInjection, SpecParsesIntoOptions) {
  FaultSpec o;
  ASSERT_TRUE(ParseFaultSpec("", &o).ok());
  EXPECT_FALSE(o.any());
  ASSERT_TRUE(
      ParseFaultSpec(
          "enqueue=2,stage=upload,sticky,device_lost=3,oom=4,build=1", &o)
          .ok());
  EXPECT_EQ(o.enqueue, 2);
  EXPECT_EQ(o.stage, "upload");
  EXPECT_TRUE(o.sticky);
  EXPECT_EQ(o.device_lost, 3);
  EXPECT_EQ(o.oom, 4);
  EXPECT_TRUE(o.build);
  EXPECT_TRUE(o.any());
  ASSERT_TRUE(ParseFaultSpec("oom=7", &o).ok());  // replaces, not adds
  EXPECT_EQ(o.enqueue, 0);
  EXPECT_FALSE(o.sticky);
  EXPECT_TRUE(o.stage.empty());
  EXPECT_EQ(o.oom, 7);
  EXPECT_TRUE(o.any());
  for (const char* bad :
       {"enqueue", "enqueue=0", "enqueue=x", "enqueue=-1", "sticky=1",
        "stage=", "build=2", "lost=1", "sticky", "stage=upload"}) {
    FaultSpec b;
    const absl::Status s = ParseFaultSpec(bad, &b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--inject_faults")) << bad;
    EXPECT_FALSE(b.any()) << bad;
  }
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
// build options: kernels that leave keys unsorted (-DITEMS=8: tiles of
// another length than the host's) or sort keys but not their permutation
// (-DHAS_INDEX=0) are refused.
TEST(WarmUp, KernelsThatDoNotSortAreRefused) {
  for (const char* extra : {"-DITEMS=8", "-DHAS_INDEX=0"}) {
    OpenClEngine::Options options = CpuDevice();
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

TEST(Policy, FitsTheDeviceAndPrints) {
  const EnginePolicy& p = Engine().policy();
  EXPECT_TRUE(p.CheckFits(Engine().info()).ok());
  EXPECT_THAT(p.ToString(), HasSubstr("radix.radix_bits="));
  EXPECT_THAT(p.ToString(), HasSubstr("radix.local_bits="));
  EXPECT_THAT(p.ToString(), HasSubstr("transpose.matrices_per_group="));
  // The NVIDIA entry (8-bit passes, each ranked in one warp-level step,
  // one launch per pass) fits an H100's limits.
  DeviceInfo nvidia = Engine().info();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.is_gpu = true;
  nvidia.local_mem_bytes = 48 * 1024;
  nvidia.max_work_group = 1024;
  const EnginePolicy np = EnginePolicy::For(nvidia);
  EXPECT_EQ(np.radix.radix_bits, 8);
  EXPECT_EQ(np.name, "nvidia-ptx");
  EXPECT_EQ(np.radix.Ranking(32), TileRanking::kWarpMasks);
  // 64-bit keys: ballots, keys placed as ranked.
  EXPECT_EQ(np.radix.Ranking(64), TileRanking::kWarpBallots);
  EXPECT_TRUE(np.radix.DirectPlace(64));
  EXPECT_FALSE(np.radix.DirectPlace(32));
  // Marked look-back statuses up to their limit, status lines prefetched.
  EXPECT_TRUE(np.radix.MarkedStatus((size_t{1} << 29) - 1));
  EXPECT_TRUE(np.radix.status_prefetch);
  EXPECT_EQ(np.radix.count_unroll, 2);
  // An NVIDIA GPU older than sm_70 cannot build the PTX: it gets the
  // portable policy, and a PTX policy does not fit it.
  DeviceInfo old_nvidia = nvidia;
  old_nvidia.nv_compute_major = 6;
  const EnginePolicy op = EnginePolicy::For(old_nvidia);
  EXPECT_EQ(op.radix.ranking, TileRanking::kWorkItemCounters);
  EXPECT_TRUE(op.CheckFits(old_nvidia).ok()) << op.ToString();
  EXPECT_FALSE(np.CheckFits(old_nvidia).ok());
  old_nvidia.nv_compute_major = 7;
  EXPECT_EQ(EnginePolicy::For(old_nvidia).radix.ranking,
            TileRanking::kWarpMasks);
  EXPECT_EQ(np.radix.LocalBits(), 8);
  EXPECT_GT(np.radix.Items(32, false), np.radix.Items(32, true));
  EXPECT_TRUE(np.CheckFits(nvidia).ok()) << np.ToString();
  // The same entry is refused by a device of another vendor (PTX).
  DeviceInfo not_nvidia = nvidia;
  not_nvidia.vendor = "Another Vendor";
  EXPECT_FALSE(np.CheckFits(not_nvidia).ok());
  DeviceInfo small = Engine().info();
  small.local_mem_bytes = 8 * 1024;
  small.max_work_group = 128;
  small.is_gpu = true;
  EnginePolicy fitted = EnginePolicy::For(small);
  EXPECT_TRUE(fitted.CheckFits(small).ok()) << fitted.ToString();
  EXPECT_FALSE(p.CheckFits(small).ok());
}

}  // namespace
}  // namespace sortd::gpu
