// Transposition of 32x32 bit matrices (32 uint rows each): bit j of row i
// becomes bit i of row j.
//
// Portable version: a work-group stages MATRICES_PER_WG matrices in local
// memory with coalesced loads, each work-item transposes one matrix in
// registers (five rounds of masked block swaps), and the group stores them
// back coalesced. Rows are padded to 33 words in local memory so that the
// work-items, each reading its own matrix, hit different banks.
//
// Build options (-D): MATRICES_PER_WG (also the work-group size).

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
void transpose32(__global const uint* in, __global uint* out, uint count) {
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
