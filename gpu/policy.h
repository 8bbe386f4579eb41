// Tuning as data: the launch shapes and kernel variants of every kernel,
// chosen per device by name. Nothing inside a kernel is a magic number:
// these values reach the kernels as -D build options, made here and only
// here (RadixBuildOptions and its siblings).
//
//   EnginePolicy p = EnginePolicy::For(device_info);   // p.name: "nvidia-ptx"
//   auto q = EnginePolicy::Named("intel-subgroups", device_info);  // forced
//   absl::Status fits = p.CheckFits(device_info);      // one line per problem
//   std::string text = p.ToString();                   // key=value ...
//   absl::Status s = ApplyPolicyOverrides("radix.lookback=8", &p);
#ifndef SORTD_GPU_POLICY_H_
#define SORTD_GPU_POLICY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpu/device.h"

namespace sortd::gpu {

// How one LSD radix pass runs.
enum class RadixPass {
  // Digit histogram, scan and scatter launches: runs on any device.
  kThreeLaunch,
  // One launch with a decoupled look-back: a tile counts its digits,
  // publishes them and looks back before it ranks its keys (needs
  // warp-level ranking). Tiles wait on tiles that started before them,
  // which needs a device that keeps started work-groups running (NVIDIA,
  // Intel, PoCL). Arrays of 2^30 keys or more and long segments still take
  // three launches.
  kOneLaunchEarlyCounts,
};

// How the scatter ranks the keys of a tile by digit (-DRANKING, values in
// gpu/kernels/sort_constants.h).
enum class TileRanking {
  // Per-work-item counters in local memory.
  kWorkItemCounters,
  // Each warp of 32 work-items ranks a whole digit in one step, its warp
  // operations done through local memory: the portable twin of kBallots.
  kWarpEmulated,
  // Warp-level, the lanes sharing a digit found by one PTX ballot per digit
  // bit (NVIDIA sm_70 and later).
  kWarpBallots,
  // Warp-level, a warp being an OpenCL sub-group of radix.warp_size
  // work-items (the kernels' required sub-group size): the lanes sharing a
  // digit found by one sub-group ballot (or reduction) per digit bit, the
  // warp's count read from its leader by a sub-group shuffle, the
  // work-group scans by sub-group scans (Intel GPUs; kWarpEmulated with the
  // same warp_size is its portable twin).
  kSubgroup,
};

// The sub-group built-ins of kSubgroup ranking, each needing the device's
// extensions (and cl_intel_required_subgroup_size for the required size).
enum class SubgroupOps {
  // sub_group_ballot per digit bit, sub_group_shuffle (cl_khr_subgroups,
  // cl_khr_subgroup_ballot, cl_khr_subgroup_shuffle).
  kKhrBallot,
  // A ballot made by sub_group_reduce_add of each lane's bit,
  // sub_group_shuffle (cl_khr_subgroups, cl_khr_subgroup_shuffle).
  kKhr,
  // The same reduction, intel_sub_group_shuffle (cl_intel_subgroups).
  kIntel,
};

struct RadixSortPolicy {
  // Digit width of a pass: 4 or 8. Every ranking ranks a whole digit in
  // one step.
  int radix_bits = 4;
  int work_group = 256;  // work-items per group
  size_t WorkGroupSize() const { return static_cast<size_t>(work_group); }
  int items_32 = 16;  // keys per work-item, 32-bit keys
  int items_64 = 8;   // keys per work-item, 64-bit keys
  // Keys per work-item of sorts without an index (keys only): with no
  // index array in local memory a tile can hold more keys. 0: as above.
  int items_32_keys = 0;
  int items_64_keys = 0;
  RadixPass pass = RadixPass::kThreeLaunch;
  // Predecessor tiles the look-back reads at once (one-launch passes).
  int lookback = 8;
  TileRanking ranking = TileRanking::kWorkItemCounters;  // both key widths
  // Work-items of a warp under warp-level ranking: 32 for kWarpBallots
  // (NVIDIA's warp); 8, 16 or 32 for kSubgroup (the kernels'
  // required sub-group size) and kWarpEmulated.
  int warp_size = 32;
  // kSubgroup ranking's built-ins.
  SubgroupOps subgroup_ops = SubgroupOps::kKhrBallot;
  // 16-byte vectors each work-item of the digit count loads at once (1-4).
  int count_unroll = 1;
  // Radix passes over at most small_max keys use tiles of small_items keys
  // per work-item (a second build of the kernels): short arrays then make
  // enough tiles to occupy the device, which is what their latency needs.
  // 0: one tile size for all.
  int small_items = 0;
  size_t small_max = 0;
  // Segments of more than this many keys, up to one tile, are sorted by
  // radix_segments: one work-group each, every pass in local memory (needs
  // warp-level ranking). 0: off (bitonic up to its block, radix passes
  // beyond).
  size_t segment_radix_above = 0;
  // Longer segments of up to this many keys are sorted by
  // radix_segment_groups: one work-group each, looping over the segment's
  // tiles in every pass, all in one launch (a batch of mid-size sorts then
  // costs one launch and its transfers). A segment longer still sorts the
  // whole array as one (by key, then by segment). 0: off. 16K: H100
  // batches of 16K and 64K keys (decision 005, "Segment groups").
  size_t segment_group_max = size_t{1} << 14;
  // One-launch passes over at most this many keys (and fewer than 2^29)
  // take marked look-back statuses: one area for every pass, zeroed once
  // per sort, each pass's words marked with its parity so that the previous
  // pass's words read as not yet published (no fill between passes).
  // Longer arrays get a fill before every pass. 0: off.
  size_t marked_status_max = 0;
  // Width of an unmarked look-back status's count (the word's top two bits
  // hold its kind): one-launch passes take arrays of at most
  // 2^status_count_bits keys. At exactly that many, only the last tile's
  // prefix can overflow, and no tile reads it. Narrower widths are for
  // tests, which reach that case with small arrays.
  int status_count_bits = kStatusCountBits;
  static constexpr int kStatusCountBits = 30;
  // One-launch passes: each tile has its own status lines brought to L2 as
  // it starts (PTX: NVIDIA only). Three-launch passes have no statuses: the
  // knob does nothing there.
  bool status_prefetch = false;
  // One-launch passes with early counts over 32-bit keys without an index:
  // a tile publishes its digit counts as soon as it has counted them, but
  // walks back over earlier tiles' statuses only once its keys are in place
  // in local memory, just before it stores them, so that the walk finds
  // more of those tiles done. The unranked first pass does so where
  // late_lookback_unordered_32 is on, the ranked passes (with early
  // counts) of at least late_lookback_tiles_32 tiles (0: never). Where the
  // passes have no such form (three-launch passes, no unranked first pass)
  // the knobs do nothing, so that overriding those leaves a policy that
  // still fits.
  bool late_lookback_unordered_32 = false;
  size_t late_lookback_tiles_32 = 0;
  // Whether a build (of this key width, with or without an index) has the
  // ranked pass with the late walk (radix_late_onesweep).
  bool LateRanked(int key_bits, bool with_index) const {
    return late_lookback_tiles_32 > 0 && key_bits == 32 && !with_index &&
           pass == RadixPass::kOneLaunchEarlyCounts;
  }
  // Sorts of 32-bit keys without an index of at least this many keys (and
  // above small_max) run a third build of the kernels, whose passes read
  // their keys with a streaming cache hint (PTX: NVIDIA only). 0: never.
  size_t stream_keys_32_min = 0;
  bool StreamKeys(int key_bits, bool with_index, size_t count) const {
    return stream_keys_32_min > 0 && key_bits == 32 && !with_index &&
           count >= stream_keys_32_min && !Small(count);
  }
  // Sorts of at least this many keys read their digit totals back, while
  // the first pass runs, and skip later passes whose digit every key
  // shares; shorter ones run every pass, as the read's round trip to the
  // host costs more than the passes it could save there. 0: every sort.
  size_t skip_check_min = 0;
  // Keys-only sorts of one array pass over only the highest digits in
  // which the keys differ, as many as cover log2(count) + the margin bits
  // of their key width, and then sort the runs of keys equal in those
  // digits in place (radix_settle; every digit is sorted where a run of
  // more than SORTD_SETTLE_MAX keys is out of order). With uniform keys
  // runs then hold about 2^-margin keys on average. Off: every digit,
  // always.
  bool picked_digits = true;
  int picked_margin_bits_32 = 4;
  int picked_margin_bits_64 = 4;
  int PickedMarginBits(int key_bits) const {
    return key_bits == 64 ? picked_margin_bits_64 : picked_margin_bits_32;
  }
  // One-launch passes with early counts: the first pass of a keys-only
  // sort from scratch places each tile's keys of one digit in the order
  // its local atomics counted them, not ranked by warps (any order of equal
  // digits is right there: no earlier pass ordered them). Off: ranked like
  // every other pass.
  bool unordered_first = true;
  // Whether the passes of a build (with or without an index) have the
  // unranked first pass (radix_unordered_onesweep) and may take it.
  bool UnorderedFirst(bool with_index) const {
    return unordered_first && !with_index &&
           pass == RadixPass::kOneLaunchEarlyCounts;
  }

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
  bool WarpLevel() const { return ranking != TileRanking::kWorkItemCounters; }
  bool OneLaunch() const { return pass != RadixPass::kThreeLaunch; }
  // Whether the passes prefetch their status lines: the knob, where the
  // passes have statuses (one launch).
  bool StatusPrefetch() const { return status_prefetch && OneLaunch(); }
  // The knobs that are on but do nothing under this pass form and ranking
  // (see each knob), as key=value, for the startup log and the benchmark
  // to name beside the policy. Only knobs that are off in the default
  // policy and turn a form on are named; knobs with values in every
  // policy (unordered_first, lookback, warp_size, subgroup_ops) are not.
  std::vector<std::string> IdleKnobs() const;
  // Local memory of the scatter kernel, the largest user.
  size_t ScatterLocalBytes(int key_bits, bool with_index) const;
  // Keys of one radix_settle tile: SORTD_SETTLE_ITEMS a work-item. Its
  // work-group owns the runs that start in the tile.
  size_t SettleTileKeys() const;
  // Local memory of radix_settle (a tile and its halos, with each place's
  // run start and end).
  size_t SettleLocalBytes(int key_bits) const;
};

struct BitonicPolicy {
  int block_32 = 4096;  // keys one work-group sorts in local memory
  int block_64 = 2048;
  int work_group = 256;
  size_t WorkGroupSize() const { return static_cast<size_t>(work_group); }
  // Single arrays of at most this many keys are sorted by the bitonic
  // network instead of radix: its few launches beat radix's passes there.
  // max_keys_64 for 64-bit keys, max_keys_32_keys for 32-bit keys sorted
  // without an index (keys only); 0: max_keys.
  size_t max_keys = 4096;
  size_t max_keys_64 = 0;
  size_t max_keys_32_keys = 0;

