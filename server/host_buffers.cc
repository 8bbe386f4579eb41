#include "server/host_buffers.h"

#include <cstdlib>
#include <list>
#include <mutex>
#include <new>
#include <vector>

#include "grpc/slice.h"

namespace sortd {

struct HostBufferPool::Shared {
  struct Block {
    std::shared_ptr<Shared> owner;  // keeps the pool's state while out
    void* data = nullptr;
    size_t capacity = 0;
  };

  explicit Shared(const Options& o) : options(o) {}
  ~Shared() {
    for (Block& block : idle) std::free(block.data);
  }

  // An idle block of a fitting size into `out`; false if there is none.
  bool TakeIdle(size_t bytes, Block* out) {
    std::lock_guard<std::mutex> lock(mu);
    // The smallest idle block that holds `bytes` and wastes at most a
    // quarter of it.
    auto best = idle.end();
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if (it->capacity >= bytes && it->capacity <= bytes + bytes / 4 &&
          (best == idle.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best == idle.end()) return false;
    out->data = best->data;
    out->capacity = best->capacity;
    idle_bytes -= best->capacity;
    in_use_bytes += best->capacity;
    idle.erase(best);
    ++reused;
    return true;
  }

  void Return(const Block& block) {
    std::vector<void*> to_free;
    {
      std::lock_guard<std::mutex> lock(mu);
      in_use_bytes -= block.capacity;
      if (block.capacity > options.max_idle_bytes) {
        to_free.push_back(block.data);
      } else {
        // Make room: the blocks idle longest go first.
        while (idle_bytes + block.capacity > options.max_idle_bytes) {
          to_free.push_back(idle.front().data);
          idle_bytes -= idle.front().capacity;
          idle.pop_front();
        }
        idle.push_back({nullptr, block.data, block.capacity});
        idle_bytes += block.capacity;
      }
    }
    for (void* p : to_free) std::free(p);
  }

  void Trim() {
    std::list<Block> freed;
    {
      std::lock_guard<std::mutex> lock(mu);
      freed.swap(idle);
      idle_bytes = 0;
    }
    for (Block& block : freed) std::free(block.data);
  }

  const Options options;
  mutable std::mutex mu;
  std::list<Block> idle;  // the longest idle first
  size_t idle_bytes = 0, in_use_bytes = 0;
  uint64_t reused = 0, allocated = 0;
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
    // Whole megabytes, so that nearby sizes share buffers.
    const size_t capacity = (bytes + (size_t{1} << 20) - 1) >> 20 << 20;
    block->data = std::malloc(capacity);
    if (block->data == nullptr) {
      delete block;
      throw std::bad_alloc();
    }
    block->capacity = capacity;
    std::lock_guard<std::mutex> lock(shared_->mu);
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

HostBufferPool::Stats HostBufferPool::stats() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return {shared_->idle_bytes, shared_->in_use_bytes, shared_->reused,
          shared_->allocated};
}

}  // namespace sortd
