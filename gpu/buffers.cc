#include "gpu/buffers.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/parallel.h"

namespace sortd::gpu {
namespace {

// One core copies about 8-10 GB/s, well under what pinned DMA moves
// (about 55 GB/s on the H100 host), so chunks are copied by several.
void ParallelCopy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t{1} << 20;
  if (bytes <= kPiece) {
    std::memcpy(dst, src, bytes);
    return;
  }
  parallel::For(size_t{0}, (bytes + kPiece - 1) / kPiece, [&](size_t i) {
    const size_t off = i * kPiece;
    std::memcpy(static_cast<char*>(dst) + off,
                static_cast<const char*>(src) + off,
                std::min(kPiece, bytes - off));
  });
}

constexpr size_t kMinClass = size_t{64} << 10;

}  // namespace

size_t BufferPool::SizeClass(size_t bytes) {
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& o) noexcept {
  if (this != &o) {
    if (pool_ != nullptr) pool_->Release(std::move(buffer_), capacity_);
    pool_ = std::exchange(o.pool_, nullptr);
    buffer_ = std::move(o.buffer_);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

PooledBuffer::~PooledBuffer() {
  if (pool_ != nullptr) pool_->Release(std::move(buffer_), capacity_);
}

absl::StatusOr<PooledBuffer> BufferPool::Acquire(size_t bytes,
                                                 const char* what) {
  const size_t capacity = SizeClass(bytes);
  {
    MutexLock lock(&mu_);
    auto it = idle_.find(capacity);
    if (it != idle_.end() && !it->second.empty()) {
      cl::Buffer b = std::move(it->second.back().buffer);
      it->second.pop_back();
      stats_.pooled_bytes -= capacity;
      stats_.in_use_bytes += capacity;
      ++stats_.reuses;
      return PooledBuffer(this, std::move(b), capacity);
    }
    while (stats_.in_use_bytes + stats_.pooled_bytes + capacity >
               max_total_bytes_ &&
           EvictOldestLocked()) {
    }
  }
  cl_int err = CL_SUCCESS;
  cl::Buffer b(context_, CL_MEM_READ_WRITE, capacity, nullptr, &err);
  if (err != CL_SUCCESS) {
    // Idle buffers of other classes may be what stands in the way.
    Trim();
    b = cl::Buffer(context_, CL_MEM_READ_WRITE, capacity, nullptr, &err);
  }
  if (err != CL_SUCCESS) {
    return ClStatus(
        err, absl::StrCat("allocating ", capacity, " device bytes for ", what));
  }
  MutexLock lock(&mu_);
  ++stats_.allocations;
  stats_.in_use_bytes += capacity;
  return PooledBuffer(this, std::move(b), capacity);
}

void BufferPool::Release(cl::Buffer buffer, size_t capacity) {
  MutexLock lock(&mu_);
  stats_.in_use_bytes -= capacity;
  if (capacity > max_pooled_bytes_) return;  // freed: it could never fit
  // Room for it at the expense of what has been idle longest: the sizes
  // being asked for now are the likeliest to be asked for again.
  while (stats_.pooled_bytes + capacity > max_pooled_bytes_ &&
         EvictOldestLocked()) {
  }
  idle_[capacity].push_back({std::move(buffer), ++release_clock_});
  stats_.pooled_bytes += capacity;
}

bool BufferPool::EvictOldestLocked() {
  auto oldest = idle_.end();
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if (!it->second.empty() &&
        (oldest == idle_.end() ||
         it->second.front().released < oldest->second.front().released)) {
      oldest = it;
    }
  }
  if (oldest == idle_.end()) return false;
  oldest->second.erase(oldest->second.begin());
  stats_.pooled_bytes -= oldest->first;
  ++stats_.evictions;
  return true;
}

void BufferPool::Trim() {
  MutexLock lock(&mu_);
  idle_.clear();
  stats_.pooled_bytes = 0;
}

BufferPool::Stats BufferPool::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<std::unique_ptr<StagingRing>> StagingRing::Create(
    cl::Context context, cl::CommandQueue queue, const Options& options) {
  std::unique_ptr<StagingRing> ring(new StagingRing(queue, options));
  for (int i = 0; i < options.slots; ++i) {
    cl_int err = CL_SUCCESS;
    cl::Buffer b(context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                 options.chunk_bytes, nullptr, &err);
    SORTD_CL_RETURN_IF(err, "clCreateBuffer(pinned staging)");
    void* p =
        queue.enqueueMapBuffer(b, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                               options.chunk_bytes, nullptr, nullptr, &err);
    SORTD_CL_RETURN_IF(err, "clEnqueueMapBuffer(pinned staging)");
    ring->buffers_.push_back(b);
    ring->mapped_.push_back(p);
    ring->busy_.emplace_back();
  }
  return ring;
}

StagingRing::~StagingRing() {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    queue_.enqueueUnmapMemObject(buffers_[i], mapped_[i]);
  }
  queue_.finish();
}

