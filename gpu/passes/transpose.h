// 32x32 bit-matrix transposition on the device (transpose.cl; arguments in
// gpu/kernels/transpose_args.h): the portable kernel, one work-item a
// matrix, or the sub-group shuffle kernel, one work-item a row.
#ifndef SORTD_GPU_PASSES_TRANSPOSE_H_
#define SORTD_GPU_PASSES_TRANSPOSE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/transpose_args.h"

namespace sortd::gpu {

class Run;

SORTD_KERNEL_ARGS(TransposeArgs, SORTD_TRANSPOSE_ARGS);

// `count` matrices of `in` transposed into `out` by `kernel`, the
// sub-group one where `subgroup` says, `per_group` matrices a work-group.
absl::Status Transpose(Run& run, ArgsKernel<TransposeArgs>& kernel,
                       bool subgroup, size_t per_group, const cl::Buffer& in,
                       const cl::Buffer& out, size_t count);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_TRANSPOSE_H_
