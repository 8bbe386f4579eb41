// The arguments of the three-launch radix pass's kernels (radix_sort.cl:
// radix_histogram, scan_blocks and scan_add, radix_scatter), in order, for
// the kernels and the host (gpu/passes/three_launch.h) alike; valid C++ and
// OpenCL C, expanded as onesweep_args.h says.
//   keys (histogram), keys_in/keys_out, index_in/index_out (scatter): the
//     pass's input and output
//   n: keys (scans: words); shift: the digit's first bit, or a picked slot
//   counts (histogram): each tile's digit counts, digit-major, which the
//     scans turn in place into the scatter's offsets
//   tiles: tiles of the pass; mode: the pass's mode (sort_constants.h)
//   picks: the picked digits (radix_digit_starts)
//   data, block_sums (scans): the words scanned, each block's total
#ifndef SORTD_GPU_KERNELS_THREE_LAUNCH_ARGS_H_
#define SORTD_GPU_KERNELS_THREE_LAUNCH_ARGS_H_

#define SORTD_HISTOGRAM_ARGS(CONST_BUF, BUF, U32, SEP)                 \
  CONST_BUF(key_t, keys) SEP() U32(n) SEP() U32(shift) SEP()           \
  BUF(uint, counts) SEP() U32(tiles) SEP() U32(mode) SEP()             \
  CONST_BUF(uint, picks)

#define SORTD_SCAN_BLOCKS_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(uint, data) SEP() U32(n) SEP() BUF(uint, block_sums)

#define SORTD_SCAN_ADD_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(uint, data) SEP() U32(n) SEP() CONST_BUF(uint, block_sums)

#define SORTD_SCATTER_ARGS(CONST_BUF, BUF, U32, SEP)                     \
  CONST_BUF(key_t, keys_in) SEP() BUF(key_t, keys_out) SEP()             \
  CONST_BUF(uint, index_in) SEP() BUF(uint, index_out) SEP()             \
  U32(n) SEP() U32(shift) SEP() CONST_BUF(uint, offsets) SEP()           \
  U32(tiles) SEP() U32(mode) SEP() CONST_BUF(uint, picks)

#endif  // SORTD_GPU_KERNELS_THREE_LAUNCH_ARGS_H_
