// Device buffer pool and pinned host staging, so that a warm engine
// allocates nothing large per request.
//
// BufferPool hands out device buffers rounded up to a power-of-two size
// class and takes them back when the PooledBuffer goes out of scope; freed
// buffers are kept (up to a byte budget) for the next request of their
// class. Callers must keep a PooledBuffer alive until the queue has finished
// with it.
//
// Each class is a stack: Acquire takes the buffer released last. A caller
// that releases its buffers in the reverse order of acquiring them (as the
// engine's runs do) gets the same buffer for each of its arrays the next
// time it asks for the same sizes. Where kernel time depends on where an
// array lies in device memory (it does, by up to 10% a pass on the H100),
// that keeps a repeated request's time repeatable. When the budget is full,
// the buffers idle longest are freed first, so the sizes in use now stay.
//
// StagingRing is a few persistently mapped pinned host buffers
// (CL_MEM_ALLOC_HOST_PTR) that transfers go through in chunks: while the
// DMA engine moves one chunk, the host copies the next, and transfers from
// pinned memory run at several times the speed of pageable ones.
//
//   BufferPool pool(context, 8 << 30);
//   auto b = pool.Acquire(n * 4, "keys");
//   StagingRing ring(context, queue, {.chunk_bytes = 8 << 20, .slots = 4});
//   ring.Upload(b->buffer(), 0, host_ptr, bytes, &events);
#ifndef SORTD_GPU_BUFFERS_H_
#define SORTD_GPU_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "gpu/cl.h"

namespace sortd::gpu {

class BufferPool;

class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(BufferPool* pool, cl::Buffer buffer, size_t capacity)
      : pool_(pool), buffer_(std::move(buffer)), capacity_(capacity) {}
  PooledBuffer(PooledBuffer&& o) noexcept { *this = std::move(o); }
  PooledBuffer& operator=(PooledBuffer&& o) noexcept;
  ~PooledBuffer();

  cl::Buffer& buffer() { return buffer_; }
  size_t capacity() const { return capacity_; }

 private:
  BufferPool* pool_ = nullptr;
  cl::Buffer buffer_;
  size_t capacity_ = 0;
};

class BufferPool {
 public:
  struct Stats {
    size_t allocations = 0;   // buffers created on the device
    size_t reuses = 0;        // requests served from the pool
    size_t evictions = 0;     // idle buffers freed to make room
    size_t pooled_bytes = 0;  // idle bytes held now
    size_t in_use_bytes = 0;
  };

  // Keeps at most `max_pooled_bytes` idle, and at most `max_total_bytes` in
  // use and idle together: a new buffer that would go past it first frees
  // idle ones, longest idle first.
  BufferPool(cl::Context context, size_t max_pooled_bytes,
             size_t max_total_bytes = SIZE_MAX)
      : context_(std::move(context)),
        max_pooled_bytes_(max_pooled_bytes),
        max_total_bytes_(max_total_bytes) {}

  // A buffer of at least `bytes`; `what` names it in errors. Allocation
  // failures are RESOURCE_EXHAUSTED.
  absl::StatusOr<PooledBuffer> Acquire(size_t bytes, const char* what);
  Stats stats() const;
  // Drops every idle buffer (after a device error, or to give memory
  // back).
  void Trim();
  // The capacity Acquire(bytes) hands out: a power of two, at least 64 KiB.
  static size_t SizeClass(size_t bytes);

 private:
  friend class PooledBuffer;
  void Release(cl::Buffer buffer, size_t capacity);

  struct Idle {
    cl::Buffer buffer;
    uint64_t released;  // release_clock_ when it came back
  };
  // Frees the buffer idle longest, of any class. False if none.
  bool EvictOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  cl::Context context_;
  size_t max_pooled_bytes_;
  size_t max_total_bytes_;
  mutable Mutex mu_;
  // Per class, oldest first.
  std::map<size_t, std::vector<Idle>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t release_clock_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

class StagingRing {
 public:
  struct Options {
    size_t chunk_bytes = size_t{16} << 20;
    int slots = 4;
  };
  using Events = std::vector<std::pair<const char*, cl::Event>>;

  static absl::StatusOr<std::unique_ptr<StagingRing>> Create(
      cl::Context context, cl::CommandQueue queue, const Options& options);
  ~StagingRing();

  // Host -> device (from byte `offset` of `dst` on), chunk by chunk through
  // the pinned slots, on `queue` (the ring's own if null: a lane's queues
  // share its ring). Returns once the last chunk is enqueued; the source
  // may be reused then.
  absl::Status Upload(cl::Buffer& dst, size_t offset, const void* src,
                      size_t bytes, Events* events,
                      cl::CommandQueue* queue = nullptr);
  // Device (from byte `offset` of `src` on) -> host; returns once every
  // byte is in `dst`.
  absl::Status Download(cl::Buffer& src, size_t offset, void* dst, size_t bytes,
                        Events* events, cl::CommandQueue* queue = nullptr);

 private:
  StagingRing(cl::CommandQueue queue, const Options& options)
      : queue_(std::move(queue)), options_(options) {}

  cl::CommandQueue queue_;
  Options options_;
  std::vector<cl::Buffer> buffers_;
  std::vector<void*> mapped_;
  std::vector<cl::Event> busy_;  // last transfer through each slot
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_BUFFERS_H_