absl::Status StagingRing::Upload(cl::Buffer& dst, size_t offset,
                                 const void* src, size_t bytes, Events* events,
                                 cl::CommandQueue* queue) {
  cl::CommandQueue& q = queue != nullptr ? *queue : queue_;
  const char* from = static_cast<const char*>(src);
  size_t chunk = 0;
  for (size_t off = 0; off < bytes; off += options_.chunk_bytes, ++chunk) {
    const size_t slot = chunk % buffers_.size();
    const size_t len = std::min(options_.chunk_bytes, bytes - off);
    if (busy_[slot]())
      SORTD_CL_RETURN_IF(AwaitEvent(busy_[slot]), "staging wait");
    ParallelCopy(mapped_[slot], from + off, len);
    cl::Event e;
    SORTD_CL_RETURN_IF(q.enqueueWriteBuffer(dst, CL_FALSE, offset + off, len,
                                            mapped_[slot], nullptr, &e),
                       "clEnqueueWriteBuffer(staged)");
    busy_[slot] = e;
    events->emplace_back("upload", e);
  }
  return absl::OkStatus();
}

absl::Status StagingRing::Download(cl::Buffer& src, size_t offset, void* dst,
                                   size_t bytes, Events* events,
                                   cl::CommandQueue* queue) {
  cl::CommandQueue& q = queue != nullptr ? *queue : queue_;
  char* to = static_cast<char*>(dst);
  const size_t slots = buffers_.size();
  std::vector<std::pair<size_t, size_t>> pending(slots, {0, 0});  // off, len
  auto drain = [&](size_t slot) -> absl::Status {
    if (pending[slot].second == 0) return absl::OkStatus();
    SORTD_CL_RETURN_IF(AwaitEvent(busy_[slot]), "staging wait");
    ParallelCopy(to + pending[slot].first, mapped_[slot], pending[slot].second);
    pending[slot].second = 0;
    return absl::OkStatus();
  };
  size_t chunk = 0;
  for (size_t off = 0; off < bytes; off += options_.chunk_bytes, ++chunk) {
    const size_t slot = chunk % slots;
    SORTD_RETURN_IF_ERROR(drain(slot));
    if (busy_[slot]())
      SORTD_CL_RETURN_IF(AwaitEvent(busy_[slot]), "staging wait");
    const size_t len = std::min(options_.chunk_bytes, bytes - off);
    cl::Event e;
    SORTD_CL_RETURN_IF(q.enqueueReadBuffer(src, CL_FALSE, offset + off, len,
                                           mapped_[slot], nullptr, &e),
                       "clEnqueueReadBuffer(staged)");
    busy_[slot] = e;
    pending[slot] = {off, len};
    events->emplace_back("download", e);
  }
  for (size_t i = 0; i < slots; ++i) {
    SORTD_RETURN_IF_ERROR(drain((chunk + i) % slots));
  }
  return absl::OkStatus();
}

}  // namespace sortd::gpu
