// OpenClEngine::SortSegments: every segment of one array sorted in one run.
// Segments of up to a bitonic block (or, with warp-level ranking, of up to
// one radix tile) are sorted by one work-group each in a single launch per
// kind; longer ones by radix passes on a scratch copy, all enqueued without
// waiting on the host.
#include <algorithm>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"
#include "gpu/radix_passes.h"

namespace sortd::gpu {

absl::Status OpenClEngine::SortSegments(const SortJob& job,
                                        absl::Span<const uint32_t> offsets) {
  SORTD_RETURN_IF_ERROR(CheckSegmentOffsets(job.count, offsets));
  if (job.count == 0) return absl::OkStatus();
  if (job.count >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError("the OpenCL engine sorts < 2^31 keys");
  }
  LaneLease lease(this);
  Run run(core_, lease.lane());
  absl::Status status = SegmentsOnLane(run, job, offsets);
  absl::Status finished = run.Finish(status.ok() ? job.stages : nullptr);
  return status.ok() ? finished : status;
}

absl::Status OpenClEngine::SegmentsOnLane(Run& run, const SortJob& job,
                                          absl::Span<const uint32_t> offsets) {
  const int bits = KeyBits(job);
  const bool with_index = WithIndex(job);
  const size_t block = policy_.bitonic.Block(bits);
  // Segments of more than segment_radix_above keys that fit one radix tile
  // are sorted by radix_segments (one work-group each); others of up to a
  // bitonic block by the bitonic kernel; longer ones by radix passes.
  const RadixSortPolicy& rp = policy_.radix;
  const size_t radix_above = rp.WarpLevel(bits) && rp.segment_radix_above > 0
                                 ? rp.segment_radix_above
                                 : std::numeric_limits<size_t>::max();
  const size_t radix_tile = rp.Tile(bits, with_index);
  std::vector<uint32_t> short_segments, radix_segments, long_segments;
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const size_t len = offsets[s + 1] - offsets[s];
    if (len <= 1) continue;
    if (len > radix_above && len <= radix_tile) {
      radix_segments.push_back(static_cast<uint32_t>(s));
    } else if (len <= block) {
      short_segments.push_back(static_cast<uint32_t>(s));
    } else {
      long_segments.push_back(static_cast<uint32_t>(s));
    }
  }

  SortArrays a;
  cl::Buffer totals;
  const SortPlan plan =
      PlanSort(policy_, SortAlgorithm::kRadix, job, job.count);
  SORTD_RETURN_IF_ERROR(Upload(run, job, plan, false, true, a, &totals));
  cl::Buffer d_offsets;
  if (!short_segments.empty() || !radix_segments.empty()) {
    absl::StatusOr<cl::Buffer> b =
        run.Allocate(offsets.size() * 4, "segment offsets");
    if (!b.ok()) return b.status();
    d_offsets = *b;
    SORTD_RETURN_IF_ERROR(run.WriteNow(d_offsets, offsets.size() * 4,
                                       offsets.data(), "segment offsets"));
  }
  // One work-group per listed segment.
  auto per_segment = [&](const std::vector<uint32_t>& list, auto& kernel,
                         size_t group_size) -> absl::Status {
    if (list.empty()) return absl::OkStatus();
    absl::StatusOr<cl::Buffer> d_list =
        run.Allocate(list.size() * 4, "segment list");
    if (!d_list.ok()) return d_list.status();
    SORTD_RETURN_IF_ERROR(
        run.WriteNow(*d_list, list.size() * 4, list.data(), "segment list"));
    kernel.Bind(a.keys[0], a.index[0], d_offsets, *d_list);
    return run.Launch(kernel, list.size(), group_size, "local_sort");
  };
  Lane& lane = run.lane();
  SORTD_RETURN_IF_ERROR(per_segment(
      short_segments, lane.bitonic[bits == 64][with_index].segmented,
      policy_.bitonic.work_group));
  SORTD_RETURN_IF_ERROR(per_segment(radix_segments,
                                    lane.radix[bits == 64][with_index].segments,
                                    rp.work_group));
  SORTD_RETURN_IF_ERROR(LongSegments(run, job, offsets, long_segments, a));
  return Download(run, job, a);
}

absl::Status OpenClEngine::LongSegments(Run& run, const SortJob& job,
                                        absl::Span<const uint32_t> offsets,
                                        const std::vector<uint32_t>& list,
                                        SortArrays& a) {
  if (list.empty()) return absl::OkStatus();
  const int bits = KeyBits(job);
  const bool with_index = WithIndex(job);
  const size_t ks = KeySize(job.key_type);
  size_t longest = 0;
  for (uint32_t s : list) {
    longest = std::max<size_t>(longest, offsets[s + 1] - offsets[s]);
  }
  SortArrays scratch;
  for (auto [buffer, bytes, what] :
       {std::tuple{&scratch.keys[0], longest * ks, "segment keys"},
        {&scratch.keys[1], longest * ks, "segment keys (alternate)"},
        {&scratch.index[0], with_index ? longest * 4 : 0, "segment indices"},
        {&scratch.index[1], with_index ? longest * 4 : 0,
         "segment indices (alternate)"}}) {
    absl::StatusOr<cl::Buffer> b = run.Allocate(bytes, what);
    if (!b.ok()) return b.status();
    *buffer = *b;
  }
  const std::vector<bool> all_passes(
      DivUp(static_cast<size_t>(bits), policy_.radix.radix_bits));
  for (uint32_t s : list) {
    const size_t begin = offsets[s];
    const size_t len = offsets[s + 1] - begin;
    scratch.cur = 0;
    SORTD_RETURN_IF_ERROR(
        run.Copy(a.keys[0], begin * ks, scratch.keys[0], 0, len * ks));
    if (with_index) {
      SORTD_RETURN_IF_ERROR(
          run.Copy(a.index[0], begin * 4, scratch.index[0], 0, len * 4));
    }
    // No digit totals for a segment: three launches per pass.
    const RadixPassPlan plan = PlanRadixPasses(policy_.radix, bits, with_index,
                                               len, /*has_totals=*/false);
    SORTD_RETURN_IF_ERROR(RadixPasses(run, policy_.radix, plan, scratch,
                                      all_passes, nullptr, nullptr));
    SORTD_RETURN_IF_ERROR(run.Copy(scratch.keys[scratch.cur], 0, a.keys[0],
                                   begin * ks, len * ks));
    if (with_index) {
      SORTD_RETURN_IF_ERROR(run.Copy(scratch.index[scratch.cur], 0, a.index[0],
                                     begin * 4, len * 4));
    }
  }
  return absl::OkStatus();
}

}  // namespace sortd::gpu
