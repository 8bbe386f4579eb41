#include "gpu/policy.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sortd::gpu {

// The NVIDIA fast paths use PTX for sm_70 and later (vote.sync,
// shfl.sync, bar.warp.sync): an NVIDIA GPU that reports an older compute
// capability gets the portable policy; one that reports none is taken to
// be recent.
bool NvidiaPtxRuns(const DeviceInfo& device) {
  return absl::StrContains(device.vendor, "NVIDIA") &&
         (device.nv_compute_major == 0 || device.nv_compute_major >= 7);
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
  const int rank = WarpRank(key_bits);
  const size_t counter_bytes =
      rank != 0 ? (work_group / 32) * radix * 4
                : (counters + (bank_pad ? counters / 32 : 0)) * 2;
  // The one-launch pass adds each digit's global base.
  const size_t onesweep_bytes = onesweep != 0 ? radix * 4 + 4 : 0;
  // Keys (and indices) share one array with warp_rank 4's digit masks
  // (three sets of a word per warp and digit), which are dead by the time
  // the keys are exchanged.
  const size_t tile_bytes =
      padded_tile * (key_bits / 8) + (with_index ? padded_tile * 4 : 0);
  const size_t mask_bytes = rank == 4 ? (work_group / 32) * radix * 3 * 4 : 0;
  return (std::max(tile_bytes, mask_bytes) + 7) / 8 * 8 + counter_bytes +
         radix * 4 + work_group * 4 + onesweep_bytes;
}