  size_t MaxKeys(int key_bits, bool keys_only) const {
    if (key_bits == 64) return max_keys_64 > 0 ? max_keys_64 : max_keys;
    return keys_only && max_keys_32_keys > 0 ? max_keys_32_keys : max_keys;
  }
  int Block(int key_bits) const { return key_bits == 64 ? block_64 : block_32; }
  size_t LocalBytes(int key_bits) const {
    return static_cast<size_t>(Block(key_bits)) * (key_bits / 8 + 4);
  }
};

struct TransposePolicy {
  int matrices_per_group = 64;  // also the work-group size
  // The sub-group kernel's required sub-group size (32: a 32-row matrix
  // per sub-group); 0: the compiler's choice. Where the device has no
  // sub-group shuffles the portable kernel runs and this is unused.
  int sub_group_size = 0;
};

// Whether the device runs the NVIDIA PTX fast paths (kWarpBallots,
// status_prefetch, stream_keys_32_min): an NVIDIA GPU of compute capability 7
// or later (or one that does not report it).
bool NvidiaPtxRuns(const DeviceInfo& device);

// Whether the device has the extensions of kSubgroup ranking with `ops`
// (cl_intel_required_subgroup_size included).
bool SubgroupOpsRun(const DeviceInfo& device, SubgroupOps ops);
// The first of kKhrBallot, kIntel, kKhr that the device runs; none where
// it has no sub-group ranking.
std::optional<SubgroupOps> BestSubgroupOps(const DeviceInfo& device);
// Whether the device gets the "intel-subgroups" policy from For(): an
// Intel GPU with sub-group ranking's extensions.
bool IntelSubgroupsRun(const DeviceInfo& device);

struct EnginePolicy {
  // Which entry of For() this is ("nvidia-ptx", "intel-subgroups", "gpu",
  // "cpu"), or what made it ("... + overrides").
  std::string name = "gpu";
  RadixSortPolicy radix;
  BitonicPolicy bitonic;
  TransposePolicy transpose;

