#include "gpu/policy.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gpu/kernels/sort_constants.h"

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

size_t RadixSortPolicy::SettleTileKeys() const {
  return static_cast<size_t>(work_group) * SORTD_SETTLE_ITEMS;
}

size_t RadixSortPolicy::SettleLocalBytes(int key_bits) const {
  const size_t window = SettleTileKeys() + 2 * (SORTD_SETTLE_MAX + 1);
  return window * (static_cast<size_t>(key_bits) / 8 + 4) +
         static_cast<size_t>(work_group) * 4;
}

size_t RadixSortPolicy::ScatterLocalBytes(int key_bits, bool with_index) const {
  const size_t tile = Tile(key_bits, with_index);
  const size_t radix = size_t{1} << radix_bits;
  const size_t local_radix = size_t{1} << LocalBits();
  // Key, index and counter arrays carry the kernel's bank padding (one
  // element in 32).
  const size_t padded_tile = tile + (bank_pad ? tile / 32 : 0);
  const size_t counters = local_radix * work_group;
  // Warp-level ranking: 32-bit counters per warp and digit; otherwise
  // 16-bit counters per work-item and sub-digit, padded.
  const TileRanking rank = Ranking(key_bits);
  const size_t warps = warp_size > 0 ? work_group / warp_size : 0;
  const size_t counter_bytes =
      WarpLevel(key_bits) ? warps * radix * 4
                          : (counters + (bank_pad ? counters / 32 : 0)) * 2;
  // The one-launch pass adds each digit's global base and a tile slot;
  // radix_segment_groups, built for every policy, each digit's base.
  const size_t onesweep_bytes = OneLaunch() ? radix * 4 + 4 : radix * 4;
  // Keys (and indices) share one array with kWarpMasks' digit masks
  // (three sets of a word per warp and digit), which are dead by the time
  // the keys are exchanged.
  const size_t tile_bytes =
      padded_tile * (key_bits / 8) + (with_index ? padded_tile * 4 : 0);
  const size_t mask_bytes =
      rank == TileRanking::kWarpMasks ? warps * radix * 3 * 4 : 0;
  return (std::max(tile_bytes, mask_bytes) + 7) / 8 * 8 + counter_bytes +
         radix * 4 + work_group * 4 + onesweep_bytes;
}

