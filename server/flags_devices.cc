// sortd's flags on the devices and their engines: which devices serve,
// their memory and pools, the batches in flight on each, the startup
// check, kernel profiling, tuning policy and program cache, sub-devices,
// re-creation after a failure, and fault injection for tests. Their checks
// and the engine options they give are beside them.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gpu/opencl_engine.h"
#include "gpu/policy.h"
#include "server/flags_internal.h"

namespace {
// $XDG_CACHE_HOME/sortd/kernels, else $HOME/.cache/sortd/kernels.
std::string DefaultKernelCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return absl::StrCat(xdg, "/sortd/kernels");
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return absl::StrCat(home, "/.cache/sortd/kernels");
  }
  return "";
}
}  // namespace

ABSL_FLAG(std::string, device, "auto",
          "Devices, comma-separated: auto (every GPU; without one the OpenCL "
          "CPU device; without that only the CPU path), gpu (every GPU), "
          "gpu:N (the N-th), opencl-cpu[:N] (an OpenCL CPU device), or cpu "
          "(the oneTBB CPU path only). Each entry gets its own worker; an "
          "entry may repeat (a second worker on the same device).");
ABSL_FLAG(int64_t, device_memory_bytes, 0,
          "Device memory each OpenCL device may use, in bytes (0: 80% of its "
          "global memory). Split between its lanes (on a GPU the larger of "
          "--pipeline_depth and --full_pipeline_depth); a sort "
          "larger than a lane's share is sorted in device-sized runs merged "
          "on the CPU.");
ABSL_FLAG(int64_t, device_pool_bytes, 0,
          "Idle device memory each OpenCL device keeps for reuse, in bytes "
          "(0: on a GPU, whatever --device_memory_bytes leaves; on an OpenCL "
          "CPU device, 4 GiB). Idle and in-use memory together stay within "
          "--device_memory_bytes; the buffers idle longest are freed first.");
ABSL_FLAG(int64_t, warm_up_keys, int64_t{1} << 20,
          "Keys of the largest sort in each OpenCL device's startup check "
          "(every kernel is run and its answer checked before serving), "
          "which also leaves buffers for sorts up to that size in the "
          "device's pool. Smaller starts sooner, notably on an OpenCL CPU "
          "device; the check's small sizes are always run.");
ABSL_FLAG(int64_t, host_pinned_max_bytes, int64_t{4} << 30,
          "Page-locked memory each device's engine gives out at once for "
          "request and answer arrays (--host_pool_pinned) and for packing "
          "batches; beyond, pageable memory, copied through the engine's "
          "staging buffers (a 16M-key Sort from 32 calls in flight costs "
          "about 25 CPU-ms more with 1 GiB than with 4). 0: none.");
ABSL_FLAG(int, pipeline_depth, 2,
          "Batches in flight per device: while one runs, the next is "
          "gathered and packed.");
ABSL_FLAG(int, full_pipeline_depth, 3,
          "Batches in flight per GPU while the next batch is full "
          "(--max_batch_keys or --max_batch_requests) or a request alone "
          "and no longer: its transfers overlap the others' kernels (0 to "
          "16; at most "
          "--pipeline_depth: none more). OpenCL CPU devices keep "
          "--pipeline_depth.");
ABSL_FLAG(absl::Duration, kernel_profile_interval, absl::Milliseconds(10),
          "Time a device run with OpenCL profiling events (the "
          "sortd_kernel_stage_duration_seconds histogram) when no run of its "
          "kind was timed within this interval: under load one run an "
          "interval, at low rates every run. The others run on a queue "
          "without profiling, whose launches cost the host less. 0: every "
          "run; inf: none (the histogram then has only the host stages).");
ABSL_FLAG(absl::Duration, reinit_backoff, absl::Seconds(1),
          "Wait before re-creating a failed device engine; doubles on each "
          "failed attempt, up to a minute.");
ABSL_FLAG(bool, sub_devices, true,
          "Give each sub-device of a GPU that partitions by affinity domain "
          "(the tiles of Intel's multi-tile GPUs) its own worker.");
ABSL_FLAG(int, sub_device_units, 0,
          "Split each OpenCL device that partitions equally into sub-devices "
          "of this many compute units, one worker each (0: no; for tests "
          "and for sharing a CPU device).");
ABSL_FLAG(std::string, kernel_policy, "",
          "The engines' tuning policy by name (nvidia-ptx, intel-subgroups, "
          "gpu, cpu), fitted to each device; empty: the one its vendor and "
          "extensions get. The policy in use is logged at startup.");
