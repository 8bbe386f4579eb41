#include "core/sorter.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace sortd {

absl::Status CheckSegmentOffsets(size_t count,
                                 absl::Span<const uint32_t> offsets) {
  if (offsets.empty() || offsets.front() != 0 || offsets.back() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment offsets must start at 0 and end at the key count ", count));
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment offsets decrease at entry ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckParts(const SortJob& job) {
  if (job.parts.empty()) return absl::OkStatus();
  const bool values = job.value_type != ValueType::kNone;
  size_t total = 0;
  for (const SortJob* part : job.parts) {
    if (part == nullptr) {
      return absl::InvalidArgumentError("a batch has a missing (null) part");
    }
    if (part->key_type != job.key_type || part->order != job.order ||
        part->value_type != job.value_type ||
        (part->permutation_out != nullptr) !=
            (job.permutation_out != nullptr) ||
        (part->count > 0 &&
         (part->keys == nullptr || part->keys_out == nullptr ||
          (values &&
           (part->values == nullptr || part->values_out == nullptr))))) {
      return absl::InvalidArgumentError(
          "every part of a batch has the batch's key type, order, value "
          "type and outputs");
    }
    total += part->count;
  }
  if (total != job.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", job.count, " keys has parts of ", total));
  }
  return absl::OkStatus();
}

absl::Status Sorter::SortSegments(const SortJob& job,
                                  absl::Span<const uint32_t> offsets) {
  if (absl::Status s = CheckSegmentOffsets(job.count, offsets); !s.ok()) {
    return s;
  }
  if (!job.parts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_name(), " takes no batch made of parts"));
  }
  const size_t ks = KeySize(job.key_type);
  const size_t vs = ValueSize(job.value_type);
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const size_t begin = offsets[s];
    SortJob part = job;
    part.count = offsets[s + 1] - begin;
    part.keys = job.keys + begin * ks;
    part.keys_out = job.keys_out + begin * ks;
    if (job.value_type != ValueType::kNone) {
      part.values = job.values + begin * vs;
      part.values_out = job.values_out + begin * vs;
    }
    if (job.permutation_out != nullptr) {
      part.permutation_out = job.permutation_out + begin * 4;
    }
    if (absl::Status st = Sort(part); !st.ok()) return st;
    if (job.permutation_out != nullptr) {
      for (size_t i = 0; i < part.count; ++i) {
        uint32_t p;
        std::memcpy(&p, part.permutation_out + 4 * i, 4);
        p += static_cast<uint32_t>(begin);
        std::memcpy(part.permutation_out + 4 * i, &p, 4);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sortd
