// OpenClEngine's work once created: sorts (upload, the bitonic network or
// radix passes with their settle check, download), transposes, lanes
// leased to calls, and the largest inputs a run's memory budget takes.
// Creation and program building are in engine_init.cc, segmented sorts in
// segmented_sort.cc, the warm-up in engine_warm_up.cc.
#include "gpu/opencl_engine.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/transpose.h"
#include "gpu/kernels/sort_constants.h"
#include "gpu/passes/bitonic.h"
#include "gpu/passes/encode.h"
#include "gpu/passes/radix_passes.h"
#include "gpu/passes/settle.h"
#include "gpu/passes/transpose.h"

namespace sortd::gpu {

OpenClEngine::LaneLease::LaneLease(OpenClEngine* e) : engine_(e) {
  MutexLock lock(&e->lanes_mu_);
  while (e->free_lanes_.empty()) e->lanes_cv_.Wait(&e->lanes_mu_);
  lane_ = e->free_lanes_.back();
  e->free_lanes_.pop_back();
}

OpenClEngine::LaneLease::~LaneLease() {
  {
    MutexLock lock(&engine_->lanes_mu_);
    engine_->free_lanes_.push_back(lane_);
  }
  engine_->lanes_cv_.NotifyOne();
}

void OpenClEngine::ShareHostMemory(std::shared_ptr<HostMemory> memory) {
  if (core_.pinned == nullptr) return;
  if (auto pinned = std::dynamic_pointer_cast<PinnedHostMemory>(memory)) {
    core_.pinned->ShareFrom(std::move(pinned));
  }
}

std::vector<std::pair<std::string, double>> OpenClEngine::memory_bytes() const {
  const BufferPool::Stats pool = core_.pool->stats();
  double staging = 0;
  if (options_.pinned_staging) {
    staging = static_cast<double>(lanes_.size()) * options_.staging.slots *
              static_cast<double>(options_.staging.chunk_bytes);
  }
  return {
      {"total", static_cast<double>(device_.info.global_mem_bytes)},
      {"in_use", static_cast<double>(pool.in_use_bytes)},
      {"pooled", static_cast<double>(pool.pooled_bytes)},
      {"pinned_staging", staging},
      {"pinned_host",
       core_.pinned ? static_cast<double>(core_.pinned->stats().bytes) : 0.0}};
}

absl::Status OpenClEngine::Upload(
    Run& run, const SortJob& job, const SortPlan& plan, bool count_digits,
    bool encode, SortArrays& a, cl::Buffer* totals,
    const std::function<absl::Status()>& after_inputs) {
  for (auto [buffer, bytes, what] :
       {std::tuple{&a.raw, plan.raw_bytes, "raw keys"},
        {&a.keys[0], plan.keys_bytes, "keys"},
        {&a.keys[1], plan.keys_bytes, "keys (alternate)"},
        {&a.index[0], plan.index_bytes, "indices"},
        {&a.index[1], plan.index_bytes, "indices (alternate)"},
        {&a.values, plan.values_bytes, "values"},
        {&a.values_out, plan.values_bytes, "sorted values"},
        {totals, plan.totals_bytes, "digit totals"}}) {
    absl::StatusOr<cl::Buffer> b = run.Allocate(bytes, what);
    if (!b.ok()) return b.status();
    *buffer = *b;
  }
  SORTD_RETURN_IF_ERROR(WriteInputs(run, job, a));
  if (after_inputs) SORTD_RETURN_IF_ERROR(after_inputs());
  if (count_digits) {
    SORTD_RETURN_IF_ERROR(run.Zero(*totals, plan.totals_bytes, "histogram"));
  }
  a.cur = 0;
  a.keys_raw = false;
  RadixKernels& k =
      run.lane().radix[plan.key_bits == 64 ? 1 : 0][plan.with_index ? 1 : 0];
  return EncodeKeys(run, policy_.radix, k.code, job, a, *totals, count_digits,
                    encode);
}

absl::Status OpenClEngine::Download(Run& run, const SortJob& job,
                                    SortArrays& a) {
  const int bits = KeyBits(job);
  RadixKernels& k = run.lane().radix[bits == 64][WithIndex(job)];
  const cl_uint value_words =
      static_cast<cl_uint>(ValueSize(job.value_type) / 4);
  // Where the last pass stored raw keys, they are read from where they are;
  // a kernel runs only for what is left (ordering back, payload gather).
  cl::Buffer& keys_out = a.keys_raw ? a.keys[a.cur] : a.raw;
  if (!a.keys_raw || value_words != 0) {
    SORTD_RETURN_IF_ERROR(
        DecodeKeys(run, policy_.radix, k.code, job, a, value_words));
  }
  return ReadOutputs(run, job, keys_out, a.values_out, a.index[a.cur]);
}

absl::Status OpenClEngine::WriteInputs(Run& run, const SortJob& job,
                                       SortArrays& a) {
  const size_t ks = KeySize(job.key_type), vs = ValueSize(job.value_type);
  if (job.parts.empty()) {
    SORTD_RETURN_IF_ERROR(run.Write(a.raw, job.count * ks, job.keys));
    return run.Write(a.values, job.count * vs, job.values);
  }
  size_t at = 0;
  for (const SortJob* part : job.parts) {
    SORTD_RETURN_IF_ERROR(
        run.Write(a.raw, part->count * ks, part->keys, at * ks));
    SORTD_RETURN_IF_ERROR(
        run.Write(a.values, part->count * vs, part->values, at * vs));
    at += part->count;
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::ReadOutputs(Run& run, const SortJob& job,
                                       cl::Buffer& keys, cl::Buffer& values,
                                       cl::Buffer& permutation) {
  const size_t ks = KeySize(job.key_type), vs = ValueSize(job.value_type);
  const bool perm = job.permutation_out != nullptr;
  auto read = [&](const SortJob& part, size_t at) -> absl::Status {
    SORTD_RETURN_IF_ERROR(
        run.Read(keys, part.count * ks, part.keys_out, at * ks));
    SORTD_RETURN_IF_ERROR(
        run.Read(values, part.count * vs, part.values_out, at * vs));
    if (!perm) return absl::OkStatus();
    return run.Read(permutation, part.count * 4, part.permutation_out, at * 4);
  };
  if (job.parts.empty()) return read(job, 0);
  size_t at = 0;
  for (const SortJob* part : job.parts) {
    SORTD_RETURN_IF_ERROR(read(*part, at));
    at += part->count;
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::Sort(const SortJob& job) {
  if (job.count == 0) return absl::OkStatus();
  if (job.count >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError("the OpenCL engine sorts < 2^31 keys");
  }
  SORTD_RETURN_IF_ERROR(CheckParts(job));
  LaneLease lease(this);
  Run run(core_, lease.lane(), EngineCore::kSort, job.stages,
          job.kernel_span_seconds);
  absl::Status status = SortOnLane(run, job);
  // Whatever happened, nothing may still be queued when we return: the
  // caller's buffers are about to be reused or freed.
  absl::Status finished =
      run.Finish(status.ok() ? job.stages : nullptr, job.kernel_span_seconds);
  return status.ok() ? finished : status;
}

// The picks of a sort by picked digits, read back after radix_settle, and
// what sorting by more digits needs: its digit totals, read back only when
// the settle check asks for more (the reads land before the run's buffers
// go).
struct OpenClEngine::Settle {
  cl::Buffer totals;
  cl_uint kind_order = 0;
  cl::Event picks_read, totals_read;
  std::array<cl_uint, SORTD_PICKS_WORDS> words{};
  std::vector<cl_uint> counts;
  ~Settle() {
    for (cl::Event* e : {&picks_read, &totals_read}) {
      if ((*e)() != nullptr) (void)AwaitEvent(*e);
    }
  }
};

namespace {
// A sort by picked digits downloads its keys before its settle check is
// known when they are fewer bytes than this: shorter than the host's round
// trip to learn it, and a rare second download costs little. Longer ones
// wait for the check, as a second download would cost more than the wait.
constexpr size_t kSettleBeforeDownloadBytes = size_t{1} << 20;

// Whether every one of n keys has the same digit in pass `pass`, from the
// digit totals (`radix` words a pass).
bool DigitShared(const cl_uint* totals, size_t pass, size_t radix, size_t n) {
  const cl_uint* c = totals + pass * radix;
  return std::find(c, c + radix, static_cast<cl_uint>(n)) != c + radix;
}
}  // namespace

absl::Status OpenClEngine::SortOnLane(Run& run, const SortJob& job) {
  SortPlan plan = PlanSort(policy_, options_.algorithm, job, job.count);
  plan.picked_slots = PickedSlotsFor(job, plan, policy_.radix.radix_bits);
  SortArrays a;
  if (plan.bitonic) {
    cl::Buffer totals;
    SORTD_RETURN_IF_ERROR(Upload(run, job, plan, false, true, a, &totals));
    SORTD_RETURN_IF_ERROR(BitonicSort(run, policy_.bitonic, plan, a));
    return Download(run, job, a);
  }
  Settle settle;
  SORTD_RETURN_IF_ERROR(UploadAndRadixSort(run, job, plan, a, &settle));
  if (plan.picked_slots > 0 &&
      job.count * KeySize(job.key_type) >= kSettleBeforeDownloadBytes) {
    SORTD_RETURN_IF_ERROR(
        SettleOrSortEveryDigit(run, job, plan, a, settle).status());
    return Download(run, job, a);
  }
  SORTD_RETURN_IF_ERROR(Download(run, job, a));
  if (plan.picked_slots == 0) return absl::OkStatus();
  absl::StatusOr<bool> again =
      SettleOrSortEveryDigit(run, job, plan, a, settle);
  if (!again.ok()) return again.status();
  return *again ? Download(run, job, a) : absl::OkStatus();
}

absl::StatusOr<bool> OpenClEngine::SettleOrSortEveryDigit(Run& run,
                                                          const SortJob& job,
                                                          const SortPlan& plan,
                                                          SortArrays& a,
                                                          Settle& settle) {
  SORTD_CL_RETURN_IF(AwaitEvent(settle.picks_read),
                     "waiting for the settle check");
  const cl_uint unsettled = settle.words[SORTD_PICKS_UNSETTLED];
  if (unsettled == 0) return false;
  // The passes picked the lowest digits that vary: the digits above the
  // last of them follow. Or a run too long to settle was out of order:
  // every digit that varies. From the order the picked passes left (raw
  // keys), which a download enqueued before has read by the time these
  // passes write.
  const size_t done_below =
      unsettled == SORTD_UNSETTLED_CONTINUE
          ? settle.words[plan.picked_slots - 1] + size_t{1}
          : 0;
  const size_t radix = plan.passes.radix;
  settle.counts.resize(plan.passes.passes * radix);
  SORTD_RETURN_IF_ERROR(run.ReadLater(settle.totals, settle.counts.size() * 4,
                                      settle.counts.data(),
                                      &settle.totals_read));
  SORTD_CL_RETURN_IF(AwaitEvent(settle.totals_read),
                     "waiting for the digit totals");
  std::vector<bool> skip(plan.passes.passes, false);
  for (size_t p = 0; p < skip.size(); ++p) {
    skip[p] = p < done_below ||
              DigitShared(settle.counts.data(), p, radix, job.count);
  }
  if (std::find(skip.begin(), skip.end(), false) == skip.end()) return false;
  // Sorted by every digit from the start, the keys' order is not kept;
  // continued, the picked passes' order is.
  const RawEnds raw_ends{.keys = a.keys[a.cur],
                         .kind_order = settle.kind_order,
                         .unordered = done_below == 0};
  RadixPassPlan again = plan.passes;
  again.stage = "resort";
  SORTD_RETURN_IF_ERROR(RadixPasses(run, policy_.radix, again, a, skip,
                                    &settle.totals, &raw_ends));
  return true;
}

absl::Status OpenClEngine::UploadAndRadixSort(
    Run& run, const SortJob& job, const SortPlan& plan, SortArrays& a,
    Settle* settle, const std::function<absl::Status()>& after_inputs) {
  // Digits counted, keys left raw: the first pass orders them as it reads.
  cl::Buffer totals;
  SORTD_RETURN_IF_ERROR(
      Upload(run, job, plan, true, false, a, &totals, after_inputs));
  const RawEnds raw_ends{
      .keys = a.raw,
      .kind_order =
          KindCode(job.key_type) |
          (job.order == Order::kDescending ? SORTD_MODE_DESCENDING : 0u),
      .unordered = true};
  if (plan.picked_slots > 0) {
    return PickedRadixSort(run, job, plan, a, totals, raw_ends, settle);
  }
  std::vector<bool> every_pass(plan.passes.passes, false);
  if (job.count < policy_.radix.skip_check_min) {
    return RadixPasses(run, policy_.radix, plan.passes, a, every_pass, &totals,
                       &raw_ends);
  }
  // The digit totals come back while the first pass runs; later passes
  // whose digit every key shares are then skipped. The first always runs
  // (where its digit is shared too, it keeps every key in its tile).
  const size_t radix = plan.passes.radix;
  std::vector<cl_uint> counts(plan.passes.passes * radix);
  struct WaitOnExit {  // the read lands in `counts` before it goes
    cl::Event done;
    ~WaitOnExit() {
      if (done() != nullptr) (void)AwaitEvent(done);
    }
  } read;
  SORTD_RETURN_IF_ERROR(
      run.ReadLater(totals, counts.size() * 4, counts.data(), &read.done));
  auto skip_later = [&](std::vector<bool>& skip) -> absl::Status {
    SORTD_CL_RETURN_IF(AwaitEvent(read.done), "waiting for the digit totals");
    for (size_t p = 1; p < skip.size(); ++p) {
      skip[p] = DigitShared(counts.data(), p, radix, job.count);
    }
    return absl::OkStatus();
  };
  return RadixPasses(run, policy_.radix, plan.passes, a, every_pass, &totals,
                     &raw_ends, skip_later);
}

absl::Status OpenClEngine::PickedRadixSort(Run& run, const SortJob& job,
                                           const SortPlan& plan, SortArrays& a,
                                           cl::Buffer& totals,
                                           const RawEnds& raw_ends,
                                           Settle* settle) {
  // The highest digits that vary, picked on the device; then the runs of
  // keys they leave equal are sorted in place (or flagged).
  if (settle == nullptr) {
    return absl::InternalError("picked radix passes without a settle check");
  }
  absl::StatusOr<cl::Buffer> picks =
      run.Allocate(plan.picks_bytes, "digit picks");
  if (!picks.ok()) return picks.status();
  const PickedDigits picked{.buffer = *picks, .slots = plan.picked_slots};
  SORTD_RETURN_IF_ERROR(RadixPasses(run, policy_.radix, plan.passes, a,
                                    std::vector<bool>(plan.picked_slots, false),
                                    &totals, &raw_ends, nullptr, &picked));
  RadixKernels& k = run.lane().radix[plan.key_bits == 64 ? 1 : 0][0];
  SORTD_RETURN_IF_ERROR(gpu::Settle(run, policy_.radix, k.settling,
                                    a.keys[a.cur], job.count,
                                    raw_ends.kind_order, *picks));
  settle->totals = totals;
  settle->kind_order = raw_ends.kind_order;
  return run.ReadLater(*picks, plan.picks_bytes, settle->words.data(),
                       &settle->picks_read);
}

size_t OpenClEngine::max_sort_keys(const SortJob& shape) const {
  return MaxKeys(shape, [&](size_t n) { return SortFootprint(shape, n); });
}

size_t OpenClEngine::max_batch_keys(const SortJob& shape,
                                    size_t segments) const {
  return MaxKeys(shape, [&](size_t n) {
    return PlanSegmentedSort(policy_, shape, n, segments).Footprint();
  });
}

template <typename Footprint>
size_t OpenClEngine::MaxKeys(const SortJob& shape, Footprint footprint) const {
  const size_t ks = KeySize(shape.key_type);
  const size_t widest = std::max<size_t>(ks, 4);
  auto fits = [&](size_t n) {
    return footprint(n) <= core_.run_budget &&
           BufferPool::SizeClass(NextPow2(n) * widest) <=
               device_.info.max_alloc_bytes;
  };
  // The largest n that fits; footprints grow with n.
  size_t lo = 0, hi = (size_t{1} << 31) - 1;
  if (fits(hi)) return hi;
  while (lo + 1 < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return std::max<size_t>(lo, 1);
}

size_t OpenClEngine::max_transpose_matrices() const {
  // Input and output of one size class each.
  size_t cls = size_t{1} << 16;
  while (2 * (cls << 1) <= core_.run_budget &&
         (cls << 1) <= device_.info.max_alloc_bytes) {
    cls <<= 1;
  }
  return std::max<size_t>(cls / 128, 1);
}

absl::Status OpenClEngine::Transpose(const TransposeJob& job) {
  if (job.count == 0) return absl::OkStatus();
  LaneLease lease(this);
  Run run(core_, lease.lane(), EngineCore::kTranspose, job.stages,
          job.kernel_span_seconds);
  absl::Status status = [&]() -> absl::Status {
    const size_t bytes = job.count * 128;
    absl::StatusOr<cl::Buffer> in = run.Allocate(bytes, "matrices");
    if (!in.ok()) return in.status();
    absl::StatusOr<cl::Buffer> out = run.Allocate(bytes, "transposed");
    if (!out.ok()) return out.status();
    SORTD_RETURN_IF_ERROR(run.Write(*in, bytes, job.in));
    SORTD_RETURN_IF_ERROR(gpu::Transpose(
        run, run.lane().transpose, transpose_subgroup_,
        policy_.transpose.matrices_per_group, *in, *out, job.count));
    return run.Read(*out, bytes, job.out);
  }();
  absl::Status finished =
      run.Finish(status.ok() ? job.stages : nullptr, job.kernel_span_seconds);
  return status.ok() ? finished : status;
}

}  // namespace sortd::gpu
