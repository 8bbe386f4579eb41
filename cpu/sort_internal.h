// What the parts of CpuSorter's radix sort, spread over several files,
// share: the digit and block sizes, the element and block loops (on the
// caller's thread where there is one chunk, else oneTBB's), the insertion
// sort of short runs, the layout of a sort's scratch, the gather of the
// payload, and the three ways a sort runs, which Sort picks from
// (serial_sort.cc, lsd_sort.cc, msd_sort.cc). Internal to the CPU path.
#ifndef SORTD_CPU_SORT_INTERNAL_H_
#define SORTD_CPU_SORT_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/parallel.h"
#include "core/sorter.h"
#include "cpu/scratch_pool.h"
#include "oneapi/tbb/blocked_range.h"

namespace sortd::cpu_sort {

constexpr int kDigitBits = 8;
constexpr size_t kBuckets = size_t{1} << kDigitBits;
// Smallest block worth a task of its own.
constexpr size_t kMinBlock = size_t{1} << 14;
// Up to this many keys an insertion sort beats any radix pass.
constexpr size_t kInsertionUpTo = 32;
// Grain of the element-wise decode and encode loops.
constexpr size_t kElementGrain = size_t{1} << 15;
// From this many keys the serial sort takes 11-bit digits (three passes
// for 32-bit keys instead of four, six for 64-bit keys instead of eight);
// below it 8-bit ones, whose counts cost less to clear and scan.
constexpr size_t kWideDigitsFrom = size_t{1} << 12;

template <typename T>
T Load(const std::byte* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void Store(std::byte* base, size_t i, T v) {
  std::memcpy(base + i * sizeof(T), &v, sizeof(T));
}

// f(lo, hi) over [0, n) in chunks of about `grain`; one chunk runs on the
// calling thread without touching oneTBB.
template <typename F>
void ParallelFor(size_t n, size_t grain, F&& f) {
  if (n <= grain) {
    f(size_t{0}, n);
    return;
  }
  parallel::ForRange(
      tbb::blocked_range<size_t>(0, n, grain),
      [&](const tbb::blocked_range<size_t>& r) { f(r.begin(), r.end()); });
}

// f(b) for every block; one block runs on the calling thread.
template <typename F>
void ForEachBlock(size_t blocks, F&& f) {
  if (blocks == 1) {
    f(size_t{0});
    return;
  }
  parallel::For(size_t{0}, blocks, f);
}

// Sorts (key, index) pairs by key; stable. `idx` may be null (keys only).
template <typename U>
void InsertionSort(U* keys, uint32_t* idx, size_t n) {
  for (size_t i = 1; i < n; ++i) {
    U k = keys[i];
    uint32_t x = idx ? idx[i] : 0;
    size_t j = i;
    for (; j > 0 && keys[j - 1] > k; --j) {
      keys[j] = keys[j - 1];
      if (idx) idx[j] = idx[j - 1];
    }
    keys[j] = k;
    if (idx) idx[j] = x;
  }
}

// The blocks a parallel pass over `n` keys takes on `threads` threads.
inline size_t Blocks(size_t n, int threads) {
  return std::clamp<size_t>(n / kMinBlock, 1, static_cast<size_t>(threads) * 4);
}

// Keys (as ordered bits) and, when asked for, their input indices, each in
// two halves that the passes move between, in one scratch block.
template <typename U>
struct SortBuffers {
  SortBuffers(size_t n, bool with_index, CpuScratchPool& pool)
      : scratch(pool, KeyBytes(n) +
                          (with_index ? 2 * n * sizeof(uint32_t) : size_t{0})),
        keys_a(reinterpret_cast<U*>(scratch.data())),
        keys_b(keys_a + n),
        idx_a(with_index
                  ? reinterpret_cast<uint32_t*>(scratch.data() + KeyBytes(n))
                  : nullptr),
        idx_b(with_index ? idx_a + n : nullptr) {}
  // Both halves of the keys, to a whole cache line.
  static size_t KeyBytes(size_t n) {
    return (2 * n * sizeof(U) + 63) / 64 * 64;
  }
  Scratch scratch;
  U *keys_a, *keys_b;
  uint32_t *idx_a, *idx_b;
};

// Whether `job` sorts input indices along with its keys: for its values or
// its permutation.
inline bool WithIndex(const SortJob& job) {
  return job.value_type != ValueType::kNone || job.permutation_out != nullptr;
}

// The values and permutation of a sorted job over output places [lo, hi),
// from `order`: each output place's input index (cpu_sorter.cc).
void GatherPayload(const SortJob& job, const uint32_t* order, size_t lo,
                   size_t hi);

// How the sort in blocks splits large arrays (CpuSorter::Options).
struct Split {
  int threads;
  size_t msd_from_bytes;
  size_t bucket_keys;
};

// The three ways a sort runs; SortKeys in cpu_sorter.cc picks one.
//
// On the calling thread alone, for sorts CpuSorter::SortsWhole runs whole
// (serial_sort.cc); more than kInsertionUpTo keys (the caller sorts fewer
// by insertion).
void SortSerial(const SortJob& job, CpuScratchPool& pool);
// LSD passes over the whole array in blocks, on up to `threads` threads
// (lsd_sort.cc); sorts of up to kInsertionUpTo keys too, by insertion.
void SortLsdInBlocks(const SortJob& job, int threads, CpuScratchPool& pool);
// Arrays of split.msd_from_bytes or more: passes over their highest digits
// until each bucket holds at most split.bucket_keys keys, then each bucket
// in cache (msd_sort.cc).
void SortMsdThenLsd(const SortJob& job, const Split& split,
                    CpuScratchPool& pool);

}  // namespace sortd::cpu_sort

#endif  // SORTD_CPU_SORT_INTERNAL_H_