ABSL_FLAG(std::string, kernel_policy_overrides, "",
          "Knobs of the policy changed after it is chosen, key=value "
          "comma-separated as the startup log prints them (e.g. "
          "radix.pass=three-launch)");
ABSL_FLAG(std::string, kernel_cache_dir, DefaultKernelCacheDir(),
          "Folder for compiled OpenCL program binaries, so that restarts "
          "skip kernel compilation; a stale or corrupt entry is rebuilt. "
          "Empty disables the disk cache.");
ABSL_FLAG(
    std::string, inject_faults, "",
    "TESTS ONLY: make the OpenCL engines fail on purpose, a "
    "comma-separated list of enqueue=N (the N-th device enqueue after "
    "start-up fails), sticky (and every later one), "
    "stage=upload|download|copy|kernel|<stage> (count only those "
    "enqueues), device_lost=N (the N-th device run finds the device "
    "lost), oom=N (the N-th device allocation fails), host_oom=N (the "
    "N-th device allocation throws std::bad_alloc, as host memory "
    "running out in a run would), build=1 (the "
    "programs fail to build), device=N (only the N-th device of "
    "--device, from 0, has them). Failed device work goes to another device, "
    "then the CPU path. Logged loudly at startup and exported as "
    "sortd_fault_injection_enabled 1. Never in production.");

namespace sortd {

// The engine options every device shares: fault injection, only from
// --inject_faults (never from the environment); kernel build diagnostics
// (CONTRIBUTING.md), read from the environment once.
absl::StatusOr<gpu::OpenClEngine::Options> EngineBase() {
  gpu::OpenClEngine::Options engine_base;
  const std::string faults = absl::GetFlag(FLAGS_inject_faults);
  if (absl::Status s = gpu::ParseFaultSpec(faults, &engine_base.faults);
      !s.ok()) {
    return s;
  }
  if (absl::GetFlag(FLAGS_kernel_profile_interval) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--kernel_profile_interval must be 0 (every run) or more");
  }
  engine_base.profile_interval = absl::GetFlag(FLAGS_kernel_profile_interval);
  if (absl::GetFlag(FLAGS_host_pinned_max_bytes) < 0) {
    return absl::InvalidArgumentError(
        "--host_pinned_max_bytes must not be negative");
  }
  engine_base.pinned_host_max_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_host_pinned_max_bytes));
  if (absl::GetFlag(FLAGS_warm_up_keys) < 0) {
    return absl::InvalidArgumentError("--warm_up_keys must not be negative");
  }
  engine_base.preallocate_keys =
      static_cast<size_t>(absl::GetFlag(FLAGS_warm_up_keys));
  engine_base.policy_name = absl::GetFlag(FLAGS_kernel_policy);
  engine_base.policy_overrides = absl::GetFlag(FLAGS_kernel_policy_overrides);
  // Names and knobs are checked here, whatever devices there are: under
  // --device=auto a device refusing them would only be passed over.
  const std::vector<std::string> names = gpu::EnginePolicy::Names();
  if (!engine_base.policy_name.empty() &&
      std::find(names.begin(), names.end(), engine_base.policy_name) ==
          names.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel_policy=", engine_base.policy_name,
        " names no policy; the policies are ", absl::StrJoin(names, ", ")));
  }
  gpu::EnginePolicy shape;
  if (absl::Status s =
          gpu::ApplyPolicyOverrides(engine_base.policy_overrides, &shape);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kernel_policy_overrides: ", s.message()));
  }
  if (const char* extra = std::getenv("SORTD_KERNEL_EXTRA_OPTIONS")) {
    engine_base.kernel_diagnostics.extra_options = extra;
  }
  if (const char* log = std::getenv("SORTD_KERNEL_BUILD_LOG")) {
    engine_base.kernel_diagnostics.print_build_log = std::string(log) == "1";
  }
  return engine_base;
}

EngineSetup EngineSetupFromFlags(const gpu::OpenClEngine::Options& base) {
  return {
      .base = base,
      .cache_dir = absl::GetFlag(FLAGS_kernel_cache_dir),
      .lanes = absl::GetFlag(FLAGS_pipeline_depth),
      .gpu_lanes = absl::GetFlag(FLAGS_full_pipeline_depth),
      .memory_budget_bytes =
          static_cast<size_t>(absl::GetFlag(FLAGS_device_memory_bytes)),
      .pool_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_device_pool_bytes)),
      .sub_devices = absl::GetFlag(FLAGS_sub_devices),
      .sub_device_units =
          static_cast<unsigned>(absl::GetFlag(FLAGS_sub_device_units))};
}

absl::string_view DeviceFlagsFile() { return __FILE__; }

}  // namespace sortd
