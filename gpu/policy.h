// Tuning as data: the launch shapes of every kernel, chosen per device.
// Nothing inside a kernel is a magic number: these values reach the kernels
// as -D build options.
//
//   EnginePolicy p = EnginePolicy::For(device_info);
//   std::string log_line = p.ToString();
#ifndef SORTD_GPU_POLICY_H_
#define SORTD_GPU_POLICY_H_

#include <string>

#include "absl/status/status.h"
#include "gpu/device.h"

namespace sortd::gpu {

struct RadixSortPolicy {
  int radix_bits = 4;  // digit width of a global pass: 4 or 8
  // Digit width of the scatter's in-tile ranking: 0 (= radix_bits) or 4
  // under 8-bit passes (two stable 4-bit ranking steps per pass).
  int local_bits = 0;
  int work_group = 256;  // work-items per group
  int items_32 = 16;     // keys per work-item, 32-bit keys
  int items_64 = 8;      // keys per work-item, 64-bit keys
  // Keys per work-item of sorts without an index (keys only): with no
  // index array in local memory a tile can hold more keys. 0: as above.
  int items_32_keys = 0;
  int items_64_keys = 0;
  // Pad the scatter's local arrays against bank conflicts (1) or not (0).
  int bank_pad = 1;
  // One launch per pass with a decoupled look-back (radix_onesweep, 1)
  // instead of histogram, scan and scatter launches (0). It needs started
  // work-groups to keep running (NVIDIA, PoCL); arrays of 2^30 keys or more
  // and segments always take the three-launch passes. 2: the same with
  // early counts (a tile counts its digits, publishes them and looks back
  // before it ranks; needs warp_rank).
  int onesweep = 0;
  // Predecessor tiles the look-back reads at once.
  int lookback = 8;
  // How the scatter ranks a tile (-DWARP_RANK): 0, per-work-item counters
  // in local memory, in local_bits-wide steps; 1, warp-level ranking, the
  // warp operations emulated through local memory (portable, slow: the
  // twin that PoCL tests); 2, warp-level ranking with NVIDIA PTX ballots
  // and shuffles; 3, as 2 with the warp's digit counters added to
  // atomically; 4, as 3 with the lanes of a digit found through per-warp
  // masks in local memory (a local atomic OR and one warp barrier per key)
  // instead of a ballot per digit bit (2-4: NVIDIA only). Warp-level
  // ranking ranks a whole digit in one step (local_bits does not apply);
  // work_group % 32 == 0.
  int warp_rank = 0;
  // 64-bit keys' warp_rank, where it differs (0: warp_rank).
  int warp_rank_64 = 0;
  // With early counts (onesweep 2) and warp_rank 1-3: keys are written to
  // their places in local memory as they are ranked (-DDIRECT_PLACE: the
  // early counts kept per warp give each warp's start within each digit
  // before the ranking), which holds no ranks in registers. Bit 0: for
  // 32-bit keys; bit 1: for 64-bit keys.
  int direct_place = 0;
  // Registers per work-item the radix kernels may use (NVIDIA's
  // -cl-nv-maxrregcount; 0: the compiler's choice). Fewer registers let
  // more work-groups stay resident, which the one-launch pass's look-back
  // needs; NVIDIA only. On the H100's driver the option is accepted but
  // changes no kernel's register count, so no policy sets it.
  int max_registers = 0;
  // The digit-counting (and encoding) kernel runs at most this many
  // work-groups per compute unit, each striding over tiles, so that few
  // groups add their counts to the same global counters.
  int count_groups_per_cu = 8;
  // 16-byte vectors each work-item of the digit count loads at once
  // (-DCOUNT_UNROLL, 1-4).
  int count_unroll = 1;
  // Radix passes over at most small_max keys use tiles of small_items keys
  // per work-item (a second build of the kernels): short arrays then make
  // enough tiles to occupy the device, which is what their latency needs.
  // 0: one tile size for all.
  int small_items = 0;
  size_t small_max = 0;
  // Segments of more than this many keys, up to one tile, are sorted by
  // radix_segments: one work-group each, every pass in local memory (needs
  // warp_rank). 0: off (bitonic up to its block, radix passes beyond).
  size_t segment_radix_above = 0;
  // How the one-launch passes get zeroed look-back status words. Arrays of
  // at most this many keys: two areas the passes alternate between, each
  // pass zeroing the other (one fill per sort, which short arrays' latency
  // needs); longer ones: a fill before every pass (cheaper for them).
  size_t alternate_status_max = 0;
  // Arrays of at most this many keys (and fewer than 2^29) take marked
  // look-back statuses instead: one area for every pass, zeroed once per
  // sort, each pass's words marked with its parity so that the previous
  // pass's words read as not yet published (no fill between passes).
  // Takes precedence over alternate_status_max. 0: off.
  size_t marked_status_max = 0;
  // With one-launch passes: 1, each tile has its own status lines brought
  // to L2 as it starts (-DSTATUS_PREFETCH, PTX: NVIDIA only); 0, not.
  int status_prefetch = 0;
  // Arrays of fewer keys than this can take marked statuses (29-bit counts).
  static constexpr size_t kMarkedStatusLimit = size_t{1} << 29;
  bool MarkedStatus(size_t count) const {
    return count <= marked_status_max && count < kMarkedStatusLimit;
  }

