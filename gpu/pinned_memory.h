// PinnedHostMemory: page-locked host memory of one OpenCL context, handed
// to HostBufferPool (core/host_memory.h) so that request and answer arrays
// live where the device's DMA reads and writes them. A transfer from or to a
// range it gave out skips the engine's staging ring, and with it one copy of
// the array each way on the host.
//
// Each block is a CL_MEM_ALLOC_HOST_PTR buffer kept mapped: the way OpenCL
// drivers (NVIDIA's among them) hand out pinned memory. Adopt takes memory
// the caller mapped (a client's shared-memory region) under a
// CL_MEM_USE_HOST_PTR buffer: NVIDIA's driver then page-locks it, and
// transfers from and to it run at pinned speed (on the H200, 55 GB/s each
// way against 7-14 GB/s from the same pages unadopted; decision 026). The
// object keeps its context alive, so blocks may be freed after the engine is
// gone. It gives out at most `max_bytes` at once; beyond, Allocate returns null
// and the caller takes pageable memory, which the engine copies through its
// staging ring. The cap trades that copy against what NVIDIA's driver does
// with much memory locked: in one process, 4M-key sorts from 48-64
// closed-loop clients' page-locked arrays (3-4 GiB) slowed down many times
// over, while through the service a 4 GiB cap costs nothing at 4M keys and
// saves 16M-key Sorts a staging copy each (docs/decisions/
// 010-pinned-host-buffers.md).
//
//   auto pinned = PinnedHostMemory::Create(context, device, size_t{1} << 30);
//   void* p = (*pinned)->Allocate(64 << 20);
//   (*pinned)->Holds(p, 64 << 20);  // true: transfers go straight
#ifndef SORTD_GPU_PINNED_MEMORY_H_
#define SORTD_GPU_PINNED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "core/host_memory.h"
#include "core/mutex.h"
#include "gpu/cl.h"

namespace sortd::gpu {

class PinnedHostMemory final
    : public HostMemory,
      public std::enable_shared_from_this<PinnedHostMemory> {
 public:
  static absl::StatusOr<std::shared_ptr<PinnedHostMemory>> Create(
      cl::Context context, cl::Device device, size_t max_bytes = SIZE_MAX);
  ~PinnedHostMemory() override;

  void* Allocate(size_t bytes) override;
  void Free(void* data, size_t bytes) override;
  size_t Available() const override;
  // Null also for a range not page-aligned, or one that overlaps a range
  // adopted or given out here: it is taken under the lock before the
  // driver is asked, so concurrent callers cannot pin the same pages twice.
  std::shared_ptr<void> Adopt(void* data, size_t bytes) override;

  // Whether [data, data + bytes) lies inside one block given out or
  // adopted here, or by the memory shared with ShareFrom.
  bool Holds(const void* data, size_t bytes) const;

  // Counts `other`'s blocks as this context's own in Holds, so that
  // transfers from and to them skip the staging copy: for another context
  // of a driver that page-locks host memory for all of its contexts
  // (NVIDIA's, under unified addressing), whose requests' arrays live in
  // one device's memory and are served by any device. One at a time (the
  // last call's); `other` must not share back (Holds would ask in a loop).
  void ShareFrom(std::shared_ptr<const PinnedHostMemory> other);

  struct Stats {
    size_t blocks = 0, bytes = 0;
  };
  Stats stats() const;

 private:
  PinnedHostMemory(cl::Context context, cl::CommandQueue queue,
                   size_t max_bytes)
      : context_(std::move(context)),
        queue_(std::move(queue)),
        max_bytes_(max_bytes) {}

  struct Block {
    cl::Buffer buffer;
    size_t bytes = 0;
  };
  cl::Context context_;
  cl::CommandQueue queue_;  // maps and unmaps only
  const size_t max_bytes_;
  mutable Mutex mu_;
  std::map<uintptr_t, Block> blocks_ ABSL_GUARDED_BY(mu_);  // by address
  // By address, not counted in bytes_; a null buffer: being adopted.
  std::map<uintptr_t, Block> adopted_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;     // in blocks given out
  size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;  // bytes_ and blocks being made
  std::shared_ptr<const PinnedHostMemory> shared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PINNED_MEMORY_H_
