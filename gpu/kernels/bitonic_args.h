// The arguments of bitonic_sort.cl's kernels, in order, for the kernels
// and the host (gpu/passes/bitonic.h) alike; valid C++ and OpenCL C,
// expanded as onesweep_args.h says.
//   keys, index: sorted in place
//   pad: sentinels into [n, padded); merge_global: the stage's stride j;
//   stage: the merge's bitonic stage
//   segmented: offsets, where each segment starts; segments, the segments
//     to sort, one a work-group
#ifndef SORTD_GPU_KERNELS_BITONIC_ARGS_H_
#define SORTD_GPU_KERNELS_BITONIC_ARGS_H_

#define SORTD_BITONIC_PAD_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(key_t, keys) SEP() BUF(uint, index) SEP() U32(n) SEP() U32(padded)

#define SORTD_BITONIC_SORT_BLOCKS_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(key_t, keys) SEP() BUF(uint, index)

#define SORTD_BITONIC_MERGE_GLOBAL_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(key_t, keys) SEP() BUF(uint, index) SEP() U32(j) SEP() U32(stage)

#define SORTD_BITONIC_MERGE_LOCAL_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(key_t, keys) SEP() BUF(uint, index) SEP() U32(stage)

#define SORTD_BITONIC_SEGMENTS_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(key_t, keys) SEP() BUF(uint, index) SEP()               \
  CONST_BUF(uint, offsets) SEP() CONST_BUF(uint, segments)

#endif  // SORTD_GPU_KERNELS_BITONIC_ARGS_H_
