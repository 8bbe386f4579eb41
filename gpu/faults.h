// Fault injection for tests: which of the engine's enqueues, allocations,
// runs or builds fail on purpose. Nothing in the environment sets it: sortd
// parses its --inject_faults flag into a FaultSpec (ParseFaultSpec), which
// it announces loudly, and tests set one in OpenClEngine::Options::faults.
//
//   FaultSpec spec;
//   absl::Status s = ParseFaultSpec("enqueue=2,stage=upload,sticky", &spec);
//   options.faults = spec;  // the 2nd upload after warm-up fails, and all
//   after
#ifndef SORTD_GPU_FAULTS_H_
#define SORTD_GPU_FAULTS_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sortd::gpu {

struct FaultSpec {
  // The N-th enqueue after start-up fails with CL_OUT_OF_RESOURCES (0:
  // none) ...
  long enqueue = 0;
  // ... and every enqueue after it.
  bool sticky = false;
  // Only enqueues of this kind count: upload, download, copy, kernel (any
  // launch) or one kernel stage's name; empty: all.
  std::string stage;
  // The N-th run after start-up finds its queue unable to finish with
  // CL_DEVICE_NOT_AVAILABLE, as when a device is lost.
  long device_lost = 0;
  // The N-th device allocation after start-up fails as out of memory.
  long oom = 0;
  // The N-th device allocation after start-up throws std::bad_alloc, as
  // host memory running out during a run would (same count as `oom`).
  long host_oom = 0;
  // Creating the engine fails as a program build failure.
  bool build = false;
  // Only the N-th device of sortd's --device list (from 0, each sub-device
  // counted, whether or not it comes up) has the faults above; -1: every
  // device. Applied by CreateEngines (server/engines.cc): an engine given
  // a FaultSpec ignores it.
  int device = -1;

  bool any() const {
    return enqueue > 0 || device_lost > 0 || oom > 0 || host_oom > 0 || build;
  }
};

// Parses sortd's --inject_faults spec: a comma-separated list of enqueue=N,
// sticky, stage=NAME, device_lost=N, oom=N, host_oom=N, build=1, device=N
// (e.g. "enqueue=2,stage=upload,sticky,device=1"). Empty: no faults.
// INVALID_ARGUMENT names the bad item; `spec` is replaced only on success.
absl::Status ParseFaultSpec(absl::string_view text, FaultSpec* spec);

// Counts the engine's operations against a FaultSpec. Nothing fails until
// Arm() (the engine arms it once its warm-up is over). Thread-safe.
class FaultInjector {
 public:
  explicit FaultInjector(FaultSpec spec) : spec_(std::move(spec)) {}
  void Arm() { armed_ = true; }
  // Before an enqueue of kind `what` (upload, download, copy, or a kernel
  // stage's name with `kernel`): the injected failure, or OK.
  absl::Status OnEnqueue(absl::string_view what, bool kernel = false);
  // Before a device allocation of `what` (throws std::bad_alloc for
  // host_oom).
  absl::Status OnAllocate(absl::string_view what);
  // After a run's queue finished: whether it is to look lost.
  bool DeviceLostAtFinish();
  bool fail_build() const { return spec_.build; }

 private:
  const FaultSpec spec_;
  std::atomic<bool> armed_{false};
  std::atomic<long> enqueues_{0}, allocations_{0}, runs_{0};
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_FAULTS_H_
