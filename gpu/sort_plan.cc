#include "gpu/sort_plan.h"

#include <algorithm>
#include <cstring>

#include "absl/algorithm/container.h"
#include "core/keys.h"
#include "gpu/buffers.h"
#include "gpu/kernels/sort_constants.h"

namespace sortd::gpu {
namespace {

size_t Class(size_t bytes) { return BufferPool::SizeClass(bytes); }

}  // namespace

RadixPassPlan PlanRadixPasses(const RadixSortPolicy& p, int key_bits,
                              bool with_index, size_t count, bool has_totals) {
  RadixPassPlan plan;
  plan.count = count;
  plan.key_bits = key_bits;
  plan.with_index = with_index;
  plan.small = p.Small(count);
  plan.stream = p.StreamKeys(key_bits, with_index, count);
  plan.tile = static_cast<size_t>(p.Tile(key_bits, with_index, count));
  plan.tiles = DivUp(count, plan.tile);
  plan.tile_grid = {.groups = plan.tiles, .group_size = p.WorkGroupSize()};
  plan.radix = size_t{1} << p.radix_bits;
  plan.passes = DivUp(static_cast<size_t>(key_bits), p.radix_bits);
  // The look-back's counts are status_count_bits wide (RadixSortPolicy).
  plan.one_launch = p.OneLaunch() && has_totals &&
                    count <= (size_t{1} << p.status_count_bits);
  if (plan.one_launch) {
    plan.unordered_first = p.UnorderedFirst(with_index);
    plan.late_ranked = p.LateRanked(key_bits, with_index) &&
                       plan.tiles >= p.late_lookback_tiles_32;
    plan.marked = p.MarkedStatus(count);
    const int value_bits =
        plan.marked ? std::min(SORTD_STATUS_MARK_SHIFT, p.status_count_bits)
                    : p.status_count_bits;
    plan.status_value_mask = (uint32_t{1} << value_bits) - 1;
    plan.starts_bytes = plan.passes * plan.radix * 4;
    // Marked: one area for every pass, each pass's tile counter after it;
    // else one area and one counter, zeroed before every pass.
    plan.status_bytes =
        (plan.tiles * plan.radix + (plan.marked ? plan.passes : 1)) * 4;
  } else {
    // The digit-major tile offsets, scanned in place a block of `tile` at
    // a time, the block sums of each level scanned the same way.
    size_t n = plan.tiles * plan.radix;
    plan.offsets_bytes = n * 4;
    for (;;) {
      const size_t blocks = DivUp(n, plan.tile);
      plan.sums_bytes.push_back(blocks * 4);
      if (blocks <= 1) break;
      n = blocks;
    }
  }
  return plan;
}

size_t RadixPassPlan::Footprint() const {
  size_t total = 0;
  if (one_launch) return Class(starts_bytes) + Class(status_bytes);
  total += Class(offsets_bytes);
  if (starts_bytes > 0) total += Class(starts_bytes);
  for (size_t s : sums_bytes) total += Class(s);
  return total;
}

namespace {

SortPlan PlanSortOf(const EnginePolicy& policy, SortAlgorithm algorithm,
                    const SortJob& shape, size_t count, bool with_index) {
  SortPlan plan;
  plan.key_bits = KeyBits(shape);
  plan.with_index = with_index;
  plan.count = count;
  plan.bitonic = algorithm == SortAlgorithm::kBitonic ||
                 (algorithm == SortAlgorithm::kAuto &&
                  count <= policy.bitonic.MaxKeys(plan.key_bits, !with_index));
  plan.padded = plan.bitonic
                    ? std::max<size_t>(NextPow2(count),
                                       policy.bitonic.Block(plan.key_bits))
                    : count;
  const size_t ks = KeySize(shape.key_type);
  plan.raw_bytes = count * ks;
  plan.keys_bytes = plan.padded * ks;
  plan.index_bytes = plan.with_index ? plan.padded * 4 : 0;
  plan.values_bytes = count * ValueSize(shape.value_type);
  plan.totals_bytes =
      DivUp(static_cast<size_t>(plan.key_bits), policy.radix.radix_bits) *
      (size_t{1} << policy.radix.radix_bits) * 4;
  if (!plan.bitonic) {
    plan.passes = PlanRadixPasses(policy.radix, plan.key_bits, plan.with_index,
                                  count, /*has_totals=*/true);
    if (policy.radix.picked_digits && !with_index) {
      int bits = 0;
      while ((size_t{1} << bits) < count) ++bits;
      const int covered =
          bits + policy.radix.PickedMarginBits(static_cast<int>(plan.key_bits));
      const size_t slots =
          covered > 0 ? DivUp(static_cast<size_t>(covered),
                              static_cast<size_t>(policy.radix.radix_bits))
                      : 1;
      if (slots < plan.passes.passes) {
        plan.picked_slots = slots;
        plan.picks_bytes = SORTD_PICKS_WORDS * 4;
        // Three-launch passes have no digit starts of their own; picking
        // computes them.
        plan.passes.starts_bytes = plan.passes.passes * plan.passes.radix * 4;
      }
    }
  }
  return plan;
}

}  // namespace

SortPlan PlanSort(const EnginePolicy& policy, SortAlgorithm algorithm,
                  const SortJob& shape, size_t count) {
  return PlanSortOf(policy, algorithm, shape, count, WithIndex(shape));
}

namespace {

// `s` keys spread over job's array, in ordered form.
template <KeyType T>
std::vector<uint64_t> SampleOrdered(const SortJob& job, size_t s) {
  using Bits = sortd::KeyBits<T>;
  std::vector<uint64_t> out(s);
  const bool descending = job.order == Order::kDescending;
  const uint32_t n = static_cast<uint32_t>(job.count);
  const uint32_t stride = n / static_cast<uint32_t>(s);
  for (size_t j = 0; j < s; ++j) {
    // As sample_at in gpu/kernels/radix_common.clh.
    const uint32_t jitter =
        static_cast<uint32_t>(j) * SORTD_SAMPLE_JITTER % stride;
    const size_t at = j * job.count / s + jitter;
    Bits raw;
    std::memcpy(&raw, job.keys + at * sizeof(Bits), sizeof(Bits));
    out[j] = OrderedBits<T>(raw, descending);
  }
  return out;
}

std::vector<uint64_t> SampleOrdered(const SortJob& job, size_t s) {
  switch (job.key_type) {
    case KeyType::kU32:
      return SampleOrdered<KeyType::kU32>(job, s);
    case KeyType::kI32:
      return SampleOrdered<KeyType::kI32>(job, s);
    case KeyType::kF32:
      return SampleOrdered<KeyType::kF32>(job, s);
    case KeyType::kU64:
      return SampleOrdered<KeyType::kU64>(job, s);
    case KeyType::kI64:
      return SampleOrdered<KeyType::kI64>(job, s);
    case KeyType::kF64:
      return SampleOrdered<KeyType::kF64>(job, s);
  }
  return {};
}

}  // namespace

namespace {

// Which of `passes` digits of `radix_bits` vary among `samples` (ordered
// bits).
std::vector<bool> VaryingDigits(const std::vector<uint64_t>& samples,
                                size_t passes, int radix_bits) {
  const uint64_t mask = (uint64_t{1} << radix_bits) - 1;
  std::vector<bool> varies(passes, false);
  for (size_t p = 0; p < passes; ++p) {
    const uint64_t first = samples[0] >> (p * radix_bits) & mask;
    for (uint64_t k : samples) {
      varies[p] = varies[p] || (k >> (p * radix_bits) & mask) != first;
    }
  }
  return varies;
}

// Whether the runs `slots` picked digits would leave look long, by the
// device's rule over `samples`, the job's sampled keys as
// ordered bits, and the digits that vary among them.
bool SampledRunsLookLong(std::vector<uint64_t> samples, size_t count,
                         const std::vector<bool>& varies, int radix_bits,
                         size_t slots) {
  const size_t s = samples.size();
  // The highest `slots` varying digits picked, as on the device.
  const size_t passes = varies.size();
  size_t picked = 0, lowest = passes;
  for (size_t p = passes; p-- > 0 && picked < slots;) {
    if (varies[p]) {
      lowest = p;
      ++picked;
    }
  }
  bool below = false;
  for (size_t p = 0; p < lowest; ++p) below = below || varies[p];
  if (!below) return false;
  for (uint64_t& k : samples) k >>= lowest * radix_bits;
  std::sort(samples.begin(), samples.end());
  uint64_t pairs = 0;
  for (size_t i = 0, j = 0; i < s; i = j) {
    while (j < s && samples[j] == samples[i]) ++j;
    pairs += (j - i) * (j - i - 1) / 2;
  }
  // The device's rule (radix_digit_starts).
  return pairs * count > uint64_t{8} * s * s;
}

// Whether the host judges job's keys (PickedSlotsFor).
bool Sampled(const SortJob& job) {
  // The engine sorts fewer than 2^31 keys; the samples' places are 32-bit.
  return job.parts.empty() && job.keys != nullptr && job.count != 0 &&
         job.count < (size_t{1} << 31);
}

}  // namespace

size_t PickedSlotsFor(const SortJob& job, const SortPlan& plan,
                      int radix_bits) {
  const size_t slots = plan.picked_slots;
  if (slots == 0 || !Sampled(job)) return slots;
  const std::vector<uint64_t> samples =
      SampleOrdered(job, std::min<size_t>(SORTD_PICK_SAMPLES, job.count));
  const std::vector<bool> varies =
      VaryingDigits(samples, plan.passes.passes, radix_bits);
  if (!SampledRunsLookLong(samples, job.count, varies, radix_bits, slots)) {
    return slots;
  }
  // Not a count in between: 512 samples see runs of a few dozen keys in
  // large arrays too rarely to judge them.
  const auto varying = static_cast<size_t>(absl::c_count(varies, true));
  return varying < plan.passes.passes ? varying : 0;
}

SegmentedPlan PlanSegmentedSort(const EnginePolicy& policy,
                                const SortJob& shape, size_t count,
                                size_t segments) {
  SegmentedPlan plan;
  plan.keys = PlanSortOf(policy, SortAlgorithm::kRadix, shape, count,
                         /*with_index=*/true);
  plan.ids = PlanRadixPasses(policy.radix, 32, /*with_index=*/true, count,
                             /*has_totals=*/true);
  for (size_t top = segments > 0 ? segments - 1 : 0; top > 0;
       top >>= policy.radix.radix_bits) {
    ++plan.id_passes;
  }
  plan.offsets_bytes = (segments + 1) * 4;
  plan.ids_bytes = plan.id_passes > 0 ? count * 4 : 0;
  plan.id_totals_bytes =
      plan.id_passes > 0 ? plan.ids.passes * plan.ids.radix * 4 : 0;
  return plan;
}

size_t SegmentedPlan::Footprint() const {
  return keys.Footprint() + Class(offsets_bytes) + 4 * Class(ids_bytes) +
         Class(id_totals_bytes) + (id_passes > 0 ? ids.Footprint() : 0);
}

size_t SortPlan::Footprint() const {
  return Class(raw_bytes) + 2 * Class(keys_bytes) + 2 * Class(index_bytes) +
         2 * Class(values_bytes) + Class(totals_bytes) +
         // Picked passes may be followed by a sort by every digit, with
         // pass buffers of its own.
         (bitonic ? 0 : passes.Footprint() * (picked_slots > 0 ? 2 : 1)) +
         (picks_bytes > 0 ? Class(picks_bytes) : 0);
}

}  // namespace sortd::gpu
