#include "gpu/passes/segments.h"

#include "gpu/engine_run.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {

absl::Status RadixSegments(Run& run, const RadixSortPolicy& policy,
                           SegmentKernels& k, bool groups, SortArrays& a,
                           const cl::Buffer& offsets, const cl::Buffer& list,
                           size_t count) {
  if (!groups) {
    k.segments.Bind({.keys = a.keys[0],
                     .index = a.index[0],
                     .offsets = offsets,
                     .list = list});
    return run.Launch(k.segments,
                      {.groups = count, .group_size = policy.WorkGroupSize()},
                      "local_sort");
  }
  // Every pass ends where it began (radix_segment_groups).
  k.segment_groups.Bind({.keys = a.keys[0],
                         .index = a.index[0],
                         .keys_tmp = a.keys[1],
                         .index_tmp = a.index[1],
                         .offsets = offsets,
                         .list = list});
  return run.Launch(k.segment_groups,
                    {.groups = count, .group_size = policy.WorkGroupSize()},
                    "local_sort");
}

absl::Status SegmentIds(Run& run, const RadixSortPolicy& policy,
                        SegmentKernels& k, const cl::Buffer& index,
                        const cl::Buffer& offsets, size_t segments,
                        const cl::Buffer& ids, const cl::Buffer& places,
                        size_t n) {
  k.segment_ids.Bind({.index = index,
                      .offsets = offsets,
                      .segments = static_cast<cl_uint>(segments),
                      .ids = ids,
                      .places = places,
                      .n = static_cast<cl_uint>(n)});
  const size_t wg = policy.work_group;
  return run.Launch(k.segment_ids, LaunchGrid::Covering(n, wg), "transform");
}

absl::Status SegmentGather(Run& run, const RadixSortPolicy& policy,
                           SegmentKernels& k, SortArrays& from,
                           const cl::Buffer& places, size_t n) {
  const int to = 1 - from.cur;
  k.segment_gather.Bind({.keys_in = from.keys[from.cur],
                         .index_in = from.index[from.cur],
                         .places = places,
                         .keys_out = from.keys[to],
                         .index_out = from.index[to],
                         .n = static_cast<cl_uint>(n)});
  const size_t wg = policy.work_group;
  SORTD_RETURN_IF_ERROR(
      run.Launch(k.segment_gather, LaunchGrid::Covering(n, wg), "transform"));
  from.cur = to;
  return absl::OkStatus();
}

}  // namespace sortd::gpu
