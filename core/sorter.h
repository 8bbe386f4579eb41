// The one interface behind which every sortd engine sits: the oneTBB CPU
// path (cpu/cpu_sorter.h) and the OpenCL engine (gpu/). The server only
// talks to engines through it.
//
// Jobs borrow their buffers: inputs point into the request, outputs into the
// response, so an engine writes its answer where gRPC will send it from.
// Buffers carry little-endian elements and need not be aligned.
//
//   SortJob job;
//   job.key_type = KeyType::kF32;
//   job.count = n;
//   job.keys = request_bytes;
//   job.keys_out = response_bytes;   // n * KeySize(job.key_type) bytes
//   absl::Status s = sorter->Sort(job);
#ifndef SORTD_CORE_SORTER_H_
#define SORTD_CORE_SORTER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/host_memory.h"
#include "core/keys.h"

namespace sortd {

// Device time of one stage of a run (upload, histogram, scan, scatter,
// transform, transpose, download), summed over its launches, from OpenCL
// profiling events; stages named host_* (host_pack, host_unpack,
// host_merge, host_enqueue, host_wait) are the wall time of host work around
// or during a run, and device_span the device's time from a run's first
// command to its last. Engines without stages (the CPU path) report none.
struct StageTime {
  std::string stage;
  double seconds = 0;
};
using StageTimes = std::vector<StageTime>;

// One stable sort. `count` keys of `key_type` at `keys` are written sorted
// to `keys_out`. If `value_type` is not kNone, `values` holds one value per
// key and `values_out` receives them in the keys' new order. If
// `permutation_out` is set it receives, for each output position, the
// uint32 input index of the key now there.
struct SortJob {
  KeyType key_type = KeyType::kU32;
  Order order = Order::kAscending;
  size_t count = 0;
  const std::byte* keys = nullptr;
  ValueType value_type = ValueType::kNone;
  const std::byte* values = nullptr;

  std::byte* keys_out = nullptr;
  std::byte* values_out = nullptr;
  std::byte* permutation_out = nullptr;

  // A batch whose requests' arrays stay where their callers have them
  // (Sorter::SortSegments of an engine whose SortsParts() says so): when
  // not empty, part i supplies the next parts[i]->count keys (values) and
  // receives their sorted outputs, and the job's own array pointers only
  // say which arrays there are. Every part has the job's key type, order
  // and value type, and a permutation_out exactly when the job has one
  // (indices into the whole batch).
  absl::Span<const SortJob* const> parts = {};

  // When set, the engine appends the time of each stage it ran (an engine
  // that samples its device timing, as the OpenCL engine does, may report
  // only the host stages of a run).
  StageTimes* stages = nullptr;
  // When set (with `stages`), the engine times the run on the device and
  // stores its device span: from the
  // start of its first command other than a transfer to the end of its
  // last, gaps between launches included (0 when it ran none).
  double* kernel_span_seconds = nullptr;
};

// A batch of `count` 32x32 bit matrices, each 32 uint32 rows, transposed
// from `in` to `out` (which may not overlap).
struct TransposeJob {
  size_t count = 0;
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
  StageTimes* stages = nullptr;
  double* kernel_span_seconds = nullptr;  // as SortJob's
};

// kCpu: the oneTBB CPU path; kGpu: an OpenCL GPU; kOpenClCpu: the OpenCL
// CPU device (PoCL), labelled apart so that a node serving without its GPU
// shows it.
enum class ExecutionPath { kCpu, kGpu, kOpenClCpu };

inline const char* PathName(ExecutionPath p) {
  switch (p) {
    case ExecutionPath::kCpu:
      return "cpu";
    case ExecutionPath::kGpu:
      return "gpu";
    case ExecutionPath::kOpenClCpu:
      return "opencl-cpu";
  }
  return "cpu";
}

class Sorter {
 public:
  virtual ~Sorter() = default;

