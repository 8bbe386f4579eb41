#include "gpu/passes/pass_order.h"

#include <algorithm>

#include "gpu/engine_run.h"
#include "gpu/kernels/sort_constants.h"

namespace sortd::gpu {

PassOrder PassOrder::Of(const std::vector<bool>& skip, const RawEnds* raw_ends,
                        const SkipLater* later, const RadixPassPlan& plan) {
  PassOrder o{
      skip.size(), 0, raw_ends, later,
      plan.unordered_first && raw_ends != nullptr && raw_ends->unordered};
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    o.first = std::min(o.first, pass);
    o.last = pass;
  }
  // Until `later` has spoken, the first pass is not taken as the last.
  if (later != nullptr && o.last == o.first) o.last = skip.size();
  return o;
}

absl::Status PassOrder::Enqueued(Run& run, size_t pass,
                                 std::vector<bool>& skip) {
  if (later == nullptr || pass != first) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(run.Flush());
  SORTD_RETURN_IF_ERROR((*later)(skip));
  later = nullptr;
  last = first;
  for (size_t p = first + 1; p < skip.size(); ++p) {
    if (!skip[p]) last = p;
  }
  return absl::OkStatus();
}

cl_uint PassOrder::Shift(size_t pass, const RadixSortPolicy& p,
                         const PickedDigits* picked) {
  return static_cast<cl_uint>(picked != nullptr ? SORTD_PICKED_SLOT + pass
                                                : pass * p.radix_bits);
}

const cl::Buffer& PassOrder::Sampled(const SortArrays& a) const {
  return raw_ends != nullptr ? raw_ends->keys : a.keys[a.cur];
}

cl_uint PassOrder::Mode(size_t pass) const {
  if (raw_ends == nullptr) return 0;
  return raw_ends->kind_order | (pass == first ? SORTD_MODE_FIRST : 0u) |
         (pass == last ? SORTD_MODE_LAST : 0u);
}

const cl::Buffer& PassOrder::KeysIn(size_t pass, const SortArrays& a) const {
  return raw_ends != nullptr && pass == first ? raw_ends->keys : a.keys[a.cur];
}

}  // namespace sortd::gpu