  int Items(int key_bits, bool with_index) const {
    const int keys_only = key_bits == 64 ? items_64_keys : items_32_keys;
    if (!with_index && keys_only > 0) return keys_only;
    return key_bits == 64 ? items_64 : items_32;
  }
  int Tile(int key_bits, bool with_index) const {
    return work_group * Items(key_bits, with_index);
  }
  bool Small(size_t count) const {
    return small_items > 0 && count <= small_max;
  }
  // The tile of radix passes over `count` keys.
  int Tile(int key_bits, bool with_index, size_t count) const {
    return Small(count) ? work_group * small_items : Tile(key_bits, with_index);
  }
  int WarpRank(int key_bits) const {
    return key_bits == 64 && warp_rank_64 != 0 ? warp_rank_64 : warp_rank;
  }
  bool DirectPlace(int key_bits) const {
    return (direct_place & (key_bits == 64 ? 2 : 1)) != 0;
  }
  int LocalBits() const {
    return local_bits > 0 && warp_rank == 0 ? local_bits : radix_bits;
  }
  // Local memory of the scatter kernel, the largest user.
  size_t ScatterLocalBytes(int key_bits, bool with_index) const;
};

struct BitonicPolicy {
  int block_32 = 4096;  // keys one work-group sorts in local memory
  int block_64 = 2048;
  int work_group = 256;
  // Single arrays of at most this many keys are sorted by the bitonic
  // network instead of radix: its one launch beats radix's passes there.
  // max_keys_64 for 64-bit keys (0: max_keys).
  size_t max_keys = 4096;
  size_t max_keys_64 = 0;

  size_t MaxKeys(int key_bits) const {
    return key_bits == 64 && max_keys_64 > 0 ? max_keys_64 : max_keys;
  }

  int Block(int key_bits) const { return key_bits == 64 ? block_64 : block_32; }
  size_t LocalBytes(int key_bits) const {
    return static_cast<size_t>(Block(key_bits)) * (key_bits / 8 + 4);
  }
};

struct TransposePolicy {
  int matrices_per_group = 64;  // also the work-group size
};

// Whether the device runs the NVIDIA PTX fast paths (warp_rank 2-4,
// max_registers): an NVIDIA GPU of compute capability 7 or later (or one
// that does not report it).
bool NvidiaPtxRuns(const DeviceInfo& device);

struct EnginePolicy {
  RadixSortPolicy radix;
  BitonicPolicy bitonic;
  TransposePolicy transpose;

  // The policy for a device: by vendor and kind, then fitted to its local
  // memory and work-group limits.
  static EnginePolicy For(const DeviceInfo& device);
  // FAILED_PRECONDITION when the device cannot run this policy.
  absl::Status CheckFits(const DeviceInfo& device) const;
  std::string ToString() const;
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_POLICY_H_
