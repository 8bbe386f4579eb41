#include "server/cpu_sorter.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/transpose.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/info.h"
#include "oneapi/tbb/parallel_for.h"

namespace sortd {

// Scratch blocks handed to one sort at a time and kept, within a byte
// budget, for the next (CpuSorter's comment says why).
class CpuScratchPool {
 public:
  struct Block {
    std::byte* data = nullptr;
    size_t capacity = 0;
  };

  CpuScratchPool(size_t min_bytes, size_t max_idle_bytes)
      : min_bytes_(min_bytes), max_idle_bytes_(max_idle_bytes) {}
  // Every block is idle by now: sorts hold the sorter while they run.
  ~CpuScratchPool() { Trim(); }

  CpuScratchPool(const CpuScratchPool&) = delete;
  CpuScratchPool& operator=(const CpuScratchPool&) = delete;

  size_t min_bytes() const { return min_bytes_; }

  // A block of at least `bytes` uninitialised bytes, the caller's alone
  // until it gives it back with Return. Throws std::bad_alloc.
  Block Take(size_t bytes) {
    const size_t capacity = Capacity(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The smallest idle block that holds `bytes` and is at most twice as
      // large as a new one would be: a larger one would be held up by a
      // sort that needs little of it while a larger sort allocates anew.
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->capacity >= bytes && it->capacity <= 2 * capacity &&
            (best == idle_.end() || it->capacity < best->capacity)) {
          best = it;
        }
      }
      if (best != idle_.end()) {
        const Block block = *best;
        idle_.erase(best);
        idle_bytes_ -= block.capacity;
        in_use_bytes_ += block.capacity;
        ++reused_;
        return block;
      }
    }
    Block block{nullptr, capacity};
    try {
      block.data =
          static_cast<std::byte*>(::operator new(capacity, kAlignment));
    } catch (const std::bad_alloc&) {
      // Idle blocks too small or too large for this sort may be what
      // stands in the way: freed, the allocation is tried once more.
      if (stats().idle_bytes == 0) throw;
      Trim();
      block.data =
          static_cast<std::byte*>(::operator new(capacity, kAlignment));
    }
    std::lock_guard<std::mutex> lock(mu_);
    in_use_bytes_ += capacity;
    ++allocated_;
    return block;
  }

  // Takes back a block from Take; it waits for the next sort, or is freed
  // if it does not fit the budget (the blocks idle longest make room).
  void Return(const Block& block) {
    std::vector<Block> to_free;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_bytes_ -= block.capacity;
      if (block.capacity > max_idle_bytes_) {
        to_free.push_back(block);
      } else {
        auto kept = idle_.begin();
        while (idle_bytes_ + block.capacity > max_idle_bytes_) {
          idle_bytes_ -= kept->capacity;
          to_free.push_back(*kept++);
        }
        idle_.erase(idle_.begin(), kept);
        idle_.push_back(block);
        idle_bytes_ += block.capacity;
      }
    }
    for (const Block& b : to_free) Free(b);
  }

  void Trim() {
    std::vector<Block> to_free;
    {
      std::lock_guard<std::mutex> lock(mu_);
      to_free.swap(idle_);
      idle_bytes_ = 0;
    }
    for (const Block& b : to_free) Free(b);
  }

  CpuSorter::ScratchStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {idle_bytes_, in_use_bytes_, reused_, allocated_};
  }

 private:
  // Cache-line aligned, so that the scratch's halves start on lines.
  static constexpr std::align_val_t kAlignment{64};

  // New blocks are whole megabytes from 1 MiB, powers of two below (at
  // least 4 KiB), so that sorts of nearby sizes share them.
  static size_t Capacity(size_t bytes) {
    constexpr size_t kMiB = size_t{1} << 20;
    if (bytes >= kMiB) return (bytes + kMiB - 1) / kMiB * kMiB;
    return std::max<size_t>(std::bit_ceil(bytes), 4096);
  }

  // The unsized form: clang builds (the fuzzers) have no sized
  // deallocation unless asked for it.
  static void Free(const Block& block) {
    ::operator delete(block.data, kAlignment);
  }

  const size_t min_bytes_;
  const size_t max_idle_bytes_;
  mutable std::mutex mu_;
  std::vector<Block> idle_;  // the longest idle first
  size_t idle_bytes_ = 0, in_use_bytes_ = 0;
  uint64_t reused_ = 0, allocated_ = 0;
};

