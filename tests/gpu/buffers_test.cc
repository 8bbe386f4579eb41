// The engine's memory: the device buffer pool, pinned host arrays and the
// staging ring.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/transpose.h"
#include "cpu/cpu_sorter.h"
#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;

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

// An engine on the CPU device and its page-locked host memory.
struct PinnedEngine {
  std::unique_ptr<OpenClEngine> engine;
  std::shared_ptr<HostMemory> memory;
  PinnedHostMemory* pinned = nullptr;
};

void MakePinnedEngine(const OpenClEngine::Options& options, PinnedEngine* e) {
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  e->engine = *std::move(engine);
  e->memory = e->engine->host_memory();
  ASSERT_NE(e->memory, nullptr);
  e->pinned = dynamic_cast<PinnedHostMemory*>(e->memory.get());
  ASSERT_NE(e->pinned, nullptr);
}

// Arrays in the engine's page-locked host memory are transferred straight;
// the same arrays in pageable memory go through the staging ring. Both sort
// alike.
TEST(Buffers, PinnedHostArraysSkipTheStagingRing) {
  OpenClEngine::Options options = CpuDevice();
  options.staging.chunk_bytes = 4096;
  PinnedEngine e;
  ASSERT_NO_FATAL_FAILURE(MakePinnedEngine(options, &e));
  std::shared_ptr<HostMemory> memory = e.memory;
  PinnedHostMemory* pinned = e.pinned;

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
    const Sorter::TransferBytes before = e.engine->transfer_bytes();
    SortJob job{.key_type = KeyType::kU32,
                .count = n,
                .keys = base,
                .value_type = ValueType::kU32,
                .values = base + bytes,
                .keys_out = base + 2 * bytes,
                .values_out = base + 3 * bytes};
    ASSERT_TRUE(e.engine->Sort(job).ok());
    const Sorter::TransferBytes after = e.engine->transfer_bytes();
    // Two arrays up, two down.
    if (in_pinned) {
      EXPECT_EQ(after.direct - before.direct, 4 * bytes);
      EXPECT_EQ(after.staged, before.staged);
    } else {
      EXPECT_EQ(after.staged - before.staged, 4 * bytes);
      EXPECT_EQ(after.direct, before.direct);
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

// Memory the caller mapped (a client's shared-memory region), once
// adopted, is transferred straight like the engine's own page-locked
// blocks; once the handle is let go it goes through staging again. The
// same range cannot be adopted twice at once.
TEST(Buffers, AdoptedMemorySkipsTheStagingRing) {
  OpenClEngine::Options options = CpuDevice();
  options.staging.chunk_bytes = 4096;
  PinnedEngine e;
  ASSERT_NO_FATAL_FAILURE(MakePinnedEngine(options, &e));
  const size_t n = 50'000, bytes = n * 4;
  const size_t size = 2 * bytes + 4096;
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* base = static_cast<std::byte*>(mapped);
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, n, 11);

  EXPECT_FALSE(e.pinned->Holds(base, bytes));
  std::shared_ptr<void> adopted = e.memory->Adopt(base, size);
  ASSERT_NE(adopted, nullptr);
  EXPECT_EQ(e.memory->Adopt(base, size), nullptr) << "adopted twice";
  EXPECT_TRUE(e.pinned->Holds(base + bytes, bytes));
  EXPECT_FALSE(e.pinned->Holds(base + bytes, size)) << "runs past it";
  EXPECT_EQ(e.pinned->stats().bytes, 0u) << "not counted as given out";
  for (bool held : {true, false}) {
    if (!held) adopted.reset();
    EXPECT_EQ(e.pinned->Holds(base, bytes), held);
    const Sorter::TransferBytes moved =
        SortU32AndCountTransfers(*e.engine, base, keys);
    EXPECT_EQ(moved.direct, held ? 2 * bytes : 0) << held;
    EXPECT_EQ(moved.staged, held ? 0 : 2 * bytes) << held;
  }
  munmap(mapped, size);
}

// A second engine given the first one's page-locked memory
// (ShareHostMemory, as sortd does where a driver page-locks memory for all
// its devices) transfers arrays from it straight, sorts them right, and
// still stages memory of neither; memory not page-locked is ignored.
TEST(Buffers, SharedPageLockedMemorySkipsTheOtherEnginesStagingRing) {
  OpenClEngine::Options options = CpuDevice();
  options.staging.chunk_bytes = 4096;
  PinnedEngine first, second;
  ASSERT_NO_FATAL_FAILURE(MakePinnedEngine(options, &first));
  ASSERT_NO_FATAL_FAILURE(MakePinnedEngine(options, &second));
  const size_t n = 60'000, bytes = n * 4;
  auto* block = static_cast<std::byte*>(first.memory->Allocate(2 * bytes));
  ASSERT_NE(block, nullptr);
  EXPECT_FALSE(second.pinned->Holds(block, bytes));
  // Memory of another kind is no page-locked memory of any engine's.
  class Plain final : public HostMemory {
   public:
    void* Allocate(size_t bytes) override { return std::malloc(bytes); }
    void Free(void* data, size_t) override { std::free(data); }
  };
  second.engine->ShareHostMemory(std::make_shared<Plain>());
  EXPECT_FALSE(second.pinned->Holds(block, bytes));
  second.engine->ShareHostMemory(first.memory);
  EXPECT_TRUE(second.pinned->Holds(block, 2 * bytes));
  EXPECT_FALSE(second.pinned->Holds(block, 3 * bytes)) << "runs past it";
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, n, 21);
  std::vector<uint32_t> pageable(2 * n);
  for (std::byte* base :
       {block, reinterpret_cast<std::byte*>(pageable.data())}) {
    const bool shared = base == block;
    const Sorter::TransferBytes moved =
        SortU32AndCountTransfers(*second.engine, base, keys);
    EXPECT_EQ(moved.direct, shared ? 2 * bytes : 0) << shared;
    EXPECT_EQ(moved.staged, shared ? 0 : 2 * bytes) << shared;
  }
  first.memory->Free(block, 2 * bytes);
  EXPECT_FALSE(second.pinned->Holds(block, 1)) << "given back";
}

