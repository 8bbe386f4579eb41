// LSD radix sort: count digits -> per pass (histogram -> scan -> scatter, or
// one onesweep launch) -> gather payload. The first pass reads the raw keys
// and the last writes them back (MODE_FIRST, MODE_LAST).
// Portable OpenCL C 1.2: local memory and local atomics only.
//
// Build options (-D):
//   KEY_BITS    32 or 64
//   RADIX_BITS  digit width of a global pass (4 or 8)
//   LOCAL_BITS  digit width of the scatter's in-tile ranking (default
//               RADIX_BITS); with 4 under an 8-bit pass, a tile is ranked
//               in two stable 4-bit steps, so the ranking counters stay
//               small while the global passes halve
//   WG          work-group size of every kernel here
//   ITEMS       keys per work-item in histogram and scatter; TILE = WG*ITEMS
//   HAS_INDEX   1: an uint index travels with every key (payload gather and
//               permutation); 0: keys only
//   WARP_RANK   how the scatter ranks a tile: 0, per-work-item counters in
//               local memory (rank_tile); 1 and 2, warp-level ranking
//               (rank_tile_warp): each warp of 32 work-items ranks its keys
//               against each other with ballots, in one step per pass.
//               2 takes the ballots and shuffles from NVIDIA's PTX (needs
//               sm_70 or later); 1 is its portable twin, the same algorithm
//               with each warp-wide operation done through local memory and
//               barriers (slow, but runs anywhere, and tested on PoCL).
//               3: as 2, the counters added to atomically. (PTX match.any
//               in place of the ballots measured 25% slower on the H100.)
//               4: as 3, but a key finds the lanes that share its digit
//               through per-warp masks in local memory (each lane ORs its
//               bit into its digit's mask) instead of one ballot per digit
//               bit; the masks rotate over MASK_SETS sets so that one warp
//               barrier per key orders them, and share the tile's local
//               storage (they are dead before the keys are exchanged).
//   EARLY_SCAN  (default 1) with ONESWEEP_EARLY, the tile's digit starts
//               are scanned from the early counts before the ranking
//   FULL_TILES  (default 1) full tiles load, count and store without a
//               bounds test per key
//   COUNT_VEC   (default 16 bytes' worth of keys) keys per load when only
//               counting digits; 0: one at a time
//   COUNT_UNROLL (default 1) vectors loaded at once when only counting
//   DIRECT_PLACE (default 0) with ONESWEEP_EARLY, EARLY_SCAN and
//               WARP_RANK 1-3 (ignored otherwise): the early counts are
//               kept per warp, so each warp's start within each digit is
//               known before the ranking, and every key is written to its
//               place in local memory as soon as it is ranked (no ranks
//               held in registers, no second loop over the keys). Not with
//               WARP_RANK 4, whose masks share the keys' local array.
//   ABLATE      timing diagnostic only (see below)
// Keys are kept in "ordered" form while sorting: unsigned bits whose order
// is the requested order (see to_ordered), so every pass is the same
// unsigned, stable, ascending digit sort.

#if !defined(KEY_BITS) || !defined(RADIX_BITS) || !defined(WG) || \
    !defined(ITEMS) || !defined(HAS_INDEX)
#error "radix_sort.cl needs -DKEY_BITS, -DRADIX_BITS, -DWG, -DITEMS and -DHAS_INDEX"
#endif

#if KEY_BITS == 64
typedef ulong key_t;
#define SIGN_BIT (1UL << 63)
#else
typedef uint key_t;
#define SIGN_BIT (1U << 31)
#endif

#ifndef LOCAL_BITS
#define LOCAL_BITS RADIX_BITS
#endif
#define RADIX (1 << RADIX_BITS)
#define LRADIX (1 << LOCAL_BITS)
#define LMASK (LRADIX - 1)
#define SUBSTEPS (RADIX_BITS / LOCAL_BITS)
#define DIGIT_MASK (RADIX - 1)
#define TILE (WG * ITEMS)
#define PASSES ((KEY_BITS + RADIX_BITS - 1) / RADIX_BITS)

// The scatter's local arrays are padded so that its strided accesses spread
// over the local-memory banks: work-item t reads keys t*ITEMS .. t*ITEMS +
// ITEMS-1, which unpadded puts a warp's 32 reads in 2 banks (a 16-way
// conflict for ITEMS = 16). One element of padding every 32 (every 64 16-bit
// counters: two) moves each work-item's run to its own bank. Padding is
// a -D option (BANK_PAD, default 1), measured per device.
#ifndef BANK_PAD
#define BANK_PAD 1
#endif
#if BANK_PAD
#define LPAD(i) ((i) + ((i) >> 5))
#define LTILE (TILE + (TILE >> 5))
#define CPAD(i) ((i) + (((i) >> 6) << 1))
#define LCOUNTS (LRADIX * WG + ((LRADIX * WG) >> 5))
#else
#define LPAD(i) (i)
#define LTILE TILE
#define CPAD(i) (i)
#define LCOUNTS (LRADIX * WG)
#endif

// ---- Warp-level ranking (WARP_RANK 1 and 2) ----
// A "warp" is 32 consecutive work-items of a work-group. With WARP_RANK 2
// it is the hardware warp of an NVIDIA GPU (where consecutive local ids of
// a one-dimensional work-group form warps), and its operations are PTX.
// With WARP_RANK 1 the same operations go through local memory with
// work-group barriers: every work-item calls them the same number of times.
#ifndef WARP_RANK
#define WARP_RANK 0
#endif
#define WARP_SIZE 32
#define WARPS (WG / WARP_SIZE)
#if WARP_RANK && (WG % WARP_SIZE != 0)
#error "WARP_RANK needs a work-group size that is a multiple of 32"
#endif
// radix_onesweep with early counts (needs WARP_RANK): count, publish and
// look back before ranking, not after.
#ifndef ONESWEEP_EARLY
#define ONESWEEP_EARLY 0
#endif
// With early counts: the tile's digit starts are scanned from those counts
// before the ranking rather than from the warps' counts after it.
#ifndef EARLY_SCAN
#define EARLY_SCAN 1
#endif
// DIRECT_PLACE applies where it can (see above) and is ignored elsewhere.
#ifndef DIRECT_PLACE
#define DIRECT_PLACE 0
#endif
#define DIRECT (DIRECT_PLACE && ONESWEEP_EARLY && EARLY_SCAN && \
                WARP_RANK >= 1 && WARP_RANK <= 3)
