#include "gpu/pinned_memory.h"

#include <unistd.h>

#include <iterator>
#include <utility>

namespace sortd::gpu {

absl::StatusOr<std::shared_ptr<PinnedHostMemory>> PinnedHostMemory::Create(
    cl::Context context, cl::Device device, size_t max_bytes) {
  cl_int err = CL_SUCCESS;
  cl::CommandQueue queue(context, device, 0, &err);
  SORTD_CL_RETURN_IF(err, "clCreateCommandQueue(pinned host memory)");
  return std::shared_ptr<PinnedHostMemory>(
      new PinnedHostMemory(std::move(context), std::move(queue), max_bytes));
}

PinnedHostMemory::~PinnedHostMemory() {
  // Blocks still out when the last holder lets go: only a pool that never
  // returned them; unmap them so that the driver releases the pages.
  for (auto& [address, block] : blocks_) {
    queue_.enqueueUnmapMemObject(block.buffer,
                                 reinterpret_cast<void*>(address));
  }
  queue_.finish();
}

void* PinnedHostMemory::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  {
    MutexLock lock(&mu_);
    if (bytes > max_bytes_ || reserved_ > max_bytes_ - bytes) return nullptr;
    reserved_ += bytes;
  }
  auto unreserve = [&] {
    MutexLock lock(&mu_);
    reserved_ -= bytes;
  };
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(context_, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes,
                    nullptr, &err);
  if (err != CL_SUCCESS) {
    unreserve();
    return nullptr;
  }
  void* data =
      queue_.enqueueMapBuffer(buffer, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                              bytes, nullptr, nullptr, &err);
  if (err != CL_SUCCESS || data == nullptr) {
    unreserve();
    return nullptr;
  }
  MutexLock lock(&mu_);
  blocks_[reinterpret_cast<uintptr_t>(data)] = {std::move(buffer), bytes};
  bytes_ += bytes;
  return data;
}

void PinnedHostMemory::Free(void* data, size_t /*bytes*/) {
  Block block;
  {
    MutexLock lock(&mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(data));
    if (it == blocks_.end()) return;
    block = std::move(it->second);
    bytes_ -= block.bytes;
    reserved_ -= block.bytes;
    blocks_.erase(it);
  }
  cl::Event unmapped;
  if (queue_.enqueueUnmapMemObject(block.buffer, data, nullptr, &unmapped) ==
      CL_SUCCESS) {
    (void)AwaitEvent(unmapped);
  }
}

namespace {

// Whether [address, address + bytes) meets a range of `ranges` (by start
// address, none overlapping another).
template <typename Map>
bool Overlaps(const Map& ranges, uintptr_t address, size_t bytes) {
  auto it = ranges.lower_bound(address + bytes);
  if (it == ranges.begin()) return false;
  it = std::prev(it);
  return it->first + it->second.bytes > address;
}

}  // namespace

std::shared_ptr<void> PinnedHostMemory::Adopt(void* data, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (data == nullptr || bytes == 0 || address % page != 0 ||
      bytes > UINTPTR_MAX - address) {
    return nullptr;
  }
  std::shared_ptr<PinnedHostMemory> self = weak_from_this().lock();
  if (self == nullptr) return nullptr;  // not made by Create
  // The range is taken before the driver sees it, so that two callers
  // cannot both pin it, nor pin memory given out here; until the buffer
  // exists Holds does not count it.
  try {
    MutexLock lock(&mu_);
    if (Overlaps(adopted_, address, bytes) ||
        Overlaps(blocks_, address, bytes)) {
      return nullptr;
    }
    adopted_.emplace(address, Block{cl::Buffer(), bytes});
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  auto drop = [&] {
    MutexLock lock(&mu_);
    adopted_.erase(address);
  };
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(context_, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes,
                    data, &err);
  if (err != CL_SUCCESS) {
    drop();
    return nullptr;
  }
  std::shared_ptr<void> handle;
  try {
    handle = std::shared_ptr<void>(data, [self, address](void*) {
      Block block;  // released after the lock
      MutexLock lock(&self->mu_);
      auto it = self->adopted_.find(address);
      if (it == self->adopted_.end()) return;
      block = std::move(it->second);
      self->adopted_.erase(it);
    });
  } catch (const std::bad_alloc&) {  // the deleter ran: the range is free
    return nullptr;
  }
  MutexLock lock(&mu_);
  adopted_.at(address).buffer = std::move(buffer);
  return handle;
}

bool PinnedHostMemory::Holds(const void* data, size_t bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(data);
  auto within = [&](const std::map<uintptr_t, Block>& ranges) {
    auto it = ranges.upper_bound(address);
    if (it == ranges.begin()) return false;
    it = std::prev(it);
    return it->second.buffer() != nullptr &&  // not still being adopted
           address + bytes <= it->first + it->second.bytes;
  };
  std::shared_ptr<const PinnedHostMemory> shared;
  {
    MutexLock lock(&mu_);
    if (within(blocks_) || within(adopted_)) return true;
    shared = shared_;
  }
  // Outside this lock: the other memory takes its own.
  return shared != nullptr && shared->Holds(data, bytes);
}

void PinnedHostMemory::ShareFrom(
    std::shared_ptr<const PinnedHostMemory> other) {
  if (other.get() == this) return;
  MutexLock lock(&mu_);
  shared_ = std::move(other);
}

size_t PinnedHostMemory::Available() const {
  MutexLock lock(&mu_);
  return max_bytes_ - reserved_;
}

PinnedHostMemory::Stats PinnedHostMemory::stats() const {
  MutexLock lock(&mu_);
  return {blocks_.size(), bytes_};
}

}  // namespace sortd::gpu