// A keys-only sort by picked digits of under 1 MiB downloads its keys
// before it learns whether a run was too long to settle; when one was, it
// sorts by every digit and downloads again. With the arrays in page-locked
// memory both downloads go straight into the output, without waiting: the
// second must land after the first. 20000 u64 keys (five picked 4-bit
// digits on the CPU device) whose picked digits are unique but for a run
// of 100 keys, which neither the host's nor the device's samples see.
TEST(Buffers, PinnedOutputOfASortByPickedDigitsIsDownloadedAgain) {
  PinnedEngine e;
  ASSERT_NO_FATAL_FAILURE(MakePinnedEngine(CpuDevice(), &e));
  const size_t n = 20000, bytes = n * 8;
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys(n);
  const uint64_t shared_top = rng() & 0xFFFFF;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t top = i < 100 ? shared_top : rng() & 0xFFFFF;
    keys[i] = top << 32 | (rng() & 0xFFFF);
  }
  std::vector<uint64_t> want = keys;
  std::sort(want.begin(), want.end());
  auto* block = static_cast<std::byte*>(e.memory->Allocate(2 * bytes));
  ASSERT_NE(block, nullptr);
  std::memcpy(block, keys.data(), bytes);
  std::memset(block + bytes, 0, bytes);
  const Sorter::TransferBytes before = e.engine->transfer_bytes();
  SortJob job{.key_type = KeyType::kU64,
              .count = n,
              .keys = block,
              .keys_out = block + bytes};
  ASSERT_TRUE(e.engine->Sort(job).ok());
  const Sorter::TransferBytes after = e.engine->transfer_bytes();
  // Up once, down twice.
  EXPECT_EQ(after.direct - before.direct, 3 * bytes);
  EXPECT_EQ(after.staged, before.staged);
  std::vector<uint64_t> out(n);
  std::memcpy(out.data(), block + bytes, bytes);
  EXPECT_EQ(out, want);
  e.memory->Free(block, 2 * bytes);
}

// The engine's page-locked memory gives out at most its cap at once:
// beyond, Allocate returns null (callers take pageable memory), and what
// is freed can be had again.
TEST(Buffers, PinnedHostMemoryStaysWithinItsCap) {
  OpenClEngine::Options options = CpuDevice();
  options.pinned_host_max_bytes = 1 << 20;
  PinnedEngine e;
  ASSERT_NO_FATAL_FAILURE(MakePinnedEngine(options, &e));
  std::shared_ptr<HostMemory> memory = e.memory;
  PinnedHostMemory* pinned = e.pinned;
  EXPECT_EQ(memory->Allocate((1 << 20) + 1), nullptr);  // never fits
  EXPECT_EQ(memory->Available(), size_t{1} << 20);
  void* a = memory->Allocate(768 << 10);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(memory->Available(), size_t{256} << 10);
  EXPECT_EQ(memory->Allocate(512 << 10), nullptr);  // 1.25 MiB in all
  void* b = memory->Allocate(256 << 10);            // exactly the cap
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pinned->stats().bytes, size_t{1} << 20);
  EXPECT_EQ(memory->Allocate(1), nullptr);
  memory->Free(a, 768 << 10);
  void* c = memory->Allocate(512 << 10);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(pinned->Holds(c, 512 << 10));
  memory->Free(b, 256 << 10);
  memory->Free(c, 512 << 10);
  EXPECT_EQ(pinned->stats().bytes, 0u);
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

}  // namespace
}  // namespace sortd::gpu