// Timing ablations, never in a policy (their output is not sorted, or not
// stably); what each removes shows where the kernel's time goes:
//   1  a warp's keys are ranked as if no two shared a digit (no ballots;
//      WARP_RANK 1-3 only: no effect under 4's masks)
//   3  the one-launch pass does not look back (no waiting on earlier tiles)
//   4  keys are moved to their own places in local memory, not their ranks
//      (no bank conflicts in the exchange), and stored as 5 does
//   5  keys are stored to their tile's own places in global memory, not
//      their digits' (fully coalesced stores)
//   6  the look-back publishes as usual but reads nothing (no waiting)
// The engine's warm-up check runs under -DABLATE too: an ablated build that
// does not sort fails the engine's creation.
#ifndef ABLATE
#define ABLATE 0
#endif
// STATUS_PREFETCH (default 0): 1, as a one-launch tile starts, it asks
// for each 128-byte line of its own status words to be brought to L2 (PTX
// prefetch.global.L2; NVIDIA only), so that its first publish does not
// wait on memory. 0 is the portable twin: no prefetch.
#ifndef STATUS_PREFETCH
#define STATUS_PREFETCH 0
#endif
// Full tiles load and store without a test per key.
#ifndef FULL_TILES
#define FULL_TILES 1
#endif
#if ONESWEEP_EARLY && !WARP_RANK
#error "ONESWEEP_EARLY needs WARP_RANK"
#endif
#if WARP_RANK
typedef uint rank_counter_t;
#define RANK_COUNTERS (WARPS * RADIX)
#else
typedef ushort rank_counter_t;
#define RANK_COUNTERS LCOUNTS
#endif

#define WARP_PTX (WARP_RANK >= 2)
#if WARP_PTX
// Bit i set where lane i's pred is non-zero.
inline uint warp_ballot(uint pred) {
  uint votes;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0;\n\t"
      "vote.sync.ballot.b32 %0, p, 0xffffffff;\n\t}"
      : "=r"(votes)
      : "r"(pred));
  return votes;
}
// Lane `from`'s v (each lane names its own source lane).
inline uint warp_read_lane(uint v, uint from) {
  uint out;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(out)
               : "r"(v), "r"(from));
  return out;
}
// Lane (this lane - by)'s v; lanes below `by` get their own v back.
inline uint warp_read_lane_below(uint v, uint by) {
  uint out;
  asm volatile("shfl.sync.up.b32 %0, %1, %2, 0x0, 0xffffffff;"
               : "=r"(out)
               : "r"(v), "r"(by));
  return out;
}
inline void warp_sync(void) { asm volatile("bar.warp.sync 0xffffffff;"); }
// The same, also a fence the compiler keeps local-memory accesses behind.
inline void warp_sync_memory(void) {
  asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
}
#endif

// Per-warp digit masks (WARP_RANK 4): MASK_SETS sets of RADIX words per warp.
#if WARP_RANK == 4
#define MASK_SETS 3
#define MASK_WORDS (WARPS * RADIX * MASK_SETS)
#else
#define MASK_WORDS 0
#endif
#define NO_PENDING 0xffffffffu

// The local storage of a tile: keys (and indices) at their ranks, and,
// before those are written, the ranking's masks. One array, so that the
// masks cost no local memory of their own.
#if HAS_INDEX
#define TILE_BYTES (LTILE * (KEY_BITS / 8) + LTILE * 4)
#else
#define TILE_BYTES (LTILE * (KEY_BITS / 8))
#endif
#define STORE_BYTES \
  (TILE_BYTES > MASK_WORDS * 4 ? TILE_BYTES : MASK_WORDS * 4)
#define TILE_STORAGE                                          \
  __local ulong tile_store[(STORE_BYTES + 7) / 8];            \
  __local key_t* lkeys = (__local key_t*)tile_store;          \
  __local uint* lindex = (__local uint*)(lkeys + LTILE);      \
  __local uint* masks = (__local uint*)tile_store

