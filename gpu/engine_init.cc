// OpenClEngine's creation: the engine made for a device (and its portable
// twin where a chosen vendor policy does not run there), then Init's steps:
// the policy chosen and checked, the context, memory budget and lanes made,
// and every program built (or loaded from the binary cache) with each
// lane's kernel objects, the sub-group probes and the transpose kernel
// chosen. The warm-up that follows is in engine_warm_up.cc.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"

namespace sortd::gpu {
namespace {

// Creates each named kernel of `program` into its typed slot.
template <typename... K>
absl::Status MakeKernels(const cl::Program& program,
                         std::pair<K*, const char*>... list) {
  absl::Status status;
  auto one = [&](auto* kernel, const char* name) {
    if (!status.ok()) return;
    cl_int err = CL_SUCCESS;
    cl::Kernel k(program, name, &err);
    if (err != CL_SUCCESS) {
      status = ClStatus(err, absl::StrCat("clCreateKernel(", name, ")"));
      return;
    }
    *kernel = std::remove_pointer_t<decltype(kernel)>(std::move(k));
  };
  (one(list.first, list.second), ...);
  return status;
}

absl::Status RadixKernelsOf(const cl::Program& program, RadixKernels& k,
                            bool warp_level, bool unordered_pass,
                            bool late_ranked) {
  SORTD_RETURN_IF_ERROR(MakeKernels(
      program, std::pair{&k.code.encode, "radix_encode"},
      std::pair{&k.three_launch.histogram, "radix_histogram"},
      std::pair{&k.three_launch.scan_blocks, "scan_blocks"},
      std::pair{&k.three_launch.scan_add, "scan_add"},
      std::pair{&k.three_launch.scatter, "radix_scatter"},
      std::pair{&k.onesweep.ranked, "radix_onesweep"},
      std::pair{&k.settling.digit_starts, "radix_digit_starts"},
      std::pair{&k.settling.settle, "radix_settle"},
      std::pair{&k.code.decode, "radix_decode"},
      std::pair{&k.segments.segment_ids, "radix_segment_ids"},
      std::pair{&k.segments.segment_gather, "radix_segment_gather"},
      std::pair{&k.segments.segment_groups, "radix_segment_groups"}));
  // Only keys-only builds with early counts have it; it is taken where the
  // policy's knob is on (RadixSortPolicy::UnorderedFirst).
  if (unordered_pass) {
    SORTD_RETURN_IF_ERROR(MakeKernels(
        program, std::pair{&k.onesweep.unordered, "radix_unordered_onesweep"}));
  }
  if (late_ranked) {
    SORTD_RETURN_IF_ERROR(MakeKernels(
        program, std::pair{&k.onesweep.late_ranked, "radix_late_onesweep"}));
  }
  // Only warp-level builds have it.
  if (!warp_level) return absl::OkStatus();
  return MakeKernels(program,
                     std::pair{&k.segments.segments, "radix_segments"});
}

absl::Status BitonicKernelsOf(const cl::Program& program, BitonicKernels& k) {
  return MakeKernels(program, std::pair{&k.pad, "bitonic_pad"},
                     std::pair{&k.sort_blocks, "bitonic_sort_blocks"},
                     std::pair{&k.merge_global, "bitonic_merge_global"},
                     std::pair{&k.merge_local, "bitonic_merge_local"},
                     std::pair{&k.segmented, "segmented_local_sort"});
}

// The -D macro that selects the transpose kernel's sub-group shuffles on
// this device, or "" where it reports none.
const char* SubgroupShuffleMacro(const DeviceInfo& info) {
  if (info.HasExtension("cl_khr_subgroup_shuffle") &&
      info.HasExtension("cl_khr_subgroups")) {
    return "SUBGROUP_KHR";
  }
  if (info.HasExtension("cl_intel_subgroups")) return "SUBGROUP_INTEL";
  return "";
}

}  // namespace

OpenClEngine::OpenClEngine(Device device, const Options& options)
    : device_(std::move(device)),
      options_(options),
      policy_(options.policy ? *options.policy
                             : EnginePolicy::For(device_.info)),
      core_(options.faults) {}

absl::StatusOr<std::unique_ptr<OpenClEngine>> OpenClEngine::Create(
    const Options& options) {
  absl::StatusOr<Device> device =
      options.device ? *options.device
                     : FindDevice(options.kind, options.device_index);
  if (!device.ok()) return device.status();
  auto start = [](OpenClEngine& e) {
    absl::Status s = e.Init();
    return s.ok() ? e.WarmUp() : s;
  };
  std::unique_ptr<OpenClEngine> engine(new OpenClEngine(*device, options));
  absl::Status ready = start(*engine);
  // A vendor entry the device's vendor and extensions chose (not one the
  // caller named) that does not build, probe or warm up there gives way to
  // its portable twin; a named policy is the caller's to keep.
  const std::string portable = EnginePolicy::PortableName(device->info);
  const std::string chosen = EnginePolicy::For(device->info).name;
  if (!ready.ok() && !options.policy && options.policy_name.empty() &&
      chosen != portable) {
    engine.reset();  // its device memory and programs, before the twin's
    Options twin_options = options;
    twin_options.policy_name = portable;
    std::unique_ptr<OpenClEngine> twin(new OpenClEngine(*device, twin_options));
    const absl::Status twin_ready = start(*twin);
    if (!twin_ready.ok()) {
      return absl::Status(
          ready.code(),
          absl::StrCat(ready.message(), "; its portable twin ", portable,
                       " failed too: ", twin_ready.message()));
    }
    twin->policy_fallback_ =
        absl::StrCat("policy ", chosen, " refused (", ready.message(),
                     "); serving with policy ", portable);
    engine = std::move(twin);
    ready = absl::OkStatus();
  }
  SORTD_RETURN_IF_ERROR(ready);
  engine->core_.faults.Arm();  // injected faults count serving work only
  return engine;
}

absl::Status OpenClEngine::Init() {
  SORTD_RETURN_IF_ERROR(ChoosePolicy());
  core_.info = device_.info;
  if (core_.faults.fail_build()) {
    return absl::InternalError(absl::StrCat(
        "building radix_sort.cl for ", device_.info.name,
        " failed: injected program build failure (--inject_faults)"));
  }
  SORTD_RETURN_IF_ERROR(CreateContextAndMemory());
  SORTD_RETURN_IF_ERROR(CreateLanes());
  for (int wide = 0; wide < 2; ++wide) {
    for (int with_index = 0; with_index < 2; ++with_index) {
      SORTD_RETURN_IF_ERROR(BuildSortKernels(wide, with_index));
    }
  }
  return InitTranspose();
}

absl::Status OpenClEngine::ChoosePolicy() {
  if (!options_.policy && !options_.policy_name.empty()) {
    absl::StatusOr<EnginePolicy> named =
        EnginePolicy::Named(options_.policy_name, device_.info);
    if (!named.ok()) return named.status();
    policy_ = *std::move(named);
  }
  if (!options_.policy_overrides.empty()) {
    SORTD_RETURN_IF_ERROR(
        ApplyPolicyOverrides(options_.policy_overrides, &policy_));
  }
  return policy_.CheckFits(device_.info);
}

absl::Status OpenClEngine::CreateContextAndMemory() {
  cl_int err = CL_SUCCESS;
  context_ = cl::Context(device_.device, nullptr, nullptr, nullptr, &err);
  SORTD_CL_RETURN_IF(err, "clCreateContext");
  cache_ = std::make_unique<ProgramCache>(context_, device_, options_.cache_dir,
                                          options_.kernel_diagnostics);
  const size_t budget =
      options_.memory_budget_bytes > 0
          ? options_.memory_budget_bytes
          : static_cast<size_t>(device_.info.global_mem_bytes / 10 * 8);
  core_.lanes = static_cast<size_t>(std::max(1, options_.lanes));
  core_.profile_interval = options_.profile_interval;
  core_.run_budget = budget / core_.lanes;
  size_t pool_bytes = options_.pool_bytes;
  if (pool_bytes == 0) {
    pool_bytes = device_.info.is_gpu ? budget : size_t{4} << 30;
  }
  core_.pool = std::make_unique<BufferPool>(
      context_, std::min(pool_bytes, budget), budget);
  if (options_.pinned_staging) {
    auto pinned = PinnedHostMemory::Create(context_, device_.device,
                                           options_.pinned_host_max_bytes);
    if (!pinned.ok()) return pinned.status();
    core_.pinned = *std::move(pinned);
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::CreateLanes() {
  cl_int err = CL_SUCCESS;
  for (size_t l = 0; l < core_.lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->queue = cl::CommandQueue(context_, device_.device, 0, &err);
    SORTD_CL_RETURN_IF(err, "clCreateCommandQueue");
    lane->profiled_queue = cl::CommandQueue(context_, device_.device,
                                            CL_QUEUE_PROFILING_ENABLE, &err);
    SORTD_CL_RETURN_IF(err, "clCreateCommandQueue(profiling)");
    lane->side_queue = cl::CommandQueue(context_, device_.device, 0, &err);
    SORTD_CL_RETURN_IF(err, "clCreateCommandQueue(side)");
    if (options_.pinned_staging) {
      auto ring = StagingRing::Create(context_, lane->queue, options_.staging);
      if (!ring.ok()) return ring.status();
      lane->staging = std::move(*ring);
    }
    lanes_.push_back(std::move(lane));
  }
  // Not shared yet, so never contended: taken as everywhere free_lanes_ is.
  MutexLock lock(&lanes_mu_);
  for (auto& lane : lanes_) free_lanes_.push_back(lane.get());
  return absl::OkStatus();
}

absl::StatusOr<cl::Program> OpenClEngine::BuildRadixProgram(int bits,
                                                            bool with_index,
                                                            int items) {
  absl::StatusOr<cl::Program> radix = cache_->Get(
      "radix_sort", RadixBuildOptions(policy_.radix, bits, with_index, items));
  if (!radix.ok()) return radix.status();
  if (policy_.radix.ranking == TileRanking::kSubgroup) {
    SORTD_RETURN_IF_ERROR(CheckSubGroups(*radix, bits));
  }
  return radix;
}

absl::Status OpenClEngine::BuildSortKernels(int wide, int with_index) {
  const RadixSortPolicy& r = policy_.radix;
  const int bits = wide ? 64 : 32;
  auto radix = BuildRadixProgram(bits, with_index, r.Items(bits, with_index));
  if (!radix.ok()) return radix.status();
  absl::StatusOr<cl::Program> small = absl::NotFoundError("unused");
  if (r.small_items > 0) {
    small = BuildRadixProgram(bits, with_index, r.small_items);
    if (!small.ok()) return small.status();
  }
  absl::StatusOr<cl::Program> stream = absl::NotFoundError("unused");
  if (r.stream_keys_32_min > 0 && !wide && !with_index) {
    stream =
        cache_->Get("radix_sort", RadixBuildOptions(r, bits, with_index,
                                                    r.Items(bits, with_index),
                                                    /*stream_keys=*/true));
    if (!stream.ok()) return stream.status();
  }
  auto bitonic = cache_->Get(
      "bitonic_sort", BitonicBuildOptions(policy_.bitonic, bits, with_index));
  if (!bitonic.ok()) return bitonic.status();
  const bool unordered_pass = r.UnorderedFirst(with_index);
  const bool late_ranked = r.LateRanked(bits, with_index);
  // Kernel objects hold their arguments: each lane has its own.
  for (auto& lane : lanes_) {
    SORTD_RETURN_IF_ERROR(RadixKernelsOf(*radix, lane->radix[wide][with_index],
                                         r.WarpLevel(), unordered_pass,
                                         late_ranked));
    if (small.ok()) {
      SORTD_RETURN_IF_ERROR(
          RadixKernelsOf(*small, lane->radix_small[wide][with_index],
                         r.WarpLevel(), unordered_pass, late_ranked));
    }
    if (stream.ok()) {
      SORTD_RETURN_IF_ERROR(RadixKernelsOf(*stream, lane->radix_stream,
                                           r.WarpLevel(), unordered_pass,
                                           late_ranked));
    }
    SORTD_RETURN_IF_ERROR(
        BitonicKernelsOf(*bitonic, lane->bitonic[wide][with_index]));
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::CheckSubGroups(const cl::Program& program,
                                          int bits) {
  const size_t wg = policy_.radix.work_group;
  const int want = policy_.radix.warp_size;
  cl_int err = CL_SUCCESS;
  cl::Kernel probe(program, "radix_sub_group_probe", &err);
  SORTD_CL_RETURN_IF(err, "clCreateKernel(radix_sub_group_probe)");
  cl::Buffer out(context_, CL_MEM_WRITE_ONLY, wg * sizeof(cl_uint), nullptr,
                 &err);
  SORTD_CL_RETURN_IF(err, "clCreateBuffer(sub-group probe)");
  SORTD_CL_RETURN_IF(probe.setArg(0, out), "clSetKernelArg(sub-group probe)");
  cl::CommandQueue& queue = lanes_.front()->queue;
  SORTD_CL_RETURN_IF(
      queue.enqueueNDRangeKernel(probe, cl::NullRange, cl::NDRange(wg),
                                 cl::NDRange(wg)),
      "clEnqueueNDRangeKernel(radix_sub_group_probe)");
  std::vector<cl_uint> seen(wg);
  SORTD_CL_RETURN_IF(queue.enqueueReadBuffer(out, CL_TRUE, 0,
                                             wg * sizeof(cl_uint), seen.data()),
                     "clEnqueueReadBuffer(sub-group probe)");
  for (size_t i = 0; i < wg; ++i) {
    if (seen[i] != static_cast<cl_uint>(want)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "policy ", policy_.name, " on ", device_.info.name,
          ": the radix kernels (", bits, "-bit keys) require sub-groups of ",
          want, " consecutive work-items, but work-item ", i,
          " runs in one of ", seen[i] & 0x7fffffffu,
          (seen[i] & 0x80000000u) ? " whose ids are not consecutive" : ""));
    }
  }
  radix_sub_group_size_ = want;
  return absl::OkStatus();
}

// The sub-group kernel needs shuffles, sub-groups of a multiple of 32
// work-items and a work-group of 32 per matrix within the device's limit;
// anything else takes the portable kernel.
absl::Status OpenClEngine::InitTranspose() {
  using T = Options::Transpose;
  const int per_group = policy_.transpose.matrices_per_group;
  const char* subgroup = SubgroupShuffleMacro(device_.info);
  std::string why_not = "the device reports no sub-group shuffle";
  if (*subgroup != '\0' &&
      static_cast<size_t>(per_group) * 32 > device_.info.max_work_group) {
    why_not = absl::StrCat("its work-groups of ", per_group * 32,
                           " work-items exceed the device's limit of ",
                           device_.info.max_work_group);
    subgroup = "";
  }
  if (*subgroup != '\0' && options_.transpose != T::kPortable) {
    absl::StatusOr<bool> runs = TrySubgroupTranspose(subgroup, &why_not);
    if (!runs.ok()) return runs.status();
    if (*runs) return absl::OkStatus();
  }
  if (options_.transpose == T::kSubgroup) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sub-group transpose requested on ", device_.info.name, ": ", why_not));
  }
  return UsePortableTranspose();
}

absl::StatusOr<bool> OpenClEngine::TrySubgroupTranspose(const char* subgroup,
                                                        std::string* why_not) {
  const int per_group = policy_.transpose.matrices_per_group;
  // A driver that reports the extensions but does not build the kernel
  // gets the portable one too.
  auto program = cache_->Get(
      "transpose", TransposeBuildOptions(policy_.transpose, subgroup));
  size_t sub_group = 0;
  if (program.ok()) {
    cl_int err = CL_SUCCESS;
    cl::Kernel k(*program, "transpose32_subgroup", &err);
    SORTD_CL_RETURN_IF(err, "clCreateKernel(transpose32_subgroup)");
    err = k.getSubGroupInfo(device_.device,
                            CL_KERNEL_MAX_SUB_GROUP_SIZE_FOR_NDRANGE,
                            cl::NDRange(per_group * 32), &sub_group);
    if (err != CL_SUCCESS) sub_group = 0;
  }
  if (sub_group > 0 && sub_group % 32 == 0) {
    transpose_subgroup_ = true;
    for (auto& lane : lanes_) {
      SORTD_RETURN_IF_ERROR(MakeKernels(
          *program, std::pair{&lane->transpose, "transpose32_subgroup"}));
    }
    return true;
  }
  *why_not = program.ok()
                 ? absl::StrCat("its sub-groups hold ", sub_group,
                                " work-items, not a multiple of 32")
                 : absl::StrCat("its sub-group kernel does not build: ",
                                program.status().message());
  transpose_fallback_ = absl::StrCat("the sub-group transpose does not run on ",
                                     device_.info.name, " (", *why_not,
                                     "); transposing with the portable kernel");
  return false;
}

absl::Status OpenClEngine::UsePortableTranspose() {
  auto program =
      cache_->Get("transpose", TransposeBuildOptions(policy_.transpose, ""));
  if (!program.ok()) return program.status();
  for (auto& lane : lanes_) {
    SORTD_RETURN_IF_ERROR(
        MakeKernels(*program, std::pair{&lane->transpose, "transpose32"}));
  }
  transpose_subgroup_ = false;
  return absl::OkStatus();
}

}  // namespace sortd::gpu
