// CpuSorter itself: which of the radix sort's ways a sort takes (SortKeys),
// on which thread and at which priority it runs (Sort, RunBulk), its
// scratch pool's upkeep, and the bit-matrix transpose. The sorts
// themselves are in serial_sort.cc, lsd_sort.cc and msd_sort.cc; the
// scratch pool in scratch_pool.cc.
#include "cpu/cpu_sorter.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "core/transpose.h"
#include "cpu/scratch_pool.h"
#include "cpu/sort_internal.h"
#include "oneapi/tbb/info.h"

namespace sortd {

namespace cpu_sort {

void GatherPayload(const SortJob& job, const uint32_t* order, size_t lo,
                   size_t hi) {
  if (job.value_type == ValueType::kU32) {
    for (size_t i = lo; i < hi; ++i) {
      Store(job.values_out, i, Load<uint32_t>(job.values, order[i]));
    }
  } else if (job.value_type == ValueType::kU64) {
    for (size_t i = lo; i < hi; ++i) {
      Store(job.values_out, i, Load<uint64_t>(job.values, order[i]));
    }
  }
  if (job.permutation_out != nullptr) {
    std::memcpy(job.permutation_out + lo * sizeof(uint32_t), order + lo,
                (hi - lo) * sizeof(uint32_t));
  }
}

}  // namespace cpu_sort

namespace {

using cpu_sort::ParallelFor;

// Sorts of at least this many keys are bulk work: they run at a lower CPU
// priority, so that small requests sharing the cores are answered at once
// while a large one runs for seconds.
constexpr size_t kBulkFrom = size_t{1} << 20;
// The nice value of bulk work (0 is normal, 19 the lowest).
constexpr int kBulkNice = 10;

// Lowers the calling thread's CPU priority for good (raising it back would
// need privileges sortd does not have).
void LowerPriority() {
  // Best effort: a failure leaves the thread at its priority.
  (void)setpriority(PRIO_PROCESS, gettid(), kBulkNice);
}

// Below this many keys one block does the whole sort: the per-block
// histograms and task overhead would cost more than they save.
constexpr size_t kSerialBelow = size_t{1} << 15;

// Sorts `job` on the calling thread alone where `serial`, else in blocks:
// over the highest digits first from split.msd_from_bytes, over the whole
// array below.
void SortKeys(const SortJob& job, const cpu_sort::Split& split, bool serial,
              CpuScratchPool& pool) {
  using cpu_sort::kInsertionUpTo;
  const size_t n = job.count;
  if (n > kInsertionUpTo && serial) {
    cpu_sort::SortSerial(job, pool);
    return;
  }
  // (Arrays no larger than a bucket, or sorted by insertion, are not split.)
  if (n > kInsertionUpTo && n > split.bucket_keys &&
      n * KeySize(job.key_type) >= split.msd_from_bytes) {
    cpu_sort::SortMsdThenLsd(job, split, pool);
    return;
  }
  cpu_sort::SortLsdInBlocks(job, split.threads, pool);
}

}  // namespace

CpuSorter::CpuSorter(const Options& options)
    : threads_(options.threads > 0 ? options.threads
                                   : tbb::info::default_concurrency()),
      msd_from_bytes_(options.msd_from_bytes),
      bucket_keys_(std::max<size_t>(options.bucket_keys, 1)),
      arena_(threads_),
      scratch_(std::make_unique<CpuScratchPool>(
          options.scratch_min_bytes, options.scratch_max_idle_bytes)) {}

CpuSorter::~CpuSorter() = default;

void CpuSorter::Trim() { scratch_->Trim(); }

CpuSorter::ScratchStats CpuSorter::scratch_stats() const {
  return scratch_->stats();
}

std::string CpuSorter::device_name() const {
  return absl::StrCat("cpu (oneTBB, ", threads_, " threads)");
}

bool CpuSorter::SortsWhole(size_t count, int running, int threads) {
  // Under load a sort of up to a million keys runs whole on its caller:
  // split into blocks, sorts that run side by side pay per-block counts,
  // task hand-offs and an 8-bit scatter where one thread's 11-bit passes
  // need none of them (docs/decisions/002-cpu-path-stable-radix.md).
  return count < kSerialBelow ||
         (count < kBulkFrom && running >= std::max(1, threads / 2));
}

absl::Status CpuSorter::Sort(const SortJob& job) {
  if (job.count > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot sort ", job.count,
                     " keys: the CPU path indexes keys with 32 bits"));
  }
  if (job.count == 0) return absl::OkStatus();
  // Sorts beyond one block count towards the load (smaller ones are over
  // in microseconds).
  const bool counted = job.count >= kSerialBelow;
  const int running =
      counted ? running_.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
  absl::Cleanup done = [&] {
    if (counted) running_.fetch_sub(1, std::memory_order_relaxed);
  };
  const bool serial = SortsWhole(job.count, running, threads_);
  auto sort = [&] {
    SortKeys(job,
             {.threads = threads_,
              .msd_from_bytes = msd_from_bytes_,
              .bucket_keys = bucket_keys_},
             serial, *scratch_);
  };
  // A sort run whole runs on the calling thread alone: it never waits for a
  // slot in the arena, which a large sort may hold for seconds. A bulk sort's
  // own thread runs at a lower priority (the caller waits); oneTBB's workers,
  // which also copy for the OpenCL engine, keep theirs. On 2 cores, 1K-key
  // sorts from two clients during a 32M-key sort: over 1.5 times as many
  // answered, p99 as when idle.
  //
  // Scratch that cannot be allocated (std::bad_alloc, thrown here or from
  // oneTBB's workers, which oneTBB passes on to the caller) answers
  // RESOURCE_EXHAUSTED; the sort's blocks go back to the pool as it
  // unwinds.
  try {
    if (serial) {
      sort();
    } else if (job.count < kBulkFrom) {
      parallel::Execute(arena_, sort);
    } else {
      RunBulk(sort);
    }
  } catch (const std::bad_alloc&) {
    return ScratchExhausted(job);
  } catch (const std::length_error&) {
    return ScratchExhausted(job);
  }
  return absl::OkStatus();
}

