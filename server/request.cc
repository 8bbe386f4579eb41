#include "server/request.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace sortd {
namespace {

struct KeyField {
  KeyType type;
  const std::string* data;
};

// The set key field of the request; nullopt data when none is set.
KeyField FindKeys(const v1::SortRequest& r) {
  using R = v1::SortRequest;
  switch (r.keys_case()) {
    case R::kU32Keys:
      return {KeyType::kU32, &r.u32_keys()};
    case R::kI32Keys:
      return {KeyType::kI32, &r.i32_keys()};
    case R::kF32Keys:
      return {KeyType::kF32, &r.f32_keys()};
    case R::kU64Keys:
      return {KeyType::kU64, &r.u64_keys()};
    case R::kI64Keys:
      return {KeyType::kI64, &r.i64_keys()};
    case R::kF64Keys:
      return {KeyType::kF64, &r.f64_keys()};
    case R::KEYS_NOT_SET:
      break;
  }
  return {KeyType::kU32, nullptr};
}

std::string* MutableKeys(KeyType t, v1::SortResponse* r) {
  switch (t) {
    case KeyType::kU32:
      return r->mutable_u32_keys();
    case KeyType::kI32:
      return r->mutable_i32_keys();
    case KeyType::kF32:
      return r->mutable_f32_keys();
    case KeyType::kU64:
      return r->mutable_u64_keys();
    case KeyType::kI64:
      return r->mutable_i64_keys();
    case KeyType::kF64:
      return r->mutable_f64_keys();
  }
  return nullptr;
}

std::byte* SizedBuffer(std::string* s, size_t bytes) {
  s->resize(bytes);
  return reinterpret_cast<std::byte*>(s->data());
}

const std::byte* Bytes(const std::string& s) {
  return reinterpret_cast<const std::byte*>(s.data());
}

// gRPC enforces the same limit on the wire (the server sets its maximum
// receive size to it); this check covers requests that reach the handler by
// other routes, and gives the same answer.
absl::Status CheckLimit(const google::protobuf::Message& request,
                        const RequestLimits& limits) {
  const size_t bytes = request.ByteSizeLong();
  if (bytes <= limits.max_request_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("request is ", bytes, " bytes; this server accepts at most ",
                   limits.max_request_bytes, " bytes (--max_request_bytes)"));
}

}  // namespace

size_t SortRequestUnits(const v1::SortRequest& request) {
  const KeyField keys = FindKeys(request);
  return keys.data == nullptr ? 0 : keys.data->size() / KeySize(keys.type);
}

size_t TransposeRequestUnits(const v1::TransposeRequest& request) {
  return request.matrices().size() / sizeof(uint32_t);
}

KeyType RequestKeyType(const v1::SortRequest& request) {
  return FindKeys(request).type;
}

absl::StatusOr<SortJob> ParseSort(const v1::SortRequest& request,
                                  const RequestLimits& limits) {
  if (absl::Status s = CheckLimit(request, limits); !s.ok()) return s;
  const KeyField keys = FindKeys(request);
  if (keys.data == nullptr) {
    return absl::InvalidArgumentError(
        "no keys set: set exactly one of u32_keys, i32_keys, f32_keys, "
        "u64_keys, i64_keys, f64_keys (an empty one sorts an empty array)");
  }
  const size_t key_size = KeySize(keys.type);
  const char* key_field = KeyTypeName(keys.type);
  if (keys.data->size() % key_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        key_field, "_keys holds ", keys.data->size(),
        " bytes, which is not a multiple of the ", key_size, "-byte key size"));
  }
  if (request.order() != v1::ORDER_ASCENDING &&
      request.order() != v1::ORDER_DESCENDING) {
    return absl::InvalidArgumentError(
        absl::StrCat("order: unknown value ", static_cast<int>(request.order()),
                     "; expected ORDER_ASCENDING (0) or ORDER_DESCENDING (1)"));
  }

  SortJob job;
  job.key_type = keys.type;
  job.order = request.order() == v1::ORDER_DESCENDING ? Order::kDescending
                                                      : Order::kAscending;
  job.count = keys.data->size() / key_size;
  job.keys = Bytes(*keys.data);

  const std::string* values = nullptr;
  if (request.values_case() == v1::SortRequest::kU32Values) {
    job.value_type = ValueType::kU32;
    values = &request.u32_values();
  } else if (request.values_case() == v1::SortRequest::kU64Values) {
    job.value_type = ValueType::kU64;
    values = &request.u64_values();
  }
  if (values != nullptr) {
    const size_t value_size = ValueSize(job.value_type);
    if (values->size() != job.count * value_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          ValueTypeName(job.value_type), "_values holds ", values->size(),
          " bytes (", values->size() / value_size, " values",
          values->size() % value_size ? " and a partial one" : "",
          "); expected one ", value_size, "-byte value per key: ", job.count,
          " values, ", job.count * value_size, " bytes"));
    }
    job.values = Bytes(*values);
  }

  if (job.count > std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request holds ", job.count, " keys; at most 2^32-1 are supported"));
  }
  return job;
}

void SizeSortOutputs(const v1::SortRequest& request, SortJob& job,
                     v1::SortResponse* response) {
  const size_t key_size = KeySize(job.key_type);
  job.keys_out =
      SizedBuffer(MutableKeys(job.key_type, response), job.count * key_size);
  if (job.value_type == ValueType::kU32) {
    job.values_out = SizedBuffer(response->mutable_u32_values(), job.count * 4);
  } else if (job.value_type == ValueType::kU64) {
    job.values_out = SizedBuffer(response->mutable_u64_values(), job.count * 8);
  }
  if (request.return_permutation()) {
    job.permutation_out =
        SizedBuffer(response->mutable_permutation(), job.count * 4);
  }
}

absl::StatusOr<SortJob> PrepareSort(const v1::SortRequest& request,
                                    const RequestLimits& limits,
                                    v1::SortResponse* response) {
  absl::StatusOr<SortJob> job = ParseSort(request, limits);
  if (job.ok()) SizeSortOutputs(request, *job, response);
  return job;
}

absl::StatusOr<TransposeJob> PrepareTranspose(
    const v1::TransposeRequest& request, const RequestLimits& limits,
    v1::TransposeResponse* response) {
  constexpr size_t kMatrixBytes = 32 * sizeof(uint32_t);
  const size_t bytes = request.matrices().size();
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
  if (absl::Status s = CheckLimit(request, limits); !s.ok()) return s;
  TransposeJob job;
  job.count = bytes / kMatrixBytes;
  job.in = Bytes(request.matrices());
  job.out = SizedBuffer(response->mutable_matrices(), bytes);
  return job;
}

}  // namespace sortd
