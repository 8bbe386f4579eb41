// EnginePolicy's entries chosen and fitted to a device (For, Named), the
// sizes its kernels' local arrays take, the knobs a policy sets that do not
// act, and the -D build options every program is built with. The vendor
// entries are in policy_vendors.cc, the constraints in policy_checks.cc,
// the knobs by name in policy_knobs.cc.
#include "gpu/policy.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/kernels/sort_constants.h"
#include "gpu/policy_internal.h"

namespace sortd::gpu {

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
  // Key, index and counter arrays carry the kernel's bank padding (one
  // element in 32).
  const size_t padded_tile = tile + tile / 32;
  const size_t counters = radix * work_group;
  // Warp-level ranking: 32-bit counters per warp and digit; otherwise
  // 16-bit counters per work-item and digit, padded.
  const size_t warps = warp_size > 0 ? work_group / warp_size : 0;
  const size_t counter_bytes =
      WarpLevel() ? warps * radix * 4 : (counters + counters / 32) * 2;
  // The one-launch pass adds each digit's global base and a tile slot;
  // radix_segment_groups, built for every policy, each digit's base.
  const size_t onesweep_bytes = OneLaunch() ? radix * 4 + 4 : radix * 4;
  const size_t tile_bytes =
      padded_tile * (key_bits / 8) + (with_index ? padded_tile * 4 : 0);
  return (tile_bytes + 7) / 8 * 8 + counter_bytes + radix * 4 + work_group * 4 +
         onesweep_bytes;
}

namespace {

using policy_internal::CpuPolicy;
using policy_internal::IntelSubgroupPolicy;
using policy_internal::NvidiaPtxPolicy;

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

int RankingCode(TileRanking r) {
  switch (r) {
    case TileRanking::kWorkItemCounters:
      return SORTD_RANK_WORK_ITEM;
    case TileRanking::kWarpEmulated:
      return SORTD_RANK_WARP_EMULATED;
    case TileRanking::kWarpBallots:
      return SORTD_RANK_WARP_BALLOTS;
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

std::vector<std::string> RadixSortPolicy::IdleKnobs() const {
  std::vector<std::string> idle;
  auto note = [&](bool set, bool acts, const std::string& knob) {
    if (set && !acts) idle.push_back(absl::StrCat("radix.", knob));
  };
  note(status_prefetch, StatusPrefetch(), "status_prefetch=1");
  note(marked_status_max > 0, OneLaunch(),
       absl::StrCat("marked_status_max=", marked_status_max));
  note(late_lookback_unordered_32, UnorderedFirst(/*with_index=*/false),
       "late_lookback_unordered_32=1");
  note(late_lookback_tiles_32 > 0, LateRanked(32, false),
       absl::StrCat("late_lookback_tiles_32=", late_lookback_tiles_32));
  note(segment_radix_above > 0, WarpLevel(),
       absl::StrCat("segment_radix_above=", segment_radix_above));
  return idle;
}

std::string RadixBuildOptions(const RadixSortPolicy& r, int key_bits,
                              bool with_index, int items, bool stream_keys) {
  const TileRanking rank = r.ranking;
  std::string out = absl::StrCat(
      "-DKEY_BITS=", key_bits, " -DRADIX_BITS=", r.radix_bits,
      " -DWG=", r.work_group, " -DITEMS=", items,
      " -DHAS_INDEX=", with_index ? 1 : 0, " -DLOOKBACK=", r.lookback,
      " -DRANKING=", RankingCode(rank));
  if (r.pass == RadixPass::kOneLaunchEarlyCounts) {
    absl::StrAppend(&out, " -DEARLY_COUNTS=1");
  }
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
  if (r.WarpLevel() && r.warp_size != 32) {
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
