#include "gpu/passes/encode.h"

#include <algorithm>

#include "gpu/engine_run.h"
#include "gpu/kernels/sort_constants.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {
namespace {

// The digit-counting (and encoding) kernel runs at most this many
// work-groups per compute unit, each striding over tiles, so that few groups
// add their counts to the same global digit counters.
constexpr size_t kCountGroupsPerCu = 8;

}  // namespace

cl_uint KindCode(KeyType type) {
  switch (type) {
    case KeyType::kI32:
    case KeyType::kI64:
      return SORTD_KIND_SIGNED;
    case KeyType::kF32:
    case KeyType::kF64:
      return SORTD_KIND_FLOAT;
    default:
      return SORTD_KIND_UNSIGNED;
  }
}

absl::Status EncodeKeys(Run& run, const RadixSortPolicy& policy,
                        EncodeKernels& k, const SortJob& job, SortArrays& a,
                        cl::Buffer& totals, bool count_digits, bool encode) {
  const int bits = KeyBits(job);
  k.encode.Bind({
      .raw = a.raw,
      .keys = a.keys[0],
      .index = a.index[0],
      .n = static_cast<cl_uint>(job.count),
      .kind = KindCode(job.key_type),
      .descending = cl_uint{job.order == Order::kDescending},
      .digit_totals = totals,
      .count_digits = cl_uint{count_digits},
      .write_keys = cl_uint{encode},
  });
  const size_t groups =
      std::min<size_t>(DivUp(job.count, policy.Tile(bits, WithIndex(job))),
                       std::max<size_t>(1, size_t{run.info().compute_units} *
                                               kCountGroupsPerCu));
  return run.Launch(k.encode,
                    {.groups = groups, .group_size = policy.WorkGroupSize()},
                    count_digits ? "histogram" : "transform");
}

absl::Status DecodeKeys(Run& run, const RadixSortPolicy& policy,
                        EncodeKernels& k, const SortJob& job, SortArrays& a,
                        cl_uint value_words) {
  const size_t n = job.count;
  k.decode.Bind({
      .keys = a.keys[a.cur],
      .raw_out = a.raw,
      .index = a.index[a.cur],
      .values_in = a.values,
      .values_out = a.values_out,
      .n = static_cast<cl_uint>(n),
      .kind = KindCode(job.key_type),
      .descending = cl_uint{job.order == Order::kDescending},
      .value_words = value_words,
      .decode_keys = cl_uint{!a.keys_raw},
  });
  const size_t wg = policy.work_group;
  return run.Launch(k.decode, LaunchGrid::Covering(n, wg), "transform");
}

}  // namespace sortd::gpu
