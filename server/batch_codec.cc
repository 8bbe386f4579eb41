#include "server/batch_codec.h"

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"
#include "core/keys.h"
#include "core/parallel.h"
#include "oneapi/tbb/blocked_range.h"

namespace sortd::batch {
namespace {

// Copies of at least this many bytes in packing and unpacking are spread
// over the oneTBB pool.
constexpr size_t kParallelCopyBytes = size_t{1} << 20;
// A batch of at least this many bytes packs and unpacks its requests side
// by side: a request of 64 KiB or more is worth a task of its own. (On the
// H100 host a batch of five 16K-key requests took 0.18 ms to pack and as
// long to unpack on one thread, a fifth of its time in the server.)
constexpr size_t kParallelJobsBytes = size_t{256} << 10;

// body(i) for each request of a batch: side by side on oneTBB when the
// batch holds at least kParallelJobsBytes (a batch of mid-size requests is
// host work one thread would serialise), else in turn.
template <typename Body>
void EachJob(size_t jobs, size_t bytes, Body body) {
  if (jobs < 2 || bytes < kParallelJobsBytes) {
    for (size_t i = 0; i < jobs; ++i) body(i);
  } else {
    parallel::For(size_t{0}, jobs, body);
  }
}

// memcpy, spread over oneTBB when large.
void Copy(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes < kParallelCopyBytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  constexpr size_t kChunk = size_t{256} << 10;
  parallel::For(size_t{0}, (bytes + kChunk - 1) / kChunk, [&](size_t c) {
    const size_t off = c * kChunk;
    std::memcpy(dst + off, src + off, std::min(kChunk, bytes - off));
  });
}

// Copies n keys of type t from src to dst, mapped to their ordered bits
// (encode) or back; large arrays are spread over the oneTBB pool.
void ToOrderedBits(KeyType t, bool descending, bool encode,
                   const std::byte* src, std::byte* dst, size_t n) {
  DispatchKeyType(t, [&]<KeyType T>() {
    using U = KeyBits<T>;
    auto body = [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        U v;
        std::memcpy(&v, src + i * sizeof(U), sizeof(U));
        v = encode ? OrderedBits<T>(v, descending) : RawBits<T>(v, descending);
        std::memcpy(dst + i * sizeof(U), &v, sizeof(U));
      }
    };
    if (n * sizeof(U) < kParallelCopyBytes) {
      body(0, n);
    } else {
      parallel::ForRange(tbb::blocked_range<size_t>(0, n, size_t{1} << 16),
                         [&](const tbb::blocked_range<size_t>& r) {
                           body(r.begin(), r.end());
                         });
    }
  });
}

// The engine's permutation entries are indices into the whole batch; a
// request's are into its own array, which starts at `start` of the batch.
// `src` may be `dst`.
void Rebase(const std::byte* src, std::byte* dst, size_t n, uint32_t start) {
  for (size_t k = 0; k < n; ++k) {
    uint32_t index;
    std::memcpy(&index, src + k * sizeof(uint32_t), sizeof(index));
    index -= start;
    std::memcpy(dst + k * sizeof(uint32_t), &index, sizeof(index));
  }
}

// Adds the host time since `start` to `stages` as `stage` (when stages is
// not null) and returns the time now.
absl::Time HostStage(StageTimes* stages, const char* stage, absl::Time start) {
  const absl::Time now = absl::Now();
  if (stages != nullptr) {
    stages->push_back({stage, absl::ToDoubleSeconds(now - start)});
  }
  return now;
}

}  // namespace

