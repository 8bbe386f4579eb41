// IdlePool (core/idle_pool.h): which idle block a Take reuses, the byte
// budget and which blocks make room, FreeIdle, Trim, and the counts.
#include "core/idle_pool.h"

#include <cstddef>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sortd {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

struct Block {
  int id = 0;
  size_t capacity = 0;
  bool tagged = false;
};

// The ids of the blocks freed, in order (the tests run one at a time; the
// pool frees from the threads that call it).
std::mutex freed_mu;
std::vector<int>& Freed() {
  static std::vector<int> freed;
  return freed;
}

struct FreeBlock {
  void operator()(const Block& b) const {
    std::lock_guard<std::mutex> lock(freed_mu);
    Freed().push_back(b.id);
  }
};

using Pool = IdlePool<Block, FreeBlock>;

class IdlePoolTest : public ::testing::Test {
 protected:
  void SetUp() override { Freed().clear(); }

  // Takes `bytes` from `pool`; a new block gets the next id.
  Block Take(Pool& pool, size_t bytes) {
    return pool.Take(bytes, [this](size_t capacity) {
      capacities_.push_back(capacity);
      return Block{++next_id_, capacity};
    });
  }

  int next_id_ = 0;
  std::vector<size_t> capacities_;  // of the new blocks, in order
};

