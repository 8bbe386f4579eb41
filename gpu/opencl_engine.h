// OpenClEngine: sortd's OpenCL engine, behind the same Sorter interface as
// the CPU path. It owns one device's context, a few in-order queues
// ("lanes", so that concurrent runs overlap) and every compiled
// kernel; Create() builds (or loads from the binary
// cache) all programs and runs a verified warm-up before it returns, so a
// created engine never compiles while serving.
//
//   auto engine = OpenClEngine::Create({.kind = DeviceKind::kGpu});
//   if (engine.ok()) status = (*engine)->Sort(job);  // job.stages: timings
//
// The layers below it: a SortPlan (sort_plan.h) chooses the algorithm and
// sizes every device array; a Run (engine_run.h) enqueues one call's work
// on a lane; the passes (passes/, one unit a pass, dispatched by
// passes/radix_passes.h) enqueue the kernels of a named, per-device policy
// (policy.h). Fault injection, for
// tests, comes in Options::faults (faults.h).
//
// Create() verifies every warm-up answer against a reference (keys,
// permutation, segment by segment) and fails if one is wrong, whatever the
// build options: an engine that does not sort is never handed out.
#ifndef SORTD_GPU_OPENCL_ENGINE_H_
#define SORTD_GPU_OPENCL_ENGINE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/mutex.h"
#include "core/sorter.h"
#include "gpu/buffers.h"
#include "gpu/cl.h"
#include "gpu/device.h"
#include "gpu/engine_run.h"
#include "gpu/faults.h"
#include "gpu/pinned_memory.h"
#include "gpu/policy.h"
#include "gpu/program_cache.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

