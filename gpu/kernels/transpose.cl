// Transposition of 32x32 bit matrices (32 uint rows each): bit j of row i
// becomes bit i of row j.
//
// Portable version: a work-group stages MATRICES_PER_WG matrices in local
// memory with coalesced loads, each work-item transposes one matrix in
// registers (five rounds of masked block swaps), and the group stores them
// back coalesced. Rows are padded to 33 words in local memory so that the
// work-items, each reading its own matrix, hit different banks.
//
// Build options (-D): MATRICES_PER_WG (also the work-group size); for the
// sub-group kernel below, SUBGROUP_KHR or SUBGROUP_INTEL and optionally
// SUB_GROUP_SIZE.

#include "kernel_args.clh"
#include "transpose_args.h"

#define STRIDE 33

#define SWAP_ROUND(w, m)                              \
  _Pragma("unroll") for (uint k = 0; k < 32; ++k) {   \
    if ((k & (w)) == 0) {                             \
      const uint t = ((a[k] >> (w)) ^ a[k + (w)]) & (m); \
      a[k] ^= t << (w);                               \
      a[k + (w)] ^= t;                                \
    }                                                 \
  }

__kernel __attribute__((reqd_work_group_size(MATRICES_PER_WG, 1, 1)))
void transpose32(KERNEL_PARAMS(SORTD_TRANSPOSE_ARGS)) {
  __local uint tile[MATRICES_PER_WG * STRIDE];
  const uint lid = get_local_id(0);
  const size_t first = get_group_id(0) * (size_t)MATRICES_PER_WG;
  const uint here = (uint)min((size_t)MATRICES_PER_WG, count - first);

  for (uint w = lid; w < here * 32; w += MATRICES_PER_WG) {
    tile[(w / 32) * STRIDE + w % 32] = in[first * 32 + w];
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  if (lid < here) {
    uint a[32];
    _Pragma("unroll") for (uint r = 0; r < 32; ++r) a[r] = tile[lid * STRIDE + r];
    SWAP_ROUND(16, 0x0000FFFFu)
    SWAP_ROUND(8, 0x00FF00FFu)
    SWAP_ROUND(4, 0x0F0F0F0Fu)
    SWAP_ROUND(2, 0x33333333u)
    SWAP_ROUND(1, 0x55555555u)
    _Pragma("unroll") for (uint r = 0; r < 32; ++r) tile[lid * STRIDE + r] = a[r];
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  for (uint w = lid; w < here * 32; w += MATRICES_PER_WG) {
    out[first * 32 + w] = tile[(w / 32) * STRIDE + w % 32];
  }
}

// Sub-group variant (Intel GPUs and other devices with cl_khr_subgroup_shuffle
// or cl_intel_subgroups): work-item i of each aligned run of 32 holds row i
// of one matrix, and each of the five rounds swaps blocks with the partner
// row through one shuffle-xor instead of local memory. Loads and stores are
// one coalesced word per work-item. Needs sub-groups whose size is a
// multiple of 32 (the host checks before choosing it): SUB_GROUP_SIZE, where
// set, is the kernel's required sub-group size (Intel GPUs, whose compiler
// otherwise picks 8, 16 or 32).
#if defined(SUBGROUP_KHR) || defined(SUBGROUP_INTEL)
#ifdef SUB_GROUP_SIZE
#define SUB_GROUP_SIZE_ATTR \
  __attribute__((intel_reqd_sub_group_size(SUB_GROUP_SIZE)))
#else
#define SUB_GROUP_SIZE_ATTR
#endif
#if defined(SUBGROUP_KHR)
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#pragma OPENCL EXTENSION cl_khr_subgroup_shuffle : enable
#define SHUFFLE_XOR(x, m) sub_group_shuffle_xor(x, m)
#else
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#define SHUFFLE_XOR(x, m) intel_sub_group_shuffle_xor(x, m)
#endif

#define SHUFFLE_ROUND(w, m)                                  \
  {                                                          \
    const uint other = SHUFFLE_XOR(row, (w));                \
    const bool low = (lane & (w)) == 0;                      \
    const uint t = ((low ? row : other) >> (w) ^              \
                    (low ? other : row)) & (m);               \
    row ^= low ? (t << (w)) : t;                             \
  }

__kernel __attribute__((reqd_work_group_size(MATRICES_PER_WG * 32, 1, 1)))
SUB_GROUP_SIZE_ATTR
void transpose32_subgroup(KERNEL_PARAMS(SORTD_TRANSPOSE_ARGS)) {
  const size_t word = get_global_id(0);
  const uint lane = get_local_id(0) & 31;
  const bool live = word < (size_t)count * 32;
  uint row = live ? in[word] : 0;
  SHUFFLE_ROUND(16, 0x0000FFFFu)
  SHUFFLE_ROUND(8, 0x00FF00FFu)
  SHUFFLE_ROUND(4, 0x0F0F0F0Fu)
  SHUFFLE_ROUND(2, 0x33333333u)
  SHUFFLE_ROUND(1, 0x55555555u)
  if (live) out[word] = row;
}
#endif