namespace {

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

EnginePolicy NvidiaPtxPolicy(const DeviceInfo& device) {
  EnginePolicy p;
  p.name = "nvidia-ptx";
  // The H100's tuning, measured in same-call A/Bs of kernel time
  // (docs/decisions/004-radix-kernel.md): 8-bit passes, 7-17% faster than
  // 4-bit ones at 2^24-2^26 and the fastest of nine shapes swept; the
  // scatter's bank padding (1.17x u32, 1.45x u64 at 2^26); one-launch
  // passes with warp-level ranking of a whole digit and early counts
  // (2.2x u32 keys, 1.9x f32 argsort at 2^26 over the three-launch pass),
  // with longer tiles for keys-only sorts.
  p.radix = {.radix_bits = 8,
             .work_group = 256,
             .items_32 = 16,
             .items_64 = 8,
             // 32 keys a work-item for keys-only tiles of 32-bit keys,
             // the longest tried (36 does not fit 48 KiB of local memory).
             .items_32_keys = 32,
             .items_64_keys = 16,
             .bank_pad = true,
             .pass = RadixPass::kOneLaunchEarlyCounts,
             .lookback = 4,
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
             .ranking = TileRanking::kWarpBallots,
             .direct_place_32 = true,
             .direct_place_64 = true,
             // Two vectors per load round: the count kernel is bound by
             // its local atomics (about 2.2 TB/s of keys at every size);
             // 2 against 1: u64 2^24 0.0706 -> 0.068 ms, 2^26 0.245 ->
             // 0.2405, u32 2^28 0.483 -> 0.470; 4 was slower at u64 2^24
             // (0.075) though faster at 2^28.
             .count_unroll = 2,
             // Up to 2^18 keys: tiles of 1024 (0.095 -> 0.086 ms at
             // 2^16).
             .small_items = 4,
             .small_max = size_t{1} << 18,
             // Segments of up to 2048 keys by the bitonic network (its
             // block is 4096), longer ones by radix_segments: 2^24 keys in
             // 8192 segments of 2048, span ms, one A/B, three rounds:
             // i32 0.668 -> 0.611, i64 1.042 -> 1.049.
             .segment_radix_above = 2048,
             // Marked statuses (no fill between passes) with each tile's
             // status lines prefetched to L2; same-call A/B, kernel ms,
             // against fills before every pass: u32 2^24/2^26/2^28
             // 0.522/1.685/6.821 -> 0.501/1.593/6.539, u64 1.366/5.034/
             // 18.54 -> 1.283/4.962/17.45, 2^16 u32 0.070 -> 0.069.
             .marked_status_max = RadixSortPolicy::kMarkedStatusLimit,
             .status_prefetch = true,
             // 32-bit keys-only passes walk back over earlier tiles after
             // placing their keys: the unranked first pass at every size,
             // the ranked ones from 8192 tiles (2^26 keys), where the late
             // walk turns from slower (u32 2^24 +8%, 2^25 +1%) to faster
             // (2^26 -2%, 2^28 -5%). Against the build before, same call,
             // span ms: u32 2^24 / 2^26 / 2^28 0.453 / 1.526 / 5.742 ->
             // 0.440 / 1.470 / 5.395; u64 and f32 argsort, whose passes
             // it would slow by 2-5%, look back early (level).
             .late_lookback_unordered_32 = true,
             .late_lookback_tiles_32 = 8192,
             // Below 2^25 keys the first pass does not hide reading the
             // digit totals back and enqueueing the rest (0.05 ms, at
             // times 0.13-0.28 ms on an H200 host): with the check, u32
             // 2^22/2^23 spans 0.227/0.324 ms against 0.182/0.275 without,
             // u64 0.438/0.694 against 0.403/0.667; level from 2^25.
             .skip_check_min = size_t{1} << 25,
             // 64-bit keys by picked digits: passes enough for runs of
             // up to 16 keys on average (two up to 2^20 keys, three up to
             // 2^28), against runs of a sixteenth of a key: span 0.667 against
             // 0.783 ms at 2^24, 2.564 against 3.003 at 2^26, 10.43
             // against 10.66 at 2^28 (H100). 32-bit keys keep the margin:
             // there the settle costs more than the pass it saves from
             // 2^24 keys (u32 2^26 1.715 against 1.589 ms).
             .picked_margin_bits_64 = -4};
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
//   start); keys placed as ranked (direct_place), so no ranks are held in
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
      .bank_pad = true,
      .pass = RadixPass::kOneLaunchEarlyCounts,
      .ranking = TileRanking::kSubgroup,
      .warp_size = 16,
      .subgroup_ops = BestSubgroupOps(device).value_or(SubgroupOps::kKhrBallot),
      .direct_place_32 = true,
      .direct_place_64 = true,
      .small_items = 4,
      .small_max = size_t{1} << 18,
      .segment_radix_above = 1024,
      .marked_status_max = RadixSortPolicy::kMarkedStatusLimit};
  p.transpose = {.matrices_per_group = 8, .sub_group_size = 32};
  return p;
}

