#include "server/runs.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/time/clock.h"
#include "core/keys.h"
#include "core/mutex.h"
#include "core/parallel.h"
#include "server/out_of_memory.h"

namespace sortd {
namespace {

size_t DivUp(size_t a, size_t b) { return (a + b - 1) / b; }

// Output elements one merge task produces.
constexpr size_t kPiece = size_t{1} << 18;

// Copies with stores that bypass the caches where the target has them
// (x86: SSE2): the merge's output is written once and not read again
// soon, so its cache lines need not be read in first, a third less memory
// traffic for a merge of keys alone. Call StreamFence after the last.
void StreamOut(std::byte* dst, const std::byte* src, size_t bytes) {
#if defined(__SSE2__)
  while (bytes > 0 && reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    *dst++ = *src++;
    --bytes;
  }
  for (; bytes >= 16; bytes -= 16, dst += 16, src += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  }
#endif
  std::memcpy(dst, src, bytes);
}

void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

template <KeyType T>
class Merger {
 public:
  using U = KeyBits<T>;

  Merger(const SortJob& in, const std::byte* in_permutation,
         const std::vector<size_t>& bounds, const SortJob& out)
      : in_(in),
        in_perm_(in_permutation),
        bounds_(bounds),
        out_(out),
        k_(bounds.size() - 1),
        n_(bounds.back()),
        vs_(ValueSize(in.value_type)),
        descending_(in.order == Order::kDescending) {}

  // False, with the outputs untouched, when the runs' cuts show that a run
  // is not sorted.
  bool Run() {
    const size_t pieces = DivUp(n_, kPiece);
    // Where each piece starts in every run; piece p covers output
    // positions [p * kPiece, (p + 1) * kPiece).
    std::vector<std::vector<size_t>> splits(pieces + 1);
    parallel::For(size_t{0}, pieces + 1, [&](size_t p) {
      splits[p] = Split(std::min(p * kPiece, n_));
    });
    for (size_t p = 0; p < pieces; ++p) {
      if (!Consistent(splits[p], splits[p + 1], p * kPiece)) return false;
    }
    parallel::For(size_t{0}, pieces, [&](size_t p) {
      Merge(splits[p], splits[p + 1], p * kPiece);
    });
    return true;
  }

 private:
  // Whether the cuts of the piece at output position `out_pos` lie within
  // their runs, in order, and hold the piece's length in all: then its
  // merge reads and writes only within the arrays, whatever the keys. Cuts
  // of sorted runs always are; a run that is not sorted (a device that
  // answered wrongly) can give cuts that are not.
  bool Consistent(const std::vector<size_t>& at, const std::vector<size_t>& end,
                  size_t out_pos) const {
    size_t total = 0;
    for (size_t r = 0; r < k_; ++r) {
      if (at[r] < bounds_[r] || at[r] > end[r] || end[r] > bounds_[r + 1]) {
        return false;
      }
      total += end[r] - at[r];
    }
    return total == std::min(kPiece, n_ - out_pos);
  }

  // The key at position i of the runs as order-preserving bits: ascending
  // order of these is the requested order.
  U Key(size_t i) const {
    U v;
    std::memcpy(&v, in_.keys + i * sizeof(U), sizeof(U));
    return OrderedBits<T>(v, descending_);
  }

  // First position in [begin, end) whose key is >= x (or > x with
  // `strict`).
  size_t Bound(size_t begin, size_t end, U x, bool strict) const {
    while (begin < end) {
      const size_t mid = begin + (end - begin) / 2;
      const U v = Key(mid);
      if (strict ? v <= x : v < x) {
        begin = mid + 1;
      } else {
        end = mid;
      }
    }
    return begin;
  }

