#include "gpu/passes/transpose.h"

#include "gpu/engine_run.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

absl::Status Transpose(Run& run, ArgsKernel<TransposeArgs>& kernel,
                       bool subgroup, size_t per_group, const cl::Buffer& in,
                       const cl::Buffer& out, size_t count) {
  kernel.Bind({.in = in, .out = out, .count = static_cast<cl_uint>(count)});
  // The sub-group kernel runs one work-item per row, the portable one
  // one per matrix.
  const size_t group_size = subgroup ? per_group * 32 : per_group;
  return run.Launch(
      kernel, {.groups = DivUp(count, per_group), .group_size = group_size},
      "transpose");
}

}  // namespace sortd::gpu
