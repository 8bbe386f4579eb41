#include "gpu/passes/three_launch.h"

#include <utility>
#include <vector>

#include "gpu/engine_run.h"

namespace sortd::gpu {
namespace {

// Exclusive scan of `count` words of `data` in place, a tile of the
// kernels' build at a time; `sums[level]` holds each level's block sums.
absl::Status ScanInPlace(Run& run, ThreeLaunchKernels& k,
                         const RadixPassPlan& plan, size_t work_group,
                         cl::Buffer& data, size_t count,
                         std::vector<cl::Buffer>& sums, size_t level) {
  const size_t blocks = DivUp(count, plan.tile);
  const cl_uint n = static_cast<cl_uint>(count);
  k.scan_blocks.Bind({.data = data, .n = n, .block_sums = sums[level]});
  SORTD_RETURN_IF_ERROR(run.Launch(k.scan_blocks,
                                   {.groups = blocks, .group_size = work_group},
                                   plan.Stage("scan")));
  if (blocks == 1) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, plan, work_group, sums[level],
                                    blocks, sums, level + 1));
  k.scan_add.Bind({.data = data, .n = n, .block_sums = sums[level]});
  return run.Launch(k.scan_add, {.groups = blocks, .group_size = work_group},
                    plan.Stage("scan"));
}

// The block sums of every level of the scan.
absl::StatusOr<std::vector<cl::Buffer>> AllocateSums(
    Run& run, const RadixPassPlan& plan) {
  std::vector<cl::Buffer> sums;
  for (size_t bytes : plan.sums_bytes) {
    absl::StatusOr<cl::Buffer> b = run.Allocate(bytes, "scan sums");
    if (!b.ok()) return b.status();
    sums.push_back(*std::move(b));
  }
  return sums;
}

}  // namespace

absl::Status ThreeLaunchPasses(const RadixPassJob& job, ThreeLaunchKernels& k,
                               const cl::Buffer* totals) {
  const RadixPassPlan& plan = job.plan;
  SortArrays& a = job.arrays;
  absl::StatusOr<cl::Buffer> offsets =
      job.run.Allocate(plan.offsets_bytes, "tile offsets");
  if (!offsets.ok()) return offsets.status();
  absl::StatusOr<std::vector<cl::Buffer>> sums = AllocateSums(job.run, plan);
  if (!sums.ok()) return sums.status();
  const cl_uint n = static_cast<cl_uint>(plan.count);
  const cl_uint tiles = static_cast<cl_uint>(plan.tiles);
  // Picked digits: picked by radix_digit_starts, whose digit starts these
  // passes do not use.
  const cl::Buffer& picks =
      job.picked != nullptr ? job.picked->buffer : *offsets;
  if (job.picked != nullptr) {
    absl::StatusOr<cl::Buffer> starts =
        job.run.Allocate(plan.starts_bytes, "digit starts");
    if (!starts.ok()) return starts.status();
    SORTD_RETURN_IF_ERROR(DigitStarts(job, *totals, *starts));
  }
  for (size_t pass = 0; pass < job.skip.size(); ++pass) {
    if (job.skip[pass]) continue;
    const cl_uint shift = PassOrder::Shift(pass, job.policy, job.picked);
    k.histogram.Bind({
        .keys = job.order.KeysIn(pass, a),
        .n = n,
        .shift = shift,
        .counts = *offsets,
        .tiles = tiles,
        .mode = job.order.Mode(pass),
        .picks = picks,
    });
    SORTD_RETURN_IF_ERROR(
        job.run.Launch(k.histogram, plan.tile_grid, plan.Stage("histogram")));
    SORTD_RETURN_IF_ERROR(ScanInPlace(job.run, k, plan, job.policy.work_group,
                                      *offsets, plan.tiles * plan.radix, *sums,
                                      0));
    k.scatter.Bind({
        .keys_in = job.order.KeysIn(pass, a),
        .keys_out = a.keys[1 - a.cur],
        .index_in = a.index[a.cur],
        .index_out = a.index[1 - a.cur],
        .n = n,
        .shift = shift,
        .offsets = *offsets,
        .tiles = tiles,
        .mode = job.order.Mode(pass),
        .picks = picks,
    });
    SORTD_RETURN_IF_ERROR(
        job.run.Launch(k.scatter, plan.tile_grid, plan.Stage("scatter")));
    a.cur = 1 - a.cur;
    SORTD_RETURN_IF_ERROR(job.order.Enqueued(job.run, pass, job.skip));
  }
  return absl::OkStatus();
}

}  // namespace sortd::gpu
