// libFuzzer target: arbitrary bytes as SortRequest and TransposeRequest,
// through the validation the server runs (server/request.h) and, when a
// request is accepted, the CPU path and the reference check. Any crash,
// sanitizer report, or accepted request answered wrongly is a finding.
// Allocation is bounded by the input: sizes are checked before buffers are.
#include <cstdint>
#include <cstdlib>
#include <cstdio>

#include "client/sortctl_lib.h"
#include "server/cpu_sorter.h"
#include "server/request.h"

namespace {

sortd::CpuSorter& Cpu() {
  static sortd::CpuSorter* cpu = new sortd::CpuSorter({.threads = 1});
  return *cpu;
}

void Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "fuzz_request: %s: %s\n", what, s.ToString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const sortd::RequestLimits limits{.max_request_bytes = 1 << 16};
  sortd::v1::SortRequest sort;
  if (sort.ParseFromArray(data, static_cast<int>(size))) {
    (void)sortd::SortRequestUnits(sort);
    sortd::v1::SortResponse response;
    absl::StatusOr<sortd::SortJob> job =
        sortd::PrepareSort(sort, limits, &response);
    if (job.ok()) {
      if (absl::Status s = Cpu().Sort(*job); !s.ok()) Fail("cpu sort", s);
      if (absl::Status s = sortd::cli::VerifySort(sort, response); !s.ok()) {
        Fail("verify", s);
      }
    } else if (job.status().message().empty()) {
      Fail("a refusal without a message", job.status());
    }
  }
  sortd::v1::TransposeRequest transpose;
  if (transpose.ParseFromArray(data, static_cast<int>(size))) {
    (void)sortd::TransposeRequestUnits(transpose);
    sortd::v1::TransposeResponse response;
    absl::StatusOr<sortd::TransposeJob> job =
        sortd::PrepareTranspose(transpose, limits, &response);
    if (job.ok()) {
      if (absl::Status s = Cpu().Transpose(*job); !s.ok()) {
        Fail("cpu transpose", s);
      }
      if (absl::Status s = sortd::cli::VerifyTranspose(transpose.matrices(),
                                                       response.matrices());
          !s.ok()) {
        Fail("verify transpose", s);
      }
    }
  }
  return 0;
}
