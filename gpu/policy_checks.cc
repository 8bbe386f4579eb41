// Whether an EnginePolicy runs on a device: every constraint of the radix,
// bitonic and transpose kernels on the policy's knobs and on the device's
// local memory, work-group limit and extensions, each broken one reported
// as a sentence (EnginePolicy::Violations, CheckFits).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/policy.h"
#include "gpu/policy_internal.h"

namespace sortd::gpu {
namespace {

using policy_internal::SubgroupOpsName;

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
  need(r.pass != RadixPass::kOneLaunchEarlyCounts || r.WarpLevel(),
       "radix.pass=one-launch-early-counts needs warp-level ranking");
}

// What warp-level and sub-group ranking need.
void CheckRanking(const RadixSortPolicy& r, const DeviceInfo& device,
                  Constraints& c) {
  auto need = [&](bool ok, std::string what) { c.Need(ok, std::move(what)); };
  const bool ptx = NvidiaPtxRuns(device);
  const TileRanking rank = r.ranking;
  need(rank == TileRanking::kWorkItemCounters ||
           (r.warp_size > 0 && r.work_group % r.warp_size == 0),
       absl::StrCat("warp-level ranking needs radix.work_group % ", r.warp_size,
                    " == 0 (radix.warp_size)"));
  // Every shipped policy that ranks by warps uses 8-bit digits; 4-bit
  // digits with warp ranking are a build no device is tuned for.
  need(rank == TileRanking::kWorkItemCounters || r.radix_bits == 8,
       "warp-level ranking needs radix.radix_bits=8");
  need(rank != TileRanking::kWarpBallots || ptx,
       "warp-ballots ranking needs an NVIDIA GPU that runs PTX");
  need(rank != TileRanking::kWarpBallots || r.warp_size == 32,
       "warp-ballots ranking needs radix.warp_size=32");
  need(rank != TileRanking::kSubgroup || SubgroupOpsRun(device, r.subgroup_ops),
       absl::StrCat("subgroup ranking with radix.subgroup_ops=",
                    SubgroupOpsName(r.subgroup_ops), " needs the device's ",
                    SubgroupOpsExtensions(r.subgroup_ops)));
}

// What the builds for `bits`-wide keys need.
void CheckKeyWidth(const EnginePolicy& p, const DeviceInfo& device, int bits,
                   Constraints& c) {
  auto need = [&](bool ok, std::string what) { c.Need(ok, std::move(what)); };
  const RadixSortPolicy& r = p.radix;
  const BitonicPolicy& bitonic = p.bitonic;
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
  CheckRanking(radix, device, c);
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

}  // namespace sortd::gpu
