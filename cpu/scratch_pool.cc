// Where CpuScratchPool's new blocks come from: the aligned allocator, tried
// once more after the idle blocks are freed.
#include "cpu/scratch_pool.h"

namespace sortd {

CpuScratchPool::Block CpuScratchPool::Take(size_t bytes) {
  return idle_.Take(bytes,
                    [this](size_t capacity) { return Allocate(capacity); });
}

CpuScratchPool::Block CpuScratchPool::Allocate(size_t capacity) {
  try {
    return {static_cast<std::byte*>(::operator new(capacity, kAlignment)),
            capacity};
  } catch (const std::bad_alloc&) {
    // Idle blocks too small or too large for this sort may be what
    // stands in the way: freed, the allocation is tried once more.
    if (idle_.stats().idle_bytes == 0) throw;
    idle_.Trim();
    return {static_cast<std::byte*>(::operator new(capacity, kAlignment)),
            capacity};
  }
}

}  // namespace sortd
