// The arguments of the kernels around picked digits (radix_sort.cl:
// radix_digit_starts, radix_settle), in order, for the kernels and the
// host (gpu/passes/settle.h) alike; valid C++ and OpenCL C, expanded as
// onesweep_args.h says.
//   digit_starts: every pass's digit starts from the digit totals, and,
//     with slots > 0, the digits picked into `picks` from samples of
//     `keys` (raw if kind_order says their kind)
//   settle: the runs of keys equal in the picked digits sorted in place,
//     or flagged in `picks`
#ifndef SORTD_GPU_KERNELS_SETTLE_ARGS_H_
#define SORTD_GPU_KERNELS_SETTLE_ARGS_H_

#define SORTD_DIGIT_STARTS_ARGS(CONST_BUF, BUF, U32, SEP)                 \
  CONST_BUF(uint, totals) SEP() BUF(uint, starts) SEP() U32(n) SEP()      \
  U32(slots) SEP() BUF(uint, picks) SEP() CONST_BUF(key_t, keys) SEP()    \
  U32(kind_order)

#define SORTD_SETTLE_ARGS(CONST_BUF, BUF, U32, SEP) \
  BUF(key_t, keys) SEP() U32(n) SEP() U32(kind_order) SEP() BUF(uint, picks)

#endif  // SORTD_GPU_KERNELS_SETTLE_ARGS_H_
