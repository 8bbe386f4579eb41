// OpenClEngine: sortd's OpenCL engine, behind the same Sorter interface as
// the CPU path. It owns one device's context, a few in-order profiling
// queues ("lanes", so that concurrent runs overlap) and every compiled
// kernel; Create() builds (or loads from the binary
// cache) all programs and runs a verified warm-up before it returns, so a
// created engine never compiles while serving.
//
//   auto engine = OpenClEngine::Create({.kind = DeviceKind::kGpu});
//   if (engine.ok()) status = (*engine)->Sort(job);  // job.stages: timings
//
// Fault injection, for tests only: Options::fail_enqueue = N makes the N-th
// enqueue after start-up fail with CL_OUT_OF_RESOURCES (and every one after
// it with fail_enqueue_sticky); fail_stage = upload|download|copy|kernel|
// <stage> counts only those enqueues. fail_allocation = N fails the N-th
// device allocation as out of memory; fail_build fails Create() as a
// program build failure; lose_device_at = N makes the N-th run after
// start-up find its queue unable to finish with CL_DEVICE_NOT_AVAILABLE, as
// when a device is lost: the engine turns unhealthy. Nothing in the
// environment sets them: sortd sets them from its --inject_faults flag
// (ParseFaultSpec), which it announces loudly.
//
// Create() verifies every warm-up answer against a reference (keys,
// permutation, segment by segment) and fails if one is wrong, whatever the
// build options: an engine that does not sort is never handed out.
#ifndef SORTD_GPU_OPENCL_ENGINE_H_
#define SORTD_GPU_OPENCL_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpu/buffers.h"
#include "gpu/cl.h"
#include "gpu/device.h"
#include "gpu/pinned_memory.h"
#include "gpu/policy.h"
#include "gpu/program_cache.h"
#include "server/sorter.h"

namespace sortd::gpu {

class OpenClEngine final : public Sorter {
 public:
  struct Options {
    DeviceKind kind = DeviceKind::kGpu;
    // Which device of that kind (FindDevices order).
    size_t device_index = 0;
    // Set: this exact device (a sub-device from SplitDevice), instead.
    std::optional<Device> device;
    // Folder of the program-binary cache; empty keeps programs in memory.
    std::string cache_dir;
    // Fault injection (tests; see the top of this file). 0 / false / empty:
    // none.
    // The N-th enqueue after start-up fails.
    long fail_enqueue = 0;
    // ... and every enqueue after it.
    bool fail_enqueue_sticky = false;
    // Only enqueues of this kind count: upload, download, copy, kernel (any
    // launch) or one kernel stage's name; empty: all.
    std::string fail_stage;
    // The N-th run after start-up finds the device lost.
    long lose_device_at = 0;
    // The N-th device allocation after start-up fails as out of device
    // memory.
    long fail_allocation = 0;
    // Create() fails as if a program did not build.
    bool fail_build = false;
    // Launch shapes; unset: EnginePolicy::For(device). Tests use tiny tiles
    // to reach every level of the scan with small inputs.
    std::optional<EnginePolicy> policy;
    // Which algorithm sorts single arrays: by size (the policy's
    // bitonic.max_keys), or forced (benchmarks measure both).
    enum class Algorithm {
      kAuto,
      kRadix,
      kBitonic
    } algorithm = Algorithm::kAuto;
    // Transpose kernel: the sub-group shuffle one where the device has
    // sub-group shuffles of a usable size, else the portable one; or forced
    // (a forced sub-group kernel the device cannot run is an error).
    enum class Transpose {
      kAuto,
      kPortable,
      kSubgroup
    } transpose = Transpose::kAuto;
    // Transfers through pinned staging buffers (else straight from the
    // caller's pageable memory).
    bool pinned_staging = true;
    StagingRing::Options staging;
    // Command queues, each with its own staging ring and kernel objects:
    // this many runs proceed at once (the scheduler keeps as many batches
    // in flight per device), overlapping transfers with kernels.
    int lanes = 2;
    // Idle device memory kept for reuse between requests; in use and idle
    // together never exceed the memory budget. 0: on a GPU, as much as the
    // budget leaves, so that requests of one shape reuse the same buffers
    // instead of allocating anew (whose placement moved kernel time by up
    // to 6%); on an OpenCL CPU device, whose buffers are host memory,
    // 4 GiB.
    size_t pool_bytes = 0;
    // Device memory the engine may use, split evenly between its lanes so
    // that concurrent runs always fit; a sort larger than a lane's share is
    // sorted in runs (server/runs.h). 0: 80% of the device's global
    // memory.
    size_t memory_budget_bytes = 0;
    // The warm-up also sorts this many keys of each width, so that buffers
    // for requests up to that size are allocated before serving.
    size_t preallocate_keys = size_t{1} << 20;
  };

  static absl::StatusOr<std::unique_ptr<OpenClEngine>> Create(
      const Options& options);

