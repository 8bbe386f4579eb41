// CpuSorter: sortd's CPU path, a stable parallel radix sort on oneTBB.
//
// Keys are mapped to order-preserving unsigned bits (core/keys.h), sorted
// 8 bits a pass with per-block digit counts, a digit-major prefix sum and a
// stable per-block scatter; a pass whose digit is the same for every key is
// skipped. Large arrays are first split by their highest digits into
// buckets that fit the caches, each then sorted on its own
// (Options::msd_from_bytes). Payloads and permutations ride along as uint32
// input indices and are gathered once at the end. All parallel work runs in the
// sorter's own task arena, so `threads` bounds the cores one request can take.
// Sorts of one block run whole on the caller's thread without oneTBB (11 bits a
// pass from 4K keys), and so do sorts of up to a million keys while as
// many sorts of a block or more run at once as half the threads (with up
// to three threads: always); callers' threads are not the arena's, so
// under load the path may use more cores than `threads`. Sorts of a million
// keys or more are bulk work, run from a thread of lower CPU priority
// (nice 10), so that small requests on the same cores keep their latency.
//
// A sort's scratch (its keys as ordered bits and their indices, twice) of
// Options::scratch_min_bytes or more comes from a pool the sorter owns,
// block by block: a block is one sort's alone until that sort ends, then
// waits for the next, within a byte budget. Fresh memory costs a page fault
// per 4 KiB when first written, and glibc maps blocks of 32 MiB and more
// afresh for every sort: 2^22 u32 keys on the 2-core VM took 8192 faults
// and 21.8 ms a sort, 11.7 ms in reused scratch (2^24 u64: 158 against
// 96 ms). Smaller scratch comes from the allocator, without the pool's
// lock. Trim() frees the idle blocks, for the idle trimmer
// (server/memory.h) to call when sortd goes quiet.
//
//   CpuSorter cpu(CpuSorter::Options{.threads = 8});
//   absl::Status s = cpu.Sort(job);
#ifndef SORTD_CPU_CPU_SORTER_H_
#define SORTD_CPU_CPU_SORTER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/idle_pool.h"
#include "core/sorter.h"
#include "oneapi/tbb/task_arena.h"

namespace sortd {

class CpuScratchPool;  // cpu/scratch_pool.h

class CpuSorter final : public Sorter {
 public:
  struct Options {
    // Worker threads for one sort and across concurrent sorts; 0 means one
    // per hardware thread.
    int threads = 0;
    // Sorts in blocks of at least this many bytes of keys start with passes
    // over their highest digits (most significant first) until each bucket
    // holds at most `bucket_keys` keys, then sort each bucket by its lower
    // bits in cache, buckets side by side; smaller ones take LSD passes
    // over the whole array (decision 002).
    size_t msd_from_bytes = size_t{1} << 20;
    size_t bucket_keys = size_t{1} << 17;
    // Sorts whose scratch takes at least this many bytes take it from the
    // sorter's pool; smaller ones (every sort of fewer than 32K keys) from
    // the allocator, which reuses blocks this small without faults.
    size_t scratch_min_bytes = size_t{1} << 20;
    // Idle scratch bytes kept for reuse; beyond, the blocks idle longest
    // are freed. A 2^24-key u64 sort with a permutation takes 384 MiB.
    size_t scratch_max_idle_bytes = size_t{1} << 30;
  };
  using ScratchStats = IdlePoolStats;

  explicit CpuSorter(const Options& options);
  ~CpuSorter() override;

  ExecutionPath path() const override { return ExecutionPath::kCpu; }
  std::string device_name() const override;
  int threads() const { return threads_; }

  // RESOURCE_EXHAUSTED where the sort's scratch cannot be allocated.
  absl::Status Sort(const SortJob& job) override;
  // Whether a sort of `count` keys runs whole on its caller, with
  // `running` sorts of a block or more (itself included) under way on a
  // path of `threads` threads.
  static bool SortsWhole(size_t count, int running, int threads);
  absl::Status Transpose(const TransposeJob& job) override;

  // Frees every idle scratch block (blocks of sorts under way go back to
  // the pool when they end).
  void Trim();
  ScratchStats scratch_stats() const;

 private:
  // Runs `sort` in the arena from a thread of its own at a lower priority,
  // rethrowing here what it threw.
  template <typename F>
  void RunBulk(F& sort);
  // RESOURCE_EXHAUSTED: no memory for `job`'s scratch.
  static absl::Status ScratchExhausted(const SortJob& job);

  int threads_;
  size_t msd_from_bytes_;
  size_t bucket_keys_;
  tbb::task_arena arena_;
  std::atomic<int> running_{0};
  std::unique_ptr<CpuScratchPool> scratch_;
};

}  // namespace sortd

#endif  // SORTD_CPU_CPU_SORTER_H_
