// The arguments of the segmented sort's radix kernels (radix_segments.clh:
// radix_segments, radix_segment_groups, radix_segment_ids,
// radix_segment_gather), in order, for the kernels and the host
// (gpu/passes/segments.h) alike; valid C++ and OpenCL C, expanded as
// onesweep_args.h says.
//   keys, index: sorted in place, segment by segment; keys_tmp, index_tmp:
//     their scratch twins (segment_groups)
//   offsets: where each segment starts; list: the segments to sort, one a
//     work-group
//   segment_ids: each key's segment id (`ids`) and place (`places`) from
//     its index; segment_gather: keys and indices moved by `places`
#ifndef SORTD_GPU_KERNELS_SEGMENTS_ARGS_H_
#define SORTD_GPU_KERNELS_SEGMENTS_ARGS_H_

#define SORTD_SEGMENTS_ARGS(CONST_BUF, BUF, U32, SEP)                \
  BUF(key_t, keys) SEP() BUF(uint, index) SEP()                      \
  CONST_BUF(uint, offsets) SEP() CONST_BUF(uint, list)

#define SORTD_SEGMENT_GROUPS_ARGS(CONST_BUF, BUF, U32, SEP)             \
  BUF(key_t, keys) SEP() BUF(uint, index) SEP() BUF(key_t, keys_tmp)    \
  SEP() BUF(uint, index_tmp) SEP() CONST_BUF(uint, offsets) SEP()       \
  CONST_BUF(uint, list)

#define SORTD_SEGMENT_IDS_ARGS(CONST_BUF, BUF, U32, SEP)               \
  CONST_BUF(uint, index) SEP() CONST_BUF(uint, offsets) SEP()          \
  U32(segments) SEP() BUF(uint, ids) SEP() BUF(uint, places) SEP() U32(n)

#define SORTD_SEGMENT_GATHER_ARGS(CONST_BUF, BUF, U32, SEP)             \
  CONST_BUF(key_t, keys_in) SEP() CONST_BUF(uint, index_in) SEP()       \
  CONST_BUF(uint, places) SEP() BUF(key_t, keys_out) SEP()              \
  BUF(uint, index_out) SEP() U32(n)

#endif  // SORTD_GPU_KERNELS_SEGMENTS_ARGS_H_
