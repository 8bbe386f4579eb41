#include "gpu/passes/bitonic.h"

#include <algorithm>

#include "gpu/engine_run.h"

namespace sortd::gpu {

absl::Status BitonicSort(Run& run, const BitonicPolicy& p, const SortPlan& plan,
                         SortArrays& a) {
  BitonicKernels& k =
      run.lane().bitonic[plan.key_bits == 64 ? 1 : 0][plan.with_index ? 1 : 0];
  const size_t block = p.Block(plan.key_bits);
  const size_t wg = p.work_group;
  cl::Buffer& keys = a.keys[a.cur];
  cl::Buffer& index = a.index[a.cur];
  k.pad.Bind({.keys = keys,
              .index = index,
              .n = static_cast<cl_uint>(plan.count),
              .padded = static_cast<cl_uint>(plan.padded)});
  SORTD_RETURN_IF_ERROR(run.Launch(
      k.pad, LaunchGrid::Covering(plan.padded - plan.count, wg), "local_sort"));
  const size_t total = std::max(block, plan.padded);
  k.sort_blocks.Bind({.keys = keys, .index = index});
  SORTD_RETURN_IF_ERROR(run.Launch(k.sort_blocks,
                                   {.groups = total / block, .group_size = wg},
                                   "local_sort"));
  for (size_t stage = 2 * block; stage <= total; stage <<= 1) {
    for (size_t j = stage / 2; j >= block; j >>= 1) {
      k.merge_global.Bind({.keys = keys,
                           .index = index,
                           .j = static_cast<cl_uint>(j),
                           .stage = static_cast<cl_uint>(stage)});
      SORTD_RETURN_IF_ERROR(
          run.Launch(k.merge_global,
                     {.groups = total / 2 / wg, .group_size = wg}, "merge"));
    }
    k.merge_local.Bind(
        {.keys = keys, .index = index, .stage = static_cast<cl_uint>(stage)});
    SORTD_RETURN_IF_ERROR(run.Launch(
        k.merge_local, {.groups = total / block, .group_size = wg}, "merge"));
  }
  return absl::OkStatus();
}

absl::Status BitonicSegments(Run& run, const BitonicPolicy& policy,
                             BitonicKernels& k, SortArrays& a,
                             const cl::Buffer& offsets, const cl::Buffer& list,
                             size_t count) {
  k.segmented.Bind({.keys = a.keys[0],
                    .index = a.index[0],
                    .offsets = offsets,
                    .segments = list});
  return run.Launch(k.segmented,
                    {.groups = count, .group_size = policy.WorkGroupSize()},
                    "local_sort");
}

}  // namespace sortd::gpu