// Shrinks `p` until its kernels fit the device's local memory and
// work-group limits (a vendor with no entry starts from the defaults).
void FitToDevice(const DeviceInfo& device, EnginePolicy& p) {
  while (p.radix.work_group > 32 &&
         (static_cast<size_t>(p.radix.work_group) > device.max_work_group ||
          p.radix.ScatterLocalBytes(64, true) > device.local_mem_bytes ||
          p.radix.SettleLocalBytes(64) > device.local_mem_bytes)) {
    p.radix.work_group /= 2;
  }
  // Then the keys per work-item of each kind of sort.
  for (auto [items, bits, with_index] :
       {std::tuple{&p.radix.items_64, 64, true},
        {&p.radix.items_32, 32, true},
        {&p.radix.items_64_keys, 64, false},
        {&p.radix.items_32_keys, 32, false}}) {
    while (*items > 1 && p.radix.ScatterLocalBytes(bits, with_index) >
                             device.local_mem_bytes) {
      *items /= 2;
    }
  }
  // Small-array tiles are never longer than the others.
  p.radix.small_items = std::min(
      {p.radix.small_items, p.radix.Items(32, true), p.radix.Items(64, true),
       p.radix.Items(32, false), p.radix.Items(64, false)});
  while (p.bitonic.block_32 > 64 &&
         p.bitonic.LocalBytes(32) > device.local_mem_bytes) {
    p.bitonic.block_32 /= 2;
  }
  while (p.bitonic.block_64 > 64 &&
         p.bitonic.LocalBytes(64) > device.local_mem_bytes) {
    p.bitonic.block_64 /= 2;
  }
  p.bitonic.work_group = std::min<int>({p.bitonic.work_group,
                                        static_cast<int>(device.max_work_group),
                                        p.bitonic.block_64 / 2});
  p.transpose.matrices_per_group = std::min<int>(
      p.transpose.matrices_per_group, static_cast<int>(device.max_work_group));
}

}  // namespace

EnginePolicy EnginePolicy::For(const DeviceInfo& device) {
  EnginePolicy p;  // "gpu": the defaults
  if (!device.is_gpu) {
    p = CpuPolicy();
  } else if (NvidiaPtxRuns(device)) {
    p = NvidiaPtxPolicy(device);
  } else if (IntelSubgroupsRun(device)) {
    p = IntelSubgroupPolicy(device);
  }
  FitToDevice(device, p);
  return p;
}

std::vector<std::string> EnginePolicy::Names() {
  return {"nvidia-ptx", "intel-subgroups", "gpu", "cpu"};
}

std::string EnginePolicy::PortableName(const DeviceInfo& device) {
  return device.is_gpu ? "gpu" : "cpu";
}

absl::StatusOr<EnginePolicy> EnginePolicy::Named(absl::string_view name,
                                                 const DeviceInfo& device) {
  EnginePolicy p;
  if (name == "nvidia-ptx") {
    p = NvidiaPtxPolicy(device);
  } else if (name == "intel-subgroups") {
    p = IntelSubgroupPolicy(device);
  } else if (name == "cpu") {
    p = CpuPolicy();
  } else if (name != "gpu") {
    return absl::NotFoundError(
        absl::StrCat("no policy named '", name,
                     "'; the policies: ", absl::StrJoin(Names(), ", ")));
  }
  FitToDevice(device, p);
  return p;
}

