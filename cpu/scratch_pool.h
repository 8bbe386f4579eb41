// CpuScratchPool: the scratch blocks of CpuSorter's sorts, each handed to
// one sort at a time and kept, within a byte budget, for the next (the
// comment on CpuSorter in cpu/cpu_sorter.h says why), and Scratch, the
// uninitialised scratch of one sort: a block of the pool from its
// min_bytes(), smaller from the allocator. Internal to the CPU path.
#ifndef SORTD_CPU_SCRATCH_POOL_H_
#define SORTD_CPU_SCRATCH_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "core/idle_pool.h"
#include "cpu/cpu_sorter.h"

namespace sortd {

// Scratch blocks handed to one sort at a time and kept, within a byte
// budget, for the next (CpuSorter's comment says why). The keeping is
// IdlePool's (core/idle_pool.h); this class is where blocks come from.
class CpuScratchPool {
 public:
  struct Block {
    std::byte* data = nullptr;
    size_t capacity = 0;
  };

  CpuScratchPool(size_t min_bytes, size_t max_idle_bytes)
      : min_bytes_(min_bytes),
        idle_({.max_idle_bytes = max_idle_bytes, .reuse_quarters = 8}) {}

  CpuScratchPool(const CpuScratchPool&) = delete;
  CpuScratchPool& operator=(const CpuScratchPool&) = delete;

  size_t min_bytes() const { return min_bytes_; }

  // A block of at least `bytes` uninitialised bytes, the caller's alone
  // until it gives it back with Return: an idle one at most twice as large
  // as a new one would be, else a new one. Throws std::bad_alloc.
  Block Take(size_t bytes);
  // Takes back a block from Take; it waits for the next sort, or is freed
  // if it does not fit the budget (the blocks idle longest make room).
  void Return(const Block& block) { idle_.Return(block); }
  void Trim() { idle_.Trim(); }
  CpuSorter::ScratchStats stats() const { return idle_.stats(); }

 private:
  // Cache-line aligned, so that the scratch's halves start on lines.
  static constexpr std::align_val_t kAlignment{64};

  // The unsized form: clang builds (the fuzzers) have no sized
  // deallocation unless asked for it.
  struct FreeBlock {
    void operator()(const Block& block) const {
      ::operator delete(block.data, kAlignment);
    }
  };

  // A new block of `capacity` bytes. Throws std::bad_alloc.
  Block Allocate(size_t capacity);

  const size_t min_bytes_;
  // Every block is idle when the pool goes: sorts hold the sorter while
  // they run.
  IdlePool<Block, FreeBlock> idle_;
};

// The uninitialised scratch of one sort: a block of `pool` from
// pool.min_bytes(), given back when the sort ends; smaller from the
// allocator, without the pool's lock.
class Scratch {
 public:
  Scratch(CpuScratchPool& pool, size_t bytes) {
    if (bytes >= pool.min_bytes()) {
      pool_ = &pool;
      block_ = pool.Take(bytes);
      data_ = block_.data;
    } else {
      small_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      data_ = small_.get();
    }
  }
  ~Scratch() {
    if (pool_ != nullptr) pool_->Return(block_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::byte* data() const { return data_; }

 private:
  CpuScratchPool* pool_ = nullptr;
  CpuScratchPool::Block block_;
  std::unique_ptr<std::byte[]> small_;
  std::byte* data_ = nullptr;
};

}  // namespace sortd

#endif  // SORTD_CPU_SCRATCH_POOL_H_
