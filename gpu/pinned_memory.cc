#include "gpu/pinned_memory.h"

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
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > max_bytes_ || reserved_ > max_bytes_ - bytes) return nullptr;
    reserved_ += bytes;
  }
  auto unreserve = [&] {
    std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  blocks_[reinterpret_cast<uintptr_t>(data)] = {std::move(buffer), bytes};
  bytes_ += bytes;
  return data;
}

void PinnedHostMemory::Free(void* data, size_t /*bytes*/) {
  Block block;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    unmapped.wait();
  }
}

std::shared_ptr<void> PinnedHostMemory::Adopt(void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return nullptr;
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(context_, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes,
                    data, &err);
  if (err != CL_SUCCESS) return nullptr;
  const auto address = reinterpret_cast<uintptr_t>(data);
  try {
    std::shared_ptr<PinnedHostMemory> self = shared_from_this();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!adopted_.try_emplace(address, Block{buffer, bytes}).second) {
        return nullptr;  // adopted already: the first handle rules
      }
    }
    return std::shared_ptr<void>(data, [self, address](void*) {
      Block block;  // released after the lock
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->adopted_.find(address);
      if (it == self->adopted_.end()) return;
      block = std::move(it->second);
      self->adopted_.erase(it);
    });
  } catch (const std::exception&) {  // bad_alloc, or bad_weak_ptr
    std::lock_guard<std::mutex> lock(mu_);
    adopted_.erase(address);
    return nullptr;
  }
}

bool PinnedHostMemory::Holds(const void* data, size_t bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(data);
  auto within = [&](const std::map<uintptr_t, Block>& ranges) {
    auto it = ranges.upper_bound(address);
    if (it == ranges.begin()) return false;
    it = std::prev(it);
    return address + bytes <= it->first + it->second.bytes;
  };
  std::lock_guard<std::mutex> lock(mu_);
  return within(blocks_) || within(adopted_);
}

size_t PinnedHostMemory::Available() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_bytes_ - reserved_;
}

PinnedHostMemory::Stats PinnedHostMemory::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {blocks_.size(), bytes_};
}

}  // namespace sortd::gpu
