// Bitonic sorting networks on keys already in ordered form (radix_sort.cl's
// radix_encode), so every sort here is ascending on unsigned bits.
//
// Stability: with HAS_INDEX every key carries its input index and ties are
// broken by it, which makes the order total and the result the stable
// order. Keys-only sorts need no tie-break: equal ordered keys are equal
// bit patterns.
//
// Build options (-D):
//   KEY_BITS   32 or 64
//   HAS_INDEX  0 or 1
//   BLOCK      elements one work-group sorts in local memory (power of two)
//   BWG        work-group size (power of two, at most BLOCK / 2)

#include "kernel_args.clh"
#include "bitonic_args.h"

#if KEY_BITS == 64
typedef ulong key_t;
#define KEY_MAX ((ulong)-1)
#else
typedef uint key_t;
#define KEY_MAX ((uint)-1)
#endif
#define INDEX_MAX ((uint)-1)

#if HAS_INDEX
#define BEFORE(ka, xa, kb, xb) ((ka) < (kb) || ((ka) == (kb) && (xa) < (xb)))
#else
#define BEFORE(ka, xa, kb, xb) ((ka) < (kb))
#endif

// Lower element of compare-exchange pair p at distance j (a power of two).
inline uint pair_low(uint p, uint j) { return ((p & ~(j - 1)) << 1) | (p & (j - 1)); }

// One compare-exchange in local memory; `ascending` orders the pair.
inline void exchange_local(__local key_t* k, __local uint* x, uint a, uint b,
                           bool ascending) {
  const key_t ka = k[a], kb = k[b];
#if HAS_INDEX
  const uint xa = x[a], xb = x[b];
#else
  const uint xa = 0, xb = 0;
#endif
  if (BEFORE(kb, xb, ka, xa) == ascending) {
    k[a] = kb;
    k[b] = ka;
#if HAS_INDEX
    x[a] = xb;
    x[b] = xa;
#endif
  }
}

// Stages 2..`size` of the network, in local memory. Direction follows bit
// `stage` of (origin + position), the standard rule, so that neighbouring
// blocks of a larger sort come out in opposite directions.
inline void sort_local(__local key_t* k, __local uint* x, uint size,
                       ulong origin) {
  const uint lid = get_local_id(0);
  for (uint stage = 2; stage <= size; stage <<= 1) {
    for (uint j = stage >> 1; j > 0; j >>= 1) {
      for (uint p = lid; p < size / 2; p += BWG) {
        const uint a = pair_low(p, j);
        exchange_local(k, x, a, a + j, ((origin + a) & stage) == 0);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
}

// One BLOCK of keys (and indices) between global and local memory.
inline void load_block(__global const key_t* keys, __global const uint* index,
                       size_t base, __local key_t* k, __local uint* x) {
  for (uint i = get_local_id(0); i < BLOCK; i += BWG) {
    k[i] = keys[base + i];
#if HAS_INDEX
    x[i] = index[base + i];
#endif
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

inline void store_block(__global key_t* keys, __global uint* index,
                        size_t base, __local const key_t* k,
                        __local const uint* x) {
  for (uint i = get_local_id(0); i < BLOCK; i += BWG) {
    keys[base + i] = k[i];
#if HAS_INDEX
    index[base + i] = x[i];
#endif
  }
}

// Fills [n, padded) with sentinels that sort after every real key.
__kernel void bitonic_pad(KERNEL_PARAMS(SORTD_BITONIC_PAD_ARGS)) {
  const uint i = n + (uint)get_global_id(0);
  if (i >= padded) return;
  keys[i] = KEY_MAX;
#if HAS_INDEX
  index[i] = INDEX_MAX;
#endif
}

// Sorts each BLOCK of a padded power-of-two array in local memory, in the
// direction the global network needs.
__kernel __attribute__((reqd_work_group_size(BWG, 1, 1)))
void bitonic_sort_blocks(KERNEL_PARAMS(SORTD_BITONIC_SORT_BLOCKS_ARGS)) {
  __local key_t k[BLOCK];
  __local uint x[HAS_INDEX ? BLOCK : 1];
  const size_t base = get_group_id(0) * (size_t)BLOCK;
  load_block(keys, index, base, k, x);
  sort_local(k, x, BLOCK, base);
  store_block(keys, index, base, k, x);
}

// One global step (distance j >= BLOCK) of stage `stage`.
__kernel void bitonic_merge_global(
    KERNEL_PARAMS(SORTD_BITONIC_MERGE_GLOBAL_ARGS)) {
  const uint p = (uint)get_global_id(0);
  const uint a = pair_low(p, j), b = a + j;
  const key_t ka = keys[a], kb = keys[b];
#if HAS_INDEX
  const uint xa = index[a], xb = index[b];
#else
  const uint xa = 0, xb = 0;
#endif
  if (BEFORE(kb, xb, ka, xa) == ((a & stage) == 0)) {
    keys[a] = kb;
    keys[b] = ka;
#if HAS_INDEX
    index[a] = xb;
    index[b] = xa;
#endif
  }
}

// The steps of stage `stage` below BLOCK, all in local memory: the strides
// below the block stay local.
__kernel __attribute__((reqd_work_group_size(BWG, 1, 1)))
void bitonic_merge_local(KERNEL_PARAMS(SORTD_BITONIC_MERGE_LOCAL_ARGS)) {
  __local key_t k[BLOCK];
  __local uint x[HAS_INDEX ? BLOCK : 1];
  const uint lid = get_local_id(0);
  const size_t base = get_group_id(0) * (size_t)BLOCK;
  load_block(keys, index, base, k, x);
  for (uint j = BLOCK / 2; j > 0; j >>= 1) {
    for (uint p = lid; p < BLOCK / 2; p += BWG) {
      const uint a = pair_low(p, j);
      exchange_local(k, x, a, a + j, ((base + a) & stage) == 0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  store_block(keys, index, base, k, x);
}

// Segmented sort of the short segments: work-group g sorts segment
// segments[g], [offsets[s], offsets[s + 1]) of at most BLOCK keys, in place,
// padding to the next power of two in local memory only. Lengths 0 and 1
// return at once.
__kernel __attribute__((reqd_work_group_size(BWG, 1, 1)))
void segmented_local_sort(KERNEL_PARAMS(SORTD_BITONIC_SEGMENTS_ARGS)) {
  __local key_t k[BLOCK];
  __local uint x[HAS_INDEX ? BLOCK : 1];
  const uint lid = get_local_id(0);
  const uint s = segments[get_group_id(0)];
  const uint begin = offsets[s];
  const uint len = offsets[s + 1] - begin;
  if (len <= 1) return;
  uint size = 2;
  while (size < len) size <<= 1;
  for (uint i = lid; i < size; i += BWG) {
    k[i] = i < len ? keys[begin + i] : KEY_MAX;
#if HAS_INDEX
    x[i] = i < len ? index[begin + i] : INDEX_MAX;
#endif
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  sort_local(k, x, size, 0);
  for (uint i = lid; i < len; i += BWG) {
    keys[begin + i] = k[i];
#if HAS_INDEX
    index[begin + i] = x[i];
#endif
  }
}