struct RawEnds;  // passes/pass_order.h

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
    // Kernel build diagnostics (sortd: SORTD_KERNEL_EXTRA_OPTIONS and
    // SORTD_KERNEL_BUILD_LOG, read once at startup).
    ProgramCache::Diagnostics kernel_diagnostics;
    // Fault injection (tests; sortd's --inject_faults): none by default.
    FaultSpec faults;
    // Launch shapes; unset: EnginePolicy::For(device). Tests use tiny tiles
    // to reach every level of the scan with small inputs.
    std::optional<EnginePolicy> policy;
    // Unless `policy` is set: the named entry of EnginePolicy::For (e.g.
    // "intel-subgroups"), fitted to the device, instead of the one its
    // vendor gets (EnginePolicy::Named); empty: For(device). Tests force a
    // policy on another kind of device with it (SORTD_TEST_POLICY).
    std::string policy_name;
    // Knobs set after the policy is chosen (ApplyPolicyOverrides' list,
    // e.g. "radix.pass=three-launch"); empty: none.
    std::string policy_overrides;
    // Which algorithm sorts single arrays: by size and kind
    // (BitonicPolicy::MaxKeys), or forced (benchmarks measure both).
    SortAlgorithm algorithm = SortAlgorithm::kAuto;
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
    // Page-locked memory the engine hands out for callers' arrays
    // (host_memory()) at most at once; beyond, callers use pageable memory
    // (gpu/pinned_memory.h says why).
    size_t pinned_host_max_bytes = size_t{4} << 30;
    // Command queues, each with its own staging ring and kernel objects:
    // this many runs proceed at once (the scheduler keeps as many batches
    // in flight per device), overlapping transfers with kernels.
    int lanes = 2;
    // A run whose caller asks for stage times is timed by the device
    // (profiling events: per-stage times, spans) when no run of its kind
    // (sort, segmented sort, transpose) has been within this interval; the
    // others report only their host times, and enqueue on a queue without
    // profiling, which costs less. A run asked for its kernel span is
    // always timed. Zero: every run; infinite: none.
    absl::Duration profile_interval = absl::ZeroDuration();
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
    // The warm-up also sorts this many keys of each width (at least its
    // small sizes), so that buffers for requests up to that size are
    // allocated before serving.
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
  int concurrent_runs() const override {
    return static_cast<int>(lanes_.size());
  }
  bool healthy() const override { return core_.healthy.load(); }
  // Parts whose arrays all lie in host_memory(): transfers straight from
  // and into them cost no host copy, where packing costs two.
  bool SortsParts(absl::Span<const SortJob* const> parts) const override;
  const DeviceInfo& info() const { return device_.info; }
  const EnginePolicy& policy() const { return policy_; }
  // Why the policy For() chose gave way to its portable twin at Create;
  // empty when it did not.
  const std::string& policy_fallback() const { return policy_fallback_; }
  // Why a device that reports sub-group shuffles transposes with the
  // portable kernel; empty when it does not, or reports none.
  const std::string& transpose_fallback() const { return transpose_fallback_; }
  // "subgroup" or "portable": the transpose kernel in use.
  const char* transpose_kernel() const {
    return transpose_subgroup_ ? "subgroup" : "portable";
  }
  // The sub-group size the radix kernels run with, as the device reported
  // it from inside a kernel (radix_sub_group_probe), where the policy ranks
  // by sub-groups; 0 otherwise.
  int radix_sub_group_size() const { return radix_sub_group_size_; }
  ProgramCache::Stats cache_stats() const { return cache_->stats(); }
  BufferPool::Stats pool_stats() const { return core_.pool->stats(); }
  TransferBytes transfer_bytes() const override {
    return {core_.staged_bytes.load(), core_.direct_bytes.load()};
  }
  // Frees the pool's idle device buffers.
  void TrimPool() { core_.pool->Trim(); }

  absl::Status Sort(const SortJob& job) override;
  absl::Status SortSegments(const SortJob& job,
                            absl::Span<const uint32_t> offsets) override;
  absl::Status Transpose(const TransposeJob& job) override;
  std::vector<std::pair<std::string, double>> memory_bytes() const override;
  // With pinned staging: page-locked host memory whose ranges this
  // engine's transfers use directly (no staging copy); else null.
  std::shared_ptr<HostMemory> host_memory() const override {
    return core_.pinned;
  }
  // Another engine's PinnedHostMemory, counted as this one's for its
  // transfers (PinnedHostMemory::ShareFrom); other memory is ignored.
  void ShareHostMemory(std::shared_ptr<HostMemory> memory) override;
  std::pair<std::string, std::string> vendor_driver() const override {
    return {device_.info.vendor, device_.info.driver};
  }
  size_t max_sort_keys(const SortJob& shape) const override;
  size_t max_batch_keys(const SortJob& shape, size_t segments) const override;
  size_t max_transpose_matrices() const override;
  // Device bytes one Sort() of `count` keys of `shape`'s kind allocates
  // (pool size classes included): its plan's.
  size_t SortFootprint(const SortJob& shape, size_t count) const {
    return PlanSort(policy_, options_.algorithm, shape, count).Footprint();
  }
  // The device memory one run (one lane) may hold.
  size_t run_budget_bytes() const { return core_.run_budget; }

 private:
  // The largest key count whose `footprint` fits a run's memory budget and
  // whose widest array fits one allocation.
  template <typename Footprint>
  size_t MaxKeys(const SortJob& shape, Footprint footprint) const;

  // Holds a free lane for its lifetime.
  class LaneLease {
   public:
    explicit LaneLease(OpenClEngine* e);
    ~LaneLease();
    Lane& lane() { return *lane_; }

   private:
    OpenClEngine* engine_;
    Lane* lane_;
  };

  OpenClEngine(Device device, const Options& options);
  // Builds the engine (engine_init.cc), in the steps below.
  absl::Status Init();
  // The policy Options names or overrides, if any, checked against the
  // device.
  absl::Status ChoosePolicy();
  // The context, program cache, memory budget (split between the lanes),
  // buffer pool and pinned host memory.
  absl::Status CreateContextAndMemory();
  // Each lane's queues and staging ring, all lanes free.
  absl::Status CreateLanes();
  // The radix program for `bits`-wide keys with `items` keys a work-item,
  // its sub-groups probed where the policy ranks by sub-groups.
  absl::StatusOr<cl::Program> BuildRadixProgram(int bits, bool with_index,
                                                int items);
  // The radix (and short-array, streaming) and bitonic programs of one key
  // width, with or without an index, and every lane's kernels of them.
  absl::Status BuildSortKernels(int wide, int with_index);
  absl::Status InitTranspose();
  // The sub-group transpose kernel (`subgroup`: its -D macro) for every
  // lane if it builds and its sub-groups are a multiple of 32 (true); else
  // false, with why not in `why_not` and transpose_fallback_.
  absl::StatusOr<bool> TrySubgroupTranspose(const char* subgroup,
                                            std::string* why_not);
  // The portable transpose kernel for every lane.
  absl::Status UsePortableTranspose();
  // Where `bits`-wide keys are ranked by sub-groups: runs the program's
  // radix_sub_group_probe and fails unless every work-item is in a
  // sub-group of radix.warp_size consecutive local ids.
  absl::Status CheckSubGroups(const cl::Program& program, int bits);
  absl::Status WarmUp();
  // The warm-up's array sizes and the cases among them (engine_warm_up.cc).
  struct WarmUpSizes;
  // The sizes the warm-up sorts, within a lane's budget; FAILED_PRECONDITION
  // where not even the small ones fit. Sets the policy's stream_keys_32_min
  // to the size that verifies the streaming build, if any (WarmUp restores
  // it).
  absl::StatusOr<WarmUpSizes> ChooseWarmUpSizes();
  // Every kind of sort of `n` generated keys, each answer checked.
  absl::Status WarmUpSize(size_t n, const WarmUpSizes& sizes);
  // One warm-up sort of the `n` keys at `keys` (segment by segment where
  // `offsets` is set), with or without a permutation, checked against
  // `want`.
  absl::Status WarmUpSort(KeyType type, size_t n, const std::byte* keys,
                          const std::vector<uint32_t>* offsets, bool with_index,
                          const std::vector<uint32_t>& want);
  // Compares a warm-up sort's answer with `want`, the reference order.
  absl::Status CheckWarmUpSort(const SortJob& job,
                               const std::vector<uint32_t>& want,
                               bool segmented) const;

  // Allocates the plan's arrays, uploads keys and values, and encodes the
  // keys (`encode`) and/or counts every pass's digits into `totals`.
  // `after_inputs` (if any) enqueues more writes after the inputs' and
  // before the first kernel: small host writes then neither hold up the
  // inputs' upload nor leave the device idle between kernels.
  absl::Status Upload(
      Run& run, const SortJob& job, const SortPlan& plan, bool count_digits,
      bool encode, SortArrays& a, cl::Buffer* totals,
      const std::function<absl::Status()>& after_inputs = nullptr);
  // Ordered keys back to raw bits, payload gathered, then everything down.
  absl::Status Download(Run& run, const SortJob& job, SortArrays& a);
  // The job's keys and values to a.raw and a.values, part by part where
  // it has parts (SortJob::parts).
  absl::Status WriteInputs(Run& run, const SortJob& job, SortArrays& a);
  // The sorted keys, values and permutation to the job's outputs (its
  // parts').
  absl::Status ReadOutputs(Run& run, const SortJob& job, cl::Buffer& keys,
                           cl::Buffer& values, cl::Buffer& permutation);
  absl::Status SortOnLane(Run& run, const SortJob& job);
  // What a sort by picked digits (SortPlan::picked_slots) leaves to check
  // once its download is enqueued (opencl_engine.cc).
  struct Settle;
  // Upload, then the radix passes of `plan`: the first always, later ones
  // unless every key shares their digit (decided from the digit totals,
  // read back while the first runs, for sorts of at least the policy's
  // skip_check_min keys). The keys end in a.keys[a.cur], raw
  // if a pass after the first ran (a.keys_raw), else ordered; with their
  // indices if the plan has them. A plan with picked digits sorts those,
  // then settles the runs they leave, and needs `settle`.
  // `after_inputs` as for Upload.
  absl::Status UploadAndRadixSort(
      Run& run, const SortJob& job, const SortPlan& plan, SortArrays& a,
      Settle* settle = nullptr,
      const std::function<absl::Status()>& after_inputs = nullptr);
  // UploadAndRadixSort's passes by picked digits, after the upload: the
  // picked passes, then radix_settle, its picks read back into `settle`.
  absl::Status PickedRadixSort(Run& run, const SortJob& job,
                               const SortPlan& plan, SortArrays& a,
                               cl::Buffer& totals, const RawEnds& raw_ends,
                               Settle* settle);
  // After the settle of a sort by picked digits (and, for arrays of less
  // than kSettleBeforeDownloadBytes, after their download): where
  // radix_settle found a run too long to sort, or more digits to sort, the
  // keys sorted by those digits (true if so; they are then to be
  // downloaded, again for short arrays). Only then are the digit totals
  // read back: a second host round trip, after the picks'.
  absl::StatusOr<bool> SettleOrSortEveryDigit(Run& run, const SortJob& job,
                                              const SortPlan& plan,
                                              SortArrays& a, Settle& settle);
  absl::Status SegmentsOnLane(Run& run, const SortJob& job,
                              absl::Span<const uint32_t> offsets);
  // Segments of any length as one array (SegmentedPlan).
  absl::Status SegmentsAsOneArray(Run& run, const SortJob& job,
                                  absl::Span<const uint32_t> offsets);

  Device device_;
  Options options_;
  EnginePolicy policy_;
  std::string policy_fallback_;
  std::string transpose_fallback_;
  cl::Context context_;
  std::unique_ptr<ProgramCache> cache_;
  EngineCore core_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  bool transpose_subgroup_ = false;
  int radix_sub_group_size_ = 0;
  Mutex lanes_mu_;
  CondVar lanes_cv_;
  std::vector<Lane*> free_lanes_ ABSL_GUARDED_BY(lanes_mu_);
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_OPENCL_ENGINE_H_
