// StubEngine: a Sorter that does nothing, for tests of the parts that
// only ask an engine what it takes (the device pool, placement).
#ifndef SORTD_TESTS_STUB_ENGINE_H_
#define SORTD_TESTS_STUB_ENGINE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "core/sorter.h"

namespace sortd::testing {

class StubEngine : public Sorter {
 public:
  // `max_keys`: max_sort_keys (0: no limit of its own); `runs`:
  // concurrent_runs.
  explicit StubEngine(size_t max_keys = 0, int runs = 0)
      : max_keys_(max_keys), runs_(runs) {}
  int concurrent_runs() const override { return runs_; }
  ExecutionPath path() const override { return ExecutionPath::kGpu; }
  std::string device_name() const override { return "stub"; }
  absl::Status Sort(const SortJob&) override { return absl::OkStatus(); }
  absl::Status Transpose(const TransposeJob&) override {
    return absl::OkStatus();
  }
  size_t max_sort_keys(const SortJob&) const override { return max_keys_; }

 private:
  size_t max_keys_;
  int runs_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_STUB_ENGINE_H_