std::byte* PackBuffer::Get(size_t bytes,
                           const std::shared_ptr<HostMemory>& memory) {
  if (data_ != nullptr && bytes <= bytes_ && memory == memory_) {
    // A heap buffer taken while the memory had none left: asked again,
    // as page-locked memory is capped and may have room now.
    if (!from_memory_ && memory != nullptr) {
      if (auto* p = static_cast<std::byte*>(memory->Allocate(bytes_))) {
        delete[] data_;
        data_ = p;
        from_memory_ = true;
      }
    }
    return data_;
  }
  Release();
  size_t size = size_t{1} << 20;
  while (size < bytes) size <<= 1;
  memory_ = memory;
  if (memory != nullptr) {
    data_ = static_cast<std::byte*>(memory->Allocate(size));
    from_memory_ = data_ != nullptr;
  }
  if (data_ == nullptr) data_ = new std::byte[size];
  bytes_ = size;
  return data_;
}

void PackBuffer::Release() {
  if (data_ == nullptr) return;
  if (from_memory_) {
    memory_->Free(data_, bytes_);
  } else {
    delete[] data_;
  }
  memory_ = nullptr;
  from_memory_ = false;
  data_ = nullptr;
  bytes_ = 0;
}

absl::Status TransposeInPieces(Sorter& engine, const TransposeJob& whole,
                               StageTimes* stages, int* device_runs) {
  *device_runs = 1;
  const size_t step = engine.max_transpose_matrices();
  if (step == 0 || whole.count <= step) {
    TransposeJob job = whole;
    job.stages = stages;
    return engine.Transpose(job);
  }
  *device_runs = 0;
  for (size_t at = 0; at < whole.count; at += step) {
    TransposeJob job = whole;
    job.count = std::min(step, whole.count - at);
    job.in = whole.in + at * 128;
    job.out = whole.out + at * 128;
    job.stages = stages;
    job.kernel_span_seconds = nullptr;  // one piece's span is not the call's
    if (absl::Status s = engine.Transpose(job); !s.ok()) return s;
    ++*device_runs;
  }
  return absl::OkStatus();
}

absl::Status TransposeTogether(Sorter& engine,
                               absl::Span<const TransposeJob* const> jobs,
                               StageTimes* stages, PackBuffer* pack) {
  size_t total = 0;
  for (const TransposeJob* t : jobs) total += t->count;
  const size_t bytes = total * 32 * sizeof(uint32_t);
  absl::Time at_time = absl::Now();
  std::byte* in = pack->Get(2 * bytes, engine.host_memory());
  std::byte* out = in + bytes;
  size_t at = 0;
  for (const TransposeJob* t : jobs) {
    const size_t b = t->count * 32 * sizeof(uint32_t);
    Copy(in + at, t->in, b);
    at += b;
  }
  TransposeJob job;
  job.count = total;
  job.in = in;
  job.out = out;
  job.stages = stages;
  at_time = HostStage(stages, "host_pack", at_time);
  if (absl::Status s = engine.Transpose(job); !s.ok()) return s;
  at_time = absl::Now();
  at = 0;
  for (const TransposeJob* t : jobs) {
    const size_t b = t->count * 32 * sizeof(uint32_t);
    Copy(t->out, out + at, b);
    at += b;
  }
  HostStage(stages, "host_unpack", at_time);
  return absl::OkStatus();
}

namespace {

// Whether the batch is sorted where its requests' arrays lie: requests of
// `min_keys` keys or more on average, one key type and order throughout
// (the engine then maps keys to their ordered bits itself), and an engine
// that takes these requests as parts.
bool SortsInPlace(const Sorter& engine, absl::Span<const SortJob* const> jobs,
                  size_t total_keys, size_t min_keys) {
  if (total_keys / jobs.size() < min_keys) return false;
  const SortJob& first = *jobs.front();
  for (const SortJob* j : jobs) {
    if (j->key_type != first.key_type || j->order != first.order) return false;
  }
  return engine.SortsParts(jobs);
}

// The batch sorted as parts: no packing; only permutations are rebased.
absl::Status SortParts(Sorter& engine, absl::Span<const SortJob* const> jobs,
                       const std::vector<uint32_t>& offsets,
                       StageTimes* stages) {
  const SortJob& first = *jobs.front();
  SortJob job;
  job.key_type = first.key_type;
  job.order = first.order;
  job.count = offsets.back();
  job.keys = first.keys;
  job.value_type = first.value_type;
  job.values = first.values;
  job.keys_out = first.keys_out;
  job.values_out = first.values_out;
  job.permutation_out = first.permutation_out;
  job.parts = jobs;
  job.stages = stages;
  if (absl::Status s = engine.SortSegments(job, offsets); !s.ok()) return s;
  if (first.permutation_out == nullptr) return absl::OkStatus();
  const absl::Time start = absl::Now();
  EachJob(jobs.size(), offsets.back() * sizeof(uint32_t), [&](size_t i) {
    Rebase(jobs[i]->permutation_out, jobs[i]->permutation_out, jobs[i]->count,
           offsets[i]);
  });
  HostStage(stages, "host_unpack", start);
  return absl::OkStatus();
}

}  // namespace

