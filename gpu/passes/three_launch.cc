#include "gpu/passes/three_launch.h"

#include <utility>

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
  SORTD_RETURN_IF_ERROR(
      run.Launch(k.scan_blocks, blocks, work_group, plan.Stage("scan")));
  if (blocks == 1) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, plan, work_group, sums[level],
                                    blocks, sums, level + 1));
  k.scan_add.Bind({.data = data, .n = n, .block_sums = sums[level]});
  return run.Launch(k.scan_add, blocks, work_group, plan.Stage("scan"));
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

absl::Status ThreeLaunchPasses(Run& run, const RadixSortPolicy& p,
                               const RadixPassPlan& plan, ThreeLaunchKernels& k,
                               SettleKernels& settle_k, SortArrays& a,
                               std::vector<bool>& skip,
                               const cl::Buffer* totals, PassOrder& order,
                               const PickedDigits* picked) {
  absl::StatusOr<cl::Buffer> offsets =
      run.Allocate(plan.offsets_bytes, "tile offsets");
  if (!offsets.ok()) return offsets.status();
  absl::StatusOr<std::vector<cl::Buffer>> sums = AllocateSums(run, plan);
  if (!sums.ok()) return sums.status();
  const cl_uint n = static_cast<cl_uint>(plan.count);
  const cl_uint tiles = static_cast<cl_uint>(plan.tiles);
  // Picked digits: picked by radix_digit_starts, whose digit starts these
  // passes do not use.
  const cl::Buffer& picks = picked != nullptr ? picked->buffer : *offsets;
  if (picked != nullptr) {
    absl::StatusOr<cl::Buffer> starts =
        run.Allocate(plan.starts_bytes, "digit starts");
    if (!starts.ok()) return starts.status();
    SORTD_RETURN_IF_ERROR(DigitStarts(run, p, plan, settle_k, *totals, *starts,
                                      picked, order, a));
  }
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    const cl_uint shift = PassOrder::Shift(pass, p, picked);
    k.histogram.Bind({
        .keys = order.KeysIn(pass, a),
        .n = n,
        .shift = shift,
        .counts = *offsets,
        .tiles = tiles,
        .mode = order.Mode(pass),
        .picks = picks,
    });
    SORTD_RETURN_IF_ERROR(run.Launch(k.histogram, plan.tiles, p.work_group,
                                     plan.Stage("histogram")));
    SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, plan, p.work_group, *offsets,
                                      plan.tiles * plan.radix, *sums, 0));
    k.scatter.Bind({
        .keys_in = order.KeysIn(pass, a),
        .keys_out = a.keys[1 - a.cur],
        .index_in = a.index[a.cur],
        .index_out = a.index[1 - a.cur],
        .n = n,
        .shift = shift,
        .offsets = *offsets,
        .tiles = tiles,
        .mode = order.Mode(pass),
        .picks = picks,
    });
    SORTD_RETURN_IF_ERROR(
        run.Launch(k.scatter, plan.tiles, p.work_group, plan.Stage("scatter")));
    a.cur = 1 - a.cur;
    SORTD_RETURN_IF_ERROR(order.Enqueued(run, pass, skip));
  }
  return absl::OkStatus();
}

}  // namespace sortd::gpu
