// End to end, batching on the OpenCL device: concurrent small requests as
// one device run, faults inside a batch, overload and drain, one worker per
// sub-device, mixed load on two workers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <random>
#include <thread>

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
using testing::ServerProcess;

// Concurrent small requests ran as fewer device runs than requests: with
// the batch closing at 8 requests (and no deadline to close it sooner),
// 8 concurrent sorts are one run, as the answers and the metrics say.
TEST(E2EBatching, ConcurrentSmallRequestsRunAsOneDeviceRun) {
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--max_batch_requests=8",
                  "--max_batch_delay=1h"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  for (auto& r : ConcurrentSorts(*client, 8)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
    EXPECT_EQ(r->served_by.batch_requests(), 8);
    EXPECT_EQ(r->served_by.route(), "batch");
  }
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("sortd_batch_requests_count{op=\"sort\"} 1\n"));
  EXPECT_THAT(body, HasSubstr("sortd_batch_requests_sum{op=\"sort\"} 8\n"));
  EXPECT_THAT(
      body,
      HasSubstr(
          "sortd_routed_requests_total{op=\"sort\",route=\"batch\"} 8\n"));
  EXPECT_THAT(body, HasSubstr("kernel=\"segmented_sort\""));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Mid-size sorts (16K keys, four times PoCL's bitonic block) with the batch
// band pinned up to 64K keys: 16 concurrent calls share one device run.
TEST(E2EBatching, MidSizeSortsShareADeviceRun) {
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--solo_min_keys=65536",
                  "--max_batch_requests=16", "--max_batch_delay=1h",
                  "--batch_in_place_min_keys=1000000"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  for (auto& r : ConcurrentSorts(*client, 16, 16384)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->served_by.route(), "batch");
    EXPECT_EQ(r->served_by.batch_requests(), 16);
  }
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("sortd_batch_requests_count{op=\"sort\"} 1\n"));
  EXPECT_THAT(body, HasSubstr("sortd_batch_requests_sum{op=\"sort\"} 16\n"));
  EXPECT_THAT(body, HasSubstr("sortd_router_threshold_keys{boundary="
                              "\"sort_solo_min\"} 65536\n"));
  EXPECT_THAT(body, HasSubstr("sortd_router_threshold_keys{boundary="
                              "\"sort_in_place_min\"} 1000000\n"));
  // Batches by size are no overflow: the router's lateness stays at 1.
  EXPECT_THAT(body, HasSubstr("sortd_router_device_lateness{op=\"sort\"} 1\n"));
  // Every threshold pinned: no calibrated costs, so nothing may spill.
  EXPECT_THAT(body, HasSubstr("sortd_router_threshold_keys{boundary="
                              "\"sort_spill_max\"} 0\n"));
  EXPECT_THAT(server.Output(), HasSubstr("while the devices are backed up, no "
                                         "requests spill"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// An injected device fault in the middle of a batch: every request of the
// batch is still answered, correctly, by the CPU path.
TEST(E2EBatching, FaultInABatchLosesNothing) {
  ServerProcess server(
      OpenClArgs({"--max_batch_requests=8", "--max_batch_delay=1h",
                  "--inject_faults=enqueue=3"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  for (auto& r : ConcurrentSorts(*client, 8)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->served_by.path(), v1::EXECUTION_PATH_CPU);
    EXPECT_EQ(r->served_by.route(), "failover");
  }
  EXPECT_TRUE(server.WaitForLine("injected fault at enqueue 3",
                                 std::chrono::seconds(30)))
      << server.Output();
  // The device is still in service for the next batch.
  for (auto& r : ConcurrentSorts(*client, 8)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A device fault at each stage of a batch's run (upload, a kernel launch,
// download) and an out-of-memory allocation: every request of the batch is
// answered correctly by the CPU path, and the next batch is back on the
// device.
TEST(E2EBatching, FaultsAtEveryStageLoseNothing) {
  struct Fault {
    std::string spec;    // --inject_faults
    std::string logged;  // what sortd's failover line names
  };
  const Fault faults[] = {
      {"stage=upload,enqueue=1", "upload (injected fault"},
      {"stage=kernel,enqueue=2", "kernel (injected fault at enqueue 2"},
      {"stage=download,enqueue=1", "download (injected fault"},
      {"oom=2", "injected: out of device memory"}};
  for (const Fault& fault : faults) {
    SCOPED_TRACE(fault.logged);
    ServerProcess server(
        OpenClArgs({"--max_batch_requests=8", "--max_batch_delay=1h",
                    "--inject_faults=" + fault.spec}));
    ASSERT_TRUE(server.Start()) << server.Output();
    auto client = Connect(server);
    for (auto& r : ConcurrentSorts(*client, 8)) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->served_by.route(), "failover");
    }
    EXPECT_TRUE(server.WaitForLine(fault.logged, std::chrono::seconds(30)))
        << server.Output();
    for (auto& r : ConcurrentSorts(*client, 8)) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
    }
    EXPECT_TRUE(client->CheckHealth().ok());
    EXPECT_EQ(server.Terminate(), 0) << server.Output();
  }
}

// Overload is refused with RESOURCE_EXHAUSTED, never queued without bound;
// SIGTERM then runs the waiting batch at once and every admitted request
// gets its answer before the server exits 0.
TEST(E2EBatching, OverloadIsRefusedAndDrainAnswersTheQueue) {
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--max_batch_requests=100",
                  "--max_batch_delay=1h", "--max_queued_requests=3"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  std::vector<std::vector<uint32_t>> inputs;
  std::vector<std::future<absl::StatusOr<SortResult<uint32_t>>>> pending;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(
        testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, i));
  }
  for (int i = 0; i < 3; ++i) {
    pending.push_back(std::async(std::launch::async, [&, i] {
      return client->Sort<uint32_t>(inputs[i]);
    }));
  }
  ASSERT_TRUE(WaitForMetric(server, "sortd_queued_requests 3\n"))
      << server.Output();
  auto refused = client->Sort<uint32_t>(std::vector<uint32_t>(1000, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_queued_requests"));
  EXPECT_EQ(server.Terminate(SIGTERM), 0) << server.Output();
  for (int i = 0; i < 3; ++i) {
    auto r = pending[i].get();
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<uint32_t> want = inputs[i];
    std::sort(want.begin(), want.end());
    EXPECT_EQ(r->keys, want);
    EXPECT_EQ(r->served_by.batch_requests(), 3);
  }
}

// A device split into sub-devices (PoCL partitions equally; Intel's
// multi-tile GPUs by affinity domain): one worker per part, both serving.
TEST(E2EBatching, EachSubDeviceGetsAWorker) {
  ServerProcess server(
      OpenClArgs({"--sub_device_units=1", "--metrics_listen=127.0.0.1:0"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("[part 1/2]", std::chrono::seconds(30)))
      << server.Output();
  EXPECT_TRUE(server.WaitForLine("[part 2/2]", std::chrono::seconds(30)))
      << server.Output();
  auto client = Connect(server);
  for (auto& r : ConcurrentSorts(*client, 6)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
    EXPECT_THAT(r->served_by.device(), HasSubstr("[part "));
  }
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("[part 1/2]\"} 1\n"));
  EXPECT_THAT(body, HasSubstr("[part 2/2]\"} 1\n"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// The done-when of the scheduler: many client threads mixing sizes, key
// types, orders, payloads, sorts and transposes against two workers on the
// OpenCL device and the CPU path; every answer checked.
TEST(E2EBatching, MixedConcurrentLoadOnTwoDeviceWorkers) {
  ServerProcess server(
      {"--device=opencl-cpu,opencl-cpu",
       "--kernel_cache_dir=", "--warm_up_keys=0", "--cpu_max_keys=64",
       "--solo_min_keys=2049", "--transpose_cpu_max_matrices=2",
       "--transpose_solo_min_matrices=5000", "--max_batch_delay=5ms",
       "--spill_to_cpu=false", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  std::vector<std::thread> threads;
  std::atomic<int> answered{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      const size_t sizes[] = {1, 40, 300, 1000, 2048, 3000, 20000};
      for (int i = 0; i < 12; ++i) {
        const size_t n = sizes[rng() % 7];
        const bool desc = rng() % 2;
        switch (rng() % 4) {
          case 0:
            ExpectSorted<uint32_t>(*client, n, desc, ExpectedPath(n));
            break;
          case 1:
            ExpectSorted<float>(*client, n, desc, ExpectedPath(n));
            break;
          case 2:
            ExpectSorted<int64_t>(*client, n, desc, ExpectedPath(n));
            break;
          default: {
            std::vector<uint32_t> rows(32 * (1 + rng() % 50));
            for (uint32_t& r : rows) r = rng();
            auto got = client->Transpose(rows);
            ASSERT_TRUE(got.ok()) << got.status();
            for (size_t m = 0; m < rows.size() / 32; ++m) {
              uint32_t want[32];
              std::memcpy(want, &rows[m * 32], sizeof(want));
              TransposeBits32(want);
              ASSERT_EQ(0, std::memcmp(want, &(*got)[m * 32], sizeof(want)));
            }
          }
        }
        ++answered;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(answered, 8 * 12);
  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("#2\""));  // the second worker has a name
  EXPECT_THAT(body, Not(HasSubstr("code=\"INTERNAL\"")));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

}  // namespace
}  // namespace sortd