  // kGpu on a GPU; kOpenClCpu on an OpenCL CPU device (PoCL), so that work
  // served without a GPU is labelled as such.
  ExecutionPath path() const override {
    return device_.info.is_gpu ? ExecutionPath::kGpu
                               : ExecutionPath::kOpenClCpu;
  }
  std::string device_name() const override { return device_.info.name; }
  bool healthy() const override { return healthy_.load(); }
  const DeviceInfo& info() const { return device_.info; }
  const EnginePolicy& policy() const { return policy_; }
  // "subgroup" or "portable": the transpose kernel in use.
  const char* transpose_kernel() const {
    return transpose_subgroup_ ? "subgroup" : "portable";
  }
  ProgramCache::Stats cache_stats() const { return cache_->stats(); }
  BufferPool::Stats pool_stats() const { return pool_->stats(); }
  // Host bytes moved to and from the device: through the staging ring, or
  // straight (pinned memory from host_memory(), or no staging at all).
  struct TransferStats {
    uint64_t staged_bytes = 0, direct_bytes = 0;
  };
  TransferStats transfer_stats() const {
    return {staged_bytes_.load(), direct_bytes_.load()};
  }
  // Frees the pool's idle device buffers.
  void TrimPool() { pool_->Trim(); }
  // Diagnostic: idle buffers stay allocated but unused until TrimPool().
  void HoldPoolBuffers() { pool_->HoldIdle(); }

  absl::Status Sort(const SortJob& job) override;
  absl::Status SortSegments(const SortJob& job,
                            absl::Span<const uint32_t> offsets) override;
  absl::Status Transpose(const TransposeJob& job) override;
  std::vector<std::pair<std::string, double>> memory_bytes() const override;
  // With pinned staging: page-locked host memory whose ranges this
  // engine's transfers use directly (no staging copy); else null.
  std::shared_ptr<HostMemory> host_memory() const override { return pinned_; }
  std::pair<std::string, std::string> vendor_driver() const override {
    return {device_.info.vendor, device_.info.driver};
  }
  size_t fused_segment_keys(KeyType t) const override {
    return static_cast<size_t>(policy_.bitonic.Block(KeySize(t) * 8));
  }
  size_t max_sort_keys(const SortJob& shape) const override;
  size_t max_transpose_matrices() const override;
  // Device bytes one Sort() of `count` keys of `shape`'s kind allocates
  // (pool size classes included).
  size_t SortFootprint(const SortJob& shape, size_t count) const;
  // The device memory one run (one lane) may hold.
  size_t run_budget_bytes() const { return run_budget_; }

 private:
  struct RadixKernels {
    cl::Kernel encode, histogram, scan_blocks, scan_add, scatter, onesweep,
        digit_starts, segments, decode, address;
  };
  struct BitonicKernels {
    cl::Kernel pad, sort_blocks, merge_global, merge_local, segmented;
  };
  using Events = std::vector<std::pair<const char*, cl::Event>>;
  // A command queue with its own staging ring and kernel objects (kernels
  // hold their arguments). A run takes a lane for its whole length; runs
  // on different lanes proceed at once, so one run's transfers overlap
  // another's kernels.
  struct Lane {
    cl::CommandQueue queue;
    std::unique_ptr<StagingRing> staging;
    RadixKernels radix[2][2];  // [key_bits == 64][with_index]
    // Built with the policy's small_items, for short arrays.
    RadixKernels radix_small[2][2];
    BitonicKernels bitonic[2][2];
    cl::Kernel transpose;
  };
  // Holds a free lane for its lifetime.
  struct LaneLease {
    explicit LaneLease(OpenClEngine* e) : engine(e) {
      std::unique_lock<std::mutex> lock(e->lanes_mu_);
      e->lanes_cv_.wait(lock, [e] { return !e->free_lanes_.empty(); });
      lane = e->free_lanes_.back();
      e->free_lanes_.pop_back();
    }
    ~LaneLease() {
      {
        std::lock_guard<std::mutex> lock(engine->lanes_mu_);
        engine->free_lanes_.push_back(lane);
      }
      engine->lanes_cv_.notify_one();
    }
    OpenClEngine* engine;
    Lane* lane;
  };
  // One call's lane, its enqueued events and the pooled buffers they use;
  // the events and buffers live until the lane's queue has finished.
  struct Run {
    Run() = default;
    Run(const Run&) = delete;
    Run& operator=(const Run&) = delete;
    // Buffers go back to the pool last-acquired first, so that the next run
    // of the same shape gets each of its arrays in the same buffer again
    // (see BufferPool: a pool stack). Forward release order swapped the
    // roles of same-sized buffers from one run to the next, and with them
    // the kernel time by up to 6%
    // (docs/decisions/006-buffer-pool-and-placement.md).
    // SORTD_POOL_RELEASE_FORWARD=1 restores it, for A/B runs.
    ~Run();
    Lane* lane = nullptr;
    size_t bytes = 0;  // device memory acquired, by pool size class
    Events events;
    std::vector<PooledBuffer> buffers;
    // SORTD_QUALIFY=1: the radix passes' events (index into `events`),
    // the buffer each wrote, its size class and the pass kind.
    struct PassWrite {
      size_t event;
      cl_mem buffer;
      size_t capacity;
      int tag;
    };
    std::vector<PassWrite> pass_writes;
  };
  // The device arrays of one sort: ordered keys and indices in two
  // ping-pong halves; `cur` says which half holds the current order.
  struct Arrays {
    cl::Buffer raw, keys[2], index[2], values, values_out;
    int cur = 0;
    // keys[cur] holds raw keys: the last pass stored them (RawEnds).
    bool keys_raw = false;
  };
  // Radix passes whose first reads the raw keys (ordering them and making
  // the indices as it loads) and whose last stores raw keys: the kernels'
  // MODE_FIRST and MODE_LAST, so no encode or decode pass over the array.
  struct RawEnds {
    cl::Buffer keys;     // the raw keys
    cl_uint kind_order;  // key kind | descending << 2
  };