EnginePolicy EnginePolicy::For(const DeviceInfo& device) {
  EnginePolicy p;
  if (!device.is_gpu) {
    // CPU devices (PoCL): a work-group runs on one core; smaller groups and
    // tiles keep the per-group local arrays in cache.
    p.radix = {
        .radix_bits = 4, .work_group = 64, .items_32 = 16, .items_64 = 16};
    p.bitonic = {
        .block_32 = 2048, .block_64 = 2048, .work_group = 64, .max_keys = 2048};
    p.transpose = {.matrices_per_group = 16};
  } else if (NvidiaPtxRuns(device)) {
    // The H100's tuning, measured in same-call A/Bs of kernel time
    // (docs/decisions/004-radix-kernel.md): 8-bit passes, 7-17% faster than
    // 4-bit ones at 2^24-2^26 and the fastest of nine shapes swept; the
    // scatter's bank padding (1.17x u32, 1.45x u64 at 2^26); one-launch
    // passes with warp-level ranking of a whole digit and early counts
    // (2.2x u32 keys, 1.9x f32 argsort at 2^26 over the three-launch pass),
    // with longer tiles for keys-only sorts.
    p.radix = {.radix_bits = 8,
               .local_bits = 4,
               .work_group = 256,
               .items_32 = 16,
               .items_64 = 8,
               .items_32_keys = 24,
               .items_64_keys = 16,
               .bank_pad = 1,
               .onesweep = 2,
               .lookback = 4,
               // Digit peers through per-warp local masks: 3% (u32) and
               // 5% (u64) faster than ballots at 2^26.
               .warp_rank = 4,
               // 64-bit keys: ballots, with keys placed as they are ranked:
               // 80 -> 64 registers for keys-only tiles (four work-groups
               // per SM instead of three); u64 2^24 1.396 -> 1.314 ms, 2^28
               // 19.74 -> 18.06, 2^26 level to -5%. Masks need local
               // memory that direct placement uses for the keys.
               .warp_rank_64 = 2,
               .direct_place = 2,
               // Up to 2^18 keys: tiles of 1024 (0.095 -> 0.086 ms at
               // 2^16).
               .small_items = 4,
               .small_max = size_t{1} << 18,
               .segment_radix_above = 1024,
               // Alternating status areas: 0.076 vs 0.093 ms for u32 at
               // 2^16; a fill per pass 5% faster for u64 at 2^24-2^26.
               // (Marked statuses, below, now take precedence at every size
               // they cover, so this applies to no size here.)
               .alternate_status_max = size_t{1} << 18,
               // Marked statuses (no fill between passes) with each tile's
               // status lines prefetched to L2, and the digit count's loads
               // two vectors at a time; same-call A/B, kernel ms, against
               // the policy before: u32 2^24/2^26/2^28 0.522/1.685/
               // 6.821 -> 0.501/1.593/6.539, u64 1.366/5.034/18.54 ->
               // 1.283/4.962/17.45, 2^16 u32 0.070 -> 0.069. Marks alone
               // are level at u64 2^26 (the passes lose what the fills
               // cost), the prefetch alone was not measured.
               .marked_status_max = RadixSortPolicy::kMarkedStatusLimit,
               .status_prefetch = 1};
    // Two vectors per load round: the count kernel is bound by its local
    // atomics (about 2.2 TB/s of keys at every size); 2 against 1: u64
    // 2^24 0.0706 -> 0.068 ms, 2^26 0.245 -> 0.2405, u32 2^28 0.483 ->
    // 0.470; 4 was slower at u64 2^24 (0.075) though faster at 2^28.
    p.radix.count_unroll = 2;
    // Bitonic only below 2^12 keys: the warp-ranked one-launch radix beats
    // it from 2^16 on (u32 0.086 vs 0.150 ms, u64 0.147 vs 0.200; decision
    // record docs/decisions/005-bitonic-for-small-arrays.md).
    p.bitonic.max_keys = size_t{1} << 12;
    p.bitonic.max_keys_64 = size_t{1} << 12;
    p.transpose = {.matrices_per_group = 64};
  }
  // Shrink until the scatter kernel fits the device's local memory and
  // work-group limits (any vendor we have no entry for starts from the
  // defaults above).
  while (p.radix.work_group > 32 &&
         (static_cast<size_t>(p.radix.work_group) > device.max_work_group ||
          p.radix.ScatterLocalBytes(64, true) > device.local_mem_bytes)) {
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
  return p;
}

absl::Status EnginePolicy::CheckFits(const DeviceInfo& device) const {
  for (auto [bits, with_index] :
       {std::pair{32, true}, {64, true}, {32, false}, {64, false}}) {
    if (radix.ScatterLocalBytes(bits, with_index) > device.local_mem_bytes ||
        static_cast<size_t>(radix.work_group) > device.max_work_group ||
        radix.Tile(bits, with_index) >= 65536 ||
        radix.radix_bits % radix.LocalBits() != 0 || radix.lookback < 1 ||
        radix.lookback > 64 || radix.warp_rank < 0 || radix.warp_rank > 4 ||
        (radix.warp_rank != 0 && radix.work_group % 32 != 0) ||
        ((radix.warp_rank >= 2 || radix.max_registers != 0) &&
         !NvidiaPtxRuns(device)) ||
        radix.max_registers < 0 || radix.max_registers > 255 ||
        radix.onesweep < 0 || radix.onesweep > 2 ||
        radix.count_groups_per_cu < 1 || radix.count_unroll < 1 ||
        radix.count_unroll > 4 || radix.status_prefetch < 0 ||
        radix.status_prefetch > 1 ||
        (radix.status_prefetch != 0 && !NvidiaPtxRuns(device)) ||
        radix.small_items < 0 ||
        (radix.small_items > 0 &&
         radix.small_items > radix.Items(bits, with_index)) ||
        (radix.onesweep == 2 && radix.warp_rank == 0) ||
        radix.warp_rank_64 < 0 || radix.warp_rank_64 > 4 ||
        (radix.warp_rank == 0 && radix.warp_rank_64 != 0) ||
        (radix.warp_rank_64 >= 2 && !NvidiaPtxRuns(device)) ||
        radix.direct_place < 0 || radix.direct_place > 3 ||
        (radix.DirectPlace(bits) &&
         (radix.onesweep != 2 || radix.WarpRank(bits) < 1 ||
          radix.WarpRank(bits) > 3))) {
      return absl::FailedPreconditionError(
          absl::StrCat("radix policy ", ToString(), " does not fit ",
                       device.name, " (local memory ", device.local_mem_bytes,
                       " bytes, work-group <= ", device.max_work_group, ")"));
    }
  }
  for (int bits : {32, 64}) {
    const int block = bitonic.Block(bits);
    if (bitonic.LocalBytes(bits) > device.local_mem_bytes ||
        (block & (block - 1)) != 0 || bitonic.work_group > block / 2 ||
        static_cast<size_t>(bitonic.work_group) > device.max_work_group) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bitonic policy ", ToString(), " does not fit ", device.name));
    }
  }
  return absl::OkStatus();
}

std::string EnginePolicy::ToString() const {
  return absl::StrCat(
      "radix{bits=", radix.radix_bits, " local_bits=", radix.LocalBits(),
      " bank_pad=", radix.bank_pad, " onesweep=", radix.onesweep,
      " lookback=", radix.lookback, " warp_rank=", radix.warp_rank,
      " warp_rank_64=", radix.WarpRank(64),
      " direct_place=", radix.direct_place,
      " max_registers=", radix.max_registers,
      " small_items=", radix.small_items, " small_max=", radix.small_max,
      " segment_radix_above=", radix.segment_radix_above,
      " alternate_status_max=", radix.alternate_status_max,
      " marked_status_max=", radix.marked_status_max,
      " count_unroll=", radix.count_unroll,
      " status_prefetch=", radix.status_prefetch, " wg=", radix.work_group,
      " items32=", radix.items_32, " items64=", radix.items_64,
      " items32_keys=", radix.Items(32, false),
      " items64_keys=", radix.Items(64, false),
      "} bitonic{max_keys=", bitonic.max_keys,
      " max_keys_64=", bitonic.MaxKeys(64),
      "} transpose{matrices_per_group=", transpose.matrices_per_group, "}");
}

}  // namespace sortd::gpu
