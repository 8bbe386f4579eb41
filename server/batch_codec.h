// The batch codec: several requests packed into one engine run, and the
// run's answer unpacked into each request's own buffers.
//
// Sorts of one class (same key width, value type and permutation request)
// become one segmented sort: each request's keys are mapped to the ordered
// unsigned bits of its type and order (core/keys.h), so that u32, i32
// and f32 keys, ascending and descending, sort together ascending; values
// are copied alongside; the answer's keys are mapped back, and permutation
// entries (indices into the whole batch) are rebased to each request's own
// array. Requests of one key type and order whose arrays the engine can
// read and write where they lie (Sorter::SortsParts) are not packed when
// they are long enough: the engine moves each to and from its place in the
// device's arrays, and only permutations are rebased. Each such request
// costs the engine two transfer commands of its own, so short ones are
// packed all the same (`in_place_min_keys`, which sortd's calibration
// chooses). Transposes are concatenated and cut apart again.
//
//   std::vector<const SortJob*> jobs = {&a, &b};
//   batch::PackBuffer pack;   // reused from batch to batch
//   absl::Status s = batch::SortTogether(engine, jobs, &stages, &pack);
#ifndef SORTD_SERVER_BATCH_CODEC_H_
#define SORTD_SERVER_BATCH_CODEC_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/host_memory.h"
#include "core/sorter.h"

namespace sortd::batch {

// Where a device runner packs its batches, kept from one batch to the
// next: the engine's page-locked memory where it offers some (its
// transfers then read and write the packed arrays in place, without the
// copies through its staging buffers), else the heap. It grows to the
// largest batch seen, in powers of two; Release() gives it back.
class PackBuffer {
 public:
  PackBuffer() = default;
  ~PackBuffer() { Release(); }
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;

  // At least `bytes` bytes (their contents are not kept), from `memory`
  // when it is not null and has them (a heap buffer kept from an earlier
  // call is swapped for memory's once it has room).
  std::byte* Get(size_t bytes, const std::shared_ptr<HostMemory>& memory);
  void Release();
  size_t bytes() const { return bytes_; }
  // Whether the buffer came from the memory (else from the heap).
  bool from_memory() const { return from_memory_; }

 private:
  std::shared_ptr<HostMemory> memory_;  // what data_ was asked of
  bool from_memory_ = false;            // else the heap (memory_ had none)
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

// Sorts `jobs`, one class, as one segmented sort on `engine`, writing each
// job's outputs. Jobs of one key type and order that the engine takes as
// parts (Sorter::SortsParts: on the OpenCL engine, arrays in its
// page-locked memory) and that hold at least `in_place_min_keys` keys on
// average are read and written where they lie; otherwise they are packed
// (SIZE_MAX: always packed). `stages` may be null.
absl::Status SortTogether(Sorter& engine, absl::Span<const SortJob* const> jobs,
                          StageTimes* stages, PackBuffer* pack,
                          size_t in_place_min_keys = 0);

// Transposes `jobs` as one run on `engine`.
absl::Status TransposeTogether(Sorter& engine,
                               absl::Span<const TransposeJob* const> jobs,
                               StageTimes* stages, PackBuffer* pack);

// One transpose, in pieces of what the engine takes at once (matrices are
// independent); `device_runs` counts the pieces.
absl::Status TransposeInPieces(Sorter& engine, const TransposeJob& job,
                               StageTimes* stages, int* device_runs);

}  // namespace sortd::batch

#endif  // SORTD_SERVER_BATCH_CODEC_H_