template <typename F>
void CpuSorter::RunBulk(F& sort) {
  // An exception must not leave the bulk thread (it would end the
  // process): it is carried over and rethrown here.
  std::exception_ptr failed;
  std::optional<std::thread> bulk;
  try {
    bulk.emplace([&] {
      try {
        LowerPriority();
        parallel::Execute(arena_, sort);
      } catch (...) {
        failed = std::current_exception();
      }
    });
  } catch (const std::system_error&) {
    // No thread to be had: the sort runs on the caller, at its priority.
    parallel::Execute(arena_, sort);
    return;
  }
  bulk->join();
  if (failed) std::rethrow_exception(failed);
}

absl::Status CpuSorter::ScratchExhausted(const SortJob& job) {
  const bool with_index =
      job.value_type != ValueType::kNone || job.permutation_out != nullptr;
  const size_t bytes =
      job.count * (2 * KeySize(job.key_type) + (with_index ? 8 : 0));
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server has no host memory for this sort's scratch (", bytes,
      " bytes for ", job.count, " keys on the CPU path) now; retry later"));
}

absl::Status CpuSorter::Transpose(const TransposeJob& job) {
  constexpr size_t kMatrixBytes = 32 * sizeof(uint32_t);
  constexpr size_t kGrain = 4096;
  auto transpose = [&] {
    ParallelFor(job.count, kGrain, [&](size_t lo, size_t hi) {
      for (size_t m = lo; m < hi; ++m) {
        uint32_t rows[32];
        std::memcpy(rows, job.in + m * kMatrixBytes, kMatrixBytes);
        TransposeBits32(rows);
        std::memcpy(job.out + m * kMatrixBytes, rows, kMatrixBytes);
      }
    });
  };
  if (job.count <= kGrain) {  // one chunk: on the calling thread
    transpose();
  } else {
    parallel::Execute(arena_, transpose);
  }
  return absl::OkStatus();
}

}  // namespace sortd
