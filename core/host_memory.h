// HostMemory: where HostBufferPool's large buffers come from. Without one
// the pool uses the C allocator; an OpenCL GPU engine offers page-locked
// memory that its transfers read and write directly, without the copy
// through its staging buffers (gpu/pinned_memory.h).
#ifndef SORTD_CORE_HOST_MEMORY_H_
#define SORTD_CORE_HOST_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sortd {

class HostMemory {
 public:
  virtual ~HostMemory() = default;
  // `bytes` bytes, or null when none can be had (the caller then uses the
  // C allocator). Safe to call from many threads at once.
  virtual void* Allocate(size_t bytes) = 0;
  // Returns what Allocate(bytes) gave.
  virtual void Free(void* data, size_t bytes) = 0;
  // How many bytes Allocate could still give out now: a memory with a cap
  // (page-locked memory) says how far it is from it; SIZE_MAX: no cap.
  virtual size_t Available() const { return SIZE_MAX; }
  // Makes the caller's `bytes` at `data` (page-aligned, and mapped until
  // the handle is let go) memory that transfers read and write directly,
  // as if Allocate had given it; null where that cannot be done (transfers
  // then copy through staging). Safe to call from many threads at once.
  virtual std::shared_ptr<void> Adopt(void* /*data*/, size_t /*bytes*/) {
    return nullptr;
  }
};

}  // namespace sortd

#endif  // SORTD_CORE_HOST_MEMORY_H_