  // The named policy for a device (by vendor and kind), then fitted to its
  // local memory and work-group limits.
  static EnginePolicy For(const DeviceInfo& device);
  // The entry named `name` (one of Names()) fitted to `device` as For()
  // fits it, whatever the device's vendor: to run one device with another
  // kind's policy (tests, benchmarks). CheckFits still decides whether it
  // runs there. NOT_FOUND names the entries.
  static absl::StatusOr<EnginePolicy> Named(absl::string_view name,
                                            const DeviceInfo& device);
  // The names of For()'s entries.
  static std::vector<std::string> Names();
  // The entry of For() that uses no vendor extension on this kind of
  // device ("gpu" or "cpu"): the portable twin a vendor entry gives way to
  // where it does not build, probe or warm up.
  static std::string PortableName(const DeviceInfo& device);
  // Every constraint the policy breaks on `device`, one sentence each;
  // empty when it fits.
  std::vector<std::string> Violations(const DeviceInfo& device) const;
  // FAILED_PRECONDITION naming the policy, the device and every violation.
  absl::Status CheckFits(const DeviceInfo& device) const;
  // name, then every knob as key=value (the keys ApplyPolicyOverrides takes).
  std::string ToString() const;
};

// Sets the knobs named in `spec`, a comma-separated list of key=value as
// ToString() prints them (e.g. "radix.pass=three-launch,radix.lookback=8");
// INVALID_ARGUMENT names a bad key or value. For benchmarks of other
// shapes on one device; CheckFits still decides whether it runs.
absl::Status ApplyPolicyOverrides(absl::string_view spec, EnginePolicy* policy);

// The -D options of each program (and their variant), from the policy.
// `stream_keys`: the build of RadixSortPolicy::stream_keys_32_min.
std::string RadixBuildOptions(const RadixSortPolicy& radix, int key_bits,
                              bool with_index, int items,
                              bool stream_keys = false);
std::string BitonicBuildOptions(const BitonicPolicy& bitonic, int key_bits,
                                bool with_index);
// `subgroup`: "" (portable kernel), "SUBGROUP_KHR" or "SUBGROUP_INTEL".
std::string TransposeBuildOptions(const TransposePolicy& transpose,
                                  absl::string_view subgroup);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_POLICY_H_