namespace {

constexpr std::pair<SubgroupOps, const char*> kSubgroupOpsNames[] = {
    {SubgroupOps::kKhrBallot, "khr-ballot"},
    {SubgroupOps::kKhr, "khr"},
    {SubgroupOps::kIntel, "intel"}};

const char* SubgroupOpsName(SubgroupOps ops) {
  for (const auto& [o, n] : kSubgroupOpsNames) {
    if (o == ops) return n;
  }
  return "?";
}

const char* SubgroupOpsExtensions(SubgroupOps ops) {
  switch (ops) {
    case SubgroupOps::kKhrBallot:
      return "cl_khr_subgroups, cl_khr_subgroup_ballot, "
             "cl_khr_subgroup_shuffle and cl_intel_required_subgroup_size";
    case SubgroupOps::kKhr:
      return "cl_khr_subgroups, cl_khr_subgroup_shuffle and "
             "cl_intel_required_subgroup_size";
    case SubgroupOps::kIntel:
      return "cl_intel_subgroups and cl_intel_required_subgroup_size";
  }
  return "?";
}

// Collects a sentence for each constraint that does not hold.
struct Constraints {
  std::vector<std::string> broken;
  void Need(bool ok, std::string what) {
    if (!ok) broken.push_back(std::move(what));
  }
};

// What every radix build needs, whatever its key width.
void CheckRadix(const RadixSortPolicy& r, const DeviceInfo& device,
                Constraints& c) {
  auto need = [&](bool ok, std::string what) { c.Need(ok, std::move(what)); };
  const bool ptx = NvidiaPtxRuns(device);
  need(r.radix_bits == 4 || r.radix_bits == 8, "radix.radix_bits is 4 or 8");
  need(r.local_bits == 0 || r.radix_bits % r.local_bits == 0,
       "radix.local_bits divides radix.radix_bits");
  need(r.work_group >= 1 &&
           static_cast<size_t>(r.work_group) <= device.max_work_group,
       absl::StrCat("radix.work_group is at most the device's ",
                    device.max_work_group));
  need(r.lookback >= 1 && r.lookback <= 64, "radix.lookback is 1-64");
  need(r.status_count_bits <= RadixSortPolicy::kStatusCountBits &&
           (1 << r.status_count_bits) >
               std::max(r.Tile(32, true), r.Tile(64, false)) &&
           (1 << r.status_count_bits) > r.work_group * r.small_items,
       "radix.status_count_bits is at most 30 and holds a tile's count");
  need(r.count_groups_per_cu >= 1, "radix.count_groups_per_cu is at least 1");
  need(r.count_unroll >= 1 && r.count_unroll <= 4, "radix.count_unroll is 1-4");
  need(r.segment_group_max <= (size_t{1} << 30),
       "radix.segment_group_max is at most 2^30 keys");
  need(!r.StatusPrefetch() || ptx,
       "radix.status_prefetch needs an NVIDIA GPU that runs PTX");
  need(r.stream_keys_32_min == 0 || ptx,
       "radix.stream_keys_32_min needs an NVIDIA GPU that runs PTX");
  need(r.small_items >= 0, "radix.small_items is not negative");
  need(r.picked_margin_bits_32 >= -16 && r.picked_margin_bits_32 <= 32 &&
           r.picked_margin_bits_64 >= -16 && r.picked_margin_bits_64 <= 64,
       "radix.picked_margin_bits_32 is -16 to 32, _64 -16 to 64");
  need(r.warp_size == 8 || r.warp_size == 16 || r.warp_size == 32,
       "radix.warp_size is 8, 16 or 32");
  need(r.pass != RadixPass::kOneLaunchEarlyCounts ||
           (r.WarpLevel(32) && r.WarpLevel(64)),
       "radix.pass=one-launch-early-counts needs warp-level ranking");
}

// What the builds for `bits`-wide keys need.
void CheckKeyWidth(const EnginePolicy& p, const DeviceInfo& device, int bits,
                   Constraints& c) {
  auto need = [&](bool ok, std::string what) { c.Need(ok, std::move(what)); };
  const RadixSortPolicy& r = p.radix;
  const BitonicPolicy& bitonic = p.bitonic;
  const bool ptx = NvidiaPtxRuns(device);
  const TileRanking rank = r.Ranking(bits);
  const std::string of = absl::StrCat(" (", bits, "-bit keys)");
  need(rank == TileRanking::kWorkItemCounters ||
           (r.warp_size > 0 && r.work_group % r.warp_size == 0),
       absl::StrCat("warp-level ranking needs radix.work_group % ", r.warp_size,
                    " == 0 (radix.warp_size)", of));
  need(rank == TileRanking::kWorkItemCounters || r.local_bits == 0,
       "radix.local_bits applies only to work-item ranking" + of);
  need((rank != TileRanking::kWarpBallots && rank != TileRanking::kWarpMasks) ||
           ptx,
       "warp-ballots and warp-masks ranking need an NVIDIA GPU that runs "
       "PTX" +
           of);
  need((rank != TileRanking::kWarpBallots && rank != TileRanking::kWarpMasks) ||
           r.warp_size == 32,
       "warp-ballots and warp-masks ranking need radix.warp_size=32" + of);
  need(rank != TileRanking::kSubgroup || SubgroupOpsRun(device, r.subgroup_ops),
       absl::StrCat("subgroup ranking with radix.subgroup_ops=",
                    SubgroupOpsName(r.subgroup_ops), " needs the device's ",
                    SubgroupOpsExtensions(r.subgroup_ops), of));
  for (bool with_index : {true, false}) {
    const std::string what =
        absl::StrCat(bits, "-bit keys", with_index ? " with an index" : "");
    need(r.Items(bits, with_index) >= 1,
         absl::StrCat("a radix tile holds at least one key per work-item (",
                      what, ")"));
    need(r.Tile(bits, with_index) < 65536,
         absl::StrCat("a radix tile holds fewer than 65536 keys (", what, ": ",
                      r.Tile(bits, with_index), ")"));
    need(r.ScatterLocalBytes(bits, with_index) <= device.local_mem_bytes,
         absl::StrCat("the scatter of ", what, " needs ",
                      r.ScatterLocalBytes(bits, with_index),
                      " bytes of local memory; the device has ",
                      device.local_mem_bytes));
    need(r.small_items <= r.Items(bits, with_index),
         absl::StrCat("radix.small_items is at most the keys per "
                      "work-item of ",
                      what));
  }
  need(r.SettleLocalBytes(bits) <= device.local_mem_bytes,
       absl::StrCat(
           "the settle of ", bits, "-bit keys needs ", r.SettleLocalBytes(bits),
           " bytes of local memory; the device has ", device.local_mem_bytes));
  const int block = bitonic.Block(bits);
  need(bitonic.LocalBytes(bits) <= device.local_mem_bytes,
       absl::StrCat("a bitonic block of ", bits, "-bit keys needs ",
                    bitonic.LocalBytes(bits),
                    " bytes of local memory; the device has ",
                    device.local_mem_bytes));
  need(block > 0 && (block & (block - 1)) == 0,
       absl::StrCat("bitonic.block_", bits, " is a power of two"));
  need(bitonic.work_group >= 1 && bitonic.work_group <= block / 2,
       absl::StrCat("bitonic.work_group is at most half of bitonic.block_",
                    bits));
}

}  // namespace

