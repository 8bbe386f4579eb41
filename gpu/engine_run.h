// The pieces an OpenClEngine call is made of, shared by its passes
// (gpu/passes/): a lane (command queues, staging ring, each pass's kernel
// objects), the device arrays of one sort, and Run, one call's enqueues on
// its lane with the buffers and events they use. Internal to gpu/.
//
//   Run run(core, lane, EngineCore::kSort, &stages, nullptr);
//   absl::StatusOr<cl::Buffer> keys = run.Allocate(bytes, "keys");
//   if (keys.ok()) status = run.Write(*keys, bytes, host);
//   ThreeLaunchKernels& k = lane.radix[0][0].three_launch;
//   k.scan_blocks.Bind({.data = *keys, .n = n, .block_sums = *sums});
//   status = run.Launch(k.scan_blocks, LaunchGrid::Covering(n, wg), "scan");
//   status = run.Finish(&stages);  // waits; stage times
#ifndef SORTD_GPU_ENGINE_RUN_H_
#define SORTD_GPU_ENGINE_RUN_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/sorter.h"
#include "gpu/buffers.h"
#include "gpu/cl.h"
#include "gpu/device.h"
#include "gpu/faults.h"
#include "gpu/passes/bitonic.h"
#include "gpu/passes/encode.h"
#include "gpu/passes/onesweep.h"
#include "gpu/passes/segments.h"
#include "gpu/passes/settle.h"
#include "gpu/passes/three_launch.h"
#include "gpu/passes/transpose.h"
#include "gpu/pinned_memory.h"

namespace sortd::gpu {

// radix_sort.cl's kernels, one build (key width, index, tile), by pass.
struct RadixKernels {
  EncodeKernels code;               // encode, decode (passes/encode.h)
  ThreeLaunchKernels three_launch;  // histogram, scans, scatter
  OnesweepKernels onesweep;         // the one-launch pass and its twins
  SettleKernels settling;           // digit starts, settle
  SegmentKernels segments;          // segmented sort (passes/segments.h)
};

// A command queue with its own staging ring and kernel objects (kernels
// hold their arguments). A run takes a lane for its whole length; runs on
// different lanes proceed at once, so one run's transfers overlap
// another's kernels.
struct Lane {
  // Two in-order queues: runs that are timed use `profiled_queue`, whose
  // commands carry profiling events; the others use `queue`, whose enqueues
  // cost less (on NVIDIA's driver about half: 8 against 17 us a launch). A
  // run uses one of them from start to finish.
  cl::CommandQueue queue;
  cl::CommandQueue profiled_queue;
  // Small reads that the work behind them on `queue` need not wait for.
  cl::CommandQueue side_queue;
  std::unique_ptr<StagingRing> staging;
  RadixKernels radix[2][2];  // [key_bits == 64][with_index]
  // Built with the policy's small_items, for short arrays.
  RadixKernels radix_small[2][2];
  // Built with streaming key loads, for long arrays of 32-bit keys without
  // an index (RadixSortPolicy::stream_keys_32_min).
  RadixKernels radix_stream;
  BitonicKernels bitonic[2][2];
  ArgsKernel<TransposeArgs> transpose;  // transpose32 or its sub-group twin
};

// The device arrays of one sort: ordered keys and indices in two ping-pong
// halves; `cur` says which half holds the current order.
struct SortArrays {
  cl::Buffer raw, keys[2], index[2], values, values_out;
  int cur = 0;
  // keys[cur] holds raw keys: the last pass stored them (RawEnds).
  bool keys_raw = false;
};

// What every run of one engine shares: the device, its buffer pool and
// pinned memory, the memory each run may hold, fault injection and
// transfer counters.
struct EngineCore {
  explicit EngineCore(FaultSpec faults) : faults(std::move(faults)) {}
  DeviceInfo info;
  std::unique_ptr<BufferPool> pool;
  std::shared_ptr<PinnedHostMemory> pinned;  // null without pinned staging
  size_t run_budget = 0;
  size_t lanes = 1;
  FaultInjector faults;
  std::atomic<uint64_t> staged_bytes{0}, direct_bytes{0};
  // A queue that could not finish: the engine is not to be trusted.
  std::atomic<bool> healthy{true};
  // A run of one kind that asks for stage times is profiled when no run of
  // that kind has finished profiled within this interval (every one that
  // asks for a kernel span is): under load one run an interval, at a low
  // rate every run. Zero: every run; infinite: none.
  enum RunKind { kSort, kSegments, kTranspose, kRunKinds };
  absl::Duration profile_interval = absl::ZeroDuration();
  std::atomic<int64_t> last_profiled_ns[kRunKinds] = {};  // 0: never

