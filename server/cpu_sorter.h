// CpuSorter: sortd's CPU path, a stable parallel LSD radix sort on oneTBB.
//
// Keys are mapped to order-preserving unsigned bits (core/keys.h), sorted
// 8 bits a pass with per-block digit counts, a digit-major prefix sum and a
// stable per-block scatter; a pass whose digit is the same for every key is
// skipped. Payloads and permutations ride along as uint32 input indices and
// are gathered once at the end. All parallel work runs in the sorter's own
// task arena, so `threads` bounds the cores a request can take. Sorts of
// one block run on the caller's thread without oneTBB; sorts of a million
// keys or more are bulk work, run from a thread of lower CPU priority
// (nice 10), so that small requests on the same cores keep their latency.
//
//   CpuSorter cpu(CpuSorter::Options{.threads = 8});
//   absl::Status s = cpu.Sort(job);
#ifndef SORTD_SERVER_CPU_SORTER_H_
#define SORTD_SERVER_CPU_SORTER_H_

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
  };

  explicit CpuSorter(const Options& options);

  ExecutionPath path() const override { return ExecutionPath::kCpu; }
  std::string device_name() const override;
  int threads() const { return threads_; }

  absl::Status Sort(const SortJob& job) override;
  absl::Status Transpose(const TransposeJob& job) override;

 private:
  int threads_;
  tbb::task_arena arena_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_CPU_SORTER_H_
