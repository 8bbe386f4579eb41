// OpenClEngine::SortSegments: every segment of one array sorted in one run.
// Where every segment fits a bitonic block (or, with warp-level ranking,
// one radix tile), or up to the policy's segment_group_max keys, one
// work-group sorts each, in a single launch per kind. Where one is longer,
// the whole array is sorted as one (SegmentedPlan):
// by key, then by segment, so that the passes serve every segment at once
// and a batch costs the launches of one sort, whatever its segments.
#include <algorithm>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"
#include "gpu/passes/bitonic.h"
#include "gpu/passes/radix_passes.h"
#include "gpu/passes/segments.h"

namespace sortd::gpu {

bool OpenClEngine::SortsParts(absl::Span<const SortJob* const> parts) const {
  if (core_.pinned == nullptr) return false;
  for (const SortJob* p : parts) {
    const size_t n = p->count, ks = KeySize(p->key_type),
                 vs = ValueSize(p->value_type);
    for (auto [data, bytes] :
         {std::pair<const void*, size_t>{p->keys, n * ks},
          {p->keys_out, n * ks},
          {p->values, n * vs},
          {p->values_out, n * vs},
          {p->permutation_out, p->permutation_out ? n * 4 : 0}}) {
      if (bytes > 0 && !core_.pinned->Holds(data, bytes)) return false;
    }
  }
  return true;
}

absl::Status OpenClEngine::SortSegments(const SortJob& job,
                                        absl::Span<const uint32_t> offsets) {
  SORTD_RETURN_IF_ERROR(CheckSegmentOffsets(job.count, offsets));
  SORTD_RETURN_IF_ERROR(CheckParts(job));
  if (job.count == 0) return absl::OkStatus();
  if (job.count >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError("the OpenCL engine sorts < 2^31 keys");
  }
  LaneLease lease(this);
  Run run(core_, lease.lane(), EngineCore::kSegments, job.stages,
          job.kernel_span_seconds);
  absl::Status status = SegmentsOnLane(run, job, offsets);
  absl::Status finished =
      run.Finish(status.ok() ? job.stages : nullptr, job.kernel_span_seconds);
  return status.ok() ? finished : status;
}

namespace {

// The lists of SegmentLists, by the kernel that sorts their segments.
enum SegmentKernel : int {
  kBitonicSegments = 0,  // bitonic segmented (up to a bitonic block)
  kRadixSegments = 1,    // radix_segments (one radix tile)
  kGroupSegments = 2,    // radix_segment_groups (up to segment_group_max)
  kSegmentKernels = 3,
};

// The segments of more than one key, listed (by index) by the kernel that
// sorts each in one work-group, and the lists' device copies with the
// offsets'.
struct SegmentLists {
  std::vector<uint32_t> lists[kSegmentKernels];
  bool any_long = false;  // one fits no kernel: all are sorted as one array
  cl::Buffer d_offsets;
  cl::Buffer d_lists[kSegmentKernels];
};

// Segments of more than segment_radix_above keys that fit one radix tile
// are sorted by radix_segments (one work-group each); others of up to a
// bitonic block by the bitonic kernel. One longer: all as one array.
SegmentLists ListSegments(const EnginePolicy& policy, const SortJob& job,
                          absl::Span<const uint32_t> offsets) {
  const int bits = KeyBits(job);
  const size_t block = policy.bitonic.Block(bits);
  const RadixSortPolicy& rp = policy.radix;
  const size_t radix_above = rp.WarpLevel() && rp.segment_radix_above > 0
                                 ? rp.segment_radix_above
                                 : std::numeric_limits<size_t>::max();
  const size_t radix_tile = rp.Tile(bits, WithIndex(job));
  SegmentLists s;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const size_t len = offsets[i + 1] - offsets[i];
    if (len <= 1) continue;
    if (len > radix_above && len <= radix_tile) {
      s.lists[kRadixSegments].push_back(static_cast<uint32_t>(i));
    } else if (len <= block) {
      s.lists[kBitonicSegments].push_back(static_cast<uint32_t>(i));
    } else if (len <= rp.segment_group_max) {
      s.lists[kGroupSegments].push_back(static_cast<uint32_t>(i));
    } else {
      s.any_long = true;
    }
  }
  return s;
}

// One host write of the offsets or of a list, into its device copy.
struct ListWrite {
  cl::Buffer* buffer;
  absl::Span<const uint32_t> words;
  const char* what;
};

// Allocates the device copies of the offsets and of every list that holds
// segments (none where no list does), and returns their writes in order.
absl::StatusOr<std::vector<ListWrite>> AllocateLists(
    Run& run, absl::Span<const uint32_t> offsets, SegmentLists& s) {
  std::vector<ListWrite> writes;
  for (int l = 0; l < kSegmentKernels; ++l) {
    if (s.lists[l].empty()) continue;
    if (writes.empty()) {  // the offsets first, once
      writes.push_back({&s.d_offsets, offsets, "segment offsets"});
    }
    writes.push_back({&s.d_lists[l], s.lists[l], "segment list"});
  }
  for (auto& [buffer, words, what] : writes) {
    absl::StatusOr<cl::Buffer> b = run.Allocate(words.size() * 4, what);
    if (!b.ok()) return b.status();
    *buffer = *std::move(b);
  }
  return writes;
}

absl::Status WriteLists(Run& run, const std::vector<ListWrite>& writes) {
  for (const auto& [buffer, words, what] : writes) {
    SORTD_RETURN_IF_ERROR(
        run.WriteCopy(*buffer, words.size() * 4, words.data(), what));
  }
  return absl::OkStatus();
}

// One work-group per listed segment, list by list, each segment sorted
// where it lies in a.keys[0] and a.index[0].
absl::Status SortListedSegments(Run& run, const EnginePolicy& policy,
                                const SortJob& job, SegmentLists& s,
                                SortArrays& a) {
  const int wide = KeyBits(job) == 64;
  const bool with_index = WithIndex(job);
  Lane& lane = run.lane();
  SegmentKernels& radix = lane.radix[wide][with_index].segments;
  for (int l = 0; l < kSegmentKernels; ++l) {
    if (s.lists[l].empty()) continue;
    const size_t count = s.lists[l].size();
    SORTD_RETURN_IF_ERROR(
        l == kBitonicSegments
            ? BitonicSegments(run, policy.bitonic,
                              lane.bitonic[wide][with_index], a, s.d_offsets,
                              s.d_lists[l], count)
            // radix_segment_groups through the scratch halves of the arrays.
            : RadixSegments(run, policy.radix, radix, l == kGroupSegments, a,
                            s.d_offsets, s.d_lists[l], count));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status OpenClEngine::SegmentsOnLane(Run& run, const SortJob& job,
                                          absl::Span<const uint32_t> offsets) {
  SegmentLists s = ListSegments(policy_, job, offsets);
  if (s.any_long) return SegmentsAsOneArray(run, job, offsets);

  // The offsets and the segment lists are written after the keys and
  // before the first kernel (Upload's after_inputs): written between
  // kernels, each small write left the device idle for a host round trip
  // (0.13-0.24 ms with 16384 segments or more on the H100); written before
  // the keys, they held up the keys' upload.
  absl::StatusOr<std::vector<ListWrite>> writes =
      AllocateLists(run, offsets, s);
  if (!writes.ok()) return writes.status();
  auto write_lists = [&]() -> absl::Status { return WriteLists(run, *writes); };

  SortArrays a;
  cl::Buffer totals;
  const SortPlan plan =
      PlanSort(policy_, SortAlgorithm::kRadix, job, job.count);
  SORTD_RETURN_IF_ERROR(
      Upload(run, job, plan, false, true, a, &totals, write_lists));
  SORTD_RETURN_IF_ERROR(SortListedSegments(run, policy_, job, s, a));
  return Download(run, job, a);
}

namespace {

// What orders keys by segment after they are sorted by key: each key's
// segment id and place before the sort (ids.keys and ids.index, two of
// each, ping-pong), the segment offsets, and the ids' digit totals.
struct SegmentIdArrays {
  SortArrays ids;
  cl::Buffer offsets, totals;
};

absl::Status AllocateSegmentIds(Run& run, const SegmentedPlan& plan,
                                SegmentIdArrays& s) {
  for (auto [buffer, bytes, what] :
       {std::tuple{&s.offsets, plan.offsets_bytes, "segment offsets"},
        {&s.ids.keys[0], plan.ids_bytes, "segment ids"},
        {&s.ids.keys[1], plan.ids_bytes, "segment ids (alternate)"},
        {&s.ids.index[0], plan.ids_bytes, "places"},
        {&s.ids.index[1], plan.ids_bytes, "places (alternate)"},
        {&s.totals, plan.id_totals_bytes, "segment digit totals"}}) {
    absl::StatusOr<cl::Buffer> buf = run.Allocate(bytes, what);
    if (!buf.ok()) return buf.status();
    *buffer = *buf;
  }
  return absl::OkStatus();
}

// The ids' digit counts, which follow from the segments' lengths.
std::vector<cl_uint> SegmentIdTotals(const SegmentedPlan& plan, int digit_bits,
                                     absl::Span<const uint32_t> offsets) {
  const size_t radix = plan.ids.radix;
  std::vector<cl_uint> totals(plan.ids.passes * radix, 0);
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const cl_uint len = offsets[s + 1] - offsets[s];
    for (size_t p = 0; p < plan.ids.passes; ++p) {
      totals[p * radix + ((s >> (p * digit_bits)) & (radix - 1))] += len;
    }
  }
  return totals;
}

// The keys sorted by key in `a` (with their places before the sort in
// a.index), put in segment order: stable, so each segment stays sorted.
absl::Status OrderBySegment(Run& run, const RadixSortPolicy& rp,
                            const SortJob& job, const SegmentedPlan& plan,
                            size_t segments, SegmentIdArrays& s,
                            SortArrays& a) {
  // Each key's segment, from its place before the sort (a.index).
  Lane& lane = run.lane();
  const size_t n = job.count;
  const int wide = KeyBits(job) == 64;
  SortArrays& b = s.ids;
  SORTD_RETURN_IF_ERROR(SegmentIds(run, rp, lane.radix[0][1].segments,
                                   a.index[a.cur], s.offsets, segments,
                                   b.keys[0], b.index[0], n));
  // Stable by segment: the passes the number of segments needs.
  std::vector<bool> skip(plan.ids.passes);
  for (size_t p = plan.id_passes; p < skip.size(); ++p) skip[p] = true;
  SORTD_RETURN_IF_ERROR(
      RadixPasses(run, rp, plan.ids, b, skip, &s.totals, nullptr));
  // Keys and indices in segment order.
  return SegmentGather(run, rp, lane.radix[wide][1].segments, a, b.index[b.cur],
                       n);
}

}  // namespace

absl::Status OpenClEngine::SegmentsAsOneArray(
    Run& run, const SortJob& job, absl::Span<const uint32_t> offsets) {
  const size_t n = job.count;
  const size_t segments = offsets.size() - 1;
  const SegmentedPlan plan = PlanSegmentedSort(policy_, job, n, segments);
  if (plan.id_passes == 0) return SortOnLane(run, job);  // one segment
  if (plan.Footprint() > core_.run_budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a segmented sort of ", n, " keys needs ", plan.Footprint(),
        " bytes of device memory; a run may hold ", core_.run_budget));
  }
  // Offsets and the ids' digit totals are written after the keys and before
  // the first kernel (as in SegmentsOnLane).
  SegmentIdArrays s;
  SORTD_RETURN_IF_ERROR(AllocateSegmentIds(run, plan, s));
  const std::vector<cl_uint> totals =
      SegmentIdTotals(plan, policy_.radix.radix_bits, offsets);
  SortArrays a;
  SORTD_RETURN_IF_ERROR(UploadAndRadixSort(
      run, job, plan.keys, a, nullptr, [&]() -> absl::Status {
        SORTD_RETURN_IF_ERROR(run.WriteCopy(s.offsets, plan.offsets_bytes,
                                            offsets.data(), "segment offsets"));
        return run.WriteCopy(s.totals, plan.id_totals_bytes, totals.data(),
                             "segment digit totals");
      }));
  SORTD_RETURN_IF_ERROR(
      OrderBySegment(run, policy_.radix, job, plan, segments, s, a));
  return Download(run, job, a);
}

}  // namespace sortd::gpu
