// The vendor entries of EnginePolicy::For: which devices run the vendor
// fast paths (NVIDIA PTX, Intel sub-groups), and each vendor's tuned launch
// shapes and kernel variants (nvidia-ptx, intel-subgroups, cpu), with the
// measurements behind them. EnginePolicy::For and Named (policy.cc) pick
// one of these and fit it to the device; "gpu" is the defaults in policy.h.
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
    // Streaming key loads from 2^26 32-bit keys: on the H100 the passes'
    // span at 2^28 moves by up to 12% with where the key arrays land
    // (decision 006), and loads that leave L1 and L2 first take most of
    // that away. Against plain loads over the same nine allocation
    // histories, one run, medians (ranges) of span ms: 2^26 1.369
    // (1.363-1.407) -> 1.339 (1.336-1.345), 2^27 2.890 (2.809-3.018) ->
    // 2.679 (2.661-2.797), 2^28 5.268 (5.099-5.676) -> 5.117 (5.054-5.293),
    // every history under CUB in place (1.440-1.444, 5.517-5.539); from
    // 2^24 they were slower, 0.406 -> 0.424 and 0.719 -> 0.762 at 2^25.
    // Not the H200, whose spans placement does not move: there they were
    // slower at every size, 1.259 -> 1.294 at 2^26, 4.610 -> 4.905 at
    // 2^28 (decision 024, "Cache hints on the keys").
    {"H100 80GB HBM3", size_t{1} << 26},
};

// The radix launch shape of nvidia-ptx. The H100's tuning, measured in
// same-call A/Bs of kernel time (docs/decisions/004-radix-kernel.md): 8-bit
// passes, 7-17% faster than 4-bit ones at 2^24-2^26 and the fastest of nine
// shapes swept; the scatter's bank padding, which every build has (1.17x
// u32, 1.45x u64 at 2^26); one-launch passes with warp-level ranking of a
// whole digit and early counts (2.2x u32 keys, 1.9x f32 argsort at 2^26
// over the three-launch pass), with longer tiles for keys-only sorts.
RadixSortPolicy NvidiaRadixShape() {
  return {.radix_bits = 8,
          .work_group = 256,
          .items_32 = 16,
          .items_64 = 8,
          // 32 keys a work-item for keys-only tiles of 32-bit keys,
          // the longest tried (36 does not fit 48 KiB of local memory).
          .items_32_keys = 32,
          .items_64_keys = 16,
          .pass = RadixPass::kOneLaunchEarlyCounts,
          .lookback = 4};
}

// How nvidia-ptx ranks, places and counts the keys of a tile.
void SetNvidiaRanking(RadixSortPolicy& r) {
  // Ballots, with each key placed in local memory as it is
  // ranked (direct placement: no ranks held in registers).
  // 64-bit keys: 80 -> 64 registers for keys-only tiles (four
  // work-groups per SM instead of three); u64 2^24 1.396 ->
  // 1.314 ms, 2^28 19.74 -> 18.06, 2^26 level to -5%. 32-bit
  // keys, against digit peers through per-warp local masks
  // (which need the local memory direct placement uses for the
  // keys) and keys-only tiles of 24 keys a work-item, same
  // call, span ms at 2^24 / 2^26 / 2^28: u32 keys 0.471 /
  // 1.547 / 6.280 -> 0.450 / 1.515 / 5.907, f32 argsort
  // 0.804 / 2.964 / 11.53 -> 0.754 / 2.770 / 10.76 (H100; an
  // older probe on the H200 measured level to 1.4% slower,
  // decision 023), u32 pairs 1.253 / 5.370 /
  // 22.30 -> 1.208 / 5.200 / 22.02. Without direct placement
  // masks had been 3% (u32) and 5% (u64) faster than ballots.
  r.ranking = TileRanking::kWarpBallots;
  // Two vectors per load round: the count kernel is bound by
  // its local atomics (about 2.2 TB/s of keys at every size);
  // 2 against 1: u64 2^24 0.0706 -> 0.068 ms, 2^26 0.245 ->
  // 0.2405, u32 2^28 0.483 -> 0.470; 4 was slower at u64 2^24
  // (0.075) though faster at 2^28.
  r.count_unroll = 2;
}

// Where nvidia-ptx sorts short arrays and segments its own way.
void SetNvidiaShortArrays(RadixSortPolicy& r) {
  // Up to 2^18 keys: tiles of 1024 (0.095 -> 0.086 ms at
  // 2^16).
  r.small_items = 4;
  r.small_max = size_t{1} << 18;
  // Segments of up to 2048 keys by the bitonic network (its
  // block is 4096), longer ones by radix_segments: 2^24 keys in
  // 8192 segments of 2048, span ms, one A/B, three rounds:
  // i32 0.668 -> 0.611, i64 1.042 -> 1.049.
  r.segment_radix_above = 2048;
}

// nvidia-ptx's look-back statuses, when the passes look back, and when the
// host checks the digit totals between passes.
void SetNvidiaLookBack(RadixSortPolicy& r) {
  // Marked statuses (no fill between passes) with each tile's
  // status lines prefetched to L2; same-call A/B, kernel ms,
  // against fills before every pass: u32 2^24/2^26/2^28
  // 0.522/1.685/6.821 -> 0.501/1.593/6.539, u64 1.366/5.034/
  // 18.54 -> 1.283/4.962/17.45, 2^16 u32 0.070 -> 0.069.
  r.marked_status_max = RadixSortPolicy::kMarkedStatusLimit;
  r.status_prefetch = true;
  // 32-bit keys-only passes walk back over earlier tiles after
  // placing their keys: the unranked first pass at every size,
  // the ranked ones from 8192 tiles (2^26 keys), where the late
  // walk turns from slower (u32 2^24 +8%, 2^25 +1%) to faster
  // (2^26 -2%, 2^28 -5%). Against the build before, same call,
  // span ms: u32 2^24 / 2^26 / 2^28 0.453 / 1.526 / 5.742 ->
  // 0.440 / 1.470 / 5.395; u64 and f32 argsort, whose passes
  // it would slow by 2-5%, look back early (level).
  r.late_lookback_unordered_32 = true;
  r.late_lookback_tiles_32 = 8192;
  // Below 2^25 keys the first pass does not hide reading the
  // digit totals back and enqueueing the rest (0.05 ms, at
  // times 0.13-0.28 ms on an H200 host): with the check, u32
  // 2^22/2^23 spans 0.227/0.324 ms against 0.182/0.275 without,
  // u64 0.438/0.694 against 0.403/0.667; level from 2^25.
  r.skip_check_min = size_t{1} << 25;
  // 64-bit keys by picked digits: passes enough for runs of
  // up to 16 keys on average (two up to 2^20 keys, three up to
  // 2^28), against runs of a sixteenth of a key: span 0.667 against
  // 0.783 ms at 2^24, 2.564 against 3.003 at 2^26, 10.43
  // against 10.66 at 2^28 (H100). 32-bit keys keep the margin:
  // there the settle costs more than the pass it saves from
  // 2^24 keys (u32 2^26 1.715 against 1.589 ms).
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
  // Bitonic up to 2^12 keys, and up to 2^14 32-bit keys sorted without an
  // index: there radix's picked passes, settle and launch gaps cost more
  // than the network (u32 keys only, 16384 keys, three runs: span 0.091-
  // 0.099 ms against 0.112-0.124, host to host 0.143-0.151 against
  // 0.221-0.310), while argsort and 64-bit keys are level or faster by
  // radix at 16384 keys and every kind is faster by radix at 65536
  // (docs/decisions/005-bitonic-for-small-arrays.md).
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
