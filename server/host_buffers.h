// HostBufferPool: page-resident host memory for the large arrays of
// requests and answers, reused from one request to the next.
//
// A fresh 64 MiB buffer costs 16384 page faults when it is first written:
// on the 2-core VM that is about as long as copying it twice, and the
// allocator hands large blocks back to the system as soon as they are freed,
// so every request paid it again. Buffers from this pool stay mapped while
// idle, within a byte budget (the keeping is IdlePool's, core/idle_pool.h);
// the idle trimmer (server/memory.h) empties the pool when sortd goes quiet.
//
// Buffers are handed out as gRPC slices: an answer is sent from the slice
// the engine wrote, and its memory comes back to the pool when gRPC (and
// every other holder of the slice) lets go of it, even after the pool
// object itself is gone.
//
//   HostBufferPool pool({.max_idle_bytes = size_t{1} << 30});
//   grpc::Slice keys = pool.Allocate(n * 4);  // uninitialised
#ifndef SORTD_SERVER_HOST_BUFFERS_H_
#define SORTD_SERVER_HOST_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/host_memory.h"
#include "core/idle_pool.h"
#include "grpcpp/support/slice.h"

namespace sortd {

class HostBufferPool {
 public:
  struct Options {
    // Smaller buffers come from the allocator; a pooled buffer is at
    // least this large (sortd's --host_pool_min_bytes: 256 KiB holds a
    // 64K-key u32 request, decision 010 has the measured choice).
    size_t min_bytes = size_t{256} << 10;
    // Idle bytes kept for reuse; beyond, the buffers idle longest are freed.
    size_t max_idle_bytes = size_t{1} << 30;
  };
  using Stats = IdlePoolStats;

  explicit HostBufferPool(const Options& options);
  ~HostBufferPool();

  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  // A slice of `bytes` uninitialised bytes, always on the heap (never a
  // slice gRPC inlines), so its address is stable across copies.
  grpc::Slice Allocate(size_t bytes);
  // New buffers come from `memory` from now on (null: the C allocator);
  // it stays alive while any buffer from it does. An OpenCL GPU engine's
  // host_memory() makes every large array one its transfers use in place.
  void SetMemory(std::shared_ptr<HostMemory> memory);
  // Frees every idle buffer.
  void Trim();
  Stats stats() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_HOST_BUFFERS_H_
