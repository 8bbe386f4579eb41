// Test support: one of the CPU sort's ways of running (cpu/sort_internal.h)
// as a Sorter, so that tests/sort_check.h checks it against the reference
// like any engine.
#ifndef SORTD_TESTS_CPU_PATHS_H_
#define SORTD_TESTS_CPU_PATHS_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "core/sorter.h"
#include "cpu/scratch_pool.h"
#include "cpu/sort_internal.h"

namespace sortd::testing {

class CpuPathSorter : public Sorter {
 public:
  using Path = std::function<void(const SortJob&, CpuScratchPool&)>;
  explicit CpuPathSorter(Path path) : path_(std::move(path)) {}
  ExecutionPath path() const override { return ExecutionPath::kCpu; }
  std::string device_name() const override { return "cpu path"; }
  absl::Status Sort(const SortJob& job) override {
    path_(job, pool_);
    return absl::OkStatus();
  }
  absl::Status Transpose(const TransposeJob&) override {
    return absl::UnimplementedError("sorts only");
  }
  const CpuScratchPool& pool() const { return pool_; }

 private:
  Path path_;
  CpuScratchPool pool_{size_t{1} << 16, size_t{1} << 26};
};

// Every key type: `f.template operator()<K>()` for each.
template <typename F>
void ForEachKeyType(F&& f) {
  f.template operator()<uint32_t>();
  f.template operator()<int32_t>();
  f.template operator()<float>();
  f.template operator()<uint64_t>();
  f.template operator()<int64_t>();
  f.template operator()<double>();
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_CPU_PATHS_H_