#if WARP_RANK
// The lanes of this work-item's warp whose digit equals d (bit i: lane i).
inline uint warp_peers(uint d, __local uint* scratch) {
#if WARP_PTX
  (void)scratch;
  uint peers = 0xffffffffu;
  for (uint b = 0; b < RADIX_BITS; ++b) {
    const uint bit = (d >> b) & 1;
    const uint votes = warp_ballot(bit);
    peers &= bit ? votes : ~votes;
  }
  return peers;
#else
  const uint lid = get_local_id(0);
  scratch[lid] = d;
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint first = lid & ~(uint)(WARP_SIZE - 1);
  uint peers = 0;
  for (uint i = 0; i < WARP_SIZE; ++i) {
    peers |= (uint)(scratch[first + i] == d) << i;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return peers;
#endif
}

// One key per lane joins the warp's per-digit counters (this warp's RADIX
// counters); returns how many of the warp's keys of the same digit came
// before it: those of earlier calls, then those of lower lanes in this one.
// Only the highest lane of each digit touches the counter. j: the call's
// number (0, 1, ...); masks and *pending: this warp's masks and the mask
// word this lane is to clear (WARP_RANK 4).
inline uint warp_count(uint d, __local uint* counters, __local uint* scratch,
                       uint j, __local uint* masks, uint* pending) {
  const uint lane = get_local_id(0) & (WARP_SIZE - 1);
#if WARP_RANK == 4
  // Call j uses set j % MASK_SETS. The leader of call j - 1 clears its word
  // after this call's barrier (every lane has read it by then), and the set
  // is next ORed into at call j + 2, after call j + 1's barrier.
  (void)scratch;
  __local uint* set = masks + (j % MASK_SETS) * RADIX;
  atomic_or(&set[d], 1u << lane);
  warp_sync_memory();
  if (*pending != NO_PENDING) masks[*pending] = 0;
  const uint peers = ((volatile __local uint*)set)[d];
#else
  (void)j;
  (void)masks;
  (void)pending;
#if ABLATE == 1
  (void)scratch;
  const uint peers = 1u << lane;
#else
  const uint peers = warp_peers(d, scratch);
#endif
#endif
  const uint below = popcount(peers & ((1u << lane) - 1));
  const uint leader = (WARP_SIZE - 1) - clz(peers);
#if WARP_RANK == 2
  uint before = 0;
  if (lane == leader) {
    before = counters[d];
    counters[d] = before + popcount(peers);
  }
  before = warp_read_lane(before, leader);
  warp_sync();  // the leader's store is seen by the next call's leader
#elif WARP_PTX
  uint before = 0;
  if (lane == leader) before = atomic_add(&counters[d], popcount(peers));
#if WARP_RANK == 4
  *pending = lane == leader ? (j % MASK_SETS) * RADIX + d : NO_PENDING;
#endif
  before = warp_read_lane(before, leader);
#else
  const uint before = counters[d];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == leader) counters[d] = before + popcount(peers);
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  return before + below;
}
#endif  // WARP_RANK

// Key kinds, as passed at run time.
#define KIND_UNSIGNED 0
#define KIND_SIGNED 1
#define KIND_FLOAT 2

inline key_t to_ordered(key_t raw, uint kind, uint descending) {
  key_t b = raw;
  if (kind == KIND_SIGNED) {
    b = raw ^ SIGN_BIT;
  } else if (kind == KIND_FLOAT) {
    b = (raw & SIGN_BIT) ? ~raw : (raw | SIGN_BIT);
  }
  return descending ? ~b : b;
}

inline key_t from_ordered(key_t ordered, uint kind, uint descending) {
  key_t b = descending ? ~ordered : ordered;
  if (kind == KIND_SIGNED) return b ^ SIGN_BIT;
  if (kind == KIND_FLOAT) return (b & SIGN_BIT) ? (b & ~SIGN_BIT) : ~b;
  return b;
}

inline uint digit_of(key_t k, uint shift) {
  return (uint)(k >> shift) & DIGIT_MASK;
}

// A pass's mode: the raw keys' kind (bits 0-1) and order (bit 2), and
// whether the pass is the first (MODE_FIRST: it reads the raw keys, puts
// them in ordered form as it loads them and makes the indices from their
// positions) and the last (MODE_LAST: it stores raw keys). So the sort
// needs no encoding and decoding passes over the array.
#define MODE_FIRST 8u
#define MODE_LAST 16u
inline key_t load_key(__global const key_t* keys, size_t i, uint mode) {
  const key_t k = keys[i];
  return (mode & MODE_FIRST) ? to_ordered(k, mode & 3, (mode >> 2) & 1) : k;
}
inline uint load_index(__global const uint* index, size_t i, uint mode) {
  return (mode & MODE_FIRST) ? (uint)i : index[i];
}
inline key_t store_form(key_t ordered, uint mode) {
  return (mode & MODE_LAST) ? from_ordered(ordered, mode & 3, (mode >> 2) & 1)
                            : ordered;
}

// Every pass's digit of one ordered key, counted in hist (PASSES * RADIX).
inline void count_key(__local uint* hist, key_t k) {
  for (uint p = 0; p < PASSES; ++p) {
    atomic_inc(&hist[p * RADIX + digit_of(k, p * RADIX_BITS)]);
  }
}

// Counting only (radix_encode with write_keys 0) reads 16 bytes at a time:
// COUNT_VEC keys (0: one key at a time).
#ifndef COUNT_VEC
#if KEY_BITS == 64
#define COUNT_VEC 2
#else
#define COUNT_VEC 4
#endif
#endif
#if COUNT_VEC == 2
typedef ulong2 count_vec_t;
#elif COUNT_VEC == 4
typedef uint4 count_vec_t;
#endif
// Vectors each work-item loads before it counts them (COUNT_UNROLL, 1-4):
// more loads in flight while the local atomics of the last ones run.
#ifndef COUNT_UNROLL
#define COUNT_UNROLL 1
#endif
#if COUNT_VEC == 2
#define COUNT_VECTOR(q)                           \
  do {                                            \
    count_key(hist, to_ordered((q).s0, kind, descending)); \
    count_key(hist, to_ordered((q).s1, kind, descending)); \
  } while (0)
#elif COUNT_VEC == 4
#define COUNT_VECTOR(q)                           \
  do {                                            \
    count_key(hist, to_ordered((q).s0, kind, descending)); \
    count_key(hist, to_ordered((q).s1, kind, descending)); \
    count_key(hist, to_ordered((q).s2, kind, descending)); \
    count_key(hist, to_ordered((q).s3, kind, descending)); \
  } while (0)
#endif

// Raw keys -> ordered keys (and iota indices), while counting the digits of
// every pass over the whole array so the host can skip passes in which all
// keys share a digit. With write_keys 0 it only counts: the first pass then
// reads the raw keys itself (MODE_FIRST).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_encode(__global const key_t* raw, __global key_t* keys,
                  __global uint* index, uint n, uint kind, uint descending,
                  __global uint* digit_totals /* PASSES * RADIX */,
                  uint count_digits, uint write_keys) {
  __local uint hist[PASSES * RADIX];
  const uint lid = get_local_id(0);
  for (uint i = lid; i < PASSES * RADIX; i += WG) hist[i] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
#if COUNT_VEC
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
  } else