std::vector<std::string> EnginePolicy::Violations(
    const DeviceInfo& device) const {
  Constraints c;
  auto need = [&](bool ok, std::string what) { c.Need(ok, std::move(what)); };
  CheckRadix(radix, device, c);
  for (int bits : {32, 64}) CheckKeyWidth(*this, device, bits, c);
  need(static_cast<size_t>(bitonic.work_group) <= device.max_work_group,
       absl::StrCat("bitonic.work_group is at most the device's ",
                    device.max_work_group));
  need(transpose.matrices_per_group >= 1 &&
           static_cast<size_t>(transpose.matrices_per_group) <=
               device.max_work_group,
       "transpose.matrices_per_group is 1 to the device's work-group limit");
  need(transpose.sub_group_size >= 0 && transpose.sub_group_size % 32 == 0,
       "transpose.sub_group_size is 0 or a multiple of 32");
  return c.broken;
}

absl::Status EnginePolicy::CheckFits(const DeviceInfo& device) const {
  const std::vector<std::string> broken = Violations(device);
  if (broken.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("policy ", name, " does not fit ", device.name, ": ",
                   absl::StrJoin(broken, "; ")));
}

namespace {

// Every knob by its name in ToString() and ApplyPolicyOverrides().
struct Knob {
  const char* name;
  std::function<std::string(const EnginePolicy&)> get;
  // False: `value` is not a value of this knob.
  std::function<bool(absl::string_view value, EnginePolicy&)> set;
};

template <typename Part, typename T>
Knob Number(const char* name, Part EnginePolicy::*part, T Part::*field,
            bool signed_values = false) {
  return {name,
          [=](const EnginePolicy& p) { return absl::StrCat((p.*part).*field); },
          [=](absl::string_view v, EnginePolicy& p) {
            T x{};
            if (!absl::SimpleAtoi(v, &x) || (x < 0 && !signed_values)) {
              return false;
            }
            (p.*part).*field = x;
            return true;
          }};
}

Knob Flag(const char* name, bool RadixSortPolicy::*field) {
  return {name,
          [=](const EnginePolicy& p) {
            return std::string(p.radix.*field ? "1" : "0");
          },
          [=](absl::string_view v, EnginePolicy& p) {
            if (v != "0" && v != "1") return false;
            p.radix.*field = v == "1";
            return true;
          }};
}

constexpr std::pair<RadixPass, const char*> kPassNames[] = {
    {RadixPass::kThreeLaunch, "three-launch"},
    {RadixPass::kOneLaunch, "one-launch"},
    {RadixPass::kOneLaunchEarlyCounts, "one-launch-early-counts"}};
constexpr std::pair<TileRanking, const char*> kRankingNames[] = {
    {TileRanking::kWorkItemCounters, "work-item"},
    {TileRanking::kWarpEmulated, "warp-emulated"},
    {TileRanking::kWarpBallots, "warp-ballots"},
    {TileRanking::kWarpMasks, "warp-masks"},
    {TileRanking::kSubgroup, "subgroup"}};

template <typename E, size_t N>
const char* NameOf(E value, const std::pair<E, const char*> (&names)[N]) {
  for (const auto& [e, n] : names) {
    if (e == value) return n;
  }
  return "?";
}

template <typename E, size_t N>
bool Parse(absl::string_view text, const std::pair<E, const char*> (&names)[N],
           E* out) {
  for (const auto& [e, n] : names) {
    if (text == n) {
      *out = e;
      return true;
    }
  }
  return false;
}

const std::vector<Knob>& Knobs() {
  using E = EnginePolicy;
  using R = RadixSortPolicy;
  using B = BitonicPolicy;
  static const std::vector<Knob> knobs = {
      Number("radix.radix_bits", &E::radix, &R::radix_bits),
      Number("radix.local_bits", &E::radix, &R::local_bits),
      Number("radix.work_group", &E::radix, &R::work_group),
      Number("radix.items_32", &E::radix, &R::items_32),
      Number("radix.items_64", &E::radix, &R::items_64),
      Number("radix.items_32_keys", &E::radix, &R::items_32_keys),
      Number("radix.items_64_keys", &E::radix, &R::items_64_keys),
      Flag("radix.bank_pad", &R::bank_pad),
      {"radix.pass",
       [](const E& p) { return std::string(NameOf(p.radix.pass, kPassNames)); },
       [](absl::string_view v, E& p) {
         return Parse(v, kPassNames, &p.radix.pass);
       }},
      Number("radix.lookback", &E::radix, &R::lookback),
      {"radix.ranking",
       [](const E& p) {
         return std::string(NameOf(p.radix.ranking, kRankingNames));
       },
       [](absl::string_view v, E& p) {
         return Parse(v, kRankingNames, &p.radix.ranking);
       }},
      {"radix.ranking_64",
       [](const E& p) {
         return p.radix.ranking_64
                    ? std::string(NameOf(*p.radix.ranking_64, kRankingNames))
                    : std::string("same");
       },
       [](absl::string_view v, E& p) {
         if (v == "same") {
           p.radix.ranking_64.reset();
           return true;
         }
         TileRanking r{};
         if (!Parse(v, kRankingNames, &r)) return false;
         p.radix.ranking_64 = r;
         return true;
       }},
      Number("radix.warp_size", &E::radix, &R::warp_size),
      {"radix.subgroup_ops",
       [](const E& p) {
         return std::string(SubgroupOpsName(p.radix.subgroup_ops));
       },
       [](absl::string_view v, E& p) {
         return Parse(v, kSubgroupOpsNames, &p.radix.subgroup_ops);
       }},
      Flag("radix.direct_place_32", &R::direct_place_32),
      Flag("radix.direct_place_64", &R::direct_place_64),
      Number("radix.count_groups_per_cu", &E::radix, &R::count_groups_per_cu),
      Number("radix.count_unroll", &E::radix, &R::count_unroll),
      Number("radix.small_items", &E::radix, &R::small_items),
      Number("radix.small_max", &E::radix, &R::small_max),
      Number("radix.segment_radix_above", &E::radix, &R::segment_radix_above),
      Number("radix.segment_group_max", &E::radix, &R::segment_group_max),
      Number("radix.marked_status_max", &E::radix, &R::marked_status_max),
      Number("radix.status_count_bits", &E::radix, &R::status_count_bits),
      Flag("radix.status_prefetch", &R::status_prefetch),
      Flag("radix.late_lookback_unordered_32", &R::late_lookback_unordered_32),
      Number("radix.late_lookback_tiles_32", &E::radix,
             &R::late_lookback_tiles_32),
      Number("radix.stream_keys_32_min", &E::radix, &R::stream_keys_32_min),
      Number("radix.skip_check_min", &E::radix, &R::skip_check_min),
      Flag("radix.picked_digits", &R::picked_digits),
      Flag("radix.unordered_first", &R::unordered_first),
      Number("radix.picked_margin_bits_32", &E::radix,
             &R::picked_margin_bits_32, /*signed_values=*/true),
      Number("radix.picked_margin_bits_64", &E::radix,
             &R::picked_margin_bits_64, /*signed_values=*/true),
      Number("bitonic.block_32", &E::bitonic, &B::block_32),
      Number("bitonic.block_64", &E::bitonic, &B::block_64),
      Number("bitonic.work_group", &E::bitonic, &B::work_group),
      Number("bitonic.max_keys", &E::bitonic, &B::max_keys),
      Number("bitonic.max_keys_64", &E::bitonic, &B::max_keys_64),
      Number("bitonic.max_keys_32_keys", &E::bitonic, &B::max_keys_32_keys),
      Number("transpose.matrices_per_group", &E::transpose,
             &TransposePolicy::matrices_per_group),
      Number("transpose.sub_group_size", &E::transpose,
             &TransposePolicy::sub_group_size),
  };
  return knobs;
}

int RankingCode(TileRanking r) {
  switch (r) {
    case TileRanking::kWorkItemCounters:
      return SORTD_RANK_WORK_ITEM;
    case TileRanking::kWarpEmulated:
      return SORTD_RANK_WARP_EMULATED;
    case TileRanking::kWarpBallots:
      return SORTD_RANK_WARP_BALLOTS;
    case TileRanking::kWarpMasks:
      return SORTD_RANK_WARP_MASKS;
    case TileRanking::kSubgroup:
      return SORTD_RANK_SUBGROUP;
  }
  return SORTD_RANK_WORK_ITEM;
}

int SubgroupOpsCode(SubgroupOps ops) {
  switch (ops) {
    case SubgroupOps::kKhrBallot:
      return SORTD_SUBGROUP_KHR_BALLOT;
    case SubgroupOps::kKhr:
      return SORTD_SUBGROUP_KHR;
    case SubgroupOps::kIntel:
      return SORTD_SUBGROUP_INTEL;
  }
  return SORTD_SUBGROUP_KHR;
}

}  // namespace