TEST_F(IdlePoolTest, NewBlocksAreRoundedSoNearbySizesShareThem) {
  EXPECT_EQ(Pool::Capacity(1), 4 * kKiB);
  EXPECT_EQ(Pool::Capacity(5 * kKiB), 8 * kKiB);
  EXPECT_EQ(Pool::Capacity(256 * kKiB), 256 * kKiB);
  EXPECT_EQ(Pool::Capacity(kMiB), kMiB);
  EXPECT_EQ(Pool::Capacity(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(Pool::Capacity(3 * kMiB - 7), 3 * kMiB);
}

TEST_F(IdlePoolTest, AReturnedBlockIsReusedAndCounted) {
  Pool pool({.max_idle_bytes = 64 * kMiB});
  Block a = Take(pool, 100 * kKiB);
  EXPECT_EQ(a.capacity, 128 * kKiB);
  EXPECT_EQ(pool.stats().in_use_bytes, 128 * kKiB);
  pool.Return(a);
  EXPECT_EQ(pool.stats().idle_bytes, 128 * kKiB);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  Block b = Take(pool, 120 * kKiB);
  EXPECT_EQ(b.id, a.id);
  const IdlePoolStats s = pool.stats();
  EXPECT_EQ(s.allocated, 1u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_EQ(s.in_use_bytes, 128 * kKiB);
  EXPECT_EQ(capacities_, std::vector<size_t>{128 * kKiB});
  pool.Return(b);
  EXPECT_TRUE(Freed().empty());
}

TEST_F(IdlePoolTest, TheSmallestFittingIdleBlockIsReusedWithinTheLimit) {
  // Five quarters: a block serves a Take if at most 1.25 times as large as
  // a new one would be.
  Pool pool({.max_idle_bytes = 64 * kMiB, .reuse_quarters = 5});
  Block small = Take(pool, 2 * kMiB);
  Block large = Take(pool, 4 * kMiB);
  Block tiny = Take(pool, kMiB);
  pool.Return(large);
  pool.Return(small);
  pool.Return(tiny);
  // 1.5 MiB: tiny does not hold it; of the two that do, the smaller.
  EXPECT_EQ(Take(pool, kMiB + kMiB / 2).id, small.id);
  // 3 MiB: large (4 MiB) is more than 1.25 times a new 3 MiB block.
  Block fresh = Take(pool, 3 * kMiB);
  EXPECT_NE(fresh.id, large.id);
  EXPECT_EQ(fresh.capacity, 3 * kMiB);
  // Eight quarters let the same block serve it.
  Pool loose({.max_idle_bytes = 64 * kMiB, .reuse_quarters = 8});
  Block big = Take(loose, 4 * kMiB);
  loose.Return(big);
  EXPECT_EQ(Take(loose, 3 * kMiB).id, big.id);
}

TEST_F(IdlePoolTest, OfOneSizeTheBlockIdleLongestIsReusedFirst) {
  Pool pool({.max_idle_bytes = 64 * kMiB});
  Block a = Take(pool, kMiB);
  Block b = Take(pool, kMiB);
  pool.Return(b);
  pool.Return(a);
  EXPECT_EQ(Take(pool, kMiB).id, b.id);
  EXPECT_EQ(Take(pool, kMiB).id, a.id);
}

TEST_F(IdlePoolTest, TheBudgetFreesTheBlocksIdleLongest) {
  Pool pool({.max_idle_bytes = 3 * kMiB});
  std::vector<Block> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(Take(pool, kMiB));
  Block two = Take(pool, 2 * kMiB);
  for (int i = 0; i < 3; ++i) pool.Return(blocks[i]);
  EXPECT_TRUE(Freed().empty());
  EXPECT_EQ(pool.stats().idle_bytes, 3 * kMiB);
  pool.Return(blocks[3]);  // the first one back makes room
  EXPECT_EQ(Freed(), std::vector<int>{blocks[0].id});
  pool.Return(two);  // two more make room, oldest first
  EXPECT_EQ(Freed(),
            (std::vector<int>{blocks[0].id, blocks[1].id, blocks[2].id}));
  EXPECT_EQ(pool.stats().idle_bytes, 3 * kMiB);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  // Larger than the whole budget: freed, the idle ones kept.
  Block huge = Take(pool, 4 * kMiB);
  pool.Return(huge);
  EXPECT_EQ(Freed().back(), huge.id);
  EXPECT_EQ(pool.stats().idle_bytes, 3 * kMiB);
}

TEST_F(IdlePoolTest, ABlockNotToBeKeptIsFreed) {
  Pool pool({.max_idle_bytes = 64 * kMiB});
  Block a = Take(pool, kMiB);
  pool.Return(a, [](const Block&) { return false; });
  EXPECT_EQ(Freed(), std::vector<int>{a.id});
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

TEST_F(IdlePoolTest, FreeIdleFreesMatchingBlocksLongestIdleFirst) {
  Pool pool({.max_idle_bytes = 64 * kMiB});
  std::vector<Block> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(Take(pool, kMiB));
    blocks.back().tagged = i != 1;
  }
  for (const Block& b : blocks) pool.Return(b);
  auto tagged = [](const Block& b) { return b.tagged; };
  // Tagged blocks hold 3 MiB: asking for more frees nothing.
  EXPECT_FALSE(pool.FreeIdle(3 * kMiB + 1, tagged));
  EXPECT_TRUE(Freed().empty());
  EXPECT_TRUE(pool.FreeIdle(kMiB + 1, tagged));
  EXPECT_EQ(Freed(), (std::vector<int>{blocks[0].id, blocks[2].id}));
  EXPECT_EQ(pool.stats().idle_bytes, 2 * kMiB);
  // What is left is still found by size.
  EXPECT_EQ(Take(pool, kMiB).id, blocks[1].id);
  EXPECT_EQ(Take(pool, kMiB).id, blocks[3].id);
}

TEST_F(IdlePoolTest, TrimFreesEveryIdleBlockAndKeepsTheCounts) {
  Pool pool({.max_idle_bytes = 64 * kMiB});
  Block a = Take(pool, kMiB);
  Block b = Take(pool, 256 * kKiB);
  Block out = Take(pool, kMiB);
  pool.Return(a);
  pool.Return(b);
  pool.Trim();
  EXPECT_EQ(Freed(), (std::vector<int>{a.id, b.id}));
  IdlePoolStats s = pool.stats();
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_EQ(s.in_use_bytes, kMiB);
  EXPECT_EQ(s.allocated, 3u);
  // Nothing idle is left to reuse: the next Take allocates.
  Take(pool, kMiB);
  EXPECT_EQ(pool.stats().allocated, 4u);
  EXPECT_EQ(pool.stats().reused, 0u);
  pool.Return(out);
}

TEST_F(IdlePoolTest, AFailedAllocationCountsNothing) {
  Pool pool({.max_idle_bytes = 64 * kMiB});
  EXPECT_THROW(pool.Take(kMiB, [](size_t) -> Block { throw std::bad_alloc(); }),
               std::bad_alloc);
  const IdlePoolStats s = pool.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
}

TEST_F(IdlePoolTest, ThePoolFreesItsIdleBlocksWhenItGoes) {
  int id = 0;
  {
    Pool pool({.max_idle_bytes = 64 * kMiB});
    Block a = Take(pool, kMiB);
    id = a.id;
    pool.Return(a);
    EXPECT_TRUE(Freed().empty());
  }
  EXPECT_EQ(Freed(), std::vector<int>{id});
}

// Threads taking and returning blocks of mixed sizes at once: every block
// is one taker's at a time, and the counts add up when they are done.
TEST_F(IdlePoolTest, ConcurrentTakersShareOnePool) {
  constexpr int kThreads = 4, kRounds = 500;
  Pool pool({.max_idle_bytes = 4 * kMiB});
  std::mutex ids_mu;
  int next_id = 0;
  std::vector<int> holder(kThreads * kRounds + 1, -1);  // by block id
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each block is held across the next Take, then given back.
      std::vector<Block> held;
      auto give_back = [&] {
        {
          std::lock_guard<std::mutex> lock(ids_mu);
          holder[held.front().id] = -1;
        }
        pool.Return(held.front());
        held.erase(held.begin());
      };
      for (int r = 0; r < kRounds; ++r) {
        const size_t bytes = (size_t{64} << ((t + r) % 6)) * kKiB;
        Block b = pool.Take(bytes, [&](size_t capacity) {
          std::lock_guard<std::mutex> lock(ids_mu);
          return Block{++next_id, capacity};
        });
        {
          std::lock_guard<std::mutex> lock(ids_mu);
          EXPECT_GE(b.capacity, bytes);
          EXPECT_EQ(holder[b.id], -1) << "block " << b.id << " taken twice";
          holder[b.id] = t;
        }
        held.push_back(b);
        if (held.size() > 1) give_back();
      }
      give_back();
    });
  }
  for (std::thread& t : threads) t.join();
  const IdlePoolStats s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_LE(s.idle_bytes, 4 * kMiB);
  EXPECT_EQ(s.reused + s.allocated, uint64_t{kThreads * kRounds});
  EXPECT_EQ(s.allocated, static_cast<uint64_t>(next_id));
  EXPECT_GT(s.reused, 0u);
  pool.Trim();
  std::lock_guard<std::mutex> lock(freed_mu);
  EXPECT_EQ(Freed().size(), static_cast<size_t>(next_id));
}

}  // namespace
}  // namespace sortd
