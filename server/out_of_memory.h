// Host memory running out while a request is served: the host buffer pool
// and the heap throw std::bad_alloc (std::length_error where a container
// would outgrow its size type), which must not end the process from a
// runner or gRPC thread. Taking in a request's bytes (unary calls and
// stream messages), placing its arrays (the scheduler's prepare, Echo),
// sorting it (the CPU path, with its scratch, and device runs, with their
// host buffers) and encoding its answer (unary, parts, stream, Echo) run
// through CatchOutOfMemory, and the call is answered RESOURCE_EXHAUSTED
// like any refusal.
#ifndef SORTD_SERVER_OUT_OF_MEMORY_H_
#define SORTD_SERVER_OUT_OF_MEMORY_H_

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sortd {

// RESOURCE_EXHAUSTED: the server had no host memory for `what`.
inline absl::Status OutOfMemory(absl::string_view what) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server has no host memory for ", what, " now; retry later"));
}

// `step()` (an absl::Status or absl::StatusOr), or RESOURCE_EXHAUSTED if it
// threw std::bad_alloc or std::length_error, saying that the server had no
// host memory for `what`.
template <typename Step>
auto CatchOutOfMemory(absl::string_view what, Step&& step)
    -> decltype(std::forward<Step>(step)()) {
  try {
    return std::forward<Step>(step)();
  } catch (const std::bad_alloc&) {
    return OutOfMemory(what);
  } catch (const std::length_error&) {
    return OutOfMemory(what);
  }
}

}  // namespace sortd

#endif  // SORTD_SERVER_OUT_OF_MEMORY_H_
