// The arguments of transpose.cl's kernels (transpose32 and
// transpose32_subgroup alike), in order, for the kernels and the host
// (gpu/passes/transpose.h); valid C++ and OpenCL C, expanded as
// onesweep_args.h says. `count` 32x32 bit matrices of 32 words each.
#ifndef SORTD_GPU_KERNELS_TRANSPOSE_ARGS_H_
#define SORTD_GPU_KERNELS_TRANSPOSE_ARGS_H_

#define SORTD_TRANSPOSE_ARGS(CONST_BUF, BUF, U32, SEP) \
  CONST_BUF(uint, in) SEP() BUF(uint, out) SEP() U32(count)

#endif  // SORTD_GPU_KERNELS_TRANSPOSE_ARGS_H_
