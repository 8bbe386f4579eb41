#include "server/split_sort.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <new>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/time/clock.h"
#include "core/keys.h"
#include "core/mutex.h"
#include "core/parallel.h"
#include "server/out_of_memory.h"
#include "server/runs.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace sortd {
namespace {

// Thread starts still to be refused (SetSplitThreadFailuresForTesting).
std::atomic<int> refuse_thread_starts{0};

// A thread running `fn`, as std::thread would start it; throws
// std::system_error where no thread can be had.
template <typename Fn>
std::thread StartThread(Fn&& fn) {
  if (refuse_thread_starts.load(std::memory_order_relaxed) > 0 &&
      refuse_thread_starts.fetch_sub(1) > 0) {
    throw std::bad_alloc();
  }
  return std::thread(std::forward<Fn>(fn));
}

// A fresh anonymous mapping of `bytes` (null when none can be had), with
// huge pages where the system allows them (a five-hundredth of the faults).
std::byte* MapScratch(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, bytes, MADV_HUGEPAGE);
  return static_cast<std::byte*>(p);
}

// One sort's scratch: the cache's idle mapping where it is large enough,
// else a mapping of its own, given back to the cache (or the system) after
// the sort. A fresh mapping is faulted in ahead of the devices' downloads.
class Scratch {
 public:
  static constexpr int kPopulateThreads = 4;