  OpenClEngine(Device device, const Options& options);
  absl::Status Init();
  absl::Status WarmUp();
  // Compares a warm-up sort's answer with `want`, the reference order.
  absl::Status CheckWarmUpSort(const SortJob& job,
                               const std::vector<uint32_t>& want,
                               bool segmented) const;

  // The steps every sort is made of.
  // `encode`: also write the ordered keys and indices to keys[0] and
  // index[0] (otherwise the first radix pass reads the raw keys).
  absl::Status Upload(Run& run, const SortJob& job, size_t padded,
                      bool count_digits, bool encode, Arrays& a,
                      cl::Buffer* totals);
  absl::Status Encode(Run& run, const SortJob& job, Arrays& a,
                      cl::Buffer& totals, bool count_digits, bool encode);
  // `totals`: every pass's digit counts over the `count` keys (from
  // Upload), or null; the one-launch passes need them. `raw_ends`: the
  // first pass that runs reads raw_ends->keys, the last stores raw keys;
  // at least one pass must run. Null: a.keys[a.cur] is in ordered form.
  absl::Status RadixPasses(Run& run, int key_bits, bool with_index,
                           size_t count, Arrays& a,
                           const std::vector<bool>& skip,
                           const cl::Buffer* totals, const RawEnds* raw_ends);
  // Whether RadixPasses over `count` keys takes one launch per pass.
  bool UsesOnesweep(size_t count, bool has_totals) const;
  absl::Status BitonicSort(Run& run, int key_bits, bool with_index,
                           size_t padded, Arrays& a);
  absl::Status Download(Run& run, const SortJob& job, Arrays& a);

  absl::Status SortLocked(Run& run, const SortJob& job);
  absl::Status SegmentsLocked(Run& run, const SortJob& job,
                              absl::Span<const uint32_t> offsets);
  // `tile`: the TILE that k's kernels were built with.
  absl::Status ScanInPlace(Run& run, RadixKernels& k, size_t tile,
                           cl::Buffer& data, size_t count);
  absl::Status Launch(Run& run, cl::Kernel& kernel, size_t groups,
                      size_t group_size, const char* stage);
  absl::Status Write(Run& run, cl::Buffer& buffer, size_t bytes,
                     const void* src);
  absl::Status Read(Run& run, cl::Buffer& buffer, size_t bytes, void* dst);
  absl::Status Copy(Run& run, cl::Buffer& src, size_t src_offset,
                    cl::Buffer& dst, size_t dst_offset, size_t bytes);
  absl::StatusOr<cl::Buffer> Allocate(Run& run, size_t bytes, const char* what);
  // Waits for the queue and reports the events' times into `stages`.
  absl::Status Finish(Run& run, StageTimes* stages);
  absl::Status InjectedFault(const char* what, bool kernel = false);

  Device device_;
  Options options_;
  EnginePolicy policy_;
  cl::Context context_;
  std::unique_ptr<ProgramCache> cache_;
  std::unique_ptr<BufferPool> pool_;
  std::shared_ptr<PinnedHostMemory> pinned_;  // with pinned_staging
  std::atomic<uint64_t> staged_bytes_{0}, direct_bytes_{0};
  size_t run_budget_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  bool transpose_subgroup_ = false;
  absl::Status InitTranspose();
  std::atomic<long> enqueues_{0};
  std::atomic<long> runs_{0};
  std::atomic<long> allocations_{0};
  bool faults_armed_ = false;  // set once warm-up is over
  std::atomic<bool> healthy_{true};
  std::mutex lanes_mu_;
  std::condition_variable lanes_cv_;
  std::vector<Lane*> free_lanes_;
};

// Parses sortd's --inject_faults spec into `options`' fault fields: a
// comma-separated list of enqueue=N, sticky, stage=NAME, device_lost=N,
// oom=N, build=1 (e.g. "enqueue=2,stage=upload,sticky"). Empty: no faults.
// INVALID_ARGUMENT names the bad item.
absl::Status ParseFaultSpec(const std::string& spec,
                            OpenClEngine::Options* options);

// Whether `options` injects any fault.
bool InjectsFaults(const OpenClEngine::Options& options);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_OPENCL_ENGINE_H_
