#include "server/request.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compact_keys.h"
#include "core/parallel.h"
#include "server/no_retry.h"

namespace sortd {
namespace {

const std::byte* Bytes(std::string_view s) {
  return reinterpret_cast<const std::byte*>(s.data());
}

// gRPC enforces the same limit on the wire (the server sets its maximum
// receive size to it); this check covers requests that reach the handler by
// other routes, and gives the same answer.
absl::Status CheckLimit(size_t bytes, const RequestLimits& limits) {
  if (bytes <= limits.max_request_bytes) return absl::OkStatus();
  return NotRetryable(absl::ResourceExhaustedError(
      absl::StrCat("request is ", bytes, " bytes; this server accepts at most ",
                   limits.max_request_bytes, " bytes (--max_request_bytes)")));
}

}  // namespace

size_t SortRequestUnits(const wire::SortRequest& request) {
  return request.key_type.has_value()
             ? request.keys.size() / KeySize(*request.key_type)
             : 0;
}

size_t SharedRequestUnits(const wire::SortRequest& request, uint64_t count,
                          size_t region_bytes) {
  const size_t key_size =
      request.key_type.has_value() ? KeySize(*request.key_type) : 1;
  return static_cast<size_t>(
      std::min<uint64_t>(count, region_bytes / key_size));
}

size_t TransposeRequestUnits(const wire::TransposeRequest& request) {
  return request.matrices.size() / sizeof(uint32_t);
}

absl::StatusOr<SortJob> ParseSort(const wire::SortRequest& request,
                                  const RequestLimits& limits,
                                  size_t message_bytes) {
  if (absl::Status s = CheckLimit(message_bytes, limits); !s.ok()) return s;
  if (!request.key_type.has_value()) {
    return absl::InvalidArgumentError(
        "no keys set: set exactly one of u32_keys, i32_keys, f32_keys, "
        "u64_keys, i64_keys, f64_keys (an empty one sorts an empty array)");
  }
  const KeyType key_type = *request.key_type;
  const size_t key_size = KeySize(key_type);
  if (request.keys.size() % key_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        wire::KeyFieldName(key_type), " holds ", request.keys.size(),
        " bytes, which is not a multiple of the ", key_size, "-byte key size"));
  }
  if (request.order != v1::ORDER_ASCENDING &&
      request.order != v1::ORDER_DESCENDING) {
    return absl::InvalidArgumentError(
        absl::StrCat("order: unknown value ", request.order,
                     "; expected ORDER_ASCENDING (0) or ORDER_DESCENDING (1)"));
  }

  if (request.key_coding != v1::KEY_CODING_RAW &&
      request.key_coding != v1::KEY_CODING_COMPACT) {
    return absl::InvalidArgumentError(absl::StrCat(
        "response_key_coding: unknown value ", request.key_coding,
        "; expected KEY_CODING_RAW (0) or KEY_CODING_COMPACT (1)"));
  }

  SortJob job;
  job.key_type = key_type;
  job.order = request.order == v1::ORDER_DESCENDING ? Order::kDescending
                                                    : Order::kAscending;
  job.count = request.keys.size() / key_size;
  job.keys = Bytes(request.keys);

  if (request.value_type != ValueType::kNone) {
    job.value_type = request.value_type;
    const size_t value_size = ValueSize(job.value_type);
    const size_t bytes = request.values.size();
    if (bytes != job.count * value_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          wire::ValueFieldName(job.value_type), " holds ", bytes, " bytes (",
          bytes / value_size, " values",
          bytes % value_size ? " and a partial one" : "", "); expected one ",
          value_size, "-byte value per key: ", job.count, " values, ",
          job.count * value_size, " bytes"));
    }
    job.values = Bytes(request.values);
  }

  if (job.count > std::numeric_limits<uint32_t>::max()) {
    return NotRetryable(absl::ResourceExhaustedError(absl::StrCat(
        "request holds ", job.count, " keys; at most 2^32-1 are supported")));
  }
  return job;
}

