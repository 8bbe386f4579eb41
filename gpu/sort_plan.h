// What one sort on the OpenCL engine does and holds, decided before it
// starts: the algorithm (bitonic network or radix passes, and which kind of
// radix pass) and every device array with its size. The engine allocates
// from the plan, and its memory footprint (what admission and the run
// budget count) is the plan's sum, so the two cannot drift apart.
//
//   SortPlan plan = PlanSort(policy, SortAlgorithm::kAuto, shape, n);
//   if (plan.Footprint() > budget) ...;
#ifndef SORTD_GPU_SORT_PLAN_H_
#define SORTD_GPU_SORT_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/sorter.h"
#include "gpu/kernel_args.h"
#include "gpu/policy.h"

namespace sortd::gpu {

inline size_t DivUp(size_t a, size_t b) { return (a + b - 1) / b; }
inline size_t NextPow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// The buffers of one run of radix passes over `count` keys (RadixPasses).
struct RadixPassPlan {
  size_t count = 0;
  int key_bits = 32;
  bool with_index = false;
  bool one_launch = false;  // one launch per pass (else three)
  bool marked = false;      // one-launch: marked look-back statuses
  bool small = false;       // the short-array build of the kernels
  bool stream = false;      // the streaming-load build (stream_keys_32_min)
  // One-launch: the mask of a look-back status word's count.
  uint32_t status_value_mask = 0;
  // The first pass may leave a tile's keys of one digit in any order, where
  // the keys it reads are in none to keep (RawEnds::unordered).
  bool unordered_first = false;
  // The ranked passes walk back over earlier tiles after ranking
  // (radix_late_onesweep; RadixSortPolicy::late_lookback_tiles_32).
  bool late_ranked = false;
  size_t tile = 0, tiles = 0, passes = 0, radix = 0;
  LaunchGrid tile_grid;  // a work-group per tile
  // One-launch: every pass's digit starts, and the look-back status words
  // with the passes' tile counters.
  size_t starts_bytes = 0, status_bytes = 0;
  // Three-launch: the tiles' digit offsets, and the block sums of each
  // level of their scan.
  size_t offsets_bytes = 0;
  std::vector<size_t> sums_bytes;
  // The stage every launch of the passes is timed as; null: each kernel's
  // own (histogram, scan, scatter).
  const char* stage = nullptr;
  const char* Stage(const char* own) const {
    return stage != nullptr ? stage : own;
  }

  // Device bytes, by pool size class.
  size_t Footprint() const;
};

// `has_totals`: every pass's digit counts are known before the passes
// (single arrays count them as they upload; segments do not), which
// one-launch passes need.
RadixPassPlan PlanRadixPasses(const RadixSortPolicy& policy, int key_bits,
                              bool with_index, size_t count, bool has_totals);

enum class SortAlgorithm {
  kAuto,   // by size: the policy's bitonic.max_keys* (BitonicPolicy::MaxKeys)
  kRadix,  // forced (benchmarks measure both)
  kBitonic,
};

struct SortPlan {
  bool bitonic = false;
  int key_bits = 32;
  bool with_index = false;
  size_t count = 0;
  // Elements of each key and index array: a power of two of at least one
  // block for the bitonic network, else count.
  size_t padded = 0;
  // Bytes of each array (0: none): the raw keys as uploaded, the ordered
  // keys and indices (two of each, ping-pong), values in and out, and
  // every pass's digit totals.
  size_t raw_bytes = 0, keys_bytes = 0, index_bytes = 0, values_bytes = 0,
         totals_bytes = 0;
  RadixPassPlan passes;  // radix sorts only
  // Radix passes over picked digits (RadixSortPolicy::PickedMarginBits):
  // how many (0: every digit in turn), and the bytes of their picks.
  size_t picked_slots = 0, picks_bytes = 0;

  size_t Footprint() const;
};

SortPlan PlanSort(const EnginePolicy& policy, SortAlgorithm algorithm,
                  const SortJob& shape, size_t count);

// How many picked digits a sort of job's keys by `plan` takes. From the
// SORTD_PICK_SAMPLES keys of its host array that radix_digit_starts
// samples on the device, by the same rule as its samples there: where the
// runs plan.picked_slots digits would leave look too long to settle (a
// sort that would only learn so on the device, after its picked passes),
// every digit that varies among the samples, when fewer than all (narrow
// keys, say), else 0: every digit in turn; otherwise plan.picked_slots.
// The device's other test, of each digit's number of values, needs every
// key. A job made of parts keeps plan.picked_slots (the device judges).
size_t PickedSlotsFor(const SortJob& job, const SortPlan& plan, int radix_bits);

// A segmented sort whose segments are too long for one work-group each,
// sorted as one array: the whole array by key, with an index whatever the
// job asks for (`keys`); then by segment, a stable sort of the keys'
// segment ids carrying their places in the key order (`ids`, u32 keys with
// an index, as many passes as the number of segments needs); then a
// gather that puts the two orders together.
struct SegmentedPlan {
  SortPlan keys;
  RadixPassPlan ids;
  size_t id_passes = 0;  // passes of `ids` that run (0: one segment)
  // The segment offsets, the ids and places (two of each, ping-pong), and
  // the ids' digit totals (known on the host from the segments' lengths).
  size_t offsets_bytes = 0, ids_bytes = 0, id_totals_bytes = 0;

  size_t Footprint() const;
};

SegmentedPlan PlanSegmentedSort(const EnginePolicy& policy,
                                const SortJob& shape, size_t count,
                                size_t segments);

// Whether a job carries an index through the sort (values or a
// permutation).
inline bool WithIndex(const SortJob& job) {
  return job.value_type != ValueType::kNone || job.permutation_out != nullptr;
}
inline int KeyBits(const SortJob& job) {
  return static_cast<int>(KeySize(job.key_type) * 8);
}

}  // namespace sortd::gpu

#endif  // SORTD_GPU_SORT_PLAN_H_
