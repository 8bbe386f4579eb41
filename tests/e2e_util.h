// Helpers of the end-to-end suites (*_e2e_test.cc, e2e_test.cc): connect
// to a started sortd, sort and check against the reference
// (tests/client_checks.h), run sortctl
// against it, wait for a metric, start an OpenCL-device server with the
// router pinned. Targets using Sortctl define SORTCTL_BINARY.
#ifndef SORTD_TESTS_E2E_UTIL_H_
#define SORTD_TESTS_E2E_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/client_checks.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {

inline std::unique_ptr<Client> Connect(const testing::ServerProcess& server,
                                       const ClientOptions& options = {}) {
  auto client = Client::Create(server.address(), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

// An OpenCL-device server with the router pinned (so no calibration runs):
// every non-empty request batched on the device, nothing spilled; the
// startup check runs only its small sizes.
inline std::vector<std::string> OpenClArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--device=opencl-cpu",
                                   "--kernel_cache_dir=",
                                   "--warm_up_keys=0",
                                   "--cpu_max_keys=0",
                                   "--solo_min_keys=1000000",
                                   "--transpose_cpu_max_matrices=0",
                                   "--transpose_solo_min_matrices=1000000",
                                   "--spill_to_cpu=false"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Where the mixed-load server sends an n-key sort: the CPU path, or the
// OpenCL CPU device, which is labelled as such (never as a GPU).
inline v1::ExecutionPath ExpectedPath(size_t n) {
  return n <= 64 ? v1::EXECUTION_PATH_CPU : v1::EXECUTION_PATH_OPENCL_CPU;
}

inline std::string Sortctl(const testing::ServerProcess& server,
                           const std::string& args) {
  return absl::StrCat(SORTCTL_BINARY, " --target=", server.address(), " ",
                      args);
}

// Sends `count` u32 sorts of distinct sizes at once, one thread each, and
// checks every answer; returns them.
inline std::vector<absl::StatusOr<SortResult<uint32_t>>> ConcurrentSorts(
    Client& client, int count, size_t keys = 300) {
  std::vector<std::vector<uint32_t>> inputs(count);
  std::vector<absl::StatusOr<SortResult<uint32_t>>> results(
      count, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    inputs[i] =
        testing::Generate<uint32_t>(testing::Shape::kRandom, keys + 17 * i, i);
    threads.emplace_back([&, i] {
      results[i] = client.Sort<uint32_t>(inputs[i], {.descending = true});
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < count; ++i) {
    if (!results[i].ok()) continue;
    std::vector<uint32_t> want = inputs[i];
    std::sort(want.rbegin(), want.rend());
    EXPECT_EQ(results[i]->keys, want) << i;
  }
  return results;
}

// Waits until a scrape of the metrics contains `text` (polls; each scrape
// is an event, not a guess at how long something takes).
inline bool WaitForMetric(const testing::ServerProcess& server,
                          const std::string& text) {
  for (int i = 0; i < 6000; ++i) {
    if (HttpGet(server.metrics_address(), "/metrics").find(text) !=
        std::string::npos) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

}  // namespace sortd

#endif  // SORTD_TESTS_E2E_UTIL_H_
