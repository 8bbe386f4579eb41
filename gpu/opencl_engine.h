// OpenClEngine: sortd's OpenCL engine, behind the same Sorter interface as
// the CPU path. It owns one device's context, an in-order profiling queue
// and every compiled kernel; Create() builds (or loads from the binary
// cache) all programs and runs a verified warm-up before it returns, so a
// created engine never compiles while serving.
//
//   auto engine = OpenClEngine::Create({.kind = DeviceKind::kGpu});
//   if (engine.ok()) status = (*engine)->Sort(job);  // job.stages: timings
//
// Fault injection for tests: with SORTD_FAULT_ENQUEUE=N in the environment
// (or Options::fail_enqueue = N), the N-th enqueue after start-up fails
// with CL_OUT_OF_RESOURCES, and every one after it while
// SORTD_FAULT_ENQUEUE_STICKY=1.
#ifndef SORTD_GPU_OPENCL_ENGINE_H_
#define SORTD_GPU_OPENCL_ENGINE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/cl.h"
#include "gpu/device.h"
#include "gpu/policy.h"
#include "gpu/program_cache.h"
#include "server/sorter.h"

namespace sortd::gpu {

class OpenClEngine final : public Sorter {
 public:
  struct Options {
    DeviceKind kind = DeviceKind::kGpu;
    // Folder of the program-binary cache; empty keeps programs in memory.
    std::string cache_dir;
    // 0: read SORTD_FAULT_ENQUEUE from the environment.
    long fail_enqueue = 0;
    // Launch shapes; unset: EnginePolicy::For(device). Tests use tiny tiles
    // to reach every level of the scan with small inputs.
    std::optional<EnginePolicy> policy;
  };

  static absl::StatusOr<std::unique_ptr<OpenClEngine>> Create(
      const Options& options);

  ExecutionPath path() const override { return ExecutionPath::kGpu; }
  std::string device_name() const override { return device_.info.name; }
  const DeviceInfo& info() const { return device_.info; }
  const EnginePolicy& policy() const { return policy_; }
  ProgramCache::Stats cache_stats() const { return cache_->stats(); }

  absl::Status Sort(const SortJob& job) override;
  absl::Status Transpose(const TransposeJob& job) override;

 private:
  struct RadixKernels {
    cl::Kernel encode, histogram, scan_blocks, scan_add, scatter, decode;
  };
  using Events = std::vector<std::pair<const char*, cl::Event>>;

  OpenClEngine(Device device, const Options& options);
  absl::Status Init();
  absl::Status WarmUp();

  absl::Status SortLocked(const SortJob& job, Events& events);
  absl::Status ScanInPlace(RadixKernels& k, int key_bits, cl::Buffer& data,
                           size_t count, Events& events);
  absl::Status Launch(cl::Kernel& kernel, size_t groups, size_t group_size,
                      const char* stage, Events& events);
  absl::Status Write(cl::Buffer& buffer, size_t bytes, const void* src,
                     Events& events);
  absl::Status Read(cl::Buffer& buffer, size_t bytes, void* dst,
                    Events& events);
  absl::StatusOr<cl::Buffer> Allocate(size_t bytes, const char* what);
  // Waits for the queue and reports the events' times into `stages`.
  absl::Status Finish(Events& events, StageTimes* stages);
  absl::Status InjectedFault(const char* what);

  Device device_;
  Options options_;
  EnginePolicy policy_;
  cl::Context context_;
  cl::CommandQueue queue_;
  std::unique_ptr<ProgramCache> cache_;
  RadixKernels radix_[2][2];  // [key_bits == 64][with_index]
  cl::Kernel transpose_;
  std::atomic<long> enqueues_{0};
  bool faults_armed_ = false;  // set once warm-up is over
  std::mutex mu_;              // one run at a time on the queue and kernels
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_OPENCL_ENGINE_H_