  // Whether a run of `kind` asked for `stages` (and perhaps `kernel_span`)
  // is timed by the device.
  bool Profile(RunKind kind, const StageTimes* stages,
               const double* kernel_span) const {
    if (stages == nullptr) return false;
    if (kernel_span != nullptr) return true;
    if (profile_interval == absl::InfiniteDuration()) return false;
    const int64_t last = last_profiled_ns[kind].load(std::memory_order_relaxed);
    return last == 0 ||
           SteadyNanos() - last >= absl::ToInt64Nanoseconds(profile_interval);
  }
  // A clock that never steps back (a wall-clock step would stop the
  // sampling until it caught up).
  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// One call's work on one lane: every enqueue records its event under a
// stage name, every device buffer comes from the pool within the run's
// memory budget, and both live until the queue has finished. Buffers go
// back to the pool last-acquired first, so that the next run of the same
// shape gets each of its arrays in the same buffer again (see BufferPool:
// a pool stack; the placement moved kernel time by up to 6%,
// docs/decisions/006-buffer-pool-and-placement.md).
class Run {
 public:
  // Profiled (on the lane's profiling queue, so that Finish can report the
  // device's stage times and spans) as EngineCore::Profile says for a run
  // of `kind` asked for `stages` and `kernel_span`; otherwise Finish
  // reports only the host's times.
  Run(EngineCore& core, Lane& lane, EngineCore::RunKind kind,
      const StageTimes* stages, const double* kernel_span)
      : Run(core, lane, core.Profile(kind, stages, kernel_span), kind) {}
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  ~Run();

  Lane& lane() { return lane_; }
  const DeviceInfo& info() const { return core_.info; }

  // A pooled device buffer of at least `bytes`, counted against the run's
  // budget; `what` names it in errors.
  absl::StatusOr<cl::Buffer> Allocate(size_t bytes, const char* what);
  // `groups` work-groups of `group_size` (none if groups is 0).
  template <typename Args>
  absl::Status Launch(ArgsKernel<Args>& kernel, LaunchGrid grid,
                      const char* stage) {
    return LaunchKernel(kernel.kernel(), grid, stage);
  }
  // Host to device and back without waiting, at byte `offset` of the
  // buffer: pinned memory (from the engine's host_memory()) straight,
  // pageable memory through the lane's staging ring.
  absl::Status Write(cl::Buffer& buffer, size_t bytes, const void* src,
                     size_t offset = 0);
  absl::Status Read(cl::Buffer& buffer, size_t bytes, void* dst,
                    size_t offset = 0);
  // Submits what is enqueued on the lane's queue without waiting.
  absl::Status Flush();
  // A small read into pageable memory, on the lane's side queue after
  // everything enqueued so far: what is enqueued next does not wait for
  // it, nor does the call. `done` completes when the bytes are in `dst`,
  // which must outlive it.
  absl::Status ReadLater(cl::Buffer& buffer, size_t bytes, void* dst,
                         cl::Event* done);
  // A small write that does not wait: `src` is copied into host memory the
  // run keeps until it is destroyed (after Finish), so the host does not
  // stall here on the commands enqueued before it. Timed as "upload".
  absl::Status WriteCopy(cl::Buffer& buffer, size_t bytes, const void* src,
                         const char* what);
  absl::Status Copy(cl::Buffer& src, size_t src_offset, cl::Buffer& dst,
                    size_t dst_offset, size_t bytes);
  // Zero words, timed as `stage`.
  absl::Status Zero(cl::Buffer& buffer, size_t bytes, const char* stage);
  // Waits for the queue and adds the events' times, per stage in the order
  // first enqueued, to `stages` (if not null), and with them the span of
  // every command but the transfers to `kernel_span` (if not null). To
  // `stages` also go three times of the whole run: `host_enqueue`, the
  // host's wall time from the run's start to this call (allocating,
  // enqueuing, any wait inside), `host_wait`, its wall time in this call,
  // and `device_span`, from the device's start of the first command to its
  // end of the last, transfers included. A run that is not profiled
  // reports only the two host times (and a kernel span of 0). A queue that
  // cannot finish makes the engine unhealthy.
  absl::Status Finish(StageTimes* stages, double* kernel_span = nullptr);

 private:
  absl::Status LaunchKernel(cl::Kernel& kernel, LaunchGrid grid,
                            const char* stage);

  // The profiled commands' times, per stage, and the run's device spans.
  void DeviceTimes(StageTimes* stages, double* kernel_span);
  // Where an enqueued command's event goes: `event` on a profiled run,
  // none otherwise (events cost enqueue time and are not waited on).
  cl::Event* EventFor(cl::Event& event) { return profiled_ ? &event : nullptr; }
  void Record(const char* stage, const cl::Event& event) {
    if (profiled_) events_.emplace_back(stage, event);
  }

  Run(EngineCore& core, Lane& lane, bool profiled, EngineCore::RunKind kind)
      : core_(core),
        lane_(lane),
        queue_(profiled ? lane.profiled_queue : lane.queue),
        profiled_(profiled),
        kind_(kind),
        started_(absl::Now()) {}

  EngineCore& core_;
  Lane& lane_;
  cl::CommandQueue& queue_;
  const bool profiled_;
  const EngineCore::RunKind kind_;
  const absl::Time started_;
  bool side_used_ = false;  // ReadLater enqueued on the side queue
  bool finished_ = false;   // Finish waited for the queues
  size_t bytes_ = 0;        // device memory acquired, by pool size class
  std::vector<std::pair<const char*, cl::Event>> events_;
  std::vector<PooledBuffer> buffers_;
  std::vector<std::unique_ptr<std::byte[]>> copies_;  // WriteCopy's sources
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_ENGINE_RUN_H_