SortOutputs AllocateSortOutputs(SortJob& job, bool permutation,
                                HostBufferPool* pool) {
  SortOutputs out;
  // 32-bit keys get room for whole blocks of compact::kBlockKeys: their
  // compact form is written over them (CompactSlices).
  const size_t key_bytes =
      compact::Supports(job.key_type)
          ? compact::Blocks(job.count) * compact::kBlockKeys * 4
          : job.count * KeySize(job.key_type);
  out.keys = wire::OutputArray(key_bytes, pool);
  job.keys_out = out.keys.data();
  if (job.value_type != ValueType::kNone) {
    out.values = wire::OutputArray(job.count * ValueSize(job.value_type), pool);
    job.values_out = out.values.data();
  }
  out.with_permutation = permutation;
  if (permutation) {
    out.permutation = wire::OutputArray(job.count * sizeof(uint32_t), pool);
    job.permutation_out = out.permutation.data();
  }
  return out;
}

wire::SortArrays SortOutputs::Slices(const SortJob& job, size_t first,
                                     size_t n) const {
  wire::SortArrays a;
  const size_t ks = KeySize(job.key_type), vs = ValueSize(job.value_type);
  a.key_type = job.key_type;
  a.keys = keys.Sub(first * ks, n * ks);
  a.value_type = job.value_type;
  if (vs > 0) a.values = values.Sub(first * vs, n * vs);
  if (with_permutation) {
    a.permutation =
        permutation.Sub(first * sizeof(uint32_t), n * sizeof(uint32_t));
  }
  return a;
}

wire::SortArrays SortOutputs::CompactSlices(const SortJob& job, size_t first,
                                            size_t n, HostBufferPool* pool) {
  wire::SortArrays a = Slices(job, first, n);
  if (!compact::Supports(job.key_type)) return a;
  // Blocks per task: 1M keys, a few milliseconds of work.
  constexpr size_t kTaskBlocks = (size_t{1} << 20) / compact::kBlockKeys;
  auto* values = reinterpret_cast<uint32_t*>(keys.data()) + first;
  const bool descending = job.order == Order::kDescending;
  const size_t blocks = compact::Blocks(n);
  const size_t tasks = (blocks + kTaskBlocks - 1) / kTaskBlocks;
  wire::CompactArray c;
  c.count = n;
  c.descending = descending;
  wire::OutputArray widths(blocks, pool), bases(blocks * 4, pool);
  std::vector<size_t> written(tasks);
  // Each task's differences overwrite its own keys from their start on: a
  // block is read before its bytes land, and they end within its room
  // (AllocateSortOutputs leaves whole blocks of it). `first` must start a
  // block, and only the array's last block may be short.
  auto encode = [&](size_t task) {
    const size_t b0 = task * kTaskBlocks;
    const size_t b1 = std::min(blocks, b0 + kTaskBlocks);
    uint32_t* v = values + b0 * compact::kBlockKeys;
    const size_t count =
        std::min(n - b0 * compact::kBlockKeys, (b1 - b0) * compact::kBlockKeys);
    compact::ToOrderValues(job.key_type, descending, v, count);
    written[task] = compact::EncodeBlocks(
        values, n, b0, b1, reinterpret_cast<uint8_t*>(widths.data()),
        reinterpret_cast<uint32_t*>(bases.data()),
        reinterpret_cast<uint8_t*>(v));
  };
  if (tasks <= 1) {
    if (tasks == 1) encode(0);
  } else {
    parallel::For(size_t{0}, tasks, encode);
  }
  for (size_t t = 0; t < tasks; ++t) {
    const size_t at = (first + t * kTaskBlocks * compact::kBlockKeys) * 4;
    c.deltas.push_back(keys.Sub(at, written[t]));
  }
  c.widths = widths.Share();
  c.bases = bases.Share();
  a.keys = grpc::Slice();
  a.compact = std::move(c);
  return a;
}