  // Multi-sequence selection: the position in each run where output rank
  // `rank` begins. Elements order by (key, run), the order of a stable
  // merge, so the cut is exact even among equal keys.
  std::vector<size_t> Split(size_t rank) const {
    std::vector<size_t> s(k_);
    if (rank == 0 || rank == n_) {
      for (size_t r = 0; r < k_; ++r)
        s[r] = rank == 0 ? bounds_[r] : bounds_[r + 1];
      return s;
    }
    if (k_ == 2) return SplitTwo(rank);
    // The smallest key x with at least `rank` elements <= x.
    U lo = 0, hi = std::numeric_limits<U>::max();
    while (lo < hi) {
      const U mid = lo + (hi - lo) / 2;
      size_t at_most = 0;
      for (size_t r = 0; r < k_; ++r) {
        at_most += Bound(bounds_[r], bounds_[r + 1], mid, true) - bounds_[r];
      }
      if (at_most >= rank) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    // Everything below x comes first; of the keys equal to x, earlier runs
    // give theirs first.
    size_t need = rank;
    std::vector<size_t> upper(k_);
    for (size_t r = 0; r < k_; ++r) {
      s[r] = Bound(bounds_[r], bounds_[r + 1], lo, false);
      upper[r] = Bound(s[r], bounds_[r + 1], lo, true);
      need -= s[r] - bounds_[r];
    }
    for (size_t r = 0; r < k_; ++r) {
      const size_t take = std::min(need, upper[r] - s[r]);
      s[r] += take;
      need -= take;
    }
    return s;
  }

  // Split of two runs: the merge path's one binary search, for the number
  // i of the first run's elements among the first `rank` outputs: the
  // least i whose next element of the first run comes after the second
  // run's last one taken (ties go to the first run).
  std::vector<size_t> SplitTwo(size_t rank) const {
    const size_t a = bounds_[0], b = bounds_[1];
    const size_t len_a = bounds_[1] - a, len_b = bounds_[2] - b;
    size_t lo = rank > len_b ? rank - len_b : 0;
    size_t hi = std::min(rank, len_a);
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (Key(b + (rank - mid) - 1) < Key(a + mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return {a + lo, b + (rank - lo)};
  }

  void Merge(std::vector<size_t> at, const std::vector<size_t>& end,
             size_t out_pos) const {
    if (vs_ == 0 && out_.permutation_out == nullptr) {
      if (k_ == 2) return MergeTwoKeys(at, end, out_pos);
      return MergeKeys(at, end, out_pos);
    }
    // A binary heap of (key, run): the smallest key first, ties to the
    // earlier run.
    std::vector<std::pair<U, size_t>> heap;
    heap.reserve(k_);
    auto later = [](const std::pair<U, size_t>& a,
                    const std::pair<U, size_t>& b) { return a > b; };
    for (size_t r = 0; r < k_; ++r) {
      if (at[r] < end[r]) heap.emplace_back(Key(at[r]), r);
    }
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const size_t r = heap.back().second;
      const size_t i = at[r]++;
      std::memcpy(out_.keys_out + out_pos * sizeof(U), in_.keys + i * sizeof(U),
                  sizeof(U));
      if (vs_ > 0) {
        std::memcpy(out_.values_out + out_pos * vs_, in_.values + i * vs_, vs_);
      }
      if (out_.permutation_out != nullptr) {
        std::memcpy(out_.permutation_out + out_pos * 4, in_perm_ + i * 4, 4);
      }
      ++out_pos;
      if (at[r] < end[r]) {
        heap.back().first = Key(at[r]);
        std::push_heap(heap.begin(), heap.end(), later);
      } else {
        heap.pop_back();
      }
    }
  }

  // Keys alone from two runs, without a branch on the comparison (on
  // random keys it goes either way): ties to the first run. Everything the
  // loop reads is local: its stores (bytes) could alias the members.
  void MergeTwoKeys(const std::vector<size_t>& at,
                    const std::vector<size_t>& end, size_t out_pos) const {
    if (descending_) return MergeTwo<true>(at, end, out_pos);
    return MergeTwo<false>(at, end, out_pos);
  }
  template <bool kDescending>
  void MergeTwo(const std::vector<size_t>& at, const std::vector<size_t>& end,
                size_t out_pos) const {
    const std::byte* const keys = in_.keys;
    size_t a = at[0], b = at[1];
    const size_t ae = end[0], be = end[1];
    std::byte* out = out_.keys_out + out_pos * sizeof(U);
    // Merged a block at a time into a buffer that stays in L1, which goes
    // out with streaming stores (StreamOut).
    constexpr size_t kBlock = 4096 / sizeof(U);
    alignas(64) std::byte block[kBlock * sizeof(U)];
    auto step = [&](std::byte*& o) {
      U x, y;
      std::memcpy(&x, keys + a * sizeof(U), sizeof(U));
      std::memcpy(&y, keys + b * sizeof(U), sizeof(U));
      // 0 or 1, added to the indices: GCC turns a conditional increment
      // into a branch.
      const size_t second =
          OrderedBits<T>(y, kDescending) < OrderedBits<T>(x, kDescending);
      const U v = second ? y : x;
      std::memcpy(o, &v, sizeof(U));
      o += sizeof(U);
      a += 1 - second;
      b += second;
    };
    while (a < ae && b < be) {
      std::byte* o = block;
      // While both runs hold a block's keys, neither runs out within it:
      // only the block's count is checked.
      const size_t sure = std::min({kBlock, ae - a, be - b});
      if (sure == kBlock) {
        for (size_t i = 0; i < kBlock; ++i) step(o);
      } else {
        while (a < ae && b < be && o < block + sizeof(block)) step(o);
      }
      StreamOut(out, block, static_cast<size_t>(o - block));
      out += o - block;
    }
    StreamOut(out, keys + a * sizeof(U), (ae - a) * sizeof(U));
    out += (ae - a) * sizeof(U);
    StreamOut(out, keys + b * sizeof(U), (be - b) * sizeof(U));
    StreamFence();
  }

  // Keys alone from any number of runs: the smallest head (the earliest
  // run's among equals) goes next; each run's head key is kept, and an
  // exhausted run's is the largest key with the run past the others.
  void MergeKeys(std::vector<size_t> at, const std::vector<size_t>& end,
                 size_t out_pos) const {
    const std::byte* const keys = in_.keys;
    std::byte* out = out_.keys_out + out_pos * sizeof(U);
    std::vector<U> head(k_);
    size_t left = 0;
    for (size_t r = 0; r < k_; ++r) {
      left += end[r] - at[r];
      head[r] = at[r] < end[r] ? Key(at[r]) : std::numeric_limits<U>::max();
    }
    for (; left > 0; --left) {
      size_t best = k_;
      for (size_t r = 0; r < k_; ++r) {
        if (at[r] < end[r] && (best == k_ || head[r] < head[best])) best = r;
      }
      std::memcpy(out, keys + at[best] * sizeof(U), sizeof(U));
      out += sizeof(U);
      if (++at[best] < end[best]) head[best] = Key(at[best]);
    }
  }

  const SortJob& in_;
  const std::byte* in_perm_;
  const std::vector<size_t>& bounds_;
  const SortJob& out_;
  const size_t k_, n_, vs_;
  const bool descending_;
};

}  // namespace

absl::Status SortRunInto(Sorter& engine, const SortJob& job, size_t b, size_t e,
                         std::byte* keys, std::byte* values, std::byte* perm,
                         StageTimes* stages) {
  const size_t ks = KeySize(job.key_type);
  const size_t vs = ValueSize(job.value_type);
  const bool with_perm = job.permutation_out != nullptr;
  const size_t m = e - b;
  SortJob rj = job;
  rj.count = m;
  rj.keys = job.keys + b * ks;
  rj.values = vs > 0 ? job.values + b * vs : nullptr;
  rj.keys_out = keys + b * ks;
  rj.values_out = vs > 0 ? values + b * vs : nullptr;
  rj.permutation_out = with_perm ? perm + b * 4 : nullptr;
  rj.stages = stages;
  rj.kernel_span_seconds = nullptr;  // one run's span is not the call's
  absl::Status s = engine.Sort(rj);
  if (s.ok() && with_perm) {
    // The run's indices are into the run; the answer's into the array.
    parallel::For(size_t{0}, m, [&](size_t i) {
      uint32_t index;
      std::memcpy(&index, rj.permutation_out + i * 4, 4);
      index += static_cast<uint32_t>(b);
      std::memcpy(rj.permutation_out + i * 4, &index, 4);
    });
  }
  return s;
}

namespace {

// One entry per stage in `into`, `add`'s times added to those there.
void AddStages(const StageTimes& add, StageTimes* into) {
  for (const StageTime& st : add) {
    auto it = std::find_if(
        into->begin(), into->end(),
        [&](const StageTime& have) { return have.stage == st.stage; });
    if (it == into->end()) {
      into->push_back(st);
    } else {
      it->seconds += st.seconds;
    }
  }
}

}  // namespace

absl::Status MergeRuns(const SortJob& in, const std::byte* in_permutation,
                       const std::vector<size_t>& bounds, const SortJob& out) {
  if (bounds.size() < 2 || bounds.back() == 0) return absl::OkStatus();
  bool merged = false;
  DispatchKeyType(in.key_type, [&]<KeyType T>() {
    merged = Merger<T>(in, in_permutation, bounds, out).Run();
  });
  if (!merged) {
    return absl::InternalError(
        "a sorted run to merge is out of order: a device sorted its part "
        "wrongly");
  }
  return absl::OkStatus();
}

namespace {

// Bounds of `n` keys' runs of equal length (within one key), each at most
// `run_keys`: run r is [bounds[r], bounds[r + 1]).
std::vector<size_t> RunBounds(size_t n, size_t run_keys) {
  const size_t k = DivUp(n, run_keys);
  const size_t len = DivUp(n, k);
  std::vector<size_t> bounds(k + 1);
  for (size_t r = 0; r <= k; ++r) bounds[r] = std::min(r * len, n);
  return bounds;
}

// Sorts every run of `job` into `keys`, `values` and `perm` (SortRunInto),
// up to `concurrent_runs` at once, the caller's thread among them; the first
// run's failure stops the runs not yet begun.
absl::Status SortEveryRun(Sorter& engine, const SortJob& job,
                          const std::vector<size_t>& bounds,
                          int concurrent_runs, std::byte* keys,
                          std::byte* values, std::byte* perm) {
  const size_t k = bounds.size() - 1;
  std::atomic<size_t> next{0};
  Mutex mu;
  absl::Status status;
  auto worker = [&] {
    for (;;) {
      const size_t r = next.fetch_add(1);
      if (r >= k) return;
      {
        MutexLock lock(&mu);
        if (!status.ok()) return;
      }
      StageTimes stages;
      // Nothing may leave a worker thread: host memory running out in a
      // run is its failure.
      absl::Status s = CatchOutOfMemory("a device run of this sort", [&] {
        return SortRunInto(engine, job, bounds[r], bounds[r + 1], keys, values,
                           perm, job.stages != nullptr ? &stages : nullptr);
      });
      MutexLock lock(&mu);
      if (!s.ok() && status.ok()) status = s;
      if (job.stages != nullptr) AddStages(stages, job.stages);
    }
  };
  const size_t threads =
      std::min<size_t>(k, static_cast<size_t>(std::max(1, concurrent_runs)));
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::exception&) {  // no thread or no memory for one
      break;  // fewer runs at once (leaving with threads running aborts)
    }
  }
  worker();
  for (std::thread& t : pool) t.join();
  return status;
}

}  // namespace

absl::Status SortInRuns(Sorter& engine, const SortJob& job, size_t run_keys,
                        int* runs, int concurrent_runs) {
  if (run_keys == 0 || job.count <= run_keys) {
    if (runs != nullptr) *runs = 1;
    return engine.Sort(job);
  }
  const size_t n = job.count;
  const size_t ks = KeySize(job.key_type);
  const size_t vs = ValueSize(job.value_type);
  const bool with_perm = job.permutation_out != nullptr;
  const std::vector<size_t> bounds = RunBounds(n, run_keys);
  if (runs != nullptr) *runs = static_cast<int>(bounds.size() - 1);

  // The sorted runs, before the merge (not zero-filled: every byte is
  // written by a run).
  const size_t bytes = n * (ks + vs + (with_perm ? 4 : 0));
  std::unique_ptr<std::byte[]> scratch(new std::byte[bytes]);
  std::byte* keys = scratch.get();
  std::byte* values = keys + n * ks;
  std::byte* perm = values + n * vs;
  if (absl::Status sorted = SortEveryRun(engine, job, bounds, concurrent_runs,
                                         keys, values, perm);
      !sorted.ok()) {
    return sorted;
  }

  const absl::Time start = absl::Now();
  SortJob in = job;
  in.keys = keys;
  in.values = vs > 0 ? values : nullptr;
  const absl::Status merged =
      MergeRuns(in, with_perm ? perm : nullptr, bounds, job);
  if (!merged.ok()) return merged;
  if (job.stages != nullptr) {
    job.stages->push_back(
        {"host_merge", absl::ToDoubleSeconds(absl::Now() - start)});
  }
  return absl::OkStatus();
}

}  // namespace sortd
