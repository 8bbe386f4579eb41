#include "server/host_buffers.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdlib>
#include <iterator>
#include <list>
#include <map>
#include <new>
#include <vector>

#include "core/mutex.h"
#include "grpc/slice.h"

namespace sortd {

struct HostBufferPool::Shared {
  struct Block {
    std::shared_ptr<Shared> owner;  // keeps the pool's state while out
    void* data = nullptr;
    size_t capacity = 0;
    std::shared_ptr<HostMemory> memory;  // where it came from; null: malloc
  };

  explicit Shared(const Options& o) : options(o) {}
  ~Shared() {
    for (Block& block : idle) Free(block);
  }

  static void Free(const Block& block) {
    if (block.memory != nullptr) {
      block.memory->Free(block.data, block.capacity);
    } else {
      std::free(block.data);
    }
  }

  // A new block of `capacity` bytes from `memory` (not null), if it has
  // some.
  static bool NewFrom(const std::shared_ptr<HostMemory>& memory,
                      size_t capacity, Block* out) {
    out->capacity = capacity;
    out->data = memory->Allocate(capacity);
    out->memory = out->data != nullptr ? memory : nullptr;
    return out->data != nullptr;
  }

  // A new block of `capacity` bytes from the C allocator.
  static bool NewFromHeap(size_t capacity, Block* out) {
    out->capacity = capacity;
    out->memory = nullptr;
    out->data = std::malloc(capacity);
    return out->data != nullptr;
  }

  // New blocks are whole megabytes from 1 MiB, powers of two below (at
  // least 4 KiB), so that nearby sizes share them.
  static size_t Capacity(size_t bytes) {
    constexpr size_t kMiB = size_t{1} << 20;
    if (bytes >= kMiB) return (bytes + kMiB - 1) / kMiB * kMiB;
    return std::max<size_t>(std::bit_ceil(bytes), 4096);
  }

  // An idle block of a fitting size into `out`; false if there is none.
  bool TakeIdle(size_t bytes, Block* out) {
    MutexLock lock(&mu);
    // The smallest idle block that holds `bytes` and is at most a quarter
    // larger than a new one would be (so that the block a request of this
    // size allocated fits the next one: 1 MiB and a few bytes take 2 MiB).
    const size_t most = Capacity(bytes) + Capacity(bytes) / 4;
    auto found = by_capacity.lower_bound(bytes);
    if (found == by_capacity.end() || found->first > most) return false;
    const auto best = found->second;
    by_capacity.erase(found);
    out->data = best->data;
    out->capacity = best->capacity;
    out->memory = std::move(best->memory);
    idle_bytes -= best->capacity;
    in_use_bytes += best->capacity;
    idle.erase(best);
    ++reused;
    return true;
  }

  // Takes an idle block out of `idle` and its index. Entries of one
  // capacity keep the order they were returned in, so the oldest block's
  // entry is the first of its capacity.
  Block TakeOut(std::list<Block>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto entry = by_capacity.find(it->capacity);
    while (entry != by_capacity.end() && entry->second != it) ++entry;
    assert(entry != by_capacity.end());
    by_capacity.erase(entry);
    Block block = std::move(*it);
    idle.erase(it);
    idle_bytes -= block.capacity;
    return block;
  }

  void Return(const Block& block) {
    std::vector<Block> to_free;
    {
      MutexLock lock(&mu);
      in_use_bytes -= block.capacity;
      // A block from other memory than the pool's now (set after it was
      // handed out) is not kept; one from the heap is (taken where the
      // memory had none left: page-locked memory is capped).
      if (block.capacity > options.max_idle_bytes ||
          (block.memory != nullptr && block.memory != memory)) {
        to_free.push_back(block);
      } else {
        // Make room: the blocks idle longest go first.
        while (idle_bytes + block.capacity > options.max_idle_bytes) {
          to_free.push_back(TakeOut(idle.begin()));
        }
        idle.push_back({nullptr, block.data, block.capacity, block.memory});
        by_capacity.emplace(block.capacity, std::prev(idle.end()));
        idle_bytes += block.capacity;
      }
    }
    for (const Block& b : to_free) Free(b);
  }