namespace {

// Sorts of at least this many keys are bulk work: they run at a lower CPU
// priority, so that small requests sharing the cores are answered at once
// while a large one runs for seconds.
constexpr size_t kBulkFrom = size_t{1} << 20;
// The nice value of bulk work (0 is normal, 19 the lowest).
constexpr int kBulkNice = 10;

// Lowers the calling thread's CPU priority for good (raising it back would
// need privileges sortd does not have).
void LowerPriority() {
  // Best effort: a failure leaves the thread at its priority.
  (void)setpriority(PRIO_PROCESS, gettid(), kBulkNice);
}

constexpr int kDigitBits = 8;
constexpr size_t kBuckets = size_t{1} << kDigitBits;
// Below this many keys one block does the whole sort: the per-block
// histograms and task overhead would cost more than they save.
constexpr size_t kSerialBelow = size_t{1} << 15;
// Smallest block worth a task of its own.
constexpr size_t kMinBlock = size_t{1} << 14;
// Up to this many keys an insertion sort beats any radix pass.
constexpr size_t kInsertionUpTo = 32;
// Grain of the element-wise decode and encode loops.
constexpr size_t kElementGrain = size_t{1} << 15;

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
  tbb::parallel_for(
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
  tbb::parallel_for(size_t{0}, blocks, f);
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

// The uninitialised scratch of one sort: a block of `pool` from
// pool.min_bytes(), given back when the sort ends; smaller from the
// allocator, without the pool's lock.
class Scratch {
 public:
  Scratch(CpuScratchPool& pool, size_t bytes) {
    if (bytes >= pool.min_bytes()) {
      pool_ = &pool;
      block_ = pool.Take(bytes);
      data_ = block_.data;
    } else {
      small_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      data_ = small_.get();
    }
  }
  ~Scratch() {
    if (pool_ != nullptr) pool_->Return(block_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::byte* data() const { return data_; }

 private:
  CpuScratchPool* pool_ = nullptr;
  CpuScratchPool::Block block_;
  std::unique_ptr<std::byte[]> small_;
  std::byte* data_ = nullptr;
};

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

// The values and permutation of a sorted job over output places [lo, hi),
// from `order`: each output place's input index.
void GatherPayload(const SortJob& job, const uint32_t* order, size_t lo,
                   size_t hi) {
  if (job.value_type == ValueType::kU32) {
    for (size_t i = lo; i < hi; ++i) {
      Store(job.values_out, i, Load<uint32_t>(job.values, order[i]));
    }
  } else if (job.value_type == ValueType::kU64) {
    for (size_t i = lo; i < hi; ++i) {
      Store(job.values_out, i, Load<uint64_t>(job.values, order[i]));
    }
  }
  if (job.permutation_out != nullptr) {
    std::memcpy(job.permutation_out + lo * sizeof(uint32_t), order + lo,
                (hi - lo) * sizeof(uint32_t));
  }
}

// From this many keys the serial sort takes 11-bit digits (three passes
// for 32-bit keys instead of four, six for 64-bit keys instead of eight);
// below it 8-bit ones, whose counts cost less to clear and scan.
constexpr size_t kWideDigitsFrom = size_t{1} << 12;

// The sort of one thread (SortsWhole): every pass's digit counts are
// taken in the read that maps the keys to their ordered bits, a pass whose
// digit every key shares is skipped, and the last pass stores each key
// straight into the output, its raw bits back. Stable: each pass scatters
// in input order.
template <KeyType T, int kBits, bool kWithIndex>
void SerialSort(const SortJob& job, CpuScratchPool& pool) {
  using U = KeyBits<T>;
  constexpr int kPasses = (static_cast<int>(sizeof(U)) * 8 + kBits - 1) / kBits;
  constexpr size_t kDigits = size_t{1} << kBits;
  constexpr U kMask = static_cast<U>(kDigits - 1);
  const size_t n = job.count;
  const bool descending = job.order == Order::kDescending;

  SortBuffers<U> buffers(n, kWithIndex, pool);
  U* src = buffers.keys_a;
  U* dst = buffers.keys_b;
  uint32_t* isrc = buffers.idx_a;
  uint32_t* idst = buffers.idx_b;
  std::vector<uint32_t> counts(kPasses * kDigits, 0);

  for (size_t i = 0; i < n; ++i) {
    const U k = OrderedBits<T>(Load<U>(job.keys, i), descending);
    src[i] = k;
    for (int p = 0; p < kPasses; ++p) {
      ++counts[p * kDigits + ((k >> (p * kBits)) & kMask)];
    }
  }
  if (kWithIndex) {
    for (size_t i = 0; i < n; ++i) isrc[i] = static_cast<uint32_t>(i);
  }
  // The passes that move keys, their counts made starting places.
  std::array<bool, kPasses> moves{};
  int last = -1;
  for (int p = 0; p < kPasses; ++p) {
    uint32_t* c = counts.data() + p * kDigits;
    if (c[(src[0] >> (p * kBits)) & kMask] == n) continue;
    moves[p] = true;
    last = p;
    uint32_t running = 0;
    for (size_t d = 0; d < kDigits; ++d) {
      const uint32_t here = c[d];
      c[d] = running;
      running += here;
    }
  }
  if (last < 0) {  // every key the same: the input order stands
    for (size_t i = 0; i < n; ++i) {
      Store<U>(job.keys_out, i, RawBits<T>(src[i], descending));
    }
  }
  for (int p = 0; p <= last; ++p) {
    if (!moves[p]) continue;
    uint32_t* place = counts.data() + p * kDigits;
    const int shift = p * kBits;
    if (p < last) {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t at = place[(src[i] >> shift) & kMask]++;
        dst[at] = src[i];
        if constexpr (kWithIndex) idst[at] = isrc[i];
      }
      std::swap(src, dst);
      std::swap(isrc, idst);
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t at = place[(src[i] >> shift) & kMask]++;
        Store<U>(job.keys_out, at, RawBits<T>(src[i], descending));
        if constexpr (kWithIndex) idst[at] = isrc[i];
      }
      std::swap(isrc, idst);
    }
  }
  // isrc: each output place's input index.
  if constexpr (kWithIndex) GatherPayload(job, isrc, 0, n);
}

// From this many keys in a bucket, 12-bit digits.
constexpr size_t kWidestDigitsFrom = size_t{1} << 15;

size_t Blocks(size_t n, int threads) {
  return std::clamp<size_t>(n / kMinBlock, 1, static_cast<size_t>(threads) * 4);
}

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

// How the sort in blocks splits large arrays (CpuSorter::Options).
struct Split {
  int threads;
  size_t msd_from_bytes;
  size_t bucket_keys;
};

// Sorts places [lo, lo + m) of `src` as SortBucket does, where `m` may be
// beyond the caches (over split.bucket_keys): one stable pass in blocks over
// the digit just below `bits` into `dst` (none where every key has the same
// digit there), then each of its buckets the same way, side by side.
template <KeyType T, bool kWithIndex>
void SortRange(const SortJob& job, const Split& split, size_t lo, size_t m,
               int bits, Halves<KeyBits<T>> src, Halves<KeyBits<T>> dst) {
  using U = KeyBits<T>;
  using Counts = std::array<uint32_t, kBuckets>;
  const int threads = split.threads;
  if (m <= split.bucket_keys) {
    SortBucket<T, kWithIndex>(job, lo, m, bits, src, dst);
    return;
  }
  if (bits == 0) {  // every key the same: the input order stands
    const bool descending = job.order == Order::kDescending;
    ParallelFor(m, kElementGrain, [&](size_t l, size_t h) {
      for (size_t i = lo + l; i < lo + h; ++i) {
        Store<U>(job.keys_out, i, RawBits<T>(src.keys[i], descending));
      }
      if constexpr (kWithIndex) GatherPayload(job, src.idx, lo + l, lo + h);
    });
    return;
  }
  const int shift = std::max(0, bits - kDigitBits);
  const size_t blocks = Blocks(m, threads);
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
  // Digit-major prefix over (digit, block), as in RadixSort: stable.
  std::array<size_t, kBuckets + 1> starts{};
  uint32_t running = static_cast<uint32_t>(lo);
  for (size_t d = 0; d < kBuckets; ++d) {
    starts[d] = running;
    for (size_t blk = 0; blk < blocks; ++blk) {
      const uint32_t c = counts[blk][d];
      counts[blk][d] = running;
      running += c;
    }
    if (running - starts[d] == m) {  // one digit: nothing moves
      SortRange<T, kWithIndex>(job, split, lo, m, shift, src, dst);
      return;
    }
  }
  starts[kBuckets] = lo + m;
  ForEachBlock(blocks, [&](size_t blk) {
    Counts place = counts[blk];
    auto [from, to] = block_range(blk);
    for (size_t i = from; i < to; ++i) {
      const uint32_t at = place[(src.keys[i] >> shift) & (kBuckets - 1)]++;
      dst.keys[at] = src.keys[i];
      if constexpr (kWithIndex) dst.idx[at] = src.idx[i];
    }
  });
  tbb::parallel_for(size_t{0}, kBuckets, [&](size_t d) {
    SortRange<T, kWithIndex>(job, split, starts[d], starts[d + 1] - starts[d],
                             shift, dst, src);
  });
}

// The sort in blocks from split.msd_from_bytes: the keys put in ordered
// form (and indexed) block by block while finding the highest bit in which
// any two differ, then SortRange over the bits up to it.
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

template <KeyType T>
void SortTyped(const SortJob& job, const Split& split, bool serial,
               CpuScratchPool& pool) {
  const int threads = split.threads;
  using U = KeyBits<T>;
  const size_t n = job.count;
  const bool descending = job.order == Order::kDescending;
  const bool with_index =
      job.value_type != ValueType::kNone || job.permutation_out != nullptr;
  if (n > kInsertionUpTo && serial) {
    const bool wide = n >= kWideDigitsFrom;
    if (with_index) {
      wide ? SerialSort<T, 11, true>(job, pool)
           : SerialSort<T, 8, true>(job, pool);
    } else {
      wide ? SerialSort<T, 11, false>(job, pool)
           : SerialSort<T, 8, false>(job, pool);
    }
    return;
  }

  // (Arrays no larger than a bucket, or sorted by insertion, are not split.)
  if (n > kInsertionUpTo && n > split.bucket_keys &&
      n * sizeof(U) >= split.msd_from_bytes) {
    with_index ? MsdThenLsd<T, true>(job, split, pool)
               : MsdThenLsd<T, false>(job, split, pool);
    return;
  }

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

CpuSorter::CpuSorter(const Options& options)
    : threads_(options.threads > 0 ? options.threads
                                   : tbb::info::default_concurrency()),
      msd_from_bytes_(options.msd_from_bytes),
      bucket_keys_(std::max<size_t>(options.bucket_keys, 1)),
      arena_(threads_),
      scratch_(std::make_unique<CpuScratchPool>(
          options.scratch_min_bytes, options.scratch_max_idle_bytes)) {}

CpuSorter::~CpuSorter() = default;

void CpuSorter::Trim() { scratch_->Trim(); }

CpuSorter::ScratchStats CpuSorter::scratch_stats() const {
  return scratch_->stats();
}

std::string CpuSorter::device_name() const {
  return absl::StrCat("cpu (oneTBB, ", threads_, " threads)");
}

bool CpuSorter::SortsWhole(size_t count, int running, int threads) {
  // Under load a sort of up to a million keys runs whole on its caller:
  // split into blocks, sorts that run side by side pay per-block counts,
  // task hand-offs and an 8-bit scatter where one thread's 11-bit passes
  // need none of them (docs/decisions/002-cpu-path-stable-radix.md).
  return count < kSerialBelow ||
         (count < kBulkFrom && running >= std::max(1, threads / 2));
}

absl::Status CpuSorter::Sort(const SortJob& job) {
  if (job.count > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot sort ", job.count,
                     " keys: the CPU path indexes keys with 32 bits"));
  }
  if (job.count == 0) return absl::OkStatus();
  // Sorts beyond one block count towards the load (smaller ones are over
  // in microseconds).
  const bool counted = job.count >= kSerialBelow;
  const int running =
      counted ? running_.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
  absl::Cleanup done = [&] {
    if (counted) running_.fetch_sub(1, std::memory_order_relaxed);
  };
  const bool serial = SortsWhole(job.count, running, threads_);
  auto sort = [&] {
    DispatchKeyType(job.key_type, [&]<KeyType T>() {
      SortTyped<T>(job,
                   {.threads = threads_,
                    .msd_from_bytes = msd_from_bytes_,
                    .bucket_keys = bucket_keys_},
                   serial, *scratch_);
    });
  };
  // A sort run whole runs on the calling thread alone: it never waits for a
  // slot in the arena, which a large sort may hold for seconds. A bulk sort's
  // own thread runs at a lower priority (the caller waits); oneTBB's workers,
  // which also copy for the OpenCL engine, keep theirs. On 2 cores, 1K-key
  // sorts from two clients during a 32M-key sort: over 1.5 times as many
  // answered, p99 as when idle.
  //
  // Scratch that cannot be allocated (std::bad_alloc, thrown here or from
  // oneTBB's workers, which oneTBB passes on to the caller) answers
  // RESOURCE_EXHAUSTED; the sort's blocks go back to the pool as it
  // unwinds.
  try {
    if (serial) {
      sort();
    } else if (job.count < kBulkFrom) {
      arena_.execute(sort);
    } else {
      RunBulk(sort);
    }
  } catch (const std::bad_alloc&) {
    return ScratchExhausted(job);
  } catch (const std::length_error&) {
    return ScratchExhausted(job);
  }
  return absl::OkStatus();
}

template <typename F>
void CpuSorter::RunBulk(F& sort) {
  // An exception must not leave the bulk thread (it would end the
  // process): it is carried over and rethrown here.
  std::exception_ptr failed;
  std::optional<std::thread> bulk;
  try {
    bulk.emplace([&] {
      try {
        LowerPriority();
        arena_.execute(sort);
      } catch (...) {
        failed = std::current_exception();
      }
    });
  } catch (const std::system_error&) {
    // No thread to be had: the sort runs on the caller, at its priority.
    arena_.execute(sort);
    return;
  }
  bulk->join();
  if (failed) std::rethrow_exception(failed);
}

absl::Status CpuSorter::ScratchExhausted(const SortJob& job) {
  const bool with_index =
      job.value_type != ValueType::kNone || job.permutation_out != nullptr;
  const size_t bytes =
      job.count * (2 * KeySize(job.key_type) + (with_index ? 8 : 0));
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server has no host memory for this sort's scratch (", bytes,
      " bytes for ", job.count, " keys on the CPU path) now; retry later"));
}

absl::Status CpuSorter::Transpose(const TransposeJob& job) {
  constexpr size_t kMatrixBytes = 32 * sizeof(uint32_t);
  constexpr size_t kGrain = 4096;
  auto transpose = [&] {
    ParallelFor(job.count, kGrain, [&](size_t lo, size_t hi) {
      for (size_t m = lo; m < hi; ++m) {
        uint32_t rows[32];
        std::memcpy(rows, job.in + m * kMatrixBytes, kMatrixBytes);
        TransposeBits32(rows);
        std::memcpy(job.out + m * kMatrixBytes, rows, kMatrixBytes);
      }
    });
  };
  if (job.count <= kGrain) {  // one chunk: on the calling thread
    transpose();
  } else {
    arena_.execute(transpose);
  }
  return absl::OkStatus();
}

}  // namespace sortd
