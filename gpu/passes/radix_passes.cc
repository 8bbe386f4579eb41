#include "gpu/passes/radix_passes.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/kernels/sort_constants.h"

namespace sortd::gpu {
namespace {

// The digit-counting (and encoding) kernel runs at most this many
// work-groups per compute unit, each striding over tiles, so that few groups
// add their counts to the same global digit counters.
constexpr size_t kCountGroupsPerCu = 8;

// The kernels of `plan`'s build: the short-array one below small_max, the
// streaming-load one for long arrays of 32-bit keys.
RadixKernels& KernelsFor(Run& run, const RadixPassPlan& plan) {
  if (plan.stream) return run.lane().radix_stream;
  const int wide = plan.key_bits == 64 ? 1 : 0;
  const int index = plan.with_index ? 1 : 0;
  return plan.small ? run.lane().radix_small[wide][index]
                    : run.lane().radix[wide][index];
}

// Which passes run, and how each reads and stores its keys.
struct PassOrder {
  size_t first, last;  // the first and last pass that run
  const RawEnds* raw_ends;
  const SkipLater* later;  // null: `skip` is final
  bool unordered_first;    // the first pass places keys unranked

  static PassOrder Of(const std::vector<bool>& skip, const RawEnds* raw_ends,
                      const SkipLater* later, const RadixPassPlan& plan) {
    PassOrder o{
        skip.size(), 0, raw_ends, later,
        plan.unordered_first && raw_ends != nullptr && raw_ends->unordered};
    for (size_t pass = 0; pass < skip.size(); ++pass) {
      if (skip[pass]) continue;
      o.first = std::min(o.first, pass);
      o.last = pass;
    }
    // Until `later` has spoken, the first pass is not taken as the last.
    if (later != nullptr && o.last == o.first) o.last = skip.size();
    return o;
  }
  // After pass `pass` was enqueued: the first time, submits it and asks
  // `later` (which may wait) which passes still run.
  absl::Status Enqueued(Run& run, size_t pass, std::vector<bool>& skip) {
    if (later == nullptr || pass != first) return absl::OkStatus();
    SORTD_RETURN_IF_ERROR(run.Flush());
    SORTD_RETURN_IF_ERROR((*later)(skip));
    later = nullptr;
    last = first;
    for (size_t p = first + 1; p < skip.size(); ++p) {
      if (!skip[p]) last = p;
    }
    return absl::OkStatus();
  }

  // The kernels' `shift` argument of `pass`: its digit's first bit, or its
  // slot of the picked digits.
  static cl_uint Shift(size_t pass, const RadixSortPolicy& p,
                       const PickedDigits* picked) {
    return static_cast<cl_uint>(picked != nullptr ? SORTD_PICKED_SLOT + pass
                                                  : pass * p.radix_bits);
  }

  // radix_digit_starts's keys to sample and their kind and order, as the
  // first pass reads them.
  const cl::Buffer& Sampled(const SortArrays& a) const {
    return raw_ends != nullptr ? raw_ends->keys : a.keys[a.cur];
  }
  cl_uint SampledKindOrder() const {
    return raw_ends != nullptr ? raw_ends->kind_order : 0;
  }

  // The kernels' `mode` argument of `pass`.
  cl_uint Mode(size_t pass) const {
    if (raw_ends == nullptr) return 0;
    return raw_ends->kind_order | (pass == first ? SORTD_MODE_FIRST : 0u) |
           (pass == last ? SORTD_MODE_LAST : 0u);
  }
  const cl::Buffer& KeysIn(size_t pass, const SortArrays& a) const {
    return raw_ends != nullptr && pass == first ? raw_ends->keys
                                                : a.keys[a.cur];
  }
};

// Exclusive scan of `count` words of `data` in place, a tile of the
// kernels' build at a time; `sums[level]` holds each level's block sums.
absl::Status ScanInPlace(Run& run, RadixKernels& k, const RadixPassPlan& plan,
                         size_t work_group, cl::Buffer& data, size_t count,
                         std::vector<cl::Buffer>& sums, size_t level) {
  const size_t blocks = DivUp(count, plan.tile);
  const cl_uint n = static_cast<cl_uint>(count);
  k.scan_blocks.Bind(data, n, sums[level]);
  SORTD_RETURN_IF_ERROR(
      run.Launch(k.scan_blocks, blocks, work_group, plan.Stage("scan")));
  if (blocks == 1) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, plan, work_group, sums[level],
                                    blocks, sums, level + 1));
  k.scan_add.Bind(data, n, sums[level]);
  return run.Launch(k.scan_add, blocks, work_group, plan.Stage("scan"));
}

