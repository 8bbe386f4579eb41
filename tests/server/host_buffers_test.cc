#include "server/host_buffers.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "gtest/gtest.h"

namespace sortd {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Memory that counts what it hands out, and can refuse.
class CountingMemory final : public HostMemory {
 public:
  void* Allocate(size_t bytes) override {
    if (refuse) return nullptr;
    std::lock_guard<std::mutex> lock(mu);
    size_t held = 0;
    for (const auto& [p, b] : out) held += b;
    if (held + bytes > cap) return nullptr;
    void* p = std::malloc(bytes);
    out[p] = bytes;
    ++allocations;
    return p;
  }
  void Free(void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(out.at(data), bytes);
    out.erase(data);
    std::free(data);
  }
  size_t Available() const override {
    std::lock_guard<std::mutex> lock(mu);
    size_t held = 0;
    for (const auto& [p, b] : out) held += b;
    return cap - held;
  }
  bool Gave(const void* p) {
    std::lock_guard<std::mutex> lock(mu);
    return out.count(const_cast<void*>(p)) > 0;
  }
  mutable std::mutex mu;
  std::map<void*, size_t> out;
  int allocations = 0;
  bool refuse = false;
  size_t cap = SIZE_MAX;  // bytes given out at once at most
};

TEST(HostBufferPool, LargeBuffersComeFromTheMemoryAndAreReused) {
  HostBufferPool pool({.min_bytes = kMiB, .max_idle_bytes = 64 * kMiB});
  auto memory = std::make_shared<CountingMemory>();
  pool.SetMemory(memory);
  const void* first;
  {
    grpc::Slice a = pool.Allocate(3 * kMiB);
    first = a.begin();
    EXPECT_TRUE(memory->Gave(first));
    // Small ones do not come from it.
    grpc::Slice small = pool.Allocate(1000);
    EXPECT_FALSE(memory->Gave(small.begin()));
  }
  EXPECT_EQ(memory->out.size(), 1u);  // idle in the pool, still given out
  {
    grpc::Slice again = pool.Allocate(3 * kMiB - 100);
    EXPECT_EQ(again.begin(), first);
  }
  EXPECT_EQ(memory->allocations, 1);
  pool.Trim();
  EXPECT_TRUE(memory->out.empty());
}

// A size just past a megabyte gets a block rounded up to whole megabytes
// (almost twice the size): the next request of that size reuses it.
TEST(HostBufferPool, ASizeJustPastAMegabyteReusesItsBlock) {
  HostBufferPool pool({.min_bytes = kMiB, .max_idle_bytes = 64 * kMiB});
  for (size_t bytes : {kMiB + 10, 3 * kMiB + 1, 40 * kMiB - 1}) {
    const void* first;
    {
      grpc::Slice a = pool.Allocate(bytes);
      first = a.begin();
    }
    for (int i = 0; i < 3; ++i) {
      grpc::Slice again = pool.Allocate(bytes);
      EXPECT_EQ(again.begin(), first) << bytes;
    }
  }
  EXPECT_EQ(pool.stats().allocated, 3u);
  EXPECT_EQ(pool.stats().reused, 9u);
  // A much smaller request does not take a large block: 5 MiB fits only
  // the 40 MiB one.
  grpc::Slice small = pool.Allocate(5 * kMiB);
  EXPECT_EQ(pool.stats().allocated, 4u);
}

// Below a megabyte blocks are powers of two: 64 KiB requests share 64 KiB
// blocks, many of them idle at once are each found again, and the budget
// evicts the blocks idle longest while the rest stay reusable.
TEST(HostBufferPool, SmallPooledSizesArePowersOfTwoAndEvictOldestFirst) {
  constexpr size_t kKiB = 1024;
  HostBufferPool pool(
      {.min_bytes = 16 * kKiB, .max_idle_bytes = 64 * 64 * kKiB});
  auto memory = std::make_shared<CountingMemory>();
  pool.SetMemory(memory);
  std::vector<const void*> first;
  {
    std::vector<grpc::Slice> held;
    for (int i = 0; i < 64; ++i) {
      held.push_back(pool.Allocate(48 * kKiB + i));
      first.push_back(held.back().begin());
    }
    EXPECT_EQ(pool.stats().in_use_bytes, 64 * 64 * kKiB);
    for (grpc::Slice& s : held) s = grpc::Slice();  // back in this order
  }
  EXPECT_EQ(pool.stats().idle_bytes, 64 * 64 * kKiB);
  // 64 KiB - 1 fits a 64 KiB block; 20 KiB would waste one (a new block
  // of 32 KiB instead).
  {
    grpc::Slice fits = pool.Allocate(64 * kKiB - 1);
    EXPECT_EQ(fits.begin(), first.front());
    grpc::Slice smaller = pool.Allocate(20 * kKiB);
    EXPECT_EQ(pool.stats().allocated, 65u);
    // The 32 KiB block comes back first and fits the budget; the 64 KiB
    // one then pushes out the block idle longest, first[1].
    smaller = grpc::Slice();
    fits = grpc::Slice();
    EXPECT_FALSE(memory->Gave(first[1]));
    EXPECT_TRUE(memory->Gave(first[2]));
  }
  // A 512 KiB block's return evicts the next eight oldest 64 KiB blocks
  // (first.front() came back and went out again: it is among the newest).
  { grpc::Slice big = pool.Allocate(512 * kKiB); }
  // Idle: 55 blocks of 64 KiB, the 32 KiB one and the 512 KiB one.
  EXPECT_EQ(pool.stats().idle_bytes, (55 * 64 + 32 + 512) * kKiB);
  for (int i = 2; i < 10; ++i) EXPECT_FALSE(memory->Gave(first[i])) << i;
  EXPECT_TRUE(memory->Gave(first[10]));
  EXPECT_TRUE(memory->Gave(first.front()));
  // Every block still idle is found by a request of its size.
  const size_t idle_before = pool.stats().idle_bytes;
  std::vector<grpc::Slice> again;
  while (pool.stats().idle_bytes >= 64 * kKiB) {
    const uint64_t reused = pool.stats().reused;
    again.push_back(pool.Allocate(64 * kKiB));
    if (pool.stats().reused == reused) break;
  }
  EXPECT_LT(pool.stats().idle_bytes, idle_before);
  for (const grpc::Slice& s : again) EXPECT_TRUE(memory->Gave(s.begin()));
  again.clear();
  pool.Trim();
  EXPECT_TRUE(memory->out.empty());
  // After a trim nothing idle is left to find: a request of a size seen
  // before gets a new block.
  const uint64_t allocated = pool.stats().allocated;
  grpc::Slice fresh = pool.Allocate(64 * kKiB);
  EXPECT_EQ(pool.stats().allocated, allocated + 1);
  EXPECT_TRUE(memory->Gave(fresh.begin()));
}

TEST(HostBufferPool, FallsBackToTheAllocatorAndForgetsTheOldMemory) {
  HostBufferPool pool({.min_bytes = kMiB, .max_idle_bytes = 64 * kMiB});
  auto memory = std::make_shared<CountingMemory>();
  memory->refuse = true;
  pool.SetMemory(memory);
  {
    grpc::Slice a = pool.Allocate(2 * kMiB);
    EXPECT_FALSE(memory->Gave(a.begin()));
    const_cast<uint8_t*>(a.begin())[2 * kMiB - 1] = 1;  // writable
  }
  memory->refuse = false;
  grpc::Slice held = pool.Allocate(8 * kMiB);
  EXPECT_TRUE(memory->Gave(held.begin()));
  // Another memory (or none) from now on: a buffer of the old one that
  // comes back is freed, not kept.
  pool.SetMemory(nullptr);
  const void* old = held.begin();
  held = grpc::Slice();
  EXPECT_FALSE(memory->Gave(old));
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  grpc::Slice plain = pool.Allocate(8 * kMiB);
  EXPECT_FALSE(memory->Gave(plain.begin()));
}

// Capped memory (page-locked memory is): idle blocks of it that fit no
// request now are freed to make room for one, the longest idle first; a
// block in use is never taken, and beyond the cap the allocator serves.
TEST(HostBufferPool, IdleBlocksMakeRoomInCappedMemory) {
  HostBufferPool pool({.min_bytes = kMiB, .max_idle_bytes = 64 * kMiB});
  auto memory = std::make_shared<CountingMemory>();
  memory->cap = 16 * kMiB;
  pool.SetMemory(memory);
  grpc::Slice held = pool.Allocate(4 * kMiB);
  { grpc::Slice idle = pool.Allocate(8 * kMiB); }  // 12 MiB given out
  EXPECT_EQ(pool.stats().idle_bytes, 8 * kMiB);
  // 12 MiB more: the idle 8 MiB block goes, the held one stays.
  grpc::Slice big = pool.Allocate(12 * kMiB);
  EXPECT_TRUE(memory->Gave(big.begin()));
  EXPECT_TRUE(memory->Gave(held.begin()));
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  // Nothing idle left to free: from the allocator; that heap block is
  // kept idle and reused like any other.
  const void* heap;
  {
    grpc::Slice over = pool.Allocate(2 * kMiB);
    heap = over.begin();
    EXPECT_FALSE(memory->Gave(heap));
  }
  EXPECT_EQ(memory->out.size(), 2u);
  {
    grpc::Slice again = pool.Allocate(2 * kMiB);
    EXPECT_EQ(again.begin(), heap);
  }
  // Idle blocks of the memory that cannot make enough room stay: 12 MiB
  // more would need 12 MiB freed where 4 MiB are idle.
  held = grpc::Slice();  // 4 MiB idle, 12 MiB in use
  grpc::Slice twelve = pool.Allocate(12 * kMiB);
  EXPECT_FALSE(memory->Gave(twelve.begin()));
  EXPECT_TRUE(memory->out.count(const_cast<void*>(
                  static_cast<const void*>(big.begin()))) > 0);
  EXPECT_EQ(memory->out.size(), 2u);  // the idle 4 MiB block is kept
}

TEST(HostBufferPool, BuffersOutliveThePoolAndGoBackToTheirMemory) {
  auto memory = std::make_shared<CountingMemory>();
  grpc::Slice survivor;
  {
    HostBufferPool pool({.min_bytes = kMiB});
    pool.SetMemory(memory);
    survivor = pool.Allocate(2 * kMiB);
  }
  EXPECT_EQ(memory->out.size(), 1u);
  survivor = grpc::Slice();
  EXPECT_TRUE(memory->out.empty());
}

}  // namespace
}  // namespace sortd
