// Host memory running out while a request is served: the host buffer pool
// and the heap throw std::bad_alloc, which must not end the process from a
// runner or gRPC thread. The scheduler's allocation of a request's output
// arrays and the encoding of a finished sort's answer (unary, parts,
// stream) run through CatchOutOfMemory, and the call is answered
// RESOURCE_EXHAUSTED like any refusal.
#ifndef SORTD_SERVER_OUT_OF_MEMORY_H_
#define SORTD_SERVER_OUT_OF_MEMORY_H_

#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sortd {

// `step()` (returning absl::Status), or RESOURCE_EXHAUSTED if it threw
// std::bad_alloc, saying that the server had no host memory for `what`.
template <typename Step>
absl::Status CatchOutOfMemory(absl::string_view what, Step&& step) {
  try {
    return std::forward<Step>(step)();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server has no host memory for ", what, " now"));
  }
}

}  // namespace sortd

#endif  // SORTD_SERVER_OUT_OF_MEMORY_H_