absl::Status SortTogether(Sorter& engine, absl::Span<const SortJob* const> jobs,
                          StageTimes* stages, PackBuffer* pack,
                          size_t in_place_min_keys) {
  absl::Time at_time = absl::Now();
  const SortJob& first = *jobs.front();
  const size_t ks = KeySize(first.key_type);
  const size_t vs = ValueSize(first.value_type);
  const bool perm = first.permutation_out != nullptr;
  size_t total = 0;
  std::vector<uint32_t> offsets;
  offsets.reserve(jobs.size() + 1);
  offsets.push_back(0);
  for (const SortJob* t : jobs) {
    total += t->count;
    offsets.push_back(static_cast<uint32_t>(total));
  }
  if (SortsInPlace(engine, jobs, total, in_place_min_keys)) {
    return SortParts(engine, jobs, offsets, stages);
  }
  const size_t keys_bytes = total * ks, values_bytes = total * vs;
  std::byte* keys_in = pack->Get(
      2 * keys_bytes + 2 * values_bytes + (perm ? total * sizeof(uint32_t) : 0),
      engine.host_memory());
  std::byte* values_in = keys_in + keys_bytes;
  std::byte* keys_out = values_in + values_bytes;
  std::byte* values_out = keys_out + keys_bytes;
  std::byte* perm_out = values_out + values_bytes;
  EachJob(jobs.size(), keys_bytes + values_bytes, [&](size_t i) {
    const SortJob& j = *jobs[i];
    ToOrderedBits(j.key_type, j.order == Order::kDescending, true, j.keys,
                  keys_in + offsets[i] * ks, j.count);
    if (vs > 0) Copy(values_in + offsets[i] * vs, j.values, j.count * vs);
  });
  SortJob job;
  job.key_type = ks == 4 ? KeyType::kU32 : KeyType::kU64;
  job.order = Order::kAscending;
  job.count = total;
  job.keys = keys_in;
  job.value_type = first.value_type;
  job.values = vs > 0 ? values_in : nullptr;
  job.keys_out = keys_out;
  job.values_out = vs > 0 ? values_out : nullptr;
  job.permutation_out = perm ? perm_out : nullptr;
  job.stages = stages;
  at_time = HostStage(stages, "host_pack", at_time);
  if (absl::Status s = engine.SortSegments(job, offsets); !s.ok()) return s;
  at_time = absl::Now();
  EachJob(jobs.size(), keys_bytes + values_bytes, [&](size_t i) {
    const SortJob& j = *jobs[i];
    ToOrderedBits(j.key_type, j.order == Order::kDescending, false,
                  keys_out + offsets[i] * ks, j.keys_out, j.count);
    if (vs > 0) Copy(j.values_out, values_out + offsets[i] * vs, j.count * vs);
    if (perm) {
      Rebase(perm_out + offsets[i] * sizeof(uint32_t), j.permutation_out,
             j.count, offsets[i]);
    }
  });
  HostStage(stages, "host_unpack", at_time);
  return absl::OkStatus();
}

}  // namespace sortd::batch
