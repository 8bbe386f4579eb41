// LSD radix sort: count digits -> per pass (histogram -> scan -> scatter, or
// one onesweep launch) -> gather payload. The first pass reads the raw keys
// and the last writes them back (SORTD_MODE_FIRST, SORTD_MODE_LAST).
// Portable OpenCL C 1.2: local memory and local atomics only, unless a
// build option picks a vendor's warp operations (PTX or sub-groups).
//
// Build options (-D); the engine sets them from its policy
// (gpu/policy.cc, RadixBuildOptions):
//   KEY_BITS     32 or 64
//   RADIX_BITS   digit width of a global pass (4 or 8)
//   WG           work-group size of every kernel here
//   ITEMS        keys per work-item in histogram and scatter; TILE = WG*ITEMS
//   HAS_INDEX    1: an uint index travels with every key (payload gather and
//                permutation); 0: keys only
//   RANKING      how the scatter ranks a tile (sort_constants.h):
//                SORTD_RANK_WORK_ITEM, per-work-item counters in local
//                memory (rank_tile, radix_block.clh); the warp-level
//                variants (rank_tile_warp, radix_warp.clh) rank a whole
//                digit in one step: SORTD_RANK_WARP_BALLOTS finds the lanes
//                of a digit by one PTX ballot per digit bit (NVIDIA sm_70
//                and later), SORTD_RANK_SUBGROUP by sub-group ballots
//                (or a sub-group reduction) and shuffles (OpenCL sub-group
//                extensions: Intel GPUs), SORTD_RANK_WARP_EMULATED is the
//                portable twin of the ballots
//   WARP_SIZE    (default 32) lanes of a warp for warp-level ranking: 32 for
//                the PTX variant; 8, 16 or 32 for the sub-group variant
//                (every kernel then requires sub-groups of that size) and
//                the emulated one
//   SUBGROUP_OPS with SORTD_RANK_SUBGROUP: which sub-group built-ins
//                (SORTD_SUBGROUP_*, sort_constants.h)
//   EARLY_COUNTS (default 0) one-launch passes count a tile's digits per
//                warp, publish them and look back before ranking, not
//                after; each warp's start within each digit is then known
//                before the ranking, and every key is written to its place
//                in local memory as soon as it is ranked (no ranks held in
//                registers). Needs warp-level ranking.
//   LOOKBACK     (default 8) predecessor tiles the look-back reads at once
//   COUNT_UNROLL (default 1) 16-byte vectors each work-item loads at once
//                when only counting digits
//   STATUS_PREFETCH (default 0) 1: a one-launch tile asks for its status
//                lines in L2 as it starts (PTX; NVIDIA only)
//   LATE_UNORDERED (default 0) 1: radix_unordered_onesweep's tiles walk
//                back over earlier tiles only once their keys are placed
//   LATE_RANKED  (default 0) 1: keys-only builds with EARLY_COUNTS
//                also build radix_late_onesweep, radix_onesweep with its
//                walk back after the ranking
//   STREAM_KEYS  (default 0) 1: 32-bit keys are read with a streaming cache
//                hint (PTX ld.global.cs; NVIDIA only)
// Keys are kept in "ordered" form while sorting: unsigned bits whose order
// is the requested order (see to_ordered), so every pass is the same
// unsigned, stable, ascending digit sort.

#include "sort_constants.h"
#include "kernel_args.clh"
#include "encode_args.h"
#include "three_launch_args.h"
#include "onesweep_args.h"
#include "settle_args.h"
#include "segments_args.h"
#include "radix_common.clh"
#include "radix_block.clh"
#include "radix_warp.clh"