std::string EnginePolicy::ToString() const {
  std::string out = name;
  for (const Knob& k : Knobs()) {
    absl::StrAppend(&out, " ", k.name, "=", k.get(*this));
  }
  return out;
}

absl::Status ApplyPolicyOverrides(absl::string_view spec,
                                  EnginePolicy* policy) {
  EnginePolicy p = *policy;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view key = item.substr(0, eq);
    const Knob* knob = nullptr;
    for (const Knob& k : Knobs()) {
      if (key == k.name) knob = &k;
    }
    if (knob == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy override '", item, "': no knob named '", key,
          "' (the knobs are those EnginePolicy::ToString prints)"));
    }
    if (eq == absl::string_view::npos || !knob->set(item.substr(eq + 1), p)) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy override '", item, "': not a value of ", key,
                       " (now ", knob->get(p), ")"));
    }
  }
  if (!spec.empty()) p.name = absl::StrCat(policy->name, " + overrides");
  *policy = std::move(p);
  return absl::OkStatus();
}

std::vector<std::string> RadixSortPolicy::IdleKnobs() const {
  std::vector<std::string> idle;
  auto note = [&](bool set, bool acts, const std::string& knob) {
    if (set && !acts) idle.push_back(absl::StrCat("radix.", knob));
  };
  note(direct_place_32, DirectPlace(32), "direct_place_32=1");
  note(direct_place_64, DirectPlace(64), "direct_place_64=1");
  note(status_prefetch, StatusPrefetch(), "status_prefetch=1");
  note(marked_status_max > 0, OneLaunch(),
       absl::StrCat("marked_status_max=", marked_status_max));
  note(late_lookback_unordered_32, UnorderedFirst(/*with_index=*/false),
       "late_lookback_unordered_32=1");
  note(late_lookback_tiles_32 > 0, LateRanked(32, false),
       absl::StrCat("late_lookback_tiles_32=", late_lookback_tiles_32));
  note(segment_radix_above > 0, WarpLevel(32) || WarpLevel(64),
       absl::StrCat("segment_radix_above=", segment_radix_above));
  return idle;
}

