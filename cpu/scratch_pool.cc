// CpuScratchPool's blocks: taken by a sort (an idle one where one fits,
// else a new one), given back when it ends, and freed beyond the idle
// budget or on Trim.
#include "cpu/scratch_pool.h"

#include <algorithm>
#include <bit>

namespace sortd {

CpuScratchPool::Block CpuScratchPool::Take(size_t bytes) {
  const size_t capacity = Capacity(bytes);
  {
    MutexLock lock(&mu_);
    // The smallest idle block that holds `bytes` and is at most twice as
    // large as a new one would be: a larger one would be held up by a
    // sort that needs little of it while a larger sort allocates anew.
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity >= bytes && it->capacity <= 2 * capacity &&
          (best == idle_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      const Block block = *best;
      idle_.erase(best);
      idle_bytes_ -= block.capacity;
      in_use_bytes_ += block.capacity;
      ++reused_;
      return block;
    }
  }
  Block block{nullptr, capacity};
  try {
    block.data = static_cast<std::byte*>(::operator new(capacity, kAlignment));
  } catch (const std::bad_alloc&) {
    // Idle blocks too small or too large for this sort may be what
    // stands in the way: freed, the allocation is tried once more.
    if (stats().idle_bytes == 0) throw;
    Trim();
    block.data = static_cast<std::byte*>(::operator new(capacity, kAlignment));
  }
  MutexLock lock(&mu_);
  in_use_bytes_ += capacity;
  ++allocated_;
  return block;
}

void CpuScratchPool::Return(const Block& block) {
  std::vector<Block> to_free;
  {
    MutexLock lock(&mu_);
    in_use_bytes_ -= block.capacity;
    if (block.capacity > max_idle_bytes_) {
      to_free.push_back(block);
    } else {
      auto kept = idle_.begin();
      while (idle_bytes_ + block.capacity > max_idle_bytes_) {
        idle_bytes_ -= kept->capacity;
        to_free.push_back(*kept++);
      }
      idle_.erase(idle_.begin(), kept);
      idle_.push_back(block);
      idle_bytes_ += block.capacity;
    }
  }
  for (const Block& b : to_free) Free(b);
}

void CpuScratchPool::Trim() {
  std::vector<Block> to_free;
  {
    MutexLock lock(&mu_);
    to_free.swap(idle_);
    idle_bytes_ = 0;
  }
  for (const Block& b : to_free) Free(b);
}

CpuSorter::ScratchStats CpuScratchPool::stats() const {
  MutexLock lock(&mu_);
  return {idle_bytes_, in_use_bytes_, reused_, allocated_};
}

size_t CpuScratchPool::Capacity(size_t bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes >= kMiB) return (bytes + kMiB - 1) / kMiB * kMiB;
  return std::max<size_t>(std::bit_ceil(bytes), 4096);
}

}  // namespace sortd