// One launch per pass. The look-back status words and tile counter must be
// zero (or, marked, of another pass's parity) when a pass starts: marked
// statuses are zeroed once, each pass marking its words with its parity;
// otherwise they are zeroed before every pass.
absl::Status OneLaunchPasses(Run& run, const RadixSortPolicy& p,
                             const RadixPassPlan& plan, RadixKernels& k,
                             SortArrays& a, std::vector<bool>& skip,
                             const cl::Buffer& totals, PassOrder& order,
                             const PickedDigits* picked) {
  absl::StatusOr<cl::Buffer> status =
      run.Allocate(plan.status_bytes, "look-back status");
  if (!status.ok()) return status.status();
  absl::StatusOr<cl::Buffer> starts =
      run.Allocate(plan.starts_bytes, "digit starts");
  if (!starts.ok()) return starts.status();
  if (plan.marked) {
    SORTD_RETURN_IF_ERROR(
        run.Zero(*status, plan.status_bytes, plan.Stage("scatter")));
  }
  // Where each digit starts in each pass's output, from the totals (and
  // which digits the passes sort, if picked).
  const cl_uint n = static_cast<cl_uint>(plan.count);
  const cl::Buffer& picks = picked != nullptr ? picked->buffer : *starts;
  k.digit_starts.Bind(totals, *starts, n,
                      static_cast<cl_uint>(picked ? picked->slots : 0), picks,
                      order.Sampled(a), order.SampledKindOrder());
  SORTD_RETURN_IF_ERROR(run.Launch(k.digit_starts, plan.passes, p.work_group,
                                   plan.Stage("scan")));
  const cl_uint tiles = static_cast<cl_uint>(plan.tiles);
  const cl_uint words = static_cast<cl_uint>(plan.tiles * plan.radix);
  cl_uint run_pass = 0;  // passes run so far (marked: the parity)
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    if (!plan.marked) {
      SORTD_RETURN_IF_ERROR(
          run.Zero(*status, plan.status_bytes, plan.Stage("scatter")));
    }
    const cl_uint mark =
        plan.marked ? (run_pass & 1) << SORTD_STATUS_MARK_SHIFT : 0;
    const cl_uint value_mask = plan.status_value_mask;
    auto& kernel = order.unordered_first && pass == order.first
                       ? k.onesweep_unordered
                   : plan.late_ranked ? k.onesweep_late
                                      : k.onesweep;
    kernel.Bind(order.KeysIn(pass, a), a.keys[1 - a.cur], a.index[a.cur],
                a.index[1 - a.cur], n, PassOrder::Shift(pass, p, picked),
                *starts, static_cast<cl_uint>(pass * plan.radix), *status,
                tiles, order.Mode(pass), /*status_at=*/cl_uint{0},
                /*next_at=*/static_cast<cl_uint>(plan.status_bytes / 4),
                /*zero_next=*/cl_uint{0},
                plan.marked ? words + run_pass : words, mark, value_mask,
                picks);
    ++run_pass;
    SORTD_RETURN_IF_ERROR(
        run.Launch(kernel, plan.tiles, p.work_group, plan.Stage("scatter")));
    a.cur = 1 - a.cur;
    SORTD_RETURN_IF_ERROR(order.Enqueued(run, pass, skip));
  }
  return absl::OkStatus();
}