std::string RadixBuildOptions(const RadixSortPolicy& r, int key_bits,
                              bool with_index, int items, bool stream_keys) {
  const TileRanking rank = r.Ranking(key_bits);
  std::string out = absl::StrCat(
      "-DKEY_BITS=", key_bits, " -DRADIX_BITS=", r.radix_bits,
      " -DLOCAL_BITS=", r.LocalBits(), " -DWG=", r.work_group,
      " -DITEMS=", items, " -DHAS_INDEX=", with_index ? 1 : 0,
      " -DBANK_PAD=", r.bank_pad ? 1 : 0, " -DLOOKBACK=", r.lookback,
      " -DRANKING=", RankingCode(rank));
  if (r.pass == RadixPass::kOneLaunchEarlyCounts) {
    absl::StrAppend(&out, " -DEARLY_COUNTS=1");
  }
  if (r.DirectPlace(key_bits)) absl::StrAppend(&out, " -DDIRECT_PLACE=1");
  if (r.count_unroll > 1) {
    absl::StrAppend(&out, " -DCOUNT_UNROLL=", r.count_unroll);
  }
  if (r.StatusPrefetch()) {
    absl::StrAppend(&out, " -DSTATUS_PREFETCH=1");
  }
  if (key_bits == 32 && r.late_lookback_unordered_32 &&
      r.UnorderedFirst(with_index)) {
    absl::StrAppend(&out, " -DLATE_UNORDERED=1");
  }
  if (r.LateRanked(key_bits, with_index)) {
    absl::StrAppend(&out, " -DLATE_RANKED=1");
  }
  if (r.WarpLevel(key_bits) && r.warp_size != 32) {
    absl::StrAppend(&out, " -DWARP_SIZE=", r.warp_size);
  }
  if (rank == TileRanking::kSubgroup) {
    absl::StrAppend(&out, " -DSUBGROUP_OPS=", SubgroupOpsCode(r.subgroup_ops));
  }
  if (stream_keys) absl::StrAppend(&out, " -DSTREAM_KEYS=1");
  return out;
}

std::string BitonicBuildOptions(const BitonicPolicy& b, int key_bits,
                                bool with_index) {
  return absl::StrCat("-DKEY_BITS=", key_bits,
                      " -DHAS_INDEX=", with_index ? 1 : 0,
                      " -DBLOCK=", b.Block(key_bits), " -DBWG=", b.work_group);
}

std::string TransposeBuildOptions(const TransposePolicy& t,
                                  absl::string_view subgroup) {
  std::string out = absl::StrCat("-DMATRICES_PER_WG=", t.matrices_per_group);
  if (!subgroup.empty()) {
    absl::StrAppend(&out, " -D", subgroup, "=1");
    if (t.sub_group_size > 0) {
      absl::StrAppend(&out, " -DSUB_GROUP_SIZE=", t.sub_group_size);
    }
  }
  return out;
}

}  // namespace sortd::gpu
