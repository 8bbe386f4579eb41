// The CPU path's sort of one thread (CpuSorter::SortsWhole): an LSD radix
// sort of 8-bit digits, or 11-bit ones from kWideDigitsFrom keys, without
// oneTBB. Every pass's digit counts are taken in the read that maps the
// keys to their ordered bits, a pass whose digit every key shares is
// skipped, and the last pass stores each key straight into the output, its
// raw bits back. Stable: each pass scatters in input order.
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/keys.h"
#include "cpu/sort_internal.h"

namespace sortd::cpu_sort {
namespace {

// The digits of kBits bits that a key of type U has.
template <typename U, int kBits>
struct Digits {
  static constexpr int kPasses =
      (static_cast<int>(sizeof(U)) * 8 + kBits - 1) / kBits;
  static constexpr size_t kCount = size_t{1} << kBits;
  static constexpr U kMask = static_cast<U>(kCount - 1);
};

// Maps the job's keys to their ordered bits at `src` (and their input
// indices to `isrc` when kWithIndex), counting every pass's digits into
// `counts` (kCount a pass) in the same read.
template <KeyType T, int kBits, bool kWithIndex>
void OrderAndCount(const SortJob& job, KeyBits<T>* src, uint32_t* isrc,
                   uint32_t* counts) {
  using U = KeyBits<T>;
  using D = Digits<U, kBits>;
  const size_t n = job.count;
  const bool descending = job.order == Order::kDescending;
  for (size_t i = 0; i < n; ++i) {
    const U k = OrderedBits<T>(Load<U>(job.keys, i), descending);
    src[i] = k;
    for (int p = 0; p < D::kPasses; ++p) {
      ++counts[p * D::kCount + ((k >> (p * kBits)) & D::kMask)];
    }
  }
  if (kWithIndex) {
    for (size_t i = 0; i < n; ++i) isrc[i] = static_cast<uint32_t>(i);
  }
}

// Marks in `moves` the passes that move keys (those whose digit not all `n`
// keys share, as `first` shows) and makes their counts starting places.
// Returns the last of them, -1 where none moves.
template <typename U, int kBits>
int StartingPlaces(uint32_t* counts, U first, size_t n,
                   std::array<bool, Digits<U, kBits>::kPasses>& moves) {
  using D = Digits<U, kBits>;
  int last = -1;
  for (int p = 0; p < D::kPasses; ++p) {
    uint32_t* c = counts + p * D::kCount;
    if (c[(first >> (p * kBits)) & D::kMask] == n) continue;
    moves[p] = true;
    last = p;
    uint32_t running = 0;
    for (size_t d = 0; d < D::kCount; ++d) {
      const uint32_t here = c[d];
      c[d] = running;
      running += here;
    }
  }
  return last;
}

template <KeyType T, int kBits, bool kWithIndex>
void SerialSort(const SortJob& job, CpuScratchPool& pool) {
  using U = KeyBits<T>;
  using D = Digits<U, kBits>;
  const size_t n = job.count;
  const bool descending = job.order == Order::kDescending;

  SortBuffers<U> buffers(n, kWithIndex, pool);
  U* src = buffers.keys_a;
  U* dst = buffers.keys_b;
  uint32_t* isrc = buffers.idx_a;
  uint32_t* idst = buffers.idx_b;
  std::vector<uint32_t> counts(D::kPasses * D::kCount, 0);
  OrderAndCount<T, kBits, kWithIndex>(job, src, isrc, counts.data());
  // The passes that move keys, their counts made starting places.
  std::array<bool, D::kPasses> moves{};
  const int last = StartingPlaces<U, kBits>(counts.data(), src[0], n, moves);
  if (last < 0) {  // every key the same: the input order stands
    for (size_t i = 0; i < n; ++i) {
      Store<U>(job.keys_out, i, RawBits<T>(src[i], descending));
    }
  }
  for (int p = 0; p <= last; ++p) {
    if (!moves[p]) continue;
    uint32_t* place = counts.data() + p * D::kCount;
    const int shift = p * kBits;
    if (p < last) {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t at = place[(src[i] >> shift) & D::kMask]++;
        dst[at] = src[i];
        if constexpr (kWithIndex) idst[at] = isrc[i];
      }
      std::swap(src, dst);
      std::swap(isrc, idst);
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t at = place[(src[i] >> shift) & D::kMask]++;
        Store<U>(job.keys_out, at, RawBits<T>(src[i], descending));
        if constexpr (kWithIndex) idst[at] = isrc[i];
      }
      std::swap(isrc, idst);
    }
  }
  // isrc: each output place's input index.
  if constexpr (kWithIndex) GatherPayload(job, isrc, 0, n);
}

}  // namespace

void SortSerial(const SortJob& job, CpuScratchPool& pool) {
  DispatchKeyType(job.key_type, [&]<KeyType T>() {
    const bool wide = job.count >= kWideDigitsFrom;
    if (WithIndex(job)) {
      wide ? SerialSort<T, 11, true>(job, pool)
           : SerialSort<T, 8, true>(job, pool);
    } else {
      wide ? SerialSort<T, 11, false>(job, pool)
           : SerialSort<T, 8, false>(job, pool);
    }
  });
}

}  // namespace sortd::cpu_sort