// Histogram, scan and scatter launches per pass.
absl::Status ThreeLaunchPasses(Run& run, const RadixSortPolicy& p,
                               const RadixPassPlan& plan, RadixKernels& k,
                               SortArrays& a, std::vector<bool>& skip,
                               const cl::Buffer* totals, PassOrder& order,
                               const PickedDigits* picked) {
  absl::StatusOr<cl::Buffer> offsets =
      run.Allocate(plan.offsets_bytes, "tile offsets");
  if (!offsets.ok()) return offsets.status();
  std::vector<cl::Buffer> sums;
  for (size_t bytes : plan.sums_bytes) {
    absl::StatusOr<cl::Buffer> b = run.Allocate(bytes, "scan sums");
    if (!b.ok()) return b.status();
    sums.push_back(*std::move(b));
  }
  const cl_uint n = static_cast<cl_uint>(plan.count);
  const cl_uint tiles = static_cast<cl_uint>(plan.tiles);
  // Picked digits: picked by radix_digit_starts, whose digit starts these
  // passes do not use.
  const cl::Buffer& picks = picked != nullptr ? picked->buffer : *offsets;
  if (picked != nullptr) {
    absl::StatusOr<cl::Buffer> starts =
        run.Allocate(plan.starts_bytes, "digit starts");
    if (!starts.ok()) return starts.status();
    k.digit_starts.Bind(*totals, *starts, n,
                        static_cast<cl_uint>(picked->slots), picked->buffer,
                        order.Sampled(a), order.SampledKindOrder());
    SORTD_RETURN_IF_ERROR(run.Launch(k.digit_starts, plan.passes, p.work_group,
                                     plan.Stage("scan")));
  }
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    const cl_uint shift = PassOrder::Shift(pass, p, picked);
    k.histogram.Bind(order.KeysIn(pass, a), n, shift, *offsets, tiles,
                     order.Mode(pass), picks);
    SORTD_RETURN_IF_ERROR(run.Launch(k.histogram, plan.tiles, p.work_group,
                                     plan.Stage("histogram")));
    SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, plan, p.work_group, *offsets,
                                      plan.tiles * plan.radix, sums, 0));
    k.scatter.Bind(order.KeysIn(pass, a), a.keys[1 - a.cur], a.index[a.cur],
                   a.index[1 - a.cur], n, shift, *offsets, tiles,
                   order.Mode(pass), picks);
    SORTD_RETURN_IF_ERROR(
        run.Launch(k.scatter, plan.tiles, p.work_group, plan.Stage("scatter")));
    a.cur = 1 - a.cur;
    SORTD_RETURN_IF_ERROR(order.Enqueued(run, pass, skip));
  }
  return absl::OkStatus();
}

}  // namespace

cl_uint KindCode(KeyType type) {
  switch (type) {
    case KeyType::kI32:
    case KeyType::kI64:
      return SORTD_KIND_SIGNED;
    case KeyType::kF32:
    case KeyType::kF64:
      return SORTD_KIND_FLOAT;
    default:
      return SORTD_KIND_UNSIGNED;
  }
}

absl::Status EncodeKeys(Run& run, const RadixSortPolicy& policy,
                        RadixKernels& k, const SortJob& job, SortArrays& a,
                        cl::Buffer& totals, bool count_digits, bool encode) {
  const int bits = KeyBits(job);
  k.encode.Bind(a.raw, a.keys[0], a.index[0], static_cast<cl_uint>(job.count),
                KindCode(job.key_type),
                cl_uint{job.order == Order::kDescending}, totals,
                cl_uint{count_digits}, cl_uint{encode});
  const size_t groups =
      std::min<size_t>(DivUp(job.count, policy.Tile(bits, WithIndex(job))),
                       std::max<size_t>(1, size_t{run.info().compute_units} *
                                               kCountGroupsPerCu));
  return run.Launch(k.encode, groups, policy.work_group,
                    count_digits ? "histogram" : "transform");
}

absl::Status RadixPasses(Run& run, const RadixSortPolicy& policy,
                         const RadixPassPlan& plan, SortArrays& a,
                         std::vector<bool> skip, const cl::Buffer* totals,
                         const RawEnds* raw_ends, const SkipLater& later,
                         const PickedDigits* picked) {
  PassOrder order =
      PassOrder::Of(skip, raw_ends, later ? &later : nullptr, plan);
  if (raw_ends != nullptr && order.first == skip.size()) {
    return absl::InternalError("radix passes with raw ends but no pass to run");
  }
  if ((plan.one_launch || picked != nullptr) && totals == nullptr) {
    return absl::InternalError("radix passes without the digit totals");
  }
  RadixKernels& k = KernelsFor(run, plan);
  SORTD_RETURN_IF_ERROR(plan.one_launch
                            ? OneLaunchPasses(run, policy, plan, k, a, skip,
                                              *totals, order, picked)
                            : ThreeLaunchPasses(run, policy, plan, k, a, skip,
                                                totals, order, picked));
  // Raw keys stored, unless the first pass, run as not the last, was the
  // only one.
  if (raw_ends != nullptr) a.keys_raw = order.last != order.first || !later;
  return absl::OkStatus();
}

}  // namespace sortd::gpu
