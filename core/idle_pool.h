// IdlePool: the bookkeeping shared by sortd's pools of large memory blocks
// (the host buffers of requests and answers, server/host_buffers.h; the CPU
// engine's sort scratch, cpu/scratch_pool.h). A block is its taker's alone
// until it is given back; then it waits, idle, for the next taker that
// needs about its size, within a byte budget: beyond it the blocks idle
// longest are freed. Trim frees every idle block (the idle trimmer,
// server/memory.h, calls it when sortd goes quiet). Reused blocks cost no
// page faults, which is the pools' reason to be (decisions 001 and 016).
//
// The pool decides which blocks are kept and counts them; where a new
// block's memory comes from is its owner's (the `allocate` of Take), and so
// is how one is freed (the `Free` functor type). Block is a movable type
// with a `size_t capacity` member; Free is a default-constructible
// functor, `Free{}(const Block&)`. Blocks are freed outside the pool's lock.
//
//   struct FreeBlock {
//     void operator()(const Block& b) const { std::free(b.data); }
//   };
//   IdlePool<Block, FreeBlock> pool({.max_idle_bytes = size_t{1} << 30});
//   Block b = pool.Take(bytes, [](size_t capacity) {
//     return Block{NewOrThrow(capacity), capacity};
//   });
//   ...
//   pool.Return(std::move(b));
#ifndef SORTD_CORE_IDLE_POOL_H_
#define SORTD_CORE_IDLE_POOL_H_

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace sortd {

struct IdlePoolStats {
  size_t idle_bytes = 0, in_use_bytes = 0;  // bytes of block capacity
  uint64_t reused = 0, allocated = 0;       // blocks taken, by source
};

template <typename Block, typename Free>
class IdlePool {
 public:
  struct Options {
    // Idle bytes kept for reuse; beyond, the blocks idle longest are freed.
    size_t max_idle_bytes = 0;
    // An idle block serves a Take of `bytes` if it holds them and is at
    // most this many quarters of Capacity(bytes): larger ones would be
    // held up by a taker that needs little of them while a larger taker
    // allocates anew.
    size_t reuse_quarters = 4;
  };

  explicit IdlePool(const Options& options) : options_(options) {}
  ~IdlePool() { Trim(); }

  IdlePool(const IdlePool&) = delete;
  IdlePool& operator=(const IdlePool&) = delete;

  // The capacity of a new block for `bytes`: whole megabytes from 1 MiB,
  // powers of two below (at least 4 KiB), so that nearby sizes share
  // blocks.
  static size_t Capacity(size_t bytes) {
    constexpr size_t kMiB = size_t{1} << 20;
    if (bytes >= kMiB) return (bytes + kMiB - 1) / kMiB * kMiB;
    return std::max<size_t>(std::bit_ceil(bytes), 4096);
  }

  // A block of at least `bytes`: the smallest idle one that serves them
  // (Options::reuse_quarters), else allocate(Capacity(bytes)), called
  // without the pool's lock (it may call FreeIdle or Trim, and may throw:
  // then nothing is counted).
  template <typename Allocate>
  Block Take(size_t bytes, Allocate&& allocate) ABSL_LOCKS_EXCLUDED(mu_) {
    const size_t capacity = Capacity(bytes);
    if (std::optional<Block> idle = TakeIdle(bytes, capacity)) {
      return *std::move(idle);
    }
    Block block = std::forward<Allocate>(allocate)(capacity);
    MutexLock lock(&mu_);
    in_use_bytes_ += block.capacity;
    ++allocated_;
    return block;
  }

  // Takes back a block from Take. It waits for the next taker if
  // keep(block) (called with the pool's lock held, so that a Trim after
  // whatever keep checks frees the block; it must not call the pool) and
  // it fits the budget, making room by freeing the blocks idle longest;
  // otherwise it is freed.
  template <typename Keep>
  void Return(Block block, Keep&& keep) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Block> to_free;
    {
      MutexLock lock(&mu_);
      in_use_bytes_ -= block.capacity;
      if (block.capacity > options_.max_idle_bytes || !keep(block)) {
        to_free.push_back(std::move(block));
      } else {
        while (idle_bytes_ + block.capacity > options_.max_idle_bytes) {
          to_free.push_back(TakeOutLocked(idle_.begin()));
        }
        idle_bytes_ += block.capacity;
        idle_.push_back(std::move(block));
        by_capacity_.emplace(idle_.back().capacity, std::prev(idle_.end()));
      }
    }
    for (const Block& b : to_free) Free{}(b);
  }
  void Return(Block block) ABSL_LOCKS_EXCLUDED(mu_) {
    Return(std::move(block), [](const Block&) { return true; });
  }

  // Frees idle blocks for which match(block), the longest idle first,
  // until at least `bytes` of them are freed; nothing if they hold fewer.
  // Whether it freed them.
  template <typename Match>
  bool FreeIdle(size_t bytes, Match&& match) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Block> to_free;
    {
      MutexLock lock(&mu_);
      size_t held = 0;
      for (const Block& b : idle_) {
        if (match(b)) held += b.capacity;
      }
      if (held < bytes) return false;
      size_t freed = 0;
      for (auto it = idle_.begin(); it != idle_.end() && freed < bytes;) {
        if (!match(*it)) {
          ++it;
          continue;
        }
        freed += it->capacity;
        to_free.push_back(TakeOutLocked(it++));
      }
    }
    for (const Block& b : to_free) Free{}(b);
    return true;
  }

  // Frees every idle block.
  void Trim() ABSL_LOCKS_EXCLUDED(mu_) {
    std::list<Block> to_free;
    {
      MutexLock lock(&mu_);
      to_free.swap(idle_);
      by_capacity_.clear();
      idle_bytes_ = 0;
    }
    for (const Block& b : to_free) Free{}(b);
  }

  IdlePoolStats stats() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return {idle_bytes_, in_use_bytes_, reused_, allocated_};
  }

 private:
  using Idle = std::list<Block>;

  std::optional<Block> TakeIdle(size_t bytes, size_t capacity)
      ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    const size_t most = capacity / 4 * options_.reuse_quarters;
    // Entries of one capacity keep the order they came back in: of the
    // smallest fitting size, the block idle longest.
    auto found = by_capacity_.lower_bound(bytes);
    if (found == by_capacity_.end() || found->first > most) return {};
    const typename Idle::iterator it = found->second;
    by_capacity_.erase(found);
    Block block = std::move(*it);
    idle_.erase(it);
    idle_bytes_ -= block.capacity;
    in_use_bytes_ += block.capacity;
    ++reused_;
    return block;
  }

  // Takes an idle block out of `idle_` and its index.
  Block TakeOutLocked(typename Idle::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [entry, end] = by_capacity_.equal_range(it->capacity);
    while (entry != end && entry->second != it) ++entry;
    assert(entry != end);
    by_capacity_.erase(entry);
    Block block = std::move(*it);
    idle_.erase(it);
    idle_bytes_ -= block.capacity;
    return block;
  }

  const Options options_;
  mutable Mutex mu_;
  Idle idle_ ABSL_GUARDED_BY(mu_);  // the longest idle first
  // `idle_` by capacity: with small blocks pooled there may be thousands.
  std::multimap<size_t, typename Idle::iterator> by_capacity_
      ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_use_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sortd

#endif  // SORTD_CORE_IDLE_POOL_H_