namespace {

// One array of a shared-memory request, where it lies in the region.
struct Range {
  const char* name;
  uint64_t offset;
  size_t bytes;
  bool output;
};

// The arrays `shared` places for `n` keys of `ks` bytes (and values of `vs`;
// and a permutation if asked for), inputs and outputs.
std::vector<Range> SharedRanges(const v1::SharedArrays& shared, size_t n,
                                size_t ks, size_t vs, bool permutation) {
  std::vector<Range> ranges = {
      {"keys_offset", shared.keys_offset(), n * ks, false},
      {"keys_out_offset", shared.keys_out_offset(), n * ks, true}};
  if (vs > 0) {
    ranges.push_back({"values_offset", shared.values_offset(), n * vs, false});
    ranges.push_back(
        {"values_out_offset", shared.values_out_offset(), n * vs, true});
  }
  if (permutation) {
    ranges.push_back({"permutation_offset", shared.permutation_offset(),
                      n * sizeof(uint32_t), true});
  }
  return ranges;
}

// Every range within the region, and no output overlapping another range.
absl::Status CheckRanges(const std::vector<Range>& ranges,
                         const Region& region) {
  for (const Range& r : ranges) {
    if (r.offset > region.size() || r.bytes > region.size() - r.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shared.", r.name, " ", r.offset, " + ", r.bytes,
          " bytes lies outside the region's ", region.size(), " bytes"));
    }
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      const Range &a = ranges[i], &b = ranges[j];
      if (!a.output && !b.output) continue;
      if (a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes &&
          b.offset < a.offset + a.bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("shared.", a.name, " and shared.", b.name,
                         " overlap; an output may overlap nothing else"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PlaceInRegion(const v1::SharedArrays& shared, bool permutation,
                           const Region& region, const RequestLimits& limits,
                           SortJob& job) {
  // ParseSort has checked that the values are as many as the keys.
  if (job.count != 0) {
    return absl::InvalidArgumentError(
        "with `shared`, the key and value fields name the types and must be "
        "empty: the arrays are in the region");
  }
  if (shared.count() > std::numeric_limits<uint32_t>::max()) {
    return NotRetryable(absl::ResourceExhaustedError(absl::StrCat(
        "shared.count is ", shared.count(), "; at most 2^32-1 keys")));
  }
  const size_t n = shared.count();
  const size_t ks = KeySize(job.key_type), vs = ValueSize(job.value_type);
  if (n * (ks + vs) > limits.max_stream_bytes) {
    return NotRetryable(absl::ResourceExhaustedError(absl::StrCat(
        "shared.count ", n, " makes ", n * (ks + vs),
        " bytes of keys and values; this server sorts at most ",
        limits.max_stream_bytes, " in one call (--max_stream_bytes)")));
  }
  if (absl::Status s =
          CheckRanges(SharedRanges(shared, n, ks, vs, permutation), region);
      !s.ok()) {
    return s;
  }
  std::byte* base = region.base();
  job.count = n;
  job.keys = base + shared.keys_offset();
  job.keys_out = base + shared.keys_out_offset();
  if (vs > 0) {
    job.values = base + shared.values_offset();
    job.values_out = base + shared.values_out_offset();
  }
  if (permutation) job.permutation_out = base + shared.permutation_offset();
  return absl::OkStatus();
}

absl::StatusOr<TransposeJob> ParseTranspose(
    const wire::TransposeRequest& request, const RequestLimits& limits,
    size_t message_bytes) {
  constexpr size_t kMatrixBytes = 32 * sizeof(uint32_t);
  const size_t bytes = request.matrices.size();
  if (bytes % sizeof(uint32_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("matrices holds ", bytes,
                     " bytes, which is not a whole number of 4-byte rows"));
  }
  if (bytes % kMatrixBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matrices holds ", bytes / sizeof(uint32_t),
        " words, which is not a multiple of 32 (one 32x32 bit matrix is 32 "
        "uint32 rows)"));
  }
  if (absl::Status s = CheckLimit(message_bytes, limits); !s.ok()) return s;
  TransposeJob job;
  job.count = bytes / kMatrixBytes;
  job.in = Bytes(request.matrices);
  return job;
}

}  // namespace sortd
