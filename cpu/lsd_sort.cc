// The CPU path's LSD radix sort over the whole array, for arrays below
// CpuSorter::Options::msd_from_bytes: the keys mapped to their ordered bits
// (and indexed) in parallel chunks, sorted 8 bits a pass with per-block
// digit counts, a digit-major prefix sum and a stable per-block scatter (a
// pass whose digit is the same for every key skipped), then stored raw
// with their payload. Up to kInsertionUpTo keys are sorted by insertion.
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/keys.h"
#include "cpu/sort_internal.h"

namespace sortd::cpu_sort {
namespace {

// LSD radix sort of keys (and their indices when kWithIndex) between two
// buffer pairs. Returns true when the result ended up in the second pair.
template <typename U, bool kWithIndex>
bool RadixSort(U* keys_a, uint32_t* idx_a, U* keys_b, uint32_t* idx_b, size_t n,
               size_t blocks) {
  using Counts = std::array<uint32_t, kBuckets>;
  std::vector<Counts> counts(blocks);
  const size_t block_len = (n + blocks - 1) / blocks;
  U* src = keys_a;
  U* dst = keys_b;
  uint32_t* isrc = idx_a;
  uint32_t* idst = idx_b;
  bool in_b = false;

  for (int shift = 0; shift < static_cast<int>(sizeof(U) * 8);
       shift += kDigitBits) {
    auto block_range = [&](size_t b) {
      return std::pair{b * block_len, std::min(n, (b + 1) * block_len)};
    };
    ForEachBlock(blocks, [&](size_t b) {
      Counts& c = counts[b];
      c.fill(0);
      auto [lo, hi] = block_range(b);
      for (size_t i = lo; i < hi; ++i) ++c[(src[i] >> shift) & (kBuckets - 1)];
    });

    // Digit-major exclusive prefix over (digit, block): block b's keys with
    // digit d land after every key with a smaller digit and after block
    // b-1's keys with digit d, which is what makes the scatter stable.
    uint32_t running = 0;
    bool single_digit = false;
    for (size_t d = 0; d < kBuckets; ++d) {
      uint32_t digit_start = running;
      for (size_t b = 0; b < blocks; ++b) {
        uint32_t c = counts[b][d];
        counts[b][d] = running;
        running += c;
      }
      if (running - digit_start == n) single_digit = true;
    }
    if (single_digit) continue;  // Every key has this digit: nothing moves.

    ForEachBlock(blocks, [&](size_t b) {
      Counts offset = counts[b];
      auto [lo, hi] = block_range(b);
      for (size_t i = lo; i < hi; ++i) {
        uint32_t pos = offset[(src[i] >> shift) & (kBuckets - 1)]++;
        dst[pos] = src[i];
        if constexpr (kWithIndex) idst[pos] = isrc[i];
      }
    });
    std::swap(src, dst);
    std::swap(isrc, idst);
    in_b = !in_b;
  }
  return in_b;
}

template <KeyType T>
void LsdInBlocks(const SortJob& job, int threads, CpuScratchPool& pool) {
  using U = KeyBits<T>;
  const size_t n = job.count;
  const bool descending = job.order == Order::kDescending;
  const bool with_index = WithIndex(job);
  SortBuffers<U> buffers(n, with_index, pool);
  U* keys_a = buffers.keys_a;
  U* keys_b = buffers.keys_b;
  uint32_t* idx_a = buffers.idx_a;
  uint32_t* idx_b = buffers.idx_b;

  ParallelFor(n, kElementGrain, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      keys_a[i] = OrderedBits<T>(Load<U>(job.keys, i), descending);
    }
    if (with_index) {
      for (size_t i = lo; i < hi; ++i) idx_a[i] = static_cast<uint32_t>(i);
    }
  });

  bool in_b = false;
  if (n <= kInsertionUpTo) {
    InsertionSort(keys_a, idx_a, n);
  } else {
    const size_t blocks = Blocks(n, threads);
    in_b = with_index
               ? RadixSort<U, true>(keys_a, idx_a, keys_b, idx_b, n, blocks)
               : RadixSort<U, false>(keys_a, idx_a, keys_b, idx_b, n, blocks);
  }
  const U* sorted = in_b ? keys_b : keys_a;
  const uint32_t* order = in_b ? idx_b : idx_a;

  ParallelFor(n, kElementGrain, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      Store<U>(job.keys_out, i, RawBits<T>(sorted[i], descending));
    }
    if (with_index) GatherPayload(job, order, lo, hi);
  });
}

}  // namespace

void SortLsdInBlocks(const SortJob& job, int threads, CpuScratchPool& pool) {
  DispatchKeyType(job.key_type,
                  [&]<KeyType T>() { LsdInBlocks<T>(job, threads, pool); });
}

}  // namespace sortd::cpu_sort