// Raw keys -> ordered keys (and iota indices), while counting the digits of
// every pass over the whole array so the host can skip passes in which all
// keys share a digit. With write_keys 0 it only counts: the first pass then
// reads the raw keys itself (SORTD_MODE_FIRST).
// digit_totals: PASSES * RADIX words.
RADIX_KERNEL
void radix_encode(KERNEL_PARAMS(SORTD_ENCODE_ARGS)) {
  __local uint hist[PASSES * RADIX];
  const uint lid = get_local_id(0);
  for (uint i = lid; i < PASSES * RADIX; i += WG) hist[i] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!write_keys) {
    // Counting alone: 16-byte loads, consecutive work-items on consecutive
    // vectors, the grid striding over the array.
    __global const count_vec_t* vec = (__global const count_vec_t*)raw;
    const size_t vectors = n / COUNT_VEC;
    const size_t step = get_global_size(0);
    size_t v = get_global_id(0);
#if COUNT_UNROLL > 1
    for (; v + (COUNT_UNROLL - 1) * step < vectors; v += COUNT_UNROLL * step) {
      count_vec_t q[COUNT_UNROLL];
      for (uint u = 0; u < COUNT_UNROLL; ++u) q[u] = vec[v + u * step];
      for (uint u = 0; u < COUNT_UNROLL; ++u) COUNT_VECTOR(q[u]);
    }
#endif
    for (; v < vectors; v += step) {
      const count_vec_t q = vec[v];
      COUNT_VECTOR(q);
    }
    for (size_t i = vectors * COUNT_VEC + get_global_id(0); i < n; i += step) {
      count_key(hist, to_ordered(raw[i], kind, descending));
    }
  } else {
    // Work-groups stride over the tiles: fewer groups, fewer global atomics
    // on the same PASSES * RADIX counters.
    const size_t stride = get_num_groups(0) * (size_t)TILE;
    for (size_t base = get_group_id(0) * (size_t)TILE; base < n; base += stride) {
      for (uint j = 0; j < ITEMS; ++j) {
        const size_t i = base + j * WG + lid;
        if (i < n) {
          const key_t k = to_ordered(raw[i], kind, descending);
          if (write_keys) {
            keys[i] = k;
#if HAS_INDEX
            index[i] = (uint)i;
#endif
          }
          if (count_digits) count_key(hist, k);
        }
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (count_digits) {
    for (uint i = lid; i < PASSES * RADIX; i += WG) {
      if (hist[i] != 0) atomic_add(&digit_totals[i], hist[i]);
    }
  }
}

// Digit counts of one tile, written digit-major: counts[d * tiles + tile],
// so that one exclusive scan over the array yields every tile's offsets.
// `shift` may name a picked slot (pass_shift).
RADIX_KERNEL
void radix_histogram(KERNEL_PARAMS(SORTD_HISTOGRAM_ARGS)) {
  __local uint hist[RADIX];
  const uint lid = get_local_id(0);
  shift = pass_shift(shift, picks);
  for (uint d = lid; d < RADIX; d += WG) hist[d] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  const size_t base = get_group_id(0) * (size_t)TILE;
  for (uint j = 0; j < ITEMS; ++j) {
    const size_t i = base + j * WG + lid;
    if (i < n) atomic_inc(&hist[digit_of(load_key(keys, i, mode), shift)]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint d = lid; d < RADIX; d += WG) {
    counts[d * tiles + get_group_id(0)] = hist[d];
  }
}

// Every pass's digit starts, for the one-launch passes: starts[p * RADIX +
// d] = the count of digits below d in pass p (one work-group per pass).
// With slots > 0, work-group 0 also picks the digits that `slots` passes
// sort (sort_constants.h, SORTD_PICKED_SLOT): the highest digits in which
// the n keys differ, as many as there are slots, in ascending order, after
// one digit that every key shares for each slot left over (a pass over such
// a digit moves no key out of its tile, and none at all when ranked). It
// notes below which bit keys are still unsorted (0 where every digit that
// varies was picked) and clears the unsettled flag for radix_settle.
// Where the runs those digits would leave look too long to settle, it
// picks the lowest digits that vary instead, the first passes of a sort by
// every digit, and sets the flag to SORTD_UNSETTLED_CONTINUE, so that the
// engine runs the passes over the digits above them. Runs look too long
// where the digits can take fewer than n / 16 combinations of values (the
// product of each one's number of values), or where SORTD_PICK_SAMPLES
// keys, one from each of as many strata of the array (sample_at; `keys`,
// raw if kind_order says their kind), share values of the digits
// more often than runs of 16 keys on average would make them: each pair
// of samples with equal digits stands for about n^2 / samples^2 pairs of
// keys in one run.
RADIX_KERNEL
void radix_digit_starts(KERNEL_PARAMS(SORTD_DIGIT_STARTS_ARGS)) {
  __local uint digits[RADIX];
  __local uint tmp[WG];
  __local key_t samples[SORTD_PICK_SAMPLES];
  __local uint sample_pairs;
  __local uint shared_digit[PASSES];  // 1: every key has the same digit
  __local uint values[PASSES];        // how many digit values occur
  const uint lid = get_local_id(0);
  const size_t at = get_group_id(0) * (size_t)RADIX;
  for (uint d = lid; d < RADIX; d += WG) digits[d] = totals[at + d];
  barrier(CLK_LOCAL_MEM_FENCE);
  exclusive_scan_digits(digits, tmp);
  for (uint d = lid; d < RADIX; d += WG) starts[at + d] = digits[d];
  if (slots == 0 || get_group_id(0) != 0) return;

  for (uint p = lid; p < PASSES; p += WG) {
    shared_digit[p] = 0;
    values[p] = 0;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint i = lid; i < PASSES * RADIX; i += WG) {
    if (totals[i] == n) shared_digit[i / RADIX] = 1;
    if (totals[i] != 0) atomic_inc(&values[i / RADIX]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  uint picked = 0, lowest = PASSES, spare = 0;
  ulong combinations = 1;  // of the picked digits' values, capped
  for (uint p = PASSES; p-- > 0;) {
    if (shared_digit[p]) {
      spare = p;
    } else if (picked < slots) {
      lowest = p;
      ++picked;
      combinations = min(combinations * values[p], (ulong)1 << 40);
    }
  }
  uint below = 0;  // digits below the picked ones that vary
  for (uint p = 0; p < lowest; ++p) below |= !shared_digit[p];
  // Pairs of samples whose picked digits are equal.
  const uint s = min((uint)SORTD_PICK_SAMPLES, n);
  if (below) {
    const uint kind = kind_order & SORTD_MODE_KIND_MASK;
    const uint descending = (kind_order & SORTD_MODE_DESCENDING) != 0;
    for (uint j = lid; j < s; j += WG) {
      const key_t k = keys[sample_at(j, n, s)];
      samples[j] = to_ordered(k, kind, descending) >> (lowest * RADIX_BITS);
    }
    if (lid == 0) sample_pairs = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint pairs = 0;
    for (uint j = lid; j < s; j += WG) {
      for (uint m = j + 1; m < s; ++m) pairs += samples[m] == samples[j];
    }
    if (pairs != 0) atomic_add(&sample_pairs, pairs);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid != 0) return;
  uint slot = 0;
  // Mean run length a key sees, about 1 + 2 * pairs * n / s^2, over 16.
  if (below && (combinations * 16 < n ||
                (ulong)sample_pairs * n > (ulong)8 * s * s)) {
    // Too few combinations: the lowest varying digits, to be continued.
    picks[SORTD_PICKS_GROUP_SHIFT] = 0;
    picks[SORTD_PICKS_UNSETTLED] = SORTD_UNSETTLED_CONTINUE;
    for (uint p = 0; p < PASSES && slot < slots; ++p) {
      if (!shared_digit[p]) picks[slot++] = p;
    }
    return;
  }
  picks[SORTD_PICKS_GROUP_SHIFT] = below ? lowest * RADIX_BITS : 0;
  picks[SORTD_PICKS_UNSETTLED] = 0;
  while (slot < slots - picked) picks[slot++] = spare;
  for (uint p = lowest; p < PASSES; ++p) {
    if (!shared_digit[p]) picks[slot++] = p;
  }
}

// After passes over picked digits only (radix_digit_starts): the keys, raw
// as the last pass stored them, are in order by their bits from the group
// shift up, and runs of keys equal there (groups) are in their input order
// below it. Each work-group takes a tile of SORTD_SETTLE_ITEMS keys a
// work-item and sorts in place every group of 2 to SORTD_SETTLE_MAX keys
// that starts in it: each key's place in its group is the number of keys
// of the group below it (ties in order of place), found in a window of the
// tile and SORTD_SETTLE_MAX + 1 keys on either side held in local memory,
// where a scan has marked where each group starts and ends.
// A key out of order after its predecessor in a longer group sets the
// unsettled flag (SORTD_UNSETTLED_LONG_RUN), and the engine then sorts the
// array by every digit; groups of equal keys, however long, need nothing.
// Work-groups read keys of their neighbours' groups while those are being
// rewritten, but only their group bits, which are the same in every key of
// a group (a torn read of a key being rewritten included): so every
// work-group finds the same extent for a group, and only its owner writes
// it.
#define SETTLE_TILE (WG * SORTD_SETTLE_ITEMS)
#define SETTLE_HALO (SORTD_SETTLE_MAX + 1)
#define SETTLE_WINDOW (SETTLE_TILE + 2 * SETTLE_HALO)
#define SETTLE_CHUNK ((SETTLE_WINDOW + WG - 1) / WG)
RADIX_KERNEL
void radix_settle(KERNEL_PARAMS(SORTD_SETTLE_ARGS)) {
  __local key_t win[SETTLE_WINDOW];
  // Where the group of each window place starts, and where the group
  // starting at a place ends (window places).
  __local ushort first_of[SETTLE_WINDOW];
  __local ushort end_of[SETTLE_WINDOW];
  __local uint tmp[WG];
  const uint shift = picks[SORTD_PICKS_GROUP_SHIFT];
  if (shift == 0) return;
  const uint kind = kind_order & SORTD_MODE_KIND_MASK;
  const uint descending = (kind_order & SORTD_MODE_DESCENDING) != 0;
  const uint lid = get_local_id(0);
  const uint base = get_group_id(0) * SETTLE_TILE;
  const uint lo = base > SETTLE_HALO ? base - SETTLE_HALO : 0;
  const uint len = min(n, base + SETTLE_TILE + SETTLE_HALO) - lo;
  for (uint j = lid; j < len; j += WG) {
    win[j] = to_ordered(keys[lo + j], kind, descending);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // Group starts: a running maximum of the places where a group starts
  // (the window's first place counts as one), over each work-item's chunk
  // and then across the work-group.
  const uint c0 = min(lid * SETTLE_CHUNK, len);
  const uint c1 = min(c0 + SETTLE_CHUNK, len);
  uint head = 0;
  for (uint j = c0; j < c1; ++j) {
    if (j == 0 || (win[j] >> shift) != (win[j - 1] >> shift)) head = j;
  }
  tmp[lid] = head;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint d = 1; d < WG; d <<= 1) {
    const uint before = lid >= d ? tmp[lid - d] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    tmp[lid] = max(tmp[lid], before);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  head = lid > 0 ? tmp[lid - 1] : 0;
  for (uint j = c0; j < c1; ++j) {
    if (j == 0 || (win[j] >> shift) != (win[j - 1] >> shift)) head = j;
    first_of[j] = (ushort)head;
    if (j + 1 == len || (win[j + 1] >> shift) != (win[j] >> shift)) {
      end_of[head] = (ushort)(j + 1);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // The tile is [own, own_end); places past it up to SORTD_SETTLE_MAX more
  // belong to groups that may start in it. A group that reaches a window's
  // edge is longer than SORTD_SETTLE_MAX wherever one of these places is
  // in it.
  const uint own = base - lo;
  const uint own_end = min(n, base + SETTLE_TILE) - lo;
  const uint last = min(n, base + SETTLE_TILE + SORTD_SETTLE_MAX) - lo;
  for (uint w = own + lid; w < last; w += WG) {
    const uint first = first_of[w];
    const uint end = end_of[first];
    const key_t k = win[w];
    if (end - first > SORTD_SETTLE_MAX) {
      // Only its keys in the tile are looked at, each against its
      // predecessor.
      if (w < own_end && w > first && win[w - 1] > k) {
        atomic_or(&picks[SORTD_PICKS_UNSETTLED], SORTD_UNSETTLED_LONG_RUN);
      }
      continue;
    }
    if (first < own || first >= own_end) continue;  // another tile's group
    uint place = first;
    for (uint q = first; q < end; ++q) {
      const key_t x = win[q];
      place += x < k || (x == k && q < w);
    }
    if (place != w) keys[lo + place] = from_ordered(k, kind, descending);
  }
}

// One block of WG * ITEMS values scanned in place (exclusive); the block's
// total goes to block_sums[group] for the next level.
RADIX_KERNEL
void scan_blocks(KERNEL_PARAMS(SORTD_SCAN_BLOCKS_ARGS)) {
  __local uint tmp[WG];
  const uint lid = get_local_id(0);
  const size_t base = get_group_id(0) * (size_t)TILE + lid * ITEMS;
  uint v[ITEMS];
  uint sum = 0;
  for (uint j = 0; j < ITEMS; ++j) {
    v[j] = base + j < n ? data[base + j] : 0;
    sum += v[j];
  }
  uint total;
  uint prefix = work_group_exclusive_scan(sum, tmp, &total);
  for (uint j = 0; j < ITEMS; ++j) {
    if (base + j < n) data[base + j] = prefix;
    prefix += v[j];
  }
  if (lid == 0) block_sums[get_group_id(0)] = total;
}

// Adds the scanned block sums to their blocks.
RADIX_KERNEL
void scan_add(KERNEL_PARAMS(SORTD_SCAN_ADD_ARGS)) {
  const uint add = block_sums[get_group_id(0)];
  const size_t base = get_group_id(0) * (size_t)TILE;
  for (uint j = 0; j < ITEMS; ++j) {
    const size_t i = base + j * WG + get_local_id(0);
    if (i < n) data[i] += add;
  }
}

// Stable scatter of one tile: ranked in local memory (rank_tile), then
// written out in order, so that runs of equal digits land in consecutive
// global addresses. offsets[d * tiles + tile]: where the tile's digit d
// goes (the scanned histogram).
RADIX_KERNEL
void radix_scatter(KERNEL_PARAMS(SORTD_SCATTER_ARGS)) {
  TILE_STORAGE;
  __local rank_counter_t counts[RANK_COUNTERS];
  __local uint digit_start[RADIX];
  __local uint tmp[WG];

  const uint lid = get_local_id(0);
  shift = pass_shift(shift, picks);
  const uint tile = get_group_id(0);
  const uint count = RANK_TILE(keys_in, index_in, n, shift, mode, tile, lkeys,
                               lindex, counts, digit_start, tmp);
  for (uint j = 0; j < ITEMS; ++j) {
    const uint li = j * WG + lid;
    if (li < count) {
      const key_t key = lkeys[LPAD(li)];
      const uint d = digit_of(key, shift);
      const uint dst = offsets[d * tiles + tile] + (li - digit_start[d]);
      keys_out[dst] = store_form(key, mode);
#if HAS_INDEX
      index_out[dst] = lindex[LPAD(li)];
#endif
    }
  }
}

// One pass in one launch (radix_onesweep.clt); its twin for a first pass
// whose keys are in no order to keep; and, where LATE_RANKED asks for it,
// the one pass again with the look-back after the ranking.
#define ONESWEEP_NAME radix_onesweep
#define ONESWEEP_UNORDERED 0
#define ONESWEEP_LATE 0
#include "radix_onesweep.clt"
#undef ONESWEEP_NAME
#undef ONESWEEP_UNORDERED
#undef ONESWEEP_LATE
#if UNORDERED_PASS
#define ONESWEEP_NAME radix_unordered_onesweep
#define ONESWEEP_UNORDERED 1
#define ONESWEEP_LATE LATE_UNORDERED
#include "radix_onesweep.clt"
#undef ONESWEEP_NAME
#undef ONESWEEP_UNORDERED
#undef ONESWEEP_LATE
#endif
#if LATE_RANKED_PASS
#define ONESWEEP_NAME radix_late_onesweep
#define ONESWEEP_UNORDERED 0
#define ONESWEEP_LATE 1
#include "radix_onesweep.clt"
#undef ONESWEEP_NAME
#undef ONESWEEP_UNORDERED
#undef ONESWEEP_LATE
#endif

#include "radix_segments.clh"

#if WARP_SUBGROUP
// The sub-groups these kernels run in, as the warp code needs them: for
// each work-item of one work-group, its sub-group's size, with bit 31 set
// where its sub-group ids are not (local id / WARP_SIZE, local id %
// WARP_SIZE). The host runs it once and refuses the kernels unless every
// entry is WARP_SIZE.
RADIX_KERNEL
void radix_sub_group_probe(__global uint* out) {
  const uint lid = get_local_id(0);
  const bool consecutive = get_sub_group_id() == lid / WARP_SIZE &&
                           get_sub_group_local_id() == lid % WARP_SIZE;
  out[lid] = get_sub_group_size() | (consecutive ? 0u : 0x80000000u);
}
#endif

// Ordered keys -> raw keys in the output buffer (decode_keys 0: the last
// pass did it); with an index, the payload is gathered (value_words 1 or 2,
// 0 for none). The permutation needs no
// kernel: it is the final index array itself.
RADIX_KERNEL
void radix_decode(KERNEL_PARAMS(SORTD_DECODE_ARGS)) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  if (decode_keys) raw_out[i] = from_ordered(keys[i], kind, descending);
#if HAS_INDEX
  const uint from = index[i];
  if (value_words == 1) {
    values_out[i] = values_in[from];
  } else if (value_words == 2) {
    values_out[2 * i] = values_in[2 * (size_t)from];
    values_out[2 * i + 1] = values_in[2 * (size_t)from + 1];
  }
#endif
}
