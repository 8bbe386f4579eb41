// HostBufferPool's blocks: where new ones come from (the engine's host
// memory, the C allocator where it has none left), and which are kept
// (IdlePool, core/idle_pool.h, does the keeping).
#include "server/host_buffers.h"

#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

#include "core/idle_pool.h"
#include "core/mutex.h"
#include "grpc/slice.h"

namespace sortd {
namespace {

struct Block {
  void* data = nullptr;
  size_t capacity = 0;
  std::shared_ptr<HostMemory> memory;  // where it came from; null: malloc
};

struct FreeBlock {
  void operator()(const Block& block) const {
    if (block.memory != nullptr) {
      block.memory->Free(block.data, block.capacity);
    } else {
      std::free(block.data);
    }
  }
};

}  // namespace

struct HostBufferPool::Shared {
  // A slice's block while it is out; `owner` keeps the pool's state alive
  // until it comes back, even after the pool object itself is gone.
  struct Lent {
    std::shared_ptr<Shared> owner;
    Block block;
  };

  // An idle block serves a request at most a quarter larger than a new one
  // would be, so that the block a request of this size allocated fits the
  // next one (1 MiB and a few bytes take 2 MiB).
  explicit Shared(const Options& o)
      : options(o),
        idle({.max_idle_bytes = o.max_idle_bytes, .reuse_quarters = 5}) {}

  // A new block of `capacity` bytes: from `memory` where it is set and has
  // room, else from the C allocator. Throws std::bad_alloc.
  Block New(size_t capacity) ABSL_LOCKS_EXCLUDED(mu) {
    std::shared_ptr<HostMemory> from;
    {
      MutexLock lock(&mu);
      from = memory;
    }
    Block block{nullptr, capacity, nullptr};
    if (from != nullptr) {
      block.data = from->Allocate(capacity);
      // Page-locked memory is capped (gpu/pinned_memory.h): where idle
      // blocks of it (of other sizes, or Take would have reused one) can
      // make room for this one, the longest idle go.
      if (block.data == nullptr) {
        const size_t available = from->Available();
        if (available < capacity &&
            idle.FreeIdle(capacity - available,
                          [&](const Block& b) { return b.memory == from; })) {
          block.data = from->Allocate(capacity);
        }
      }
      if (block.data != nullptr) block.memory = std::move(from);
    }
    if (block.data == nullptr) block.data = std::malloc(capacity);
    if (block.data == nullptr) throw std::bad_alloc();
    return block;
  }

  // Takes back a block. One from other memory than the pool's now (set
  // after it was handed out) is not kept; one from the heap is (taken
  // where the memory had none left: page-locked memory is capped).
  void Return(Block block) ABSL_LOCKS_EXCLUDED(mu) {
    idle.Return(std::move(block), [this](const Block& b) {
      if (b.memory == nullptr) return true;
      MutexLock lock(&mu);
      return b.memory == memory;
    });
  }

  const Options options;
  IdlePool<Block, FreeBlock> idle;
  // Taken inside the pool's lock (Return's check), never around a call to
  // the pool.
  Mutex mu;
  std::shared_ptr<HostMemory> memory ABSL_GUARDED_BY(mu);
};

HostBufferPool::HostBufferPool(const Options& options)
    : shared_(std::make_shared<Shared>(options)) {}

HostBufferPool::~HostBufferPool() { shared_->idle.Trim(); }

grpc::Slice HostBufferPool::Allocate(size_t bytes) {
  if (bytes < shared_->options.min_bytes) {
    return grpc::Slice(grpc_slice_malloc_large(bytes), grpc::Slice::STEAL_REF);
  }
  auto lent = std::make_unique<Shared::Lent>();
  lent->block = shared_->idle.Take(
      bytes, [this](size_t capacity) { return shared_->New(capacity); });
  lent->owner = shared_;
  void* const data = lent->block.data;
  return grpc::Slice(
      data, bytes,
      [](void* user_data) {
        std::unique_ptr<Shared::Lent> out(
            static_cast<Shared::Lent*>(user_data));
        std::shared_ptr<Shared> owner = std::move(out->owner);
        owner->Return(std::move(out->block));
      },
      lent.release());
}

void HostBufferPool::Trim() { shared_->idle.Trim(); }

void HostBufferPool::SetMemory(std::shared_ptr<HostMemory> memory) {
  {
    MutexLock lock(&shared_->mu);
    shared_->memory = std::move(memory);
  }
  // Idle blocks from the memory before. A block given back meanwhile was
  // either checked against the new memory or is idle before this runs.
  shared_->idle.Trim();
}

HostBufferPool::Stats HostBufferPool::stats() const {
  return shared_->idle.stats();
}

}  // namespace sortd
