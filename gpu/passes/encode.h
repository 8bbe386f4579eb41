// Keys into and out of the ordered form the radix passes sort (unsigned
// bits in the requested order): radix_encode, which also counts every
// pass's digits, and radix_decode, which also gathers the payload
// (radix_sort.cl; arguments in gpu/kernels/encode_args.h).
//
//   status = EncodeKeys(run, policy, k, job, arrays, totals, true, true);
//   ... the passes ...
//   status = DecodeKeys(run, policy, k, job, arrays, value_words);
#ifndef SORTD_GPU_PASSES_ENCODE_H_
#define SORTD_GPU_PASSES_ENCODE_H_

#include "absl/status/status.h"
#include "core/sorter.h"
#include "gpu/cl.h"
#include "gpu/kernel_args.h"
#include "gpu/kernels/encode_args.h"
#include "gpu/policy.h"

namespace sortd::gpu {

class Run;
struct SortArrays;

SORTD_KERNEL_ARGS(EncodeArgs, SORTD_ENCODE_ARGS);
SORTD_KERNEL_ARGS(DecodeArgs, SORTD_DECODE_ARGS);

// One build's kernels.
struct EncodeKernels {
  ArgsKernel<EncodeArgs> encode;  // radix_encode
  ArgsKernel<DecodeArgs> decode;  // radix_decode
};

// The kernel code of a key kind (gpu/kernels/sort_constants.h).
cl_uint KindCode(KeyType type);

// Raw keys (a.raw) -> ordered keys and indices in keys[0] and index[0]
// (`encode`), and/or every pass's digit counts over the job's keys into
// `totals` (`count_digits`), in one launch of k.encode.
absl::Status EncodeKeys(Run& run, const RadixSortPolicy& policy,
                        EncodeKernels& k, const SortJob& job, SortArrays& a,
                        cl::Buffer& totals, bool count_digits, bool encode);

// Ordered keys (a.keys[a.cur]) -> raw keys in a.raw, unless a.keys_raw
// says the last pass stored them; with `value_words` (1 or 2) the payload
// a.values gathered by a.index[a.cur] into a.values_out.
absl::Status DecodeKeys(Run& run, const RadixSortPolicy& policy,
                        EncodeKernels& k, const SortJob& job, SortArrays& a,
                        cl_uint value_words);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PASSES_ENCODE_H_
