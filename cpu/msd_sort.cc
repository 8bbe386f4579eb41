// The CPU path's sort of large arrays (CpuSorter::Options::msd_from_bytes):
// the keys mapped to their ordered bits block by block while finding the
// highest bit in which any two differ, then stable passes in blocks over
// the highest digits (most significant first) until each bucket holds at
// most Options::bucket_keys keys, buckets side by side; each bucket is
// then sorted by its lower bits in cache on one thread (LSD passes of 8,
// 11 or 12 bits, or an insertion sort) and stored raw with its payload.
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "core/keys.h"
#include "core/parallel.h"
#include "cpu/sort_internal.h"

namespace sortd::cpu_sort {
namespace {

using Counts = std::array<uint32_t, kBuckets>;

// From this many keys in a bucket, 12-bit digits.
constexpr size_t kWidestDigitsFrom = size_t{1} << 15;

// Key and index arrays of a sort, indexed by output place; `idx` null for
// keys only.
template <typename U>
struct Halves {
  U* keys;
  uint32_t* idx;
  U* Keys(size_t lo) const { return keys + lo; }
  uint32_t* Idx(size_t lo) const { return idx != nullptr ? idx + lo : nullptr; }
};

// LSD passes of kWidth-bit digits over the `m` keys at src (with dst as
// scratch) by their lowest `bits` bits; every pass's digit counts from one
// read, passes whose digit every key shares skipped. Returns the array the
// keys (and indices) ended in.
template <typename U, int kWidth, bool kWithIndex>
std::pair<U*, uint32_t*> LsdInCache(U* src, uint32_t* isrc, U* dst,
                                    uint32_t* idst, size_t m, int bits) {
  constexpr int kMaxPasses =
      (static_cast<int>(sizeof(U)) * 8 + kWidth - 1) / kWidth;
  constexpr size_t kDigits = size_t{1} << kWidth;
  constexpr U kMask = static_cast<U>(kDigits - 1);
  const int passes = (bits + kWidth - 1) / kWidth;
  std::vector<uint32_t> counts(passes * kDigits, 0);
  for (size_t i = 0; i < m; ++i) {
    const U k = src[i];
    for (int p = 0; p < kMaxPasses; ++p) {
      if (p < passes) ++counts[p * kDigits + ((k >> (p * kWidth)) & kMask)];
    }
  }
  for (int p = 0; p < passes; ++p) {
    uint32_t* place = counts.data() + p * kDigits;
    const int shift = p * kWidth;
    if (place[(src[0] >> shift) & kMask] == m) continue;
    uint32_t running = 0;
    for (size_t d = 0; d < kDigits; ++d) {
      const uint32_t here = place[d];
      place[d] = running;
      running += here;
    }
    for (size_t i = 0; i < m; ++i) {
      const uint32_t at = place[(src[i] >> shift) & kMask]++;
      dst[at] = src[i];
      if constexpr (kWithIndex) idst[at] = isrc[i];
    }
    std::swap(src, dst);
    std::swap(isrc, idst);
  }
  return {src, isrc};
}

// Sorts the `m` keys (ordered bits, and their input indices when
// kWithIndex) at places [lo, lo + m) of `src`, which differ only in their
// lowest `bits` bits, with `dst` as scratch, on the calling thread; stores
// them raw at output places [lo, lo + m) with their payload.
template <KeyType T, bool kWithIndex>
void SortBucket(const SortJob& job, size_t lo, size_t m, int bits,
                Halves<KeyBits<T>> src_halves, Halves<KeyBits<T>> dst_halves) {
  using U = KeyBits<T>;
  U* src = src_halves.Keys(lo);
  uint32_t* isrc = src_halves.Idx(lo);
  U* dst = dst_halves.Keys(lo);
  uint32_t* idst = dst_halves.Idx(lo);
  if (m > kInsertionUpTo && bits > 0) {
    // Wider digits where they save a pass and the keys outnumber the counts.
    auto passes = [&](int width) { return (bits + width - 1) / width; };
    int width = 8;
    if (m >= kWideDigitsFrom && passes(11) < passes(width)) width = 11;
    if (m >= kWidestDigitsFrom && passes(12) < passes(width)) width = 12;
    std::tie(src, isrc) =
        width == 12
            ? LsdInCache<U, 12, kWithIndex>(src, isrc, dst, idst, m, bits)
        : width == 11
            ? LsdInCache<U, 11, kWithIndex>(src, isrc, dst, idst, m, bits)
            : LsdInCache<U, 8, kWithIndex>(src, isrc, dst, idst, m, bits);
  } else if (m > 1 && bits > 0) {
    InsertionSort(src, isrc, m);
  }
  const bool descending = job.order == Order::kDescending;
  for (size_t i = 0; i < m; ++i) {
    Store<U>(job.keys_out, lo + i, RawBits<T>(src[i], descending));
  }
  // isrc - lo: each output place's input index, by output place.
  if constexpr (kWithIndex) GatherPayload(job, isrc - lo, lo, lo + m);
}

// Stores the keys at places [lo, lo + m) of `src` raw at the same output
// places, with their payload: every key there is the same, so the input
// order stands.
template <KeyType T, bool kWithIndex>
void StoreInInputOrder(const SortJob& job, size_t lo, size_t m,
                       Halves<KeyBits<T>> src) {
  using U = KeyBits<T>;
  const bool descending = job.order == Order::kDescending;
  ParallelFor(m, kElementGrain, [&](size_t l, size_t h) {
    for (size_t i = lo + l; i < lo + h; ++i) {
      Store<U>(job.keys_out, i, RawBits<T>(src.keys[i], descending));
    }
    if constexpr (kWithIndex) GatherPayload(job, src.idx, lo + l, lo + h);
  });
}

// Digit-major prefix over (digit, block), as in RadixSort: stable. Makes
// each block's `counts` of the `m` keys from place `lo` its starting places
// and `starts` each digit's first place (and, last, lo + m). False, with
// both partly made, where every key has the same digit: nothing moves.
bool DigitStarts(std::vector<Counts>& counts, size_t lo, size_t m,
                 std::array<size_t, kBuckets + 1>& starts) {
  uint32_t running = static_cast<uint32_t>(lo);
  for (size_t d = 0; d < kBuckets; ++d) {
    starts[d] = running;
    for (size_t blk = 0; blk < counts.size(); ++blk) {
      const uint32_t c = counts[blk][d];
      counts[blk][d] = running;
      running += c;
    }
    if (running - starts[d] == m) return false;
  }
  starts[kBuckets] = lo + m;
  return true;
}

// Sorts places [lo, lo + m) of `src` as SortBucket does, where `m` may be
// beyond the caches (over split.bucket_keys): one stable pass in blocks over
// the digit just below `bits` into `dst` (none where every key has the same
// digit there), then each of its buckets the same way, side by side.
template <KeyType T, bool kWithIndex>
void SortRange(const SortJob& job, const Split& split, size_t lo, size_t m,
               int bits, Halves<KeyBits<T>> src, Halves<KeyBits<T>> dst) {
  if (m <= split.bucket_keys) {
    SortBucket<T, kWithIndex>(job, lo, m, bits, src, dst);
    return;
  }
  if (bits == 0) {  // every key the same: the input order stands
    StoreInInputOrder<T, kWithIndex>(job, lo, m, src);
    return;
  }
  const int shift = std::max(0, bits - kDigitBits);
  const size_t blocks = Blocks(m, split.threads);
  const size_t block_len = (m + blocks - 1) / blocks;
  auto block_range = [&](size_t blk) {
    return std::pair{lo + blk * block_len,
                     lo + std::min(m, (blk + 1) * block_len)};
  };
  std::vector<Counts> counts(blocks);
  ForEachBlock(blocks, [&](size_t blk) {
    Counts& c = counts[blk];
    c.fill(0);
    auto [from, to] = block_range(blk);
    for (size_t i = from; i < to; ++i) {
      ++c[(src.keys[i] >> shift) & (kBuckets - 1)];
    }
  });
  std::array<size_t, kBuckets + 1> starts{};
  if (!DigitStarts(counts, lo, m, starts)) {  // one digit: nothing moves
    SortRange<T, kWithIndex>(job, split, lo, m, shift, src, dst);
    return;
  }
  ForEachBlock(blocks, [&](size_t blk) {
    Counts place = counts[blk];
    auto [from, to] = block_range(blk);
    for (size_t i = from; i < to; ++i) {
      const uint32_t at = place[(src.keys[i] >> shift) & (kBuckets - 1)]++;
      dst.keys[at] = src.keys[i];
      if constexpr (kWithIndex) dst.idx[at] = src.idx[i];
    }
  });
  parallel::For(size_t{0}, kBuckets, [&](size_t d) {
    SortRange<T, kWithIndex>(job, split, starts[d], starts[d + 1] - starts[d],
                             shift, dst, src);
  });
}

// The keys put in ordered form (and indexed) block by block while finding
// the highest bit in which any two differ, then SortRange over the bits up
// to it.
template <KeyType T, bool kWithIndex>
void MsdThenLsd(const SortJob& job, const Split& split, CpuScratchPool& pool) {
  const int threads = split.threads;
  using U = KeyBits<T>;
  const size_t n = job.count;
  const bool descending = job.order == Order::kDescending;
  SortBuffers<U> b(n, kWithIndex, pool);
  const size_t blocks = Blocks(n, threads);
  const size_t block_len = (n + blocks - 1) / blocks;
  const U first = OrderedBits<T>(Load<U>(job.keys, 0), descending);
  std::vector<U> differ(blocks, 0);
  ForEachBlock(blocks, [&](size_t blk) {
    const size_t lo = blk * block_len;
    const size_t hi = std::min(n, lo + block_len);
    U d = 0;
    for (size_t i = lo; i < hi; ++i) {
      const U k = OrderedBits<T>(Load<U>(job.keys, i), descending);
      b.keys_a[i] = k;
      d |= k ^ first;
    }
    if constexpr (kWithIndex) {
      for (size_t i = lo; i < hi; ++i) b.idx_a[i] = static_cast<uint32_t>(i);
    }
    differ[blk] = d;
  });
  U diff = 0;
  for (U d : differ) diff |= d;
  SortRange<T, kWithIndex>(job, split, 0, n, std::bit_width(diff),
                           {b.keys_a, b.idx_a}, {b.keys_b, b.idx_b});
}

}  // namespace

void SortMsdThenLsd(const SortJob& job, const Split& split,
                    CpuScratchPool& pool) {
  DispatchKeyType(job.key_type, [&]<KeyType T>() {
    WithIndex(job) ? MsdThenLsd<T, true>(job, split, pool)
                   : MsdThenLsd<T, false>(job, split, pool);
  });
}

}  // namespace sortd::cpu_sort
