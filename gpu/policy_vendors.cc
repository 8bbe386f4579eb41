// The vendor entries of EnginePolicy::For: which devices run the vendor
// fast paths (NVIDIA PTX, Intel sub-groups), and each vendor's tuned launch
// shapes and kernel variants (nvidia-ptx, intel-subgroups, cpu), each value
// with a line of provenance (nvidia-ptx's figures: decision 033).
// EnginePolicy::For and Named (policy.cc) pick one of these and fit it to the
// device; "gpu" is the defaults in policy.h.
#include <cstddef>
#include <optional>

#include "absl/strings/match.h"
#include "gpu/policy.h"
#include "gpu/policy_internal.h"

namespace sortd::gpu {

// The NVIDIA fast paths use PTX for sm_70 and later (vote.sync,
// shfl.sync, bar.warp.sync): an NVIDIA GPU that reports an older compute
// capability gets the portable policy; one that reports none is taken to
// be recent.
bool NvidiaPtxRuns(const DeviceInfo& device) {
  return absl::StrContains(device.vendor, "NVIDIA") &&
         (device.nv_compute_major == 0 || device.nv_compute_major >= 7);
}

bool SubgroupOpsRun(const DeviceInfo& device, SubgroupOps ops) {
  if (!device.HasExtension("cl_intel_required_subgroup_size")) return false;
  const bool khr = device.HasExtension("cl_khr_subgroups") &&
                   device.HasExtension("cl_khr_subgroup_shuffle");
  switch (ops) {
    case SubgroupOps::kKhrBallot:
      return khr && device.HasExtension("cl_khr_subgroup_ballot");
    case SubgroupOps::kKhr:
      return khr;
    case SubgroupOps::kIntel:
      return device.HasExtension("cl_intel_subgroups");
  }
  return false;
}

std::optional<SubgroupOps> BestSubgroupOps(const DeviceInfo& device) {
  for (SubgroupOps ops :
       {SubgroupOps::kKhrBallot, SubgroupOps::kIntel, SubgroupOps::kKhr}) {
    if (SubgroupOpsRun(device, ops)) return ops;
  }
  return std::nullopt;
}

bool IntelSubgroupsRun(const DeviceInfo& device) {
  return device.is_gpu && absl::StrContains(device.vendor, "Intel") &&
         BestSubgroupOps(device).has_value();
}

namespace {

// What one NVIDIA model (by the device name's `model`) sets over the
// nvidia-ptx entry, from measurements on that model alone.
struct NvidiaModelTuning {
  const char* model;
  size_t stream_keys_32_min;
};
constexpr NvidiaModelTuning kNvidiaModels[] = {
    // Streaming key loads from 2^26 32-bit keys: the H100's spans move
    // with where arrays land, the H200's do not (decision 033, "Per model").
    {"H100 80GB HBM3", size_t{1} << 26},
};

// The radix launch shape of nvidia-ptx: 8-bit one-launch passes, longer
// tiles for keys-only sorts (decision 033, "Launch shape").
RadixSortPolicy NvidiaRadixShape() {
  return {.radix_bits = 8,
          .work_group = 256,
          .items_32 = 16,
          .items_64 = 8,
          // The longest tried (36 does not fit 48 KiB of local memory).
          .items_32_keys = 32,
          .items_64_keys = 16,
          .pass = RadixPass::kOneLaunchEarlyCounts,
          .lookback = 4};
}

// How nvidia-ptx ranks, places and counts the keys of a tile.
void SetNvidiaRanking(RadixSortPolicy& r) {
  // Ballots, keys placed as ranked (decision 033, "Ranking and counting").
  r.ranking = TileRanking::kWarpBallots;
  // Two vectors per load round of the count kernel (same section).
  r.count_unroll = 2;
}

// Where nvidia-ptx sorts short arrays and segments its own way.
void SetNvidiaShortArrays(RadixSortPolicy& r) {
  // Up to 2^18 keys: tiles of 1024 (decision 033, "Short arrays and
  // segments").
  r.small_items = 4;
  r.small_max = size_t{1} << 18;
  // Segments above 2048 keys by radix_segments (same section).
  r.segment_radix_above = 2048;
}

// nvidia-ptx's look-back statuses, when the passes look back, and when the
// host checks the digit totals between passes.
void SetNvidiaLookBack(RadixSortPolicy& r) {
  // Marked statuses, prefetched to L2 (decision 033, "Look-back").
  r.marked_status_max = RadixSortPolicy::kMarkedStatusLimit;
  r.status_prefetch = true;
  // 32-bit keys-only passes walk back late: the unranked first pass always,
  // the ranked ones from 2^26 keys (same section).
  r.late_lookback_unordered_32 = true;
  r.late_lookback_tiles_32 = 8192;
  // No digit-total check below 2^25 keys (same section).
  r.skip_check_min = size_t{1} << 25;
  // Picked digits of 64-bit keys for runs of 16 (decision 033, "Picked
  // digits").
  r.picked_margin_bits_64 = -4;
}

}  // namespace

namespace policy_internal {

EnginePolicy NvidiaPtxPolicy(const DeviceInfo& device) {
  EnginePolicy p;
  p.name = "nvidia-ptx";
  p.radix = NvidiaRadixShape();
  SetNvidiaRanking(p.radix);
  SetNvidiaShortArrays(p.radix);
  SetNvidiaLookBack(p.radix);
  // Bitonic up to 2^12 keys, 2^14 for 32-bit keys without an index
  // (decision 033, "Short arrays and segments").
  p.bitonic.max_keys = size_t{1} << 12;
  p.bitonic.max_keys_64 = size_t{1} << 12;
  p.bitonic.max_keys_32_keys = size_t{1} << 14;
  p.transpose = {.matrices_per_group = 64};
  for (const NvidiaModelTuning& m : kNvidiaModels) {
    if (absl::StrContains(device.name, m.model)) {
      p.radix.stream_keys_32_min = m.stream_keys_32_min;
    }
  }
  return p;
}

// CPU devices (PoCL): a work-group runs on one core; smaller groups and
// tiles keep the per-group local arrays in cache.
EnginePolicy CpuPolicy() {
  EnginePolicy p;
  p.name = "cpu";
  p.radix = {.radix_bits = 4, .work_group = 64, .items_32 = 16, .items_64 = 16};
  p.bitonic = {
      .block_32 = 2048, .block_64 = 2048, .work_group = 64, .max_keys = 2048};
  p.transpose = {.matrices_per_group = 16};
  return p;
}

// Intel GPUs (Xe: integrated, Arc, Data Center GPU Flex and Max) with
// sub-group extensions. NOT timed on Intel hardware: each value below is a
// reasoned starting point, checked for correctness only (the kernel suite
// on PoCL's CPU device with this policy forced), to be measured with
// gpu_sort_benchmark --policy= on an Intel GPU before it is trusted.
// - Ranking by sub-group operations (kSubgroup), sub-groups of 16 required
//   (radix.warp_size): every Intel GPU from Gen9 to Xe2 compiles kernels
//   for 16 (8 and 32 are not available everywhere or cost registers: at 16
//   a work-item has twice the registers it has at 32, and the ranking holds
//   its keys and indices in registers). The cost: twice the per-warp
//   counters of 32-lane warps (16 KiB at 8-bit digits). Ballots where the
//   device has cl_khr_subgroup_ballot (Intel's driver reports it), else a
//   sub-group reduction.
// - 8-bit digits: half the passes over memory of 4-bit ones; the
//   warp-level ranking ranks a whole digit in one step.
// - Tiles sized for 64 KiB of shared local memory per work-group (Xe-LP
//   and Xe-HPG; Xe-HPC has 128): 16/12 keys per work-item with an index
//   (32/64-bit keys), 32/16 keys only, each scatter using 52-57 KiB: the
//   longest tiles that fit, so the fewest tiles to look back over and the
//   longest runs of one digit per store. One such work-group fills the
//   64 KiB: whether two shorter tiles at once would be faster is the first
//   thing to time. FitToDevice shrinks them where the device has less.
// - One launch per pass with early counts (decoupled look-back): Intel
//   GPUs keep a started work-group resident until it ends, which the
//   look-back's spin needs (tiles take their numbers in the order they
//   start); keys placed as ranked, so no ranks are held in
//   registers; marked look-back statuses (plain atomics, no fill between
//   passes). radix.pass=three-launch is the fallback that needs no such
//   guarantee.
// - Radix passes over at most 2^18 keys use tiles of 4 keys per work-item,
//   so that short arrays still spread over the Xe-cores; segments of more
//   than 1024 keys up to a tile are sorted in one work-group each.
// - Transpose: the sub-group shuffle kernel with sub-groups of 32 required
//   (one 32-row matrix per sub-group), 8 matrices (256 work-items) per
//   work-group, within every Intel GPU's work-group limit.
// - Bitonic, look-back width, digit-count loads: the defaults.
EnginePolicy IntelSubgroupPolicy(const DeviceInfo& device) {
  EnginePolicy p;
  p.name = "intel-subgroups";
  p.radix = {
      .radix_bits = 8,
      .work_group = 256,
      .items_32 = 16,
      .items_64 = 12,
      .items_32_keys = 32,
      .items_64_keys = 16,
      .pass = RadixPass::kOneLaunchEarlyCounts,
      .ranking = TileRanking::kSubgroup,
      .warp_size = 16,
      .subgroup_ops = BestSubgroupOps(device).value_or(SubgroupOps::kKhrBallot),
      .small_items = 4,
      .small_max = size_t{1} << 18,
      .segment_radix_above = 1024,
      .marked_status_max = RadixSortPolicy::kMarkedStatusLimit};
  p.transpose = {.matrices_per_group = 8, .sub_group_size = 32};
  return p;
}

}  // namespace policy_internal
}  // namespace sortd::gpu
