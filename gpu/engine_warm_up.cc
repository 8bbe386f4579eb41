// OpenClEngine's warm-up: every kernel run once on inputs that cross tile
// and block boundaries, every answer compared with a reference, before the
// engine is handed out.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/transpose.h"
#include "gpu/opencl_engine.h"

namespace sortd::gpu {

namespace {

// The stable ascending order of the n keys of `type` (u32 or i64) at
// `keys`, segment by segment (`offsets`), as indices into the whole array.
std::vector<uint32_t> ReferenceOrder(KeyType type, size_t n,
                                     const std::byte* keys,
                                     absl::Span<const uint32_t> offsets) {
  const size_t ks = KeySize(type);
  auto key = [&](uint32_t i) -> int64_t {
    if (type == KeyType::kU32) {
      uint32_t v = 0;
      std::memcpy(&v, keys + size_t{i} * ks, ks);
      return v;
    }
    int64_t v = 0;
    std::memcpy(&v, keys + size_t{i} * ks, ks);
    return v;
  };
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    std::stable_sort(order.begin() + offsets[s], order.begin() + offsets[s + 1],
                     [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  }
  return order;
}

// Three matrices through the transpose kernel, checked against the host's
// transpose.
absl::Status WarmUpTranspose(OpenClEngine& engine) {
  std::vector<uint32_t> m(32 * 3), t(32 * 3);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = static_cast<uint32_t>(i * 2654435761u);
  }
  SORTD_RETURN_IF_ERROR(
      engine.Transpose({.count = 3,
                        .in = reinterpret_cast<const std::byte*>(m.data()),
                        .out = reinterpret_cast<std::byte*>(t.data())}));
  for (size_t x = 0; x < 3; ++x) {
    uint32_t want[32];
    std::copy(m.begin() + x * 32, m.begin() + x * 32 + 32, want);
    TransposeBits32(want);
    if (!std::equal(want, want + 32, t.begin() + x * 32)) {
      return absl::InternalError(absl::StrCat("warm-up transpose on ",
                                              engine.info().name, " is wrong"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Every warm-up answer is compared with the reference: the keys bit for bit,
// and the permutation where one was asked for. This runs whatever the build
// options (extra build options included): kernels that do not sort
// stop Create(), and the device is not used.
absl::Status OpenClEngine::CheckWarmUpSort(const SortJob& job,
                                           const std::vector<uint32_t>& want,
                                           bool segmented) const {
  const size_t ks = KeySize(job.key_type);
  const auto* perm = reinterpret_cast<const uint32_t*>(job.permutation_out);
  for (size_t i = 0; i < job.count; ++i) {
    const bool key_ok = std::memcmp(job.keys_out + i * ks,
                                    job.keys + size_t{want[i]} * ks, ks) == 0;
    if (key_ok && (perm == nullptr || perm[i] == want[i])) continue;
    const std::string& extra = options_.kernel_diagnostics.extra_options;
    return absl::InternalError(absl::StrCat(
        "warm-up ", segmented ? "segmented " : "", "sort of ", job.count,
        job.key_type == KeyType::kU32 ? " u32" : " i64", " keys",
        perm != nullptr ? " with permutation" : "", " on ", device_.info.name,
        " gave a wrong answer: its ", key_ok ? "permutation" : "key",
        " at position ", i, " differs from the reference",
        extra.empty()
            ? std::string()
            : absl::StrCat(" (kernels built with extra options ", extra, ")"),
        "; this device is not used"));
  }
  return absl::OkStatus();
}

// What the warm-up sorts: its sizes, and which of them check a case of
// their own.
struct OpenClEngine::WarmUpSizes {
  std::vector<size_t> sizes;
  // The small size: segmented sorts stay at or below it.
  size_t small = 0;
  // A segment longer than one work-group sorts (segment_group_max): this
  // size, where check_beyond_groups.
  size_t beyond_groups = 0;
  bool check_beyond_groups = false;
};

absl::StatusOr<OpenClEngine::WarmUpSizes> OpenClEngine::ChooseWarmUpSizes() {
  WarmUpSizes w;
  const size_t small =
      3 * static_cast<size_t>(policy_.radix.Tile(32, true)) + 17;
  w.small = small;
  // The widest kind of sort must fit a lane's share of the memory budget
  // at the warm-up's sizes; the segmented warm-up also holds a scratch copy
  // of its long segment, and buffers round up to powers of two, hence the
  // quarter.
  std::byte dummy{};
  const SortJob widest{.key_type = KeyType::kI64, .permutation_out = &dummy};
  if (SortFootprint(widest, small) > core_.run_budget) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the device memory budget of ", device_.info.name, " leaves ",
        core_.run_budget, " bytes to each of its ", lanes_.size(),
        " lanes; a lane needs at least ", SortFootprint(widest, small),
        " (raise --device_memory_bytes)"));
  }
  const size_t large = std::max(
      small, std::min(options_.preallocate_keys, max_sort_keys(widest) / 2));
  w.sizes = {size_t{100}, small, large};
  // With a second build of the radix kernels for short arrays, one size on
  // each side of its limit, so both builds are verified.
  const size_t above_small = policy_.radix.small_max + 1;
  if (policy_.radix.small_items > 0 && above_small > large &&
      SortFootprint(widest, above_small) <= core_.run_budget) {
    w.sizes.push_back(above_small);
  }
  // With a build of streaming loads for long arrays of 32-bit keys
  // (stream_keys_32_min), one size more, the only one the warm-up sends to
  // that build (its limit set to that size until the warm-up ends, every
  // other size then below it), so that both long-array builds are verified
  // without sorting arrays that long, where the budget holds that size.
  const size_t stream_size =
      std::max({large, above_small, policy_.radix.small_max}) + 7;
  if (policy_.radix.stream_keys_32_min > 0 &&
      SortFootprint(widest, stream_size) <= core_.run_budget) {
    w.sizes.push_back(stream_size);
    policy_.radix.stream_keys_32_min = stream_size;
  }
  // A segment longer than one work-group sorts (segment_group_max): the
  // whole array sorted as one, by key then by segment.
  w.beyond_groups = policy_.radix.segment_group_max + 40;
  w.check_beyond_groups =
      policy_.radix.segment_group_max > 0 &&
      SortFootprint(widest, 2 * w.beyond_groups) <= core_.run_budget;
  if (w.check_beyond_groups) w.sizes.push_back(w.beyond_groups);
  return w;
}

absl::Status OpenClEngine::WarmUpSize(size_t n, const WarmUpSizes& w) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = (i * 0x9E3779B97F4A7C15ull) >> (i % 7);
  }
  // Segments of a third and two thirds (bitonic blocks, single tiles or
  // one work-group's loop over tiles); beyond_groups: one segment of 17
  // keys and one too long for a work-group.
  const bool long_segment = w.check_beyond_groups && n == w.beyond_groups;
  const std::vector<uint32_t> offsets = {
      0, static_cast<uint32_t>(long_segment ? 17 : n / 3),
      static_cast<uint32_t>(n)};
  const std::vector<uint32_t> whole = {0, static_cast<uint32_t>(n)};
  const auto* raw = reinterpret_cast<const std::byte*>(keys.data());
  for (KeyType type : {KeyType::kU32, KeyType::kI64}) {
    for (bool segmented : {false, true}) {
      // Segmented sorts of long segments hold scratch copies: their
      // warm-up stays at the small sizes, within any workable budget.
      if (segmented && n > w.small && !long_segment) continue;
      const std::vector<uint32_t> want =
          ReferenceOrder(type, n, raw, segmented ? offsets : whole);
      for (bool with_index : {false, true}) {
        SORTD_RETURN_IF_ERROR(WarmUpSort(
            type, n, raw, segmented ? &offsets : nullptr, with_index, want));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::WarmUpSort(KeyType type, size_t n,
                                      const std::byte* keys,
                                      const std::vector<uint32_t>* offsets,
                                      bool with_index,
                                      const std::vector<uint32_t>& want) {
  const bool segmented = offsets != nullptr;
  // Filled with what no correct answer holds in every place, so that a
  // kernel that writes nothing cannot pass.
  std::vector<uint64_t> out(n, ~uint64_t{0});
  std::vector<uint32_t> perm(n, ~uint32_t{0});
  SortJob job{.key_type = type,
              .count = n,
              .keys = keys,
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .permutation_out = with_index
                                     ? reinterpret_cast<std::byte*>(perm.data())
                                     : nullptr};
  if (absl::Status s = segmented ? SortSegments(job, *offsets) : Sort(job);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("warm-up ", segmented ? "segmented " : "",
                                     "sort of ", n, " keys: ", s.message()));
  }
  return CheckWarmUpSort(job, want, segmented);
}

// Runs every kernel once on inputs that cross tile and block boundaries and
// checks the answers, so that a miscompiling driver is caught before health
// says SERVING; the larger sorts also fill the buffer pool.
absl::Status OpenClEngine::WarmUp() {
  // ChooseWarmUpSizes may set the streaming build's limit to one of the
  // warm-up's sizes; the policy's own comes back when the warm-up ends.
  const size_t stream_min = policy_.radix.stream_keys_32_min;
  const absl::Cleanup restore_stream = [this, stream_min] {
    policy_.radix.stream_keys_32_min = stream_min;
  };
  absl::StatusOr<WarmUpSizes> sizes = ChooseWarmUpSizes();
  if (!sizes.ok()) return sizes.status();
  for (size_t n : sizes->sizes) {
    SORTD_RETURN_IF_ERROR(WarmUpSize(n, *sizes));
  }
  return WarmUpTranspose(*this);
}

}  // namespace sortd::gpu