#endif
  {
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
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_histogram(__global const key_t* keys, uint n, uint shift,
                     __global uint* counts, uint tiles, uint mode) {
  __local uint hist[RADIX];
  const uint lid = get_local_id(0);
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

#if WARP_PTX
// Exclusive scan over the work-group, as below, in warp shuffles and two
// barriers instead of two per step.
inline uint work_group_exclusive_scan(uint value, __local uint* tmp,
                                      uint* sum) {
  const uint lid = get_local_id(0);
  const uint lane = lid & (WARP_SIZE - 1);
  const uint warp = lid / WARP_SIZE;
  uint inclusive = value;
  for (uint by = 1; by < WARP_SIZE; by <<= 1) {
    const uint below = warp_read_lane_below(inclusive, by);
    if (lane >= by) inclusive += below;
  }
  if (lane == WARP_SIZE - 1) tmp[warp] = inclusive;
  barrier(CLK_LOCAL_MEM_FENCE);
  uint before = 0, total = 0;
  for (uint w = 0; w < WARPS; ++w) {
    const uint t = tmp[w];
    before += w < warp ? t : 0;
    total += t;
  }
  *sum = total;
  barrier(CLK_LOCAL_MEM_FENCE);
  return before + inclusive - value;
}
#else
// Exclusive scan of `total` values in a local array of WG entries; returns
// this work-item's exclusive prefix and leaves the sum in *sum.
inline uint work_group_exclusive_scan(uint value, __local uint* tmp,
                                      uint* sum) {
  const uint lid = get_local_id(0);
  tmp[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint offset = 1; offset < WG; offset <<= 1) {
    const uint add = lid >= offset ? tmp[lid - offset] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    tmp[lid] += add;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const uint inclusive = tmp[lid];
  *sum = tmp[WG - 1];
  barrier(CLK_LOCAL_MEM_FENCE);
  return inclusive - value;
}
#endif  // WARP_PTX

// Exclusive scan, in place, of RADIX values in local memory (RADIX / WG
// or one per work-item). Ends with a barrier.
inline void exclusive_scan_digits(__local uint* digits, __local uint* tmp) {
  const uint lid = get_local_id(0);
  const uint per = (RADIX + WG - 1) / WG;
  uint mine[(RADIX + WG - 1) / WG];
  uint sum = 0;
  for (uint e = 0; e < per; ++e) {
    const uint d = lid * per + e;
    mine[e] = d < RADIX ? digits[d] : 0;
    sum += mine[e];
  }
  uint total;
  uint prefix = work_group_exclusive_scan(sum, tmp, &total);
  for (uint e = 0; e < per; ++e) {
    const uint d = lid * per + e;
    if (d < RADIX) digits[d] = prefix;
    prefix += mine[e];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// Every pass's digit starts, for the one-launch passes: starts[p * RADIX +
// d] = the count of digits below d in pass p (one work-group per pass).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_digit_starts(__global const uint* totals, __global uint* starts) {
  __local uint digits[RADIX];
  __local uint tmp[WG];
  const size_t at = get_group_id(0) * (size_t)RADIX;
  for (uint d = get_local_id(0); d < RADIX; d += WG) {
    digits[d] = totals[at + d];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  exclusive_scan_digits(digits, tmp);
  for (uint d = get_local_id(0); d < RADIX; d += WG) {
    starts[at + d] = digits[d];
  }
}

// One block of WG * ITEMS values scanned in place (exclusive); the block's
// total goes to block_sums[group] for the next level.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scan_blocks(__global uint* data, uint n, __global uint* block_sums) {
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
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scan_add(__global uint* data, uint n, __global const uint* block_sums) {
  const uint add = block_sums[get_group_id(0)];
  const size_t base = get_group_id(0) * (size_t)TILE;
  for (uint j = 0; j < ITEMS; ++j) {
    const size_t i = base + j * WG + get_local_id(0);
    if (i < n) data[i] += add;
  }
}

// One tile, loaded into local memory and sorted there by its digit at
// `shift`: SUBSTEPS stable LOCAL_BITS-wide steps, least significant first.
// Each work-item owns ITEMS consecutive keys; per-(sub-digit, work-item)
// counts scanned digit-major give every key its rank, and the keys move to
// their ranks. Afterwards digit_start[d] is where digit d starts in the
// tile. Returns the number of keys in the tile.
inline uint rank_tile(__global const key_t* keys_in,
                      __global const uint* index_in, uint n, uint shift,
                      uint mode, uint tile, __local key_t* lkeys,
                      __local uint* lindex, __local ushort* counts,
                      __local uint* digit_start, __local uint* tmp) {
  const uint lid = get_local_id(0);
  const size_t base = tile * (size_t)TILE;
  const uint count = (uint)min((size_t)TILE, n - base);

  for (uint j = 0; j < ITEMS; ++j) {
    const uint li = j * WG + lid;
    if (li < count) {
      lkeys[LPAD(li)] = load_key(keys_in, base + li, mode);
#if HAS_INDEX
      lindex[LPAD(li)] = load_index(index_in, base + li, mode);
#endif
    }
  }
#if SUBSTEPS > 1
  for (uint d = lid; d < RADIX; d += WG) digit_start[d] = 0;
#endif
  barrier(CLK_LOCAL_MEM_FENCE);

  key_t k[ITEMS];
#if HAS_INDEX
  uint x[ITEMS];
#endif
  for (uint step = 0; step < SUBSTEPS; ++step) {
    const uint sub_shift = shift + step * LOCAL_BITS;
    for (uint d = 0; d < LRADIX; ++d) counts[CPAD(d * WG + lid)] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint j = 0; j < ITEMS; ++j) {
      const uint li = lid * ITEMS + j;
      if (li < count) {
        k[j] = lkeys[LPAD(li)];
#if HAS_INDEX
        x[j] = lindex[LPAD(li)];
#endif
        counts[CPAD((((uint)(k[j] >> sub_shift)) & LMASK) * WG + lid)] += 1;
#if SUBSTEPS > 1
        if (step == 0) atomic_inc(&digit_start[digit_of(k[j], shift)]);
#endif
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Exclusive scan of counts in digit-major order: work-item t scans the
    // LRADIX consecutive entries [t*LRADIX, (t+1)*LRADIX).
    uint sum = 0;
    for (uint e = 0; e < LRADIX; ++e) sum += counts[CPAD(lid * LRADIX + e)];
    uint total;
    uint prefix = work_group_exclusive_scan(sum, tmp, &total);
    for (uint e = 0; e < LRADIX; ++e) {
      const uint c = counts[CPAD(lid * LRADIX + e)];
      counts[CPAD(lid * LRADIX + e)] = (ushort)prefix;
      prefix += c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if SUBSTEPS == 1
    for (uint d = lid; d < RADIX; d += WG) digit_start[d] = counts[CPAD(d * WG)];
    barrier(CLK_LOCAL_MEM_FENCE);  // reads column 0 before it moves
#endif

    // Reorder the tile in local memory by rank.
    for (uint j = 0; j < ITEMS; ++j) {
      const uint li = lid * ITEMS + j;
      if (li < count) {
        const uint slot = CPAD((((uint)(k[j] >> sub_shift)) & LMASK) * WG + lid);
        const uint rank = counts[slot];
        counts[slot] = (ushort)(rank + 1);
        lkeys[LPAD(rank)] = k[j];
#if HAS_INDEX
        lindex[LPAD(rank)] = x[j];
#endif
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#if SUBSTEPS > 1
  // digit_start holds the tile's digit counts: scan them.
  exclusive_scan_digits(digit_start, tmp);
#endif
  return count;
}

// The one-launch pass's decoupled look-back (see radix_onesweep). A tile's
// status word per digit is AGGREGATE | mark | its own count, or PREFIX |
// mark | the count of that digit over every tile up to and including it;
// anything else (0, or a word of another mark) is not published yet.
// `marks` is (mark, value mask), from the host:
//   unmarked, (0, 2^30 - 1): counts are 30 bits (n < 2^30), and the words
//     are zeroed before every pass;
//   marked, (parity << 29, 2^29 - 1): bit 29 holds the parity of the
//     pass's place among the sort's passes, counts are 29 bits (n < 2^29).
//     One area serves every pass, zeroed once per sort: what a pass finds
//     there is the previous pass's words, of the other parity, which read
//     as not published, so no fill is needed between passes.
#ifndef LOOKBACK
#define LOOKBACK 8
#endif
#define STATUS_AGGREGATE (1U << 30)
#define STATUS_PREFIX (2U << 30)

// Publishes `mine`, this tile's count of digit d, and returns the count of
// d over all earlier tiles, read back LOOKBACK predecessors at a time until
// a prefix; then publishes this tile's own prefix.
inline uint lookback_digit(__global uint* status, uint tile, uint d,
                           uint mine, uint2 marks) {
  volatile __global uint* seen = status;
  __global uint* my_status = &status[tile * RADIX + d];
  const uint prefix = STATUS_PREFIX | marks.x;
  const uint aggregate = STATUS_AGGREGATE | marks.x;
  if (tile == 0) {
    atomic_xchg(my_status, prefix | mine);
    return 0;
  }
  atomic_xchg(my_status, aggregate | mine);
#if ABLATE == 6
  atomic_xchg(my_status, prefix | mine);
  return 0;
#endif
  uint before = 0;
  // Tiles [0, t) are still to be looked at.
  for (uint t = tile;;) {
    uint s[LOOKBACK];
    for (uint w = 0; w < LOOKBACK; ++w) {
      // Before tile 0 there is nothing: read as an empty prefix.
      s[w] = t > w ? seen[(t - 1 - w) * RADIX + d] : prefix;
    }
    uint w = 0;
    bool done = false;
    for (; w < LOOKBACK; ++w) {
      const uint kind = s[w] & ~marks.y;
      // Not published yet (in this pass): read again from here.
      if (kind != aggregate && kind != prefix) break;
      before += s[w] & marks.y;
      if (kind == prefix) {
        done = true;
        break;
      }
    }
    if (done) break;
    t -= w;
  }
  atomic_xchg(my_status, prefix | (before + mine));
  return before;
}

#if WARP_RANK
// Per digit: the warps' counters (WARPS sets of RADIX) become each warp's
// start among the tile's keys of that digit (exclusive over the warps), and,
// if `totals`, the tile's count of the digit goes to digit_start[d].
inline void warp_starts(__local uint* counters, __local uint* digit_start,
                        uint totals) {
  for (uint d = get_local_id(0); d < RADIX; d += WG) {
    uint sum = 0;
    for (uint w = 0; w < WARPS; ++w) {
      const uint c = counters[w * RADIX + d];
      counters[w * RADIX + d] = sum;
      sum += c;
    }
    if (totals) digit_start[d] = sum;
  }
}

// The keys (and indices) each work-item holds, ranked by their digit at
// `shift` and moved to their ranks in lkeys (and lindex). Keys are
// warp-striped: warp w's keys are offsets [w * 32 * ITEMS, (w + 1) * 32 *
// ITEMS) of the tile, lane l's key j at offset j * 32 + l, so a warp ranks
// its keys in order by taking them 32 at a time (warp_count). The warps'
// per-digit counts are then scanned (warps within a digit, then digits)
// into digit_start, the tile's digit starts. `counters` must be zero on
// entry, and a barrier past; ends with a barrier.
inline void warp_rank_and_move(const key_t* k, const uint* x, uint shift,
                               __local key_t* lkeys, __local uint* lindex,
                               __local uint* counters,
                               __local uint* digit_start, __local uint* tmp,
                               __local uint* masks, uint scanned) {
  const uint lid = get_local_id(0);
  __local uint* mine = counters + (lid / WARP_SIZE) * RADIX;
  __local uint* my_masks = masks + (lid / WARP_SIZE) * (MASK_WORDS / WARPS);
  uint rank[ITEMS];
  uint pending = NO_PENDING;
  for (uint j = 0; j < ITEMS; ++j) {
    rank[j] = warp_count(digit_of(k[j], shift), mine, tmp, j, my_masks,
                         &pending);
  }
  (void)pending;
  barrier(CLK_LOCAL_MEM_FENCE);

  // Per digit: each warp's start among the tile's keys of that digit, and
  // (unless `scanned`: digit_start holds the tile's digit starts already)
  // the tile's count of it, then scanned.
  warp_starts(counters, digit_start, !scanned);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!scanned) exclusive_scan_digits(digit_start, tmp);

  for (uint j = 0; j < ITEMS; ++j) {
    const uint d = digit_of(k[j], shift);
#if ABLATE == 4
    const uint to = ((lid / WARP_SIZE) * (WARP_SIZE * ITEMS) +
                     (lid & (WARP_SIZE - 1)) + j * WARP_SIZE) +
                    ((digit_start[d] + mine[d] + rank[j]) >> 20);
#else
    const uint to = digit_start[d] + mine[d] + rank[j];
#endif
    lkeys[LPAD(to)] = k[j];
#if HAS_INDEX
    lindex[LPAD(to)] = x[j];
#else
    (void)x;
#endif
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// Early counts (one-launch pass): each real key of the tile adds one to
// its digit's counter in `into` (the tile's or this warp's RADIX
// counters); a full tile counts without a test per key.
inline void count_early(const key_t* k, uint shift, uint full, uint first,
                        uint count, __local uint* into) {
  if (full) {
    for (uint j = 0; j < ITEMS; ++j) atomic_inc(&into[digit_of(k[j], shift)]);
  } else {
    for (uint j = 0; j < ITEMS; ++j) {
      if (first + j * WARP_SIZE < count) {
        atomic_inc(&into[digit_of(k[j], shift)]);
      }
    }
  }
}

// Publishes the tile's digit counts and adds to early_base[d] the count of
// digit d over all earlier tiles (lookback_digit).
inline void lookback_early(__global uint* status, uint tile,
                           __local const uint* counts,
                           __local uint* early_base, uint2 marks) {
  for (uint d = get_local_id(0); d < RADIX; d += WG) {
#if ABLATE == 3
    (void)status;
    (void)tile;
    (void)marks;
    early_base[d] += counts[d] >> 31;
#else
    early_base[d] += lookback_digit(status, tile, d, counts[d], marks);
#endif
  }
}

// rank_tile's contract, by warp-level ranking in one step per pass
// (warp_rank_and_move). Past the end of the array a tile is padded with the
// largest key: it ranks after every real key.
inline uint rank_tile_warp(__global const key_t* keys_in,
                           __global const uint* index_in, uint n, uint shift,
                           uint mode, uint tile, __local key_t* lkeys,
                           __local uint* lindex, __local uint* counters,
                           __local uint* digit_start, __local uint* tmp,
                           __local uint* masks, uint early,
                           __global uint* status, __local uint* early_base,
                           uint2 marks) {
  const uint lid = get_local_id(0);
  const uint warp = lid / WARP_SIZE;
  const size_t base = tile * (size_t)TILE;
  const uint count = (uint)min((size_t)TILE, n - base);
  for (uint i = lid; i < WARPS * RADIX; i += WG) counters[i] = 0;
  for (uint i = lid; i < MASK_WORDS; i += WG) masks[i] = 0;
  if (early) {
    for (uint d = lid; d < RADIX; d += WG) digit_start[d] = 0;
  }

  key_t k[ITEMS];
  uint x[ITEMS];
  const uint first = warp * (WARP_SIZE * ITEMS) + (lid & (WARP_SIZE - 1));
  // Two loops rather than a test per key: the mode is the same for all.
  // A full tile (all but the last) loads without a test per key.
  const uint full = FULL_TILES && count == TILE;
  __global const key_t* tile_keys = keys_in + base;
#define LOAD_TILE(checked, load_one, index_one)               \
  for (uint j = 0; j < ITEMS; ++j) {                          \
    const uint li = first + j * WARP_SIZE;                    \
    const bool real = !(checked) || li < count;               \
    k[j] = real ? (load_one) : ~(key_t)0;                     \
    LOAD_INDEX(x[j] = real ? (index_one) : 0);                \
  }
#if HAS_INDEX
#define LOAD_INDEX(statement) statement
#else
#define LOAD_INDEX(statement)
#endif
  if (mode & MODE_FIRST) {
    if (full) {
      LOAD_TILE(0, load_key(tile_keys, li, MODE_FIRST | mode),
                (uint)(base + li))
    } else {
      LOAD_TILE(1, load_key(tile_keys, li, MODE_FIRST | mode),
                (uint)(base + li))
    }
  } else {
    if (full) {
      LOAD_TILE(0, tile_keys[li], index_in[base + li])
    } else {
      LOAD_TILE(1, tile_keys[li], index_in[base + li])
    }
  }
#undef LOAD_TILE
#undef LOAD_INDEX
  barrier(CLK_LOCAL_MEM_FENCE);

#if DIRECT
  if (early) {
    // Early counts per warp (this warp's RADIX counters), then per digit
    // the warps' exclusive prefix (in place) and the tile's count, which is
    // published and looked back on; the counters then become each warp's
    // place in the tile for its first key of each digit, and the ranking
    // adds to them (warp_count) and writes each key there at once.
    __local uint* mine = counters + warp * RADIX;
    count_early(k, shift, full, first, count, mine);
    barrier(CLK_LOCAL_MEM_FENCE);
    warp_starts(counters, digit_start, 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    lookback_early(status, tile, digit_start, early_base, marks);
    exclusive_scan_digits(digit_start, tmp);
    for (uint d = lid; d < RADIX; d += WG) {
      const uint start = digit_start[d];
      early_base[d] -= start;
      for (uint w = 0; w < WARPS; ++w) counters[w * RADIX + d] += start;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Padding keys (past the end of a last tile) count as digit RADIX - 1
    // here only: their places start at `count`, after every real key's,
    // and are never stored.
    uint pending = NO_PENDING;
    for (uint j = 0; j < ITEMS; ++j) {
      const uint to =
          warp_count(digit_of(k[j], shift), mine, tmp, j, masks, &pending);
      lkeys[LPAD(to)] = k[j];
#if HAS_INDEX
      lindex[LPAD(to)] = x[j];
#endif
    }
    (void)pending;
    barrier(CLK_LOCAL_MEM_FENCE);
    return count;
  }
#endif
  if (early) {
    // Early counts (one-launch pass): the tile's digit counts by local
    // atomics, published and looked back on before the ranking, so that
    // later tiles find this tile's prefix as early as possible.
    count_early(k, shift, full, first, count, digit_start);
    barrier(CLK_LOCAL_MEM_FENCE);
    lookback_early(status, tile, digit_start, early_base, marks);
#if EARLY_SCAN
    // The tile's digit starts from these counts, and each digit's base
    // made relative to them, while the keys wait in registers.
    exclusive_scan_digits(digit_start, tmp);
    for (uint d = lid; d < RADIX; d += WG) early_base[d] -= digit_start[d];
#endif
  }

  warp_rank_and_move(k, x, shift, lkeys, lindex, counters, digit_start, tmp,
                     masks, early && EARLY_SCAN);
  return count;
}
// Ranking only: no early look-back (the last two arguments go unused).
#define RANK_TILE(keys_in, index_in, n, shift, mode, tile, lkeys, lindex,     \
                  counts, digit_start, tmp, masks)                          \
  rank_tile_warp(keys_in, index_in, n, shift, mode, tile, lkeys, lindex,    \
                 counts, digit_start, tmp, masks, 0, (__global uint*)0,     \
                 digit_start, (uint2)(0, 0))
#else
#define RANK_TILE(keys_in, index_in, n, shift, mode, tile, lkeys, lindex,     \
                  counts, digit_start, tmp, masks)                          \
  rank_tile(keys_in, index_in, n, shift, mode, tile, lkeys, lindex, counts, \
            digit_start, tmp)
#endif

// Stable scatter of one tile: ranked in local memory (rank_tile), then
// written out in order, so that runs of equal digits land in consecutive
// global addresses. offsets[d * tiles + tile]: where the tile's digit d
// goes (the scanned histogram).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_scatter(__global const key_t* keys_in, __global key_t* keys_out,
                   __global const uint* index_in, __global uint* index_out,
                   uint n, uint shift, __global const uint* offsets,
                   uint tiles, uint mode) {
  TILE_STORAGE;
  __local rank_counter_t counts[RANK_COUNTERS];
  __local uint digit_start[RADIX];
  __local uint tmp[WG];

  const uint lid = get_local_id(0);
  const uint tile = get_group_id(0);
  const uint count = RANK_TILE(keys_in, index_in, n, shift, mode, tile, lkeys,
                               lindex, counts, digit_start, tmp, masks);
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

// One pass in one launch ("onesweep"): no histogram pass and no scan
// launches. Work-groups take tiles in the order they start (a global
// counter), rank their tile (rank_tile), publish its digit counts, and find
// where each digit goes by looking back over the tiles before theirs
// (decoupled look-back): a tile's status word per digit is 0 (not yet
// published), AGGREGATE | its own count, or PREFIX | the count of that
// digit over every tile up to and including it. The look-back reads
// LOOKBACK predecessors at once, so a walk over many aggregates costs a
// few memory latencies rather than one per tile. A tile only waits for
// tiles that started before it, which is what makes the spin safe on
// devices that keep started work-groups running (NVIDIA and PoCL do;
// others use radix_scatter). Counts are 30 bits (n < 2^30), or 29 with
// marked statuses (lookback_digit).
//   starts[starts_at + d]: where digit d starts in this pass's output (from
//     radix_digit_starts)
//   status + status_at: tiles * RADIX words, zero on entry or (marked:
//     mark, value_mask not (0, 2^30 - 1)) of another mark. status +
//     next_at: the same for the next pass, zeroed here if zero_next
//     (otherwise the host zeroes before each pass, or marks make it
//     needless).
//   status[counter_at]: the pass's tile counter, zero on entry.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_onesweep(__global const key_t* keys_in, __global key_t* keys_out,
                    __global const uint* index_in, __global uint* index_out,
                    uint n, uint shift, __global const uint* starts,
                    uint starts_at, __global uint* status, uint tiles,
                    uint mode, uint status_at, uint next_at,
                    uint zero_next, uint counter_at, uint mark,
                    uint value_mask) {
  TILE_STORAGE;
  __local rank_counter_t counts[RANK_COUNTERS];
  __local uint digit_start[RADIX];
  __local uint digit_base[RADIX];  // global start of digit d for this tile
  __local uint tmp[WG];
  __local uint tile_slot;

  const uint lid = get_local_id(0);
  // Passes alternate between two status areas: this pass's, and the one
  // the previous pass used, which each tile zeroes its part of for the
  // next pass (so only the first pass needs the host to zero them).
  __global uint* next_status = status + next_at;
  if (lid == 0) tile_slot = atomic_inc(&status[counter_at]);
  status += status_at;
  const uint2 marks = (uint2)(mark, value_mask);
  // Where each digit starts in the output (radix_digit_starts).
  for (uint d = lid; d < RADIX; d += WG) digit_base[d] = starts[starts_at + d];
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint tile = tile_slot;
#if STATUS_PREFETCH
  // This tile's status lines on their way to L2 while its keys load. (A
  // volatile load or an atomic_or of 0 per line instead measured level or
  // slower.)
  if (lid < RADIX / 32) {
    __global uint* line = status + tile * RADIX + lid * 32;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
  }
#endif

#if ONESWEEP_EARLY
  // The look-back is done (digit_base holds this tile's share already).
  const uint count = rank_tile_warp(keys_in, index_in, n, shift, mode, tile,
                                    lkeys, lindex, counts, digit_start, tmp,
                                    masks, 1, status, digit_base, marks);
#if !EARLY_SCAN
  for (uint d = lid; d < RADIX; d += WG) digit_base[d] -= digit_start[d];
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
#else
  const uint count = RANK_TILE(keys_in, index_in, n, shift, mode, tile, lkeys,
                               lindex, counts, digit_start, tmp, masks);
  for (uint d = lid; d < RADIX; d += WG) {
    const uint end = d + 1 < RADIX ? digit_start[d + 1] : count;
    digit_base[d] +=
        lookback_digit(status, tile, d, end - digit_start[d], marks) -
        digit_start[d];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#endif

  // A full tile stores without a test per key.
#if HAS_INDEX
#define STORE_INDEX(statement) statement
#else
#define STORE_INDEX(statement)
#endif
#if ABLATE == 4 || ABLATE == 5
#define STORE_AT(key, li) \
  (tile * TILE + (li) + (digit_base[digit_of(key, shift)] >> 31))
#elif ABLATE
// Unsorted output must still stay inside the array.
#define STORE_AT(key, li) min(digit_base[digit_of(key, shift)] + (li), n - 1)
#else
#define STORE_AT(key, li) (digit_base[digit_of(key, shift)] + (li))
#endif
#define STORE_KEY(li)                                         \
  do {                                                        \
    const key_t key = lkeys[LPAD(li)];                        \
    const uint dst = STORE_AT(key, li);                       \
    keys_out[dst] = store_form(key, mode);                    \
    STORE_INDEX(index_out[dst] = lindex[LPAD(li)]);           \
  } while (0)
  if (FULL_TILES && count == TILE) {
    for (uint j = 0; j < ITEMS; ++j) STORE_KEY(j * WG + lid);
  } else {
    for (uint j = 0; j < ITEMS; ++j) {
      const uint li = j * WG + lid;
      if (li < count) STORE_KEY(li);
    }
  }
#undef STORE_KEY
#undef STORE_AT
#undef STORE_INDEX
  if (zero_next) {
    for (uint d = lid; d < RADIX; d += WG) next_status[tile * RADIX + d] = 0;
    if (tile == 0 && lid == 0) next_status[tiles * RADIX] = 0;
  }
}

#if WARP_RANK
// Whole segments of up to TILE keys (ordered form, after radix_encode), one
// work-group each, sorted in place in local memory: every pass ranks the
// keys held in registers (warp_rank_and_move) and reads them back. The
// work-group handles segment list[group]: keys [offsets[s], offsets[s+1]).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_segments(__global key_t* keys, __global uint* index,
                    __global const uint* offsets, __global const uint* list) {
  TILE_STORAGE;
  __local uint counters[WARPS * RADIX];
  __local uint digit_start[RADIX];
  __local uint tmp[WG];
  const uint lid = get_local_id(0);
  const uint s = list[get_group_id(0)];
  const uint begin = offsets[s];
  const uint count = offsets[s + 1] - begin;
  const uint first =
      (lid / WARP_SIZE) * (WARP_SIZE * ITEMS) + (lid & (WARP_SIZE - 1));
  key_t k[ITEMS];
  uint x[ITEMS];
  for (uint j = 0; j < ITEMS; ++j) {
    const uint li = first + j * WARP_SIZE;
    k[j] = li < count ? keys[begin + li] : ~(key_t)0;
#if HAS_INDEX
    x[j] = li < count ? index[begin + li] : 0;
#else
    x[j] = 0;
#endif
  }
  for (uint pass = 0; pass < PASSES; ++pass) {
    for (uint i = lid; i < WARPS * RADIX; i += WG) counters[i] = 0;
    for (uint i = lid; i < MASK_WORDS; i += WG) masks[i] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    warp_rank_and_move(k, x, pass * RADIX_BITS, lkeys, lindex, counters,
                       digit_start, tmp, masks, 0);
    if (pass + 1 < PASSES) {
      for (uint j = 0; j < ITEMS; ++j) {
        const uint li = first + j * WARP_SIZE;
        k[j] = lkeys[LPAD(li)];
#if HAS_INDEX
        x[j] = lindex[LPAD(li)];
#endif
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  for (uint j = 0; j < ITEMS; ++j) {
    const uint li = j * WG + lid;
    if (li < count) {
      keys[begin + li] = lkeys[LPAD(li)];
#if HAS_INDEX
      index[begin + li] = lindex[LPAD(li)];
#endif
    }
  }
}
#endif  // WARP_RANK

// Ordered keys -> raw keys in the output buffer (decode_keys 0: the last
// pass did it); with an index, the payload is gathered (value_words 1 or 2,
// 0 for none). The permutation needs no
// kernel: it is the final index array itself.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_decode(__global const key_t* keys, __global key_t* raw_out,
                  __global const uint* index, __global const uint* values_in,
                  __global uint* values_out, uint n, uint kind,
                  uint descending, uint value_words, uint decode_keys) {
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

// Diagnostic (SORTD_BUFFER_ADDRESSES=1): the device address of a buffer.
kernel void buffer_address(global const uchar* p, global ulong* out,
                           uint slot) {
  out[slot] = (ulong)p;
}