  Scratch(size_t bytes, SplitScratchCache* cache) : cache_(cache) {
    if (bytes == 0) return;
    if (cache_ != nullptr) {
      std::tie(data_, size_) = cache_->Take(bytes);
      fresh_ = false;
    }
    if (data_ == nullptr) {
      data_ = MapScratch(bytes);
      size_ = data_ != nullptr ? bytes : 0;
      fresh_ = true;
    }
    ok_ = data_ != nullptr;
  }
  ~Scratch() {
    StopPopulating();
    if (data_ == nullptr) return;
    if (cache_ != nullptr) {
      cache_->Give(data_, size_);
    } else {
      munmap(data_, size_);
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::byte* data() const { return data_; }
  bool ok() const { return ok_; }

  // Faults every page of a fresh mapping in, on a few cores, from a thread
  // of its own, while the devices write into it: MADV_POPULATE_WRITE maps
  // pages without changing a byte, so it may race with writes. Where the
  // kernel lacks it (before Linux 5.14) nothing happens and the writes
  // fault the pages.
  void StartPopulating() {
    if (data_ == nullptr || !fresh_) return;
    try {
      populate_ = StartThread([this] { Populate(); });
    } catch (const std::exception&) {
      // No thread to be had (std::system_error, or std::bad_alloc for its
      // state): the writes fault the pages in.
    }
  }
  void StopPopulating() {
    stop_.store(true);
    if (populate_.joinable()) populate_.join();
  }

 private:
  // Nothing may leave the thread: without an arena or its tasks the
  // writes fault the remaining pages in.
  void Populate() {
    try {
      PopulateChunks();
    } catch (const std::exception&) {
      stop_.store(true, std::memory_order_relaxed);
    }
  }
  void PopulateChunks() {
    constexpr size_t kChunk = size_t{32} << 20;
    const size_t chunks = (size_ + kChunk - 1) / kChunk;
    // A few threads: the devices' transfers copy through their staging on
    // the same cores meanwhile, and must not wait behind this.
    tbb::task_arena arena(kPopulateThreads);
    parallel::Execute(arena, [&] {
      parallel::For(size_t{0}, chunks, [&](size_t c) {
        if (stop_.load(std::memory_order_relaxed)) return;
        const size_t begin = c * kChunk;
        const size_t len = std::min(kChunk, size_ - begin);
        if (madvise(data_ + begin, len, MADV_POPULATE_WRITE) != 0) {
          stop_.store(true, std::memory_order_relaxed);
        }
      });
    });
  }

  SplitScratchCache* const cache_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool fresh_ = true, ok_ = true;
  std::thread populate_;
  std::atomic<bool> stop_{false};
};

struct Parts {
  const SortJob* job = nullptr;
  absl::Span<Sorter* const> engines;
  std::vector<size_t> bounds;
  std::byte *keys = nullptr, *values = nullptr, *perm = nullptr;
  std::vector<absl::Status> status;
  SplitReport* report = nullptr;

  void Run(size_t i) {
    StageTimes* stages = job->stages != nullptr ? &report->stages[i] : nullptr;
    // Nothing may leave a part's thread: host memory running out is its
    // failure.
    status[i] = CatchOutOfMemory("a device part of this sort", [&] {
      return SortRunInto(*engines[i], *job, bounds[i], bounds[i + 1], keys,
                         values, perm, stages);
    });
  }
};

// Every part on its engine at once: parts 1.. in threads of their own,
// part 0 in the caller's (a part whose thread cannot be had runs there
// too, after it).
// Nothing here allocates once a thread runs (both vectors are reserved
// first), so no exception can leave with a thread still joinable.
void RunParts(Parts& parts) {
  const size_t k = parts.engines.size();
  std::vector<std::thread> threads;
  std::vector<size_t> inline_parts;
  threads.reserve(k);  // may throw std::bad_alloc: no thread runs yet
  inline_parts.reserve(k);
  inline_parts.push_back(0);
  for (size_t i = 1; i < k; ++i) {
    try {
      threads.push_back(StartThread([&parts, i] { parts.Run(i); }));
    } catch (const std::exception&) {
      // std::system_error (no thread), std::bad_alloc (no memory for its
      // state): the part runs in this thread.
      inline_parts.push_back(i);
    }
  }
  for (size_t i : inline_parts) parts.Run(i);
  for (std::thread& t : threads) t.join();
}

}  // namespace

void SetSplitThreadFailuresForTesting(int count) {
  refuse_thread_starts.store(count);
}

SplitScratchCache::~SplitScratchCache() { Trim(); }

std::pair<std::byte*, size_t> SplitScratchCache::Take(size_t bytes) {
  MutexLock lock(&mu_);
  // Not one much larger than asked for: that would hold the difference.
  if (idle_ == nullptr || idle_size_ < bytes || idle_size_ / 2 > bytes) {
    return {nullptr, 0};
  }
  ++reused_;
  return {std::exchange(idle_, nullptr), std::exchange(idle_size_, 0)};
}

void SplitScratchCache::Give(std::byte* data, size_t size) {
  std::byte* drop = data;
  size_t drop_size = size;
  {
    MutexLock lock(&mu_);
    if (size <= max_idle_bytes_ && size >= idle_size_) {
      // The larger one stays idle: it serves the same sorts and more.
      std::swap(drop, idle_);
      std::swap(drop_size, idle_size_);
    }
  }
  if (drop != nullptr) munmap(drop, drop_size);
}

void SplitScratchCache::Trim() {
  std::byte* drop;
  size_t drop_size;
  {
    MutexLock lock(&mu_);
    drop = std::exchange(idle_, nullptr);
    drop_size = std::exchange(idle_size_, 0);
  }
  if (drop != nullptr) munmap(drop, drop_size);
}

size_t SplitScratchCache::idle_bytes() const {
  MutexLock lock(&mu_);
  return idle_size_;
}

uint64_t SplitScratchCache::reused() const {
  MutexLock lock(&mu_);
  return reused_;
}

size_t SplitScratchBytes(const SortJob& job) {
  return job.count * (KeySize(job.key_type) + ValueSize(job.value_type) +
                      (job.permutation_out != nullptr ? 4 : 0));
}

size_t SplitBound(size_t count, size_t parts, size_t i) {
  if (parts == 0) return 0;
  const size_t base = count / parts, extra = count % parts;
  return i * base + std::min(i, extra);
}

absl::Status SplitSort(absl::Span<Sorter* const> engines, const SortJob& job,
                       SplitReport* report, SplitScratchCache* cache) {
  if (engines.empty()) {
    return absl::InvalidArgumentError("a split sort needs a device");
  }
  const size_t k = engines.size(), n = job.count;
  report->stages.assign(k, {});
  report->merge_seconds = 0;
  report->parts_sorted = 0;
  Scratch scratch(SplitScratchBytes(job), cache);
  if (!scratch.ok()) return OutOfMemory("this sort's split scratch");
  Parts parts;
  parts.job = &job;
  parts.engines = engines;
  parts.report = report;
  parts.bounds.resize(k + 1);
  for (size_t i = 0; i <= k; ++i) parts.bounds[i] = SplitBound(n, k, i);
  parts.keys = scratch.data();
  parts.values = parts.keys + n * KeySize(job.key_type);
  parts.perm = parts.values + n * ValueSize(job.value_type);
  parts.status.assign(k, absl::OkStatus());

  scratch.StartPopulating();
  RunParts(parts);
  // Every page the parts wrote is in by now; what is left to populate is
  // not needed.
  scratch.StopPopulating();
  absl::Status failed;
  for (const absl::Status& s : parts.status) {
    if (s.ok()) {
      ++report->parts_sorted;
    } else if (failed.ok()) {
      failed = s;
    }
  }
  if (!failed.ok()) return failed;

  const absl::Time start = absl::Now();
  SortJob in = job;
  in.keys = parts.keys;
  in.values = job.value_type != ValueType::kNone ? parts.values : nullptr;
  absl::Status merged =
      MergeRuns(in, job.permutation_out != nullptr ? parts.perm : nullptr,
                parts.bounds, job);
  if (!merged.ok()) return merged;
  report->merge_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

}  // namespace sortd
