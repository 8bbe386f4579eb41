// The OpenCL engine against the reference, on the OpenCL CPU device (PoCL in
// CI): every key type and order, payloads, permutations, stability, every
// tile and scan-level boundary; the binary cache, including corruption; and
// injected faults travelling as Status.
#include "gpu/opencl_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "server/transpose.h"
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
  const size_t tile = engine.policy().radix.Tile(KeySize(type) * 8);
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

TEST(OpenClEngine, ReportsStageTimes) {
  std::vector<uint32_t> keys =
      sortd::testing::Generate<uint32_t>(Shape::kRandom, 10000, 1);
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .stages = &stages};
  ASSERT_TRUE(Engine().Sort(job).ok());
  std::vector<std::string> names;
  for (const StageTime& s : stages) {
    names.push_back(s.stage);
    EXPECT_GE(s.seconds, 0.0);
  }
  EXPECT_THAT(names,
              ::testing::IsSupersetOf({"upload", "transform", "histogram",
                                       "scan", "scatter", "download"}));
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

TEST(ProgramCache, SecondEngineLoadsBinariesAndCorruptEntriesAreRebuilt) {
  const std::string dir = TempDir("kernel_cache");
  auto first = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->cache_stats().built_from_source, 5);
  EXPECT_EQ((*first)->cache_stats().loaded_from_disk, 0);

  auto second = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->cache_stats().built_from_source, 0);
  EXPECT_EQ((*second)->cache_stats().loaded_from_disk, 5);

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
  ASSERT_EQ(i, 5);
  auto third = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->cache_stats().disk_entries_rejected, 5);
  EXPECT_EQ((*third)->cache_stats().built_from_source, 5);
  // It still sorts correctly, and the rewritten entries load again.
  CheckSort(**third, sortd::testing::Generate<float>(Shape::kSpecial, 3000, 3),
            false, Extra::kPermutation, "after corruption");
  auto fourth = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ((*fourth)->cache_stats().loaded_from_disk, 5);
  std::filesystem::remove_all(dir);
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
    options.fail_enqueue = at;
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

TEST(Policy, FitsTheDeviceAndPrints) {
  const EnginePolicy& p = Engine().policy();
  EXPECT_TRUE(p.CheckFits(Engine().info()).ok());
  EXPECT_THAT(p.ToString(), HasSubstr("radix{bits=4"));
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