  // Which path this engine is, for responses and metrics.
  virtual ExecutionPath path() const = 0;
  // Human-readable device description, e.g. "cpu (oneTBB, 8 threads)".
  virtual std::string device_name() const = 0;
  // False once the engine has seen its device fail (lost, queue broken);
  // callers then send work elsewhere.
  virtual bool healthy() const { return true; }
  // Runs it serves at once (an OpenCL engine's lanes); 0: no limit.
  virtual int concurrent_runs() const { return 0; }
  // Whether SortSegments would take `parts` as a job made of parts
  // (SortJob::parts), reading and writing their arrays where they lie;
  // an engine says so where that costs it less than the same requests
  // packed into one array (the OpenCL engine: every array in its
  // page-locked memory).
  virtual bool SortsParts(absl::Span<const SortJob* const> /*parts*/) const {
    return false;
  }

  // Both are safe to call from many threads at once. On error nothing is
  // guaranteed about the output buffers; the caller must not send them.
  virtual absl::Status Sort(const SortJob& job) = 0;
  virtual absl::Status Transpose(const TransposeJob& job) = 0;

  // Segmented sort: `offsets` (S + 1 nondecreasing entries, the first 0 and
  // the last job.count) cut the job's arrays into S independent segments,
  // each sorted on its own, stably, in job.order. Permutation entries are
  // indices into the whole array. The default sorts segment by segment
  // through Sort(); engines override it with one launch sequence.
  virtual absl::Status SortSegments(const SortJob& job,
                                    absl::Span<const uint32_t> offsets);

  // Device memory in bytes by kind (total, in_use, pooled, pinned_staging,
  // and pinned_host: what host_memory() has handed out); empty for engines
  // without a device.
  virtual std::vector<std::pair<std::string, double>> memory_bytes() const {
    return {};
  }
  // Host bytes this engine's transfers have moved since it was created:
  // copied through its staging buffers, or read and written by the device
  // where they lie (page-locked memory from host_memory(), or an engine
  // without staging). Zero for engines without a device.
  struct TransferBytes {
    uint64_t staged = 0, direct = 0;
  };
  virtual TransferBytes transfer_bytes() const { return {}; }
  // Host memory this engine's transfers read and write without a copy of
  // their own (core/host_memory.h); null: any memory serves as well.
  virtual std::shared_ptr<HostMemory> host_memory() const { return nullptr; }
  // Another engine's host_memory() (the one request and answer arrays are
  // taken from), which this engine's transfers may read and write where
  // it lies too: given to engines whose driver page-locks host memory for
  // all of its devices. Engines without staging ignore it.
  virtual void ShareHostMemory(std::shared_ptr<HostMemory> /*memory*/) {}
  // Vendor and driver version, for the device_info metric.
  virtual std::pair<std::string, std::string> vendor_driver() const {
    return {"", ""};
  }

  // The most keys of `shape`'s kind (key and value type, permutation or
  // not; its count and buffers are ignored) one Sort() call can take
  // within the engine's device memory budget; larger arrays are sorted in
  // runs (server/runs.h). 0: no bound.
  virtual size_t max_sort_keys(const SortJob& /*shape*/) const { return 0; }
  // The same for one SortSegments() call of up to `segments` segments.
  virtual size_t max_batch_keys(const SortJob& shape,
                                size_t /*segments*/) const {
    return max_sort_keys(shape);
  }
  // The most matrices one Transpose() call can take; 0: no bound.
  virtual size_t max_transpose_matrices() const { return 0; }
};

// INVALID_ARGUMENT unless `offsets` cut `count` elements into segments.
absl::Status CheckSegmentOffsets(size_t count,
                                 absl::Span<const uint32_t> offsets);
// INVALID_ARGUMENT unless the parts of `job` (SortJob::parts; none is
// fine) match it: each of its key type, order, value type and outputs, with
// arrays where it has keys, and counts that add up to job.count.
absl::Status CheckParts(const SortJob& job);

}  // namespace sortd

#endif  // SORTD_CORE_SORTER_H_
