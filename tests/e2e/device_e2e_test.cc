// End to end on the OpenCL engine (PoCL's CPU device in CI): every request
// kind, labels, calibration, injected faults, lost and re-created devices,
// kernels that do not build or do not sort, arrays beyond device memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/transpose.h"
#include "tests/e2e_util.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCommand;
using testing::ServerProcess;

// The same service on the OpenCL engine (PoCL's CPU device in CI).
TEST(E2EOpenCl, ServesEveryRequestKindOnTheOpenClDevice) {
  ServerProcess server(OpenClArgs({}));
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(
      server.WaitForLine("sortd: OpenCL device", std::chrono::seconds(30)))
      << server.Output();
  auto client = Connect(server);
  EXPECT_TRUE(client->CheckHealth().ok());
  for (bool desc : {false, true}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{777}, size_t{70'001}}) {
      // An empty request needs no device: the router keeps it on the CPU.
      const v1::ExecutionPath path =
          n == 0 ? v1::EXECUTION_PATH_CPU : v1::EXECUTION_PATH_OPENCL_CPU;
      ExpectSorted<uint32_t>(*client, n, desc, path);
      ExpectSorted<int32_t>(*client, n, desc, path);
      ExpectSorted<float>(*client, n, desc, path);
      ExpectSorted<uint64_t>(*client, n, desc, path);
      ExpectSorted<int64_t>(*client, n, desc, path);
      ExpectSorted<double>(*client, n, desc, path);
    }
  }
  auto keys_only = client->Sort<int32_t>(std::vector<int32_t>{5, -1, 3});
  ASSERT_TRUE(keys_only.ok()) << keys_only.status();
  EXPECT_EQ(keys_only->keys, (std::vector<int32_t>{-1, 3, 5}));
  EXPECT_EQ(keys_only->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);

  std::vector<uint32_t> rows(32 * 1000);
  std::mt19937 rng(5);
  for (uint32_t& r : rows) r = rng();
  auto t = client->Transpose(rows);
  ASSERT_TRUE(t.ok()) << t.status();
  for (size_t m = 0; m < 1000; ++m)
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        ASSERT_EQ((rows[m * 32 + i] >> j) & 1, ((*t)[m * 32 + j] >> i) & 1);

  auto r = RunCommand(Sortctl(server,
                              "sort --type=f64 --desc --values=u32 "
                              "--permutation --random=200000 --verify --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"path\":\"opencl-cpu\""));
  EXPECT_THAT(r.out, HasSubstr("\"verified\":true"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Work served by the OpenCL CPU device is labelled opencl-cpu, never gpu:
// in served_by, in the metrics and in the log.
TEST(E2EOpenCl, OpenClCpuWorkIsLabelledOpenClCpu) {
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--log_requests"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("(path opencl-cpu)", std::chrono::seconds(30)))
      << server.Output();
  auto client = Connect(server);
  auto sorted = client->Sort<uint32_t>(std::vector<uint32_t>{3, 1, 2});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(sorted->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_THAT(sorted->served_by.device(), Not(HasSubstr("oneTBB")));
  std::vector<uint32_t> rows(32 * 3, 0x80000001u);
  auto t = client->Transpose(rows);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("sortd_requests_total{code=\"OK\",method="
                              "\"Sort\",path=\"opencl-cpu\"} 1"));
  EXPECT_THAT(body, HasSubstr("sortd_keys_sorted_total{dtype=\"u32\",path="
                              "\"opencl-cpu\"} 3"));
  EXPECT_THAT(body, HasSubstr("sortd_matrices_transposed_total{path="
                              "\"opencl-cpu\"} 3"));
  EXPECT_THAT(body, Not(HasSubstr("path=\"gpu\"")));
  EXPECT_TRUE(
      server.WaitForLine(" path=opencl-cpu route=", std::chrono::seconds(30)))
      << server.Output();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// --device=auto on a machine without a GPU serves on the OpenCL CPU device,
// saying loudly that it serves without a GPU, and labels its work so.
TEST(E2EOpenCl, AutoWithoutAGpuSaysSoAndLabelsItsWork) {
  std::vector<std::string> args = OpenClArgs({});
  args[0] = "--device=auto";
  ServerProcess server(args);
  ASSERT_TRUE(server.Start()) << server.Output();
  ASSERT_TRUE(server.WaitForLine("sortd: engines:", std::chrono::seconds(30)))
      << server.Output();
  if (server.Output().find("(path gpu)") != std::string::npos) {
    GTEST_SKIP() << "this machine has a GPU";
  }
  EXPECT_THAT(server.Output(),
              HasSubstr("SERVING WITHOUT A GPU, on the OpenCL CPU device"));
  auto client = Connect(server);
  ExpectSorted<uint32_t>(*client, 1000, false, v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// An engine failure on a request is answered by the CPU path: correct, and
// saying so; the next request is back on the device.
// Faults are injected through --inject_faults only, which sortd announces
// on stderr and in sortd_fault_injection_enabled.
TEST(E2EOpenCl, InjectedEngineFaultFallsBackToTheCpuPath) {
  ServerProcess server(OpenClArgs(
      {"--metrics_listen=127.0.0.1:0", "--inject_faults=enqueue=2"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  std::string warning;
  EXPECT_TRUE(server.WaitForLine("FAULT INJECTION ENABLED",
                                 std::chrono::seconds(30), &warning))
      << server.Output();
  EXPECT_THAT(warning, HasSubstr("never use in production"));
  auto client = Connect(server);
  const std::vector<int64_t> keys =
      testing::Generate<int64_t>(testing::Shape::kRandom, 5000, 9);
  auto failed_over = client->Sort<int64_t>(keys);
  ASSERT_TRUE(failed_over.ok()) << failed_over.status();
  std::vector<int64_t> want = keys;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(failed_over->keys, want);
  EXPECT_EQ(failed_over->served_by.path(), v1::EXECUTION_PATH_CPU);
  EXPECT_EQ(failed_over->served_by.route(), "failover");
  EXPECT_TRUE(server.WaitForLine("injected fault at enqueue 2",
                                 std::chrono::seconds(30)))
      << server.Output();
  ExpectSorted<int64_t>(*client, 5000, true, v1::EXECUTION_PATH_OPENCL_CPU);
  ExpectSorted<int64_t>(*client, 5000, false, v1::EXECUTION_PATH_OPENCL_CPU);
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_EQ(MetricValue(body, "sortd_fault_injection_enabled"), 1) << body;
  EXPECT_THAT(
      body,
      HasSubstr("sortd_cpu_fallbacks_total{reason=\"RESOURCE_EXHAUSTED\"} 1"));
  EXPECT_THAT(body,
              HasSubstr("sortd_kernel_stage_duration_seconds_count{device="));
  EXPECT_THAT(body, HasSubstr("stage=\"scatter\""));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// The sum and the number of the series of `family` (name{labels} value
// lines) in a Prometheus exposition.
std::pair<double, int> SumSeries(const std::string& exposition,
                                 const std::string& family) {
  const std::string needle = "\n" + family + "{";
  double sum = 0;
  int series = 0;
  for (size_t at = exposition.find(needle); at != std::string::npos;
       at = exposition.find(needle, at + 1)) {
    const size_t value = exposition.find("} ", at);
    if (value == std::string::npos) break;
    sum += std::strtod(exposition.c_str() + value + 2, nullptr);
    ++series;
  }
  return {sum, series};
}

// Every byte a sort moves between host and device is counted, once, under
// the path it took (staged through the engine's buffers, or direct): the
// operator's view of whether page-locked memory ran short.
TEST(E2EOpenCl, TransferBytesAreCountedByPath) {
  ServerProcess server(OpenClArgs({"--metrics_listen=127.0.0.1:0"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const std::string before = HttpGet(server.metrics_address(), "/metrics");
  constexpr size_t kKeys = size_t{1} << 20;  // from the host buffer pool
  ExpectSorted<uint32_t>(*client, kKeys, false, v1::EXECUTION_PATH_OPENCL_CPU);
  ExpectSorted<uint32_t>(*client, 100, false, v1::EXECUTION_PATH_OPENCL_CPU);
  const std::string after = HttpGet(server.metrics_address(), "/metrics");
  const auto [was, was_series] =
      SumSeries(before, "sortd_device_transfer_bytes_total");
  const auto [now, series] =
      SumSeries(after, "sortd_device_transfer_bytes_total");
  EXPECT_EQ(series, 2) << after;  // staged and direct, for the one device
  EXPECT_THAT(after, HasSubstr("path=\"staged\"")) << after;
  EXPECT_THAT(after, HasSubstr("path=\"direct\"")) << after;
  // Each array up and down at least once.
  EXPECT_GE(now - was, 2.0 * (kKeys + 100) * sizeof(uint32_t)) << after;
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Two engines on the one OpenCL CPU device (as --device=gpu opens every
// GPU), each failing every run: each request's batch fails on one, goes to
// the other (once, not back), fails there and is answered by the CPU path;
// each hand-over counts against the device that failed it.
TEST(E2EOpenCl, FailedBatchTriesTheOtherDeviceBeforeTheCpuPath) {
  ServerProcess server(OpenClArgs({"--device=opencl-cpu,opencl-cpu",
                                   "--metrics_listen=127.0.0.1:0",
                                   "--inject_faults=enqueue=1,sticky"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const std::string before = HttpGet(server.metrics_address(), "/metrics");
  // Both devices' series exist, at 0, before any failure.
  EXPECT_EQ(SumSeries(before, "sortd_device_failovers_total"),
            std::make_pair(0.0, 2))
      << before;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int64_t> keys =
        testing::Generate<int64_t>(testing::Shape::kRandom, 4000 + i, i);
    auto r = client->Sort<int64_t>(keys);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int64_t> want = keys;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(r->keys, want);
    EXPECT_EQ(r->served_by.path(), v1::EXECUTION_PATH_CPU);
    EXPECT_EQ(r->served_by.route(), "failover");
  }
  EXPECT_TRUE(server.WaitForLine("another device answers them",
                                 std::chrono::seconds(30)))
      << server.Output();
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_EQ(SumSeries(body, "sortd_device_failovers_total"),
            std::make_pair(3.0, 2))
      << body;
  EXPECT_EQ(SumSeries(body, "sortd_cpu_fallbacks_total"),
            std::make_pair(3.0, 1))
      << body;
  EXPECT_THAT(
      body,
      HasSubstr("sortd_cpu_fallbacks_total{reason=\"RESOURCE_EXHAUSTED\"} 3"));
  // Failed runs that do not lose the device leave both up.
  EXPECT_EQ(SumSeries(body, "sortd_device_up"), std::make_pair(2.0, 2)) << body;
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Two engines, the first failing every run (--inject_faults=...,device=0):
// each request it takes is handed to the second, which answers them all;
// none reaches the CPU path.
TEST(E2EOpenCl, OneFailingDeviceHandsItsWorkToTheOther) {
  ServerProcess server(OpenClArgs(
      {"--device=opencl-cpu,opencl-cpu", "--metrics_listen=127.0.0.1:0",
       "--max_batch_requests=1", "--inject_faults=enqueue=1,sticky,device=0"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  std::set<std::string> devices;
  constexpr int kCalls = 8;
  for (int i = 0; i < kCalls; ++i) {
    const std::vector<uint32_t> keys =
        testing::Generate<uint32_t>(testing::Shape::kRandom, 3000 + i, i);
    auto r = client->Sort<uint32_t>(keys);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<uint32_t> want = keys;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(r->keys, want) << i;
    EXPECT_NE(r->served_by.path(), v1::EXECUTION_PATH_CPU) << i;
    EXPECT_NE(r->served_by.route(), "failover") << i;
    devices.insert(r->served_by.device());
  }
  // The second device answers everything, the first nothing.
  EXPECT_EQ(devices.size(), 1u);
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  const auto [failovers, series] =
      SumSeries(body, "sortd_device_failovers_total");
  EXPECT_EQ(series, 2) << body;
  EXPECT_GE(failovers, 1) << body;  // idle devices are tried first to last
  EXPECT_LE(failovers, kCalls) << body;
  EXPECT_THAT(body, Not(HasSubstr("sortd_cpu_fallbacks_total{")));
  EXPECT_EQ(SumSeries(body, "sortd_device_up"), std::make_pair(2.0, 2)) << body;
  EXPECT_THAT(server.Output(), HasSubstr("--inject_faults: on device 0"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  // Faults aimed at a device --device does not name stop startup.
  ServerProcess beyond(OpenClArgs({"--device=opencl-cpu,opencl-cpu",
                                   "--inject_faults=enqueue=1,device=2"}));
  EXPECT_FALSE(beyond.Start());
  EXPECT_THAT(beyond.Output(), HasSubstr("device=2, but --device="));
  EXPECT_EQ(beyond.Terminate(), 1) << beyond.Output();
}

// The environment variables that once injected faults do nothing: every
// sort runs on the device, none fails over, and the gauge says 0.
TEST(E2EOpenCl, FaultEnvironmentVariablesInjectNothing) {
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--max_batch_requests=1"}),
      {"SORTD_FAULT_ENQUEUE=1", "SORTD_FAULT_ENQUEUE_STICKY=1",
       "SORTD_FAULT_DEVICE_LOST=1", "SORTD_FAULT_OOM=1",
       "SORTD_FAULT_BUILD=1"});
  ASSERT_TRUE(server.Start()) << server.Output();
  // Printed after anything engine creation says (on the same stream).
  ASSERT_TRUE(server.WaitForLine("sortd: engines:", std::chrono::seconds(30)))
      << server.Output();
  EXPECT_THAT(server.Output(), Not(HasSubstr("FAULT INJECTION")));
  auto client = Connect(server);
  for (int i = 0; i < 4; ++i) {
    const std::vector<uint32_t> keys =
        testing::Generate<uint32_t>(testing::Shape::kRandom, 2000 + i, i);
    auto r = client->Sort<uint32_t>(keys);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<uint32_t> want = keys;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(r->keys, want);
    EXPECT_EQ(r->served_by.route(), "batch") << i;
    EXPECT_THAT(r->served_by.device(), Not(HasSubstr("oneTBB"))) << i;
  }
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_EQ(MetricValue(body, "sortd_fault_injection_enabled"), 0) << body;
  EXPECT_THAT(body, Not(HasSubstr("sortd_cpu_fallbacks_total{")));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A lost device: the request it failed and every later one are answered by
// the CPU path while it is down, and health stays SERVING.
TEST(E2EOpenCl, LostDeviceSendsEverythingToTheCpuPath) {
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--reinit_backoff=1h",
                  "--inject_faults=device_lost=2"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  ExpectSorted<float>(*client, 3000, false, v1::EXECUTION_PATH_OPENCL_CPU);
  ExpectSorted<float>(*client, 3000, true, v1::EXECUTION_PATH_CPU);
  ExpectSorted<uint64_t>(*client, 3000, false, v1::EXECUTION_PATH_CPU);
  EXPECT_TRUE(client->CheckHealth().ok());
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body,
              HasSubstr("sortd_cpu_fallbacks_total{reason=\"UNAVAILABLE\"} 1"));
  EXPECT_THAT(
      body,
      HasSubstr("sortd_cpu_fallbacks_total{reason=\"no_healthy_device\"} 1"));
  EXPECT_THAT(body, HasSubstr("sortd_device_up{device="));
  EXPECT_THAT(body, HasSubstr("} 0\n"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Without pinned thresholds the router is calibrated at startup by timing
// both paths; the thresholds are logged and exported, and requests follow
// them (PoCL on two cores: the CPU path wins at every measured size).
TEST(E2EOpenCl, CalibratesTheRouterAtStartup) {
  ServerProcess server({"--device=opencl-cpu",
                        "--kernel_cache_dir=", "--warm_up_keys=0",
                        "--calibrate_max_keys=65536", "--max_batch_keys=65536",
                        "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(
      server.WaitForLine("sortd: calibrate sort", std::chrono::seconds(30)))
      << server.Output();
  EXPECT_TRUE(server.WaitForLine("sortd: router sort: CPU path up to",
                                 std::chrono::seconds(30)))
      << server.Output();
  EXPECT_TRUE(
      server.WaitForLine("sortd: router transpose:", std::chrono::seconds(30)))
      << server.Output();
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(
      body,
      HasSubstr("sortd_router_threshold_keys{boundary=\"sort_cpu_max\"}"));
  EXPECT_THAT(
      body,
      HasSubstr(
          "sortd_router_threshold_keys{boundary=\"transpose_solo_min\"}"));
  // No batch of page-locked requests was timed (batches of 64K keys at
  // most, so 64K-key requests alone): in place wherever the engine can.
  EXPECT_THAT(body, HasSubstr("sortd_router_threshold_keys{boundary="
                              "\"sort_in_place_min\"} 0\n"));
  auto r = RunCommand(Sortctl(server, "sort --random=100 --verify"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("on cpu"));
  EXPECT_THAT(r.out, HasSubstr("route cpu"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// After the back-off the lost device is re-created and serves again.
TEST(E2EOpenCl, LostDeviceIsRecreatedAndServesAgain) {
  ServerProcess server(
      OpenClArgs({"--reinit_backoff=0", "--inject_faults=device_lost=2"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  ExpectSorted<uint32_t>(*client, 3000, false, v1::EXECUTION_PATH_OPENCL_CPU);
  ExpectSorted<uint32_t>(*client, 3000, false, v1::EXECUTION_PATH_CPU);
  ASSERT_TRUE(server.WaitForLine("re-created; it serves again",
                                 std::chrono::seconds(120)))
      << server.Output();
  ExpectSorted<uint32_t>(*client, 3000, true, v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_TRUE(client->CheckHealth().ok());
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A program that does not build: an explicit device stops startup with the
// reason; --device=auto passes over it and serves on the CPU path.
TEST(E2EStartup, ProgramBuildFailure) {
  ServerProcess explicit_device({"--device=opencl-cpu", "--kernel_cache_dir=",
                                 "--inject_faults=build=1"});
  EXPECT_FALSE(explicit_device.Start());
  EXPECT_THAT(explicit_device.Output(),
              HasSubstr("injected program build failure"));
  EXPECT_EQ(explicit_device.Terminate(), 1) << explicit_device.Output();
  ServerProcess automatic(
      {"--device=auto", "--kernel_cache_dir=", "--inject_faults=build=1"});
  ASSERT_TRUE(automatic.Start()) << automatic.Output();
  auto client = Connect(automatic);
  ExpectSorted<int32_t>(*client, 5000, false, v1::EXECUTION_PATH_CPU);
  EXPECT_TRUE(client->CheckHealth().ok());
  EXPECT_EQ(automatic.Terminate(), 0) << automatic.Output();
}

// No switch makes sortd serve wrong answers. Kernels built so that they do
// not sort (SORTD_KERNEL_EXTRA_OPTIONS) fail the warm-up's verification
// against the reference, whatever the options: an explicit device refuses
// to start, naming the warm-up; --device=auto passes over the device and
// the CPU path answers, correctly. The cases: -DITEMS=8 (tiles of another
// length than the host's: keys left unsorted), and -DHAS_INDEX=0 (keys
// sorted, permutations and payloads wrong, which a check of sortedness
// alone would let through).
TEST(E2EStartup, KernelsThatDoNotSortNeverServe) {
  for (const char* options : {"-DITEMS=8", "-DHAS_INDEX=0"}) {
    SCOPED_TRACE(options);
    const std::vector<std::string> env = {
        absl::StrCat("SORTD_KERNEL_EXTRA_OPTIONS=", options)};
    ServerProcess explicit_device(OpenClArgs({}), env);
    EXPECT_FALSE(explicit_device.Start()) << explicit_device.Output();
    EXPECT_THAT(explicit_device.Output(), HasSubstr("warm-up"));
    EXPECT_THAT(explicit_device.Output(),
                HasSubstr("differs from the reference"));
    EXPECT_EQ(explicit_device.Terminate(), 1) << explicit_device.Output();

    std::vector<std::string> args = OpenClArgs({});
    args[0] = "--device=auto";
    ServerProcess automatic(args, env);
    ASSERT_TRUE(automatic.Start()) << automatic.Output();
    EXPECT_TRUE(automatic.WaitForLine("passing over", std::chrono::seconds(30)))
        << automatic.Output();
    EXPECT_TRUE(automatic.WaitForLine("SERVING WITHOUT A GPU",
                                      std::chrono::seconds(30)))
        << automatic.Output();
    auto client = Connect(automatic);
    for (size_t n : {size_t{1}, size_t{100}, size_t{777}, size_t{5000}}) {
      ExpectSorted<uint32_t>(*client, n, false, v1::EXECUTION_PATH_CPU);
      ExpectSorted<int64_t>(*client, n, true, v1::EXECUTION_PATH_CPU);
      ExpectSorted<float>(*client, n, false, v1::EXECUTION_PATH_CPU);
    }
    EXPECT_EQ(automatic.Terminate(), 0) << automatic.Output();
  }
}

// An array 4x the (flag-limited) device memory is sorted on the device in
// runs and merged on the CPU, stably, for every kind of request.
TEST(E2EOutOfCore, SortsAnArrayFourTimesTheDeviceBudget) {
  constexpr size_t kBudget = size_t{16} << 20;
  ServerProcess server(OpenClArgs(
      {absl::StrCat("--device_memory_bytes=", kBudget), "--metrics_listen="}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const size_t n = 4 * kBudget / sizeof(uint32_t);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, n, 44);
  auto sorted = client->Sort<uint32_t>(keys);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  std::vector<uint32_t> want = keys;
  std::sort(want.begin(), want.end());
  EXPECT_TRUE(sorted->keys == want);
  EXPECT_EQ(sorted->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_GE(sorted->served_by.device_runs(), 4);

  // Payload, permutation, descending floats with NaNs and ties.
  const size_t m = 4 * kBudget / (sizeof(double) + sizeof(uint64_t) + 4);
  const std::vector<double> fkeys =
      testing::Generate<double>(testing::Shape::kSpecial, m, 45);
  std::vector<uint64_t> values(m);
  std::iota(values.begin(), values.end(), uint64_t{1} << 40);
  auto pairs = client->SortPairs<double, uint64_t>(
      fkeys, values, {.descending = true, .return_permutation = true});
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(fkeys, true);
  ASSERT_EQ(pairs->permutation, perm);
  for (size_t i = 0; i < m; ++i) {
    ASSERT_EQ(0, std::memcmp(&pairs->keys[i], &fkeys[perm[i]], 8)) << i;
    ASSERT_EQ(pairs->values[i], values[perm[i]]) << i;
  }
  EXPECT_EQ(pairs->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_GE(pairs->served_by.device_runs(), 4);

  // Streamed in and beyond the device: sortctl verifies it.
  auto r = RunCommand(Sortctl(server,
                              "sort --type=i32 --desc --random=3000000 "
                              "--stream --verify --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"path\":\"opencl-cpu\""));
  EXPECT_THAT(r.out, HasSubstr("\"verified\":true"));
  EXPECT_THAT(r.out, Not(HasSubstr("\"device_runs\":1,")));

  // Transposes beyond the budget run in pieces.
  std::vector<uint32_t> rows(size_t{32} * (kBudget / 128));
  std::mt19937 rng(3);
  for (uint32_t& row : rows) row = rng();
  auto t = client->Transpose(rows);
  ASSERT_TRUE(t.ok()) << t.status();
  for (size_t x = 0; x < rows.size() / 32; x += 997) {
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        ASSERT_EQ((rows[x * 32 + i] >> j) & 1, ((*t)[x * 32 + j] >> i) & 1);
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST(E2EOutOfCore, ABudgetTooSmallForTheDeviceStopsStartup) {
  ServerProcess server(OpenClArgs({"--device_memory_bytes=65536"}));
  EXPECT_FALSE(server.Start());
  EXPECT_THAT(server.Output(), HasSubstr("--device_memory_bytes"));
}

}  // namespace
}  // namespace sortd