  // Frees idle blocks from `memory`, the longest idle first, until at
  // least `bytes` of them are freed; nothing if they hold fewer. Whether
  // it freed them.
  bool FreeIdleFrom(const std::shared_ptr<HostMemory>& memory, size_t bytes) {
    std::vector<Block> to_free;
    {
      MutexLock lock(&mu);
      size_t held = 0;
      for (const Block& b : idle) {
        if (b.memory == memory) held += b.capacity;
      }
      if (held < bytes) return false;
      size_t freed = 0;
      for (auto it = idle.begin(); it != idle.end() && freed < bytes;) {
        if (it->memory != memory) {
          ++it;
          continue;
        }
        freed += it->capacity;
        to_free.push_back(TakeOut(it++));
      }
    }
    for (const Block& b : to_free) Free(b);
    return true;
  }

  void Trim() {
    std::list<Block> freed;
    {
      MutexLock lock(&mu);
      freed.swap(idle);
      by_capacity.clear();
      idle_bytes = 0;
    }
    for (Block& block : freed) Free(block);
  }

  const Options options;
  mutable Mutex mu;
  std::shared_ptr<HostMemory> memory ABSL_GUARDED_BY(mu);
  std::list<Block> idle ABSL_GUARDED_BY(mu);  // the longest idle first
  // `idle` by capacity: with small blocks pooled there may be thousands.
  std::multimap<size_t, std::list<Block>::iterator> by_capacity
      ABSL_GUARDED_BY(mu);
  size_t idle_bytes ABSL_GUARDED_BY(mu) = 0;
  size_t in_use_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t reused ABSL_GUARDED_BY(mu) = 0;
  uint64_t allocated ABSL_GUARDED_BY(mu) = 0;
};

HostBufferPool::HostBufferPool(const Options& options)
    : shared_(std::make_shared<Shared>(options)) {}

HostBufferPool::~HostBufferPool() { shared_->Trim(); }

grpc::Slice HostBufferPool::Allocate(size_t bytes) {
  if (bytes < shared_->options.min_bytes) {
    return grpc::Slice(grpc_slice_malloc_large(bytes), grpc::Slice::STEAL_REF);
  }
  auto* block = new Shared::Block;
  if (!shared_->TakeIdle(bytes, block)) {
    const size_t capacity = Shared::Capacity(bytes);
    std::shared_ptr<HostMemory> memory;
    {
      MutexLock lock(&shared_->mu);
      memory = shared_->memory;
    }
    // Page-locked memory is capped (gpu/pinned_memory.h): where idle
    // blocks of it (of other sizes, or TakeIdle would have found one) can
    // make room for this one, the longest idle go.
    if (memory != nullptr && !Shared::NewFrom(memory, capacity, block)) {
      const size_t available = memory->Available();
      if (available < capacity &&
          shared_->FreeIdleFrom(memory, capacity - available)) {
        Shared::NewFrom(memory, capacity, block);
      }
    }
    if (block->data == nullptr && !Shared::NewFromHeap(capacity, block)) {
      delete block;
      throw std::bad_alloc();
    }
    MutexLock lock(&shared_->mu);
    shared_->in_use_bytes += capacity;
    ++shared_->allocated;
  }
  block->owner = shared_;
  return grpc::Slice(
      block->data, bytes,
      [](void* user_data) {
        auto* b = static_cast<Shared::Block*>(user_data);
        std::shared_ptr<Shared> owner = std::move(b->owner);
        owner->Return(*b);
        delete b;
      },
      block);
}

void HostBufferPool::Trim() { shared_->Trim(); }

void HostBufferPool::SetMemory(std::shared_ptr<HostMemory> memory) {
  {
    MutexLock lock(&shared_->mu);
    shared_->memory = std::move(memory);
  }
  shared_->Trim();  // idle blocks from the memory before
}

HostBufferPool::Stats HostBufferPool::stats() const {
  MutexLock lock(&shared_->mu);
  return {shared_->idle_bytes, shared_->in_use_bytes, shared_->reused,
          shared_->allocated};
}

}  // namespace sortd
