// The segmented sort's radix kernels (gpu/kernels/radix_segments.clh;
// arguments in gpu/kernels/segments_args.h): segments sorted in place one
// work-group each (radix_segments up to a tile with warp-level ranking,
// radix_segment_groups up to segment_group_max keys), and, for a batch
// sorted as one array, each key's segment id (radix_segment_ids) and the
// gather into segment order (radix_segment_gather). The engine's use of
// them is gpu/segmented_sort.cc.
#ifndef SORTD_GPU_PASSES_SEGMENTS_H_
#define SORTD_GPU_PASSES_SEGMENTS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/segments_args.h"
#include "gpu/policy.h"

namespace sortd::gpu {

class Run;
struct SortArrays;

SORTD_KERNEL_ARGS(SegmentsArgs, SORTD_SEGMENTS_ARGS);
SORTD_KERNEL_ARGS(SegmentGroupsArgs, SORTD_SEGMENT_GROUPS_ARGS);
SORTD_KERNEL_ARGS(SegmentIdsArgs, SORTD_SEGMENT_IDS_ARGS);
SORTD_KERNEL_ARGS(SegmentGatherArgs, SORTD_SEGMENT_GATHER_ARGS);

// One build's kernels.
struct SegmentKernels {
  // radix_segments (warp-level builds only)
  ArgsKernel<SegmentsArgs> segments;
  ArgsKernel<SegmentGroupsArgs> segment_groups;  // radix_segment_groups
  ArgsKernel<SegmentIdsArgs> segment_ids;        // radix_segment_ids
  ArgsKernel<SegmentGatherArgs> segment_gather;  // radix_segment_gather
};

// The `count` segments listed in `list` (of those starting at `offsets`),
// each sorted by one work-group where it lies in a.keys[0] and a.index[0]:
// by radix_segments, or, with `groups`, by radix_segment_groups through the
// scratch halves a.keys[1] and a.index[1].
absl::Status RadixSegments(Run& run, const RadixSortPolicy& policy,
                           SegmentKernels& k, bool groups, SortArrays& a,
                           const cl::Buffer& offsets, const cl::Buffer& list,
                           size_t count);

// For each of the `n` keys, its segment id into `ids` and its place into
// `places`, from `index`, its place before the sort, and the `segments`
// segments' `offsets`.
absl::Status SegmentIds(Run& run, const RadixSortPolicy& policy,
                        SegmentKernels& k, const cl::Buffer& index,
                        const cl::Buffer& offsets, size_t segments,
                        const cl::Buffer& ids, const cl::Buffer& places,
                        size_t n);

// Keys and indices of `from` (at from.cur) moved by `places` into the
// other half of `from`.
absl::Status SegmentGather(Run& run, const RadixSortPolicy& policy,
                           SegmentKernels& k, SortArrays& from,
                           const cl::Buffer& places, size_t n);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_SEGMENTS_H_
