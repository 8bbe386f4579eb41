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
//   CpuSorter cpu(CpuSorter::Options{.threads = 8});
//   absl::Status s = cpu.Sort(job);
#ifndef SORTD_SERVER_CPU_SORTER_H_
#define SORTD_SERVER_CPU_SORTER_H_

#include <atomic>
#include <string>

#include "core/sorter.h"
#include "oneapi/tbb/task_arena.h"

namespace sortd {

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
  };

  explicit CpuSorter(const Options& options);

  ExecutionPath path() const override { return ExecutionPath::kCpu; }
  std::string device_name() const override;
  int threads() const { return threads_; }

  absl::Status Sort(const SortJob& job) override;
  // Whether a sort of `count` keys runs whole on its caller, with
  // `running` sorts of a block or more (itself included) under way on a
  // path of `threads` threads.
  static bool SortsWhole(size_t count, int running, int threads);
  absl::Status Transpose(const TransposeJob& job) override;

 private:
  int threads_;
  size_t msd_from_bytes_;
  size_t bucket_keys_;
  tbb::task_arena arena_;
  std::atomic<int> running_{0};
};

}  // namespace sortd

#endif  // SORTD_SERVER_CPU_SORTER_H_
