// End to end: the real sortd binary on a free loopback port, driven through
// the C++ client library and the sortctl binary over the real gRPC stack.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/version.h"
#include "grpcpp/generic/generic_stub.h"
#include "core/transpose.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/server_fixture.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCommand;
using testing::ServerProcess;

std::unique_ptr<Client> Connect(const ServerProcess& server,
                                const ClientOptions& options = {}) {
  auto client = Client::Create(server.address(), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

// One server shared by the tests that do not stop it.
class E2ETest : public testing::SharedServerTest<E2ETest> {
 public:
  static std::vector<std::string> ServerArgs() {
    return {"--device=cpu", "--cpu_threads=2", "--max_request_bytes=1048576",
            "--metrics_listen=127.0.0.1:0"};
  }

 protected:
  void SetUp() override {
    SharedServerTest::SetUp();
    client_ = Connect(*server_);
  }

  std::unique_ptr<Client> client_;
};

template <typename K>
void ExpectSorted(Client& client, size_t n, bool desc,
                  v1::ExecutionPath path = v1::EXECUTION_PATH_CPU) {
  SCOPED_TRACE(
      absl::StrCat(sizeof(K), "-byte keys, n=", n, desc ? " desc" : ""));
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kSpecial, n, 4);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = ~uint64_t{i};
  auto result = client.SortPairs<K, uint64_t>(
      keys, values, {.descending = desc, .return_permutation = true});
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, desc);
  ASSERT_EQ(result->keys.size(), n);
  ASSERT_EQ(result->permutation, perm);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(&result->keys[i], &keys[perm[i]], sizeof(K)));
    ASSERT_EQ(result->values[i], values[perm[i]]);
  }
  EXPECT_EQ(result->served_by.path(), path);
  if (path == v1::EXECUTION_PATH_CPU) {
    EXPECT_THAT(result->served_by.device(), HasSubstr("oneTBB"));
  }
  EXPECT_GE(result->served_by.compute_ns(), 0);
}

// An OpenCL-device server with the router pinned (so no calibration runs):
// every non-empty request batched on the device, nothing spilled.
std::vector<std::string> OpenClArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--device=opencl-cpu",
                                   "--kernel_cache_dir=",
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
v1::ExecutionPath ExpectedPath(size_t n) {
  return n <= 64 ? v1::EXECUTION_PATH_CPU : v1::EXECUTION_PATH_OPENCL_CPU;
}

TEST_F(E2ETest, HealthIsServing) {
  EXPECT_TRUE(client_->CheckHealth().ok());
  EXPECT_TRUE(client_->CheckHealth("sortd.v1.SortService").ok());
}

TEST_F(E2ETest, SortsEveryKeyTypeWithPayloadAndPermutation) {
  for (bool desc : {false, true}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{40'000}}) {
      ExpectSorted<uint32_t>(*client_, n, desc);
      ExpectSorted<int32_t>(*client_, n, desc);
      ExpectSorted<float>(*client_, n, desc);
      ExpectSorted<uint64_t>(*client_, n, desc);
      ExpectSorted<int64_t>(*client_, n, desc);
      ExpectSorted<double>(*client_, n, desc);
    }
  }
}

TEST_F(E2ETest, KeysOnlySortHasNoPayloadOrPermutation) {
  std::vector<double> keys = {3.0, -0.0, 0.0, -1.0};
  auto result = client_->Sort<double>(keys);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->values.empty());
  EXPECT_TRUE(result->permutation.empty());
  EXPECT_TRUE(std::signbit(result->keys[1]));  // -0.0 before +0.0
  EXPECT_EQ(result->keys[0], -1.0);
  EXPECT_EQ(result->keys[3], 3.0);
}

TEST_F(E2ETest, TransposesMatrices) {
  std::vector<uint32_t> rows(32 * 100);
  std::mt19937 rng(3);
  for (uint32_t& r : rows) r = rng();
  auto out = client_->Transpose(rows);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), rows.size());
  for (size_t m = 0; m < 100; ++m)
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        ASSERT_EQ((rows[m * 32 + i] >> j) & 1, ((*out)[m * 32 + j] >> i) & 1);
}

// Every bad input gets its status and message, and the server keeps serving.
TEST_F(E2ETest, BadInputGetsAClearStatusAndTheServerKeepsServing) {
  struct Case {
    const char* name;
    v1::SortRequest request;
    absl::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back(
      {"no keys", {}, absl::StatusCode::kInvalidArgument, "no keys set"});
  {
    v1::SortRequest r;
    r.set_u32_keys(std::string(16, 'k'));
    r.set_u32_values(std::string(12, 'v'));
    cases.push_back({"payload length", r, absl::StatusCode::kInvalidArgument,
                     "expected one 4-byte value per key: 4 values"});
  }
  {
    v1::SortRequest r;
    r.set_f32_keys(std::string(6, 'k'));
    cases.push_back({"partial key", r, absl::StatusCode::kInvalidArgument,
                     "not a multiple of the 4-byte key size"});
  }
  {
    v1::SortRequest r;
    r.set_u32_keys(std::string(16, 'k'));
    r.set_order(static_cast<v1::Order>(42));
    cases.push_back({"unknown enum", r, absl::StatusCode::kInvalidArgument,
                     "order: unknown value 42"});
  }
  {
    v1::SortRequest r;
    r.set_u64_keys(std::string(1048576 + 8, 'k'));
    cases.push_back(
        {"oversize", r, absl::StatusCode::kResourceExhausted, "1048576"});
  }
  for (const Case& c : cases) {
    auto result = client_->Sort(c.request);
    EXPECT_EQ(result.status().code(), c.code)
        << c.name << ": " << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr(c.message)) << c.name;
  }

  v1::TransposeRequest bad_transpose;
  bad_transpose.set_matrices(std::string(4 * 33, 'm'));
  auto t = client_->Transpose(bad_transpose);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("33 words"));

  // Empty is valid: an empty answer of the same type.
  v1::SortRequest empty;
  empty.set_i64_keys("");
  auto e = client_->Sort(empty);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->has_i64_keys());
  EXPECT_TRUE(e->i64_keys().empty());

  // Still serving, and correctly.
  EXPECT_TRUE(client_->CheckHealth().ok());
  ExpectSorted<float>(*client_, 5000, false);
}

TEST_F(E2ETest, MetricsCountRequestsByCodeAndPath) {
  ASSERT_FALSE(server_->metrics_address().empty()) << server_->Output();
  ASSERT_TRUE(client_->Sort(v1::SortRequest{}).status().code() ==
              absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client_->Sort<uint32_t>(std::vector<uint32_t>{3, 2, 1}).ok());
  const std::string body = HttpGet(server_->metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("sortd_requests_total{code=\"INVALID_ARGUMENT\","
                              "method=\"Sort\",path=\"none\"}"));
  EXPECT_THAT(
      body,
      HasSubstr(
          "sortd_requests_total{code=\"OK\",method=\"Sort\",path=\"cpu\"}"));
  EXPECT_THAT(body,
              HasSubstr("sortd_keys_sorted_total{dtype=\"u32\",path=\"cpu\"}"));
  EXPECT_THAT(body, HasSubstr("sortd_build_info{revision=\""));
  EXPECT_THAT(body, HasSubstr("version=\"" + std::string(Version()) + "\"} 1"));
  // The standard process metrics, read at the scrape: the start time is
  // within the last hour, and the server holds some descriptors open.
  for (const char* name :
       {"process_cpu_seconds_total ", "process_open_fds ", "process_max_fds ",
        "process_virtual_memory_bytes ", "process_resident_memory_bytes "}) {
    EXPECT_THAT(body, HasSubstr(std::string("\n") + name)) << name;
  }
  const size_t at = body.find("\nprocess_start_time_seconds ");
  ASSERT_NE(at, std::string::npos);
  const double started = std::stod(body.substr(at + 28));
  EXPECT_NEAR(started, absl::ToUnixSeconds(absl::Now()), 3600);
  const size_t fds = body.find("\nprocess_open_fds ");
  EXPECT_GT(std::stod(body.substr(fds + 18)), 3);
}

// The metrics endpoint serves /metrics and nothing else.
TEST_F(E2ETest, MetricsEndpointServesOnlyMetrics) {
  const std::string metrics = HttpGet(server_->metrics_address(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("HTTP/1.1 200"));
  for (const char* path :
       {"/", "/metrics/../etc/passwd", "/debug", "/index.html"}) {
    const std::string other = HttpGet(server_->metrics_address(), path);
    EXPECT_THAT(other, HasSubstr(" 404 ")) << path;
    EXPECT_THAT(other, Not(HasSubstr("sortd_build_info"))) << path;
  }
}

std::string Sortctl(const ServerProcess& server, const std::string& args) {
  return absl::StrCat(SORTCTL_BINARY, " --target=", server.address(), " ",
                      args);
}

TEST_F(E2ETest, SortctlSortsVerifiesAndReportsJson) {
  auto r = RunCommand(
      Sortctl(*server_, "sort --type=f32 --random=100000 --verify --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"keys\":100000"));
  EXPECT_THAT(r.out, HasSubstr("\"verified\":true"));
  EXPECT_THAT(r.out, HasSubstr("\"path\":\"cpu\""));

  r = RunCommand(Sortctl(*server_,
                         "sort --type=i64 --desc --values=u64 --permutation "
                         "--random=5000 --seed=9 --verify"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sorted 5000 i64 keys (descending, u64 values, "
                               "with permutation) on cpu"));
  EXPECT_THAT(r.out, HasSubstr("verified"));

  r = RunCommand(Sortctl(*server_, "transpose --random=300 --verify --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"matrices\":300"));

  r = RunCommand(Sortctl(*server_, "health"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("SERVING"));
}

TEST_F(E2ETest, SortctlReadsAndWritesFiles) {
  const std::string in = ::testing::TempDir() + "/sortctl_in.txt";
  const std::string out = ::testing::TempDir() + "/sortctl_out.txt";
  {
    FILE* f = fopen(in.c_str(), "w");
    fputs("5 -3\n5\t0x10 -3 7\n", f);
    fclose(f);
  }
  auto r = RunCommand(Sortctl(
      *server_, "sort --type=i32 --values=u32 --permutation --input=" + in +
                    " --output=" + out + " --verify"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string text;
  {
    FILE* f = fopen(out.c_str(), "r");
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    fclose(f);
  }
  // key, value (the input position), input index
  EXPECT_EQ(text, "-3 1 1\n-3 4 4\n5 0 0\n5 2 2\n7 5 5\n16 3 3\n");
}

TEST_F(E2ETest, SortctlReportsErrorsWithTheStatusCode) {
  const std::string in = ::testing::TempDir() + "/sortctl_31_words.txt";
  {
    FILE* f = fopen(in.c_str(), "w");
    for (int i = 0; i < 31; ++i) fprintf(f, "%d\n", i);
    fclose(f);
  }
  auto r = RunCommand(Sortctl(*server_, "transpose --input=" + in));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.err, HasSubstr("31 words"));

  r = RunCommand(Sortctl(*server_, "sort --type=u8 --random=3"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--type"));

  r = RunCommand(Sortctl(*server_, "frobnicate"));
  EXPECT_EQ(r.exit_code, 2);

  r = RunCommand(absl::StrCat(SORTCTL_BINARY,
                              " --target=127.0.0.1:1 --timeout=5s health"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
}

// SIGTERM while a sort is running: the sort completes correctly, the
// server exits 0, and it no longer accepts calls.
TEST(E2EShutdown, SigtermDrainsInFlightCallsAndExitsZero) {
  ServerProcess server({"--device=cpu", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  // One call: a sort sent in parts whose later parts come after the drain
  // began is refused (UNAVAILABLE), as any new call is.
  ClientOptions one_call;
  one_call.split_bytes = 0;
  auto client = Connect(server, one_call);
  const size_t n = size_t{6} << 20;
  const std::vector<uint64_t> keys =
      testing::Generate<uint64_t>(testing::Shape::kRandom, n, 5);
  auto pending = std::async(std::launch::async, [&] {
    return client->Sort<uint64_t>(keys, {.return_permutation = true});
  });
  ASSERT_TRUE(server.WaitForLine("sortd: start Sort", std::chrono::seconds(60)))
      << server.Output();
  EXPECT_EQ(server.Terminate(SIGTERM), 0) << server.Output();
  auto result = pending.get();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->keys.size(), n);
  EXPECT_TRUE(std::is_sorted(result->keys.begin(), result->keys.end()));
  EXPECT_THAT(server.Output(), HasSubstr("draining"));
  EXPECT_THAT(server.Output(), HasSubstr("sortd: end Sort OK"));
  EXPECT_EQ(client->CheckHealth().code(), absl::StatusCode::kUnavailable);
}

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
                        "--kernel_cache_dir=", "--calibrate_max_keys=65536",
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

// Sends `count` u32 sorts of distinct sizes at once, one thread each, and
// checks every answer; returns them.
std::vector<absl::StatusOr<SortResult<uint32_t>>> ConcurrentSorts(
    Client& client, int count) {
  std::vector<std::vector<uint32_t>> inputs(count);
  std::vector<absl::StatusOr<SortResult<uint32_t>>> results(
      count, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    inputs[i] =
        testing::Generate<uint32_t>(testing::Shape::kRandom, 300 + 17 * i, i);
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

// Waits until a scrape of the metrics contains `text` (polls; each scrape
// is an event, not a guess at how long something takes).
bool WaitForMetric(const ServerProcess& server, const std::string& text) {
  for (int i = 0; i < 6000; ++i) {
    if (HttpGet(server.metrics_address(), "/metrics").find(text) !=
        std::string::npos) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
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
       "--kernel_cache_dir=", "--cpu_max_keys=64", "--solo_min_keys=2049",
       "--transpose_cpu_max_matrices=2", "--transpose_solo_min_matrices=5000",
       "--max_batch_delay=5ms", "--spill_to_cpu=false",
       "--metrics_listen=127.0.0.1:0"});
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

// Throw-away certificates made with openssl for one test: a CA, a server
// certificate for localhost and 127.0.0.1, a client certificate from the
// same CA, and a client certificate from an unrelated CA.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sortd_tls_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string key =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script = absl::StrCat(
        "set -e; cd ", dir_, "; ", "openssl req -x509 ", key,
        " -keyout ca.key -out ca.pem -days 1 "
        "-subj '/CN=sortd test CA'; ",
        "openssl req ", key,
        " -keyout server.key -out server.csr "
        "-subj '/CN=localhost'; ",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext; ",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out server.pem -days 1 -extfile san.ext; ",
        "openssl req ", key,
        " -keyout client.key -out client.csr "
        "-subj '/CN=sortd test client'; ",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out client.pem -days 1; ",
        "openssl req -x509 ", key,
        " -keyout other-ca.key -out other-ca.pem "
        "-days 1 -subj '/CN=other CA'; ",
        "openssl req ", key,
        " -keyout other.key -out other.csr "
        "-subj '/CN=intruder'; ",
        "openssl x509 -req -in other.csr -CA other-ca.pem -CAkey other-ca.key "
        "-CAcreateserial -out other.pem -days 1");
    auto r = RunCommand("sh -c \"" + script + "\"");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void TearDown() override { RunCommand("rm -rf " + dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  absl::StatusOr<SortResult<uint32_t>> TrySort(const ServerProcess& server,
                                               ClientOptions options) {
    options.timeout = absl::Seconds(20);
    auto client = Client::Create(server.address(), options);
    if (!client.ok()) return client.status();
    return (*client)->Sort<uint32_t>(std::vector<uint32_t>{3, 1, 2});
  }

  std::string dir_;
};

TEST_F(TlsTest, ServesTlsClientsAndRefusesPlaintext) {
  ServerProcess server({"--device=cpu", "--tls_cert=" + Path("server.pem"),
                        "--tls_key=" + Path("server.key")});
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("speaks TLS", std::chrono::seconds(30)))
      << server.Output();
  ClientOptions tls;
  tls.tls_ca = Path("ca.pem");
  auto ok = TrySort(server, tls);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->keys, (std::vector<uint32_t>{1, 2, 3}));
  auto plain = TrySort(server, {});
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable);
  // A server certificate from a CA the client does not trust.
  ClientOptions wrong_ca;
  wrong_ca.tls_ca = Path("other-ca.pem");
  EXPECT_FALSE(TrySort(server, wrong_ca).ok());
  auto r = RunCommand(Sortctl(
      server, "--tls_ca=" + Path("ca.pem") + " sort --random=5000 --verify"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("verified"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST_F(TlsTest, MutualTlsAdmitsOnlyClientsWithACertificateFromItsCa) {
  ServerProcess server({"--device=cpu", "--tls_cert=" + Path("server.pem"),
                        "--tls_key=" + Path("server.key"),
                        "--tls_client_ca=" + Path("ca.pem")});
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("requires client certificates",
                                 std::chrono::seconds(30)))
      << server.Output();
  ClientOptions no_cert;
  no_cert.tls_ca = Path("ca.pem");
  EXPECT_FALSE(TrySort(server, no_cert).ok());
  ClientOptions intruder = no_cert;
  intruder.tls_cert = Path("other.pem");
  intruder.tls_key = Path("other.key");
  EXPECT_FALSE(TrySort(server, intruder).ok());
  ClientOptions member = no_cert;
  member.tls_cert = Path("client.pem");
  member.tls_key = Path("client.key");
  auto ok = TrySort(server, member);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->keys, (std::vector<uint32_t>{1, 2, 3}));
  auto r = RunCommand(Sortctl(server, "--tls_ca=" + Path("ca.pem") +
                                          " --tls_cert=" + Path("client.pem") +
                                          " --tls_key=" + Path("client.key") +
                                          " health"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST_F(TlsTest, IncompleteTlsFlagsStopStartup) {
  ServerProcess cert_only({"--device=cpu", "--tls_cert=" + Path("server.pem")});
  EXPECT_FALSE(cert_only.Start());
  EXPECT_THAT(cert_only.Output(), HasSubstr("--tls_key"));
  ServerProcess missing({"--device=cpu", "--tls_cert=" + Path("nope.pem"),
                         "--tls_key=" + Path("server.key")});
  EXPECT_FALSE(missing.Start());
  EXPECT_THAT(missing.Output(), HasSubstr("cannot read"));
}

TEST(E2EStartup, RefusesUnknownDeviceAndBadLimits) {
  ServerProcess bad_device({"--device=tpu"});
  EXPECT_FALSE(bad_device.Start());
  EXPECT_THAT(bad_device.Output(), HasSubstr("unknown entry 'tpu'"));
  ServerProcess bad_streams({"--max_concurrent_streams=0"});
  EXPECT_FALSE(bad_streams.Start());
  EXPECT_THAT(bad_streams.Output(), HasSubstr("--max_concurrent_streams"));
  ServerProcess bad_batch({"--max_batch_requests=0"});
  EXPECT_FALSE(bad_batch.Start());
  EXPECT_THAT(bad_batch.Output(), HasSubstr("--max_batch_requests"));
  ServerProcess bad_limit({"--max_request_bytes=0"});
  EXPECT_FALSE(bad_limit.Start());
  EXPECT_THAT(bad_limit.Output(), HasSubstr("--max_request_bytes"));
  ServerProcess bad_pool({"--device_pool_bytes=-1"});
  EXPECT_FALSE(bad_pool.Start());
  EXPECT_THAT(bad_pool.Output(), HasSubstr("--device_pool_bytes"));
  for (const char* spec : {"enqueue", "enqueue=0", "explode=1", "sticky"}) {
    ServerProcess bad_faults(
        {"--device=cpu", absl::StrCat("--inject_faults=", spec)});
    EXPECT_FALSE(bad_faults.Start()) << spec;
    EXPECT_THAT(bad_faults.Output(), HasSubstr("--inject_faults")) << spec;
    EXPECT_EQ(bad_faults.Terminate(), 1) << spec;
  }
}

// --- Echo, sortctl bench, SortStream, sorting beyond device memory.

TEST_F(E2ETest, EchoReturnsTheRequestUnsortedThroughTheSamePath) {
  v1::SortRequest request;
  const std::vector<int64_t> keys = {5, -3, 9, 0};
  request.set_i64_keys(PackArray<int64_t>(keys));
  request.set_u32_values(
      PackArray<uint32_t>(std::vector<uint32_t>{1, 2, 3, 4}));
  request.set_return_permutation(true);
  absl::StatusOr<v1::SortResponse> echo = client_->Echo(request);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->i64_keys(), request.i64_keys());
  EXPECT_EQ(echo->u32_values(), request.u32_values());
  EXPECT_EQ(UnpackArray<uint32_t>(echo->permutation()),
            (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(echo->served_by().route(), "echo");
  // The same validation as Sort.
  v1::SortRequest bad;
  bad.set_u32_keys("abcde");
  absl::StatusOr<v1::SortResponse> refused = client_->Echo(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("not a multiple"));
}

TEST(E2EEcho, DisabledEchoIsUnimplemented) {
  ServerProcess server({"--device=cpu", "--echo=false", "--metrics_listen="});
  ASSERT_TRUE(server.Start()) << server.Output();
  v1::SortRequest request;
  request.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{2, 1}));
  absl::StatusOr<v1::SortResponse> echo = Connect(server)->Echo(request);
  EXPECT_EQ(echo.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST_F(E2ETest, SortctlBenchIsBoundedVerifiesAndReports) {
  auto r = RunCommand(Sortctl(*server_,
                              "bench --sizes=1k:3,16k:1 --concurrency=4 "
                              "--requests=200 --duration=0 --warmup=0 "
                              "--verify --verify_every=4 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"requests\":200,\"errors\":0"));
  EXPECT_THAT(r.out, HasSubstr("\"started\":200,\"ended\":200"));
  EXPECT_THAT(r.out, HasSubstr("\"mismatches\":0"));
  EXPECT_THAT(r.out, Not(HasSubstr("\"verified\":0,")));
  EXPECT_THAT(r.out, HasSubstr("\"paths\":{\"cpu\":200}"));
  EXPECT_THAT(r.out, HasSubstr("\"size\":16384"));

  r = RunCommand(Sortctl(*server_,
                         "bench --op=echo --type=f64 --sizes=4k "
                         "--concurrency=2 --duration=300ms --warmup=0 "
                         "--verify"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sortctl bench: echo f64, sizes 4k"));
  EXPECT_THAT(r.out, HasSubstr("routes: echo 100%"));
  EXPECT_THAT(r.out, HasSubstr("all correct"));

  r = RunCommand(Sortctl(*server_,
                         "bench --op=transpose --sizes=100 --requests=20 "
                         "--duration=0 --warmup=0 --verify --verify_every=1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("20 answered, 0 errors"));
  EXPECT_THAT(r.out, HasSubstr("verified  20 sampled answers, all correct"));

  // Unbounded or malformed runs are refused before any call.
  r = RunCommand(Sortctl(*server_, "bench --duration=0"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bounded"));
  r = RunCommand(Sortctl(*server_, "bench --sizes=1q:5"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad size"));
}

// A server whose unary limit is 1 MiB; SortStream takes arrays far beyond.
class E2EStream : public ::testing::Test {
 protected:
  static constexpr size_t kUnary = size_t{1} << 20;
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--device=cpu", "--cpu_threads=2",
        "--metrics_listen=", absl::StrCat("--max_request_bytes=", kUnary),
        absl::StrCat("--max_stream_bytes=", 16 * kUnary),
        "--stream_chunk_bytes=262144"});
    ASSERT_TRUE(server_->Start()) << server_->Output();
    ClientOptions o;
    o.max_unary_bytes = kUnary;
    auto c = Client::Create(server_->address(), o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  void TearDown() override {
    EXPECT_EQ(server_->Terminate(), 0) << server_->Output();
  }
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(E2EStream, SortsAnArrayEightTimesTheUnaryLimit) {
  // 8 MiB of keys plus 4 MiB of values: 12x the unary limit.
  const size_t n = 8 * kUnary / sizeof(int64_t) + 123;
  const std::vector<int64_t> keys =
      testing::Generate<int64_t>(testing::Shape::kFewDistinct, n, 8);
  std::vector<uint32_t> values(n);
  std::iota(values.begin(), values.end(), 7u);
  auto sorted = client_->SortPairs<int64_t, uint32_t>(
      keys, values, {.descending = true, .return_permutation = true});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, true);
  ASSERT_EQ(sorted->permutation, perm);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sorted->keys[i], keys[perm[i]]) << i;
    ASSERT_EQ(sorted->values[i], values[perm[i]]) << i;
  }
  EXPECT_EQ(sorted->served_by.path(), v1::EXECUTION_PATH_CPU);
  // As one message the same array is refused: the stream was needed.
  ClientOptions unary;
  unary.max_unary_bytes = SIZE_MAX;
  auto one = Client::Create(server_->address(), unary);
  ASSERT_TRUE(one.ok());
  auto refused = (*one)->SortPairs<int64_t, uint32_t>(keys, values);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);

  // sortctl streams on its own above --max_unary_bytes, and verifies.
  auto r = RunCommand(Sortctl(*server_,
                              "sort --type=f32 --random=2500000 --verify "
                              "--max_unary_bytes=1048576 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"stream\":true"));
  EXPECT_THAT(r.out, HasSubstr("\"verified\":true"));
}

TEST_F(E2EStream, BadStreamsGetAClearStatus) {
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::SortService::NewStub(channel);
  auto run = [&](const std::vector<v1::SortRequest>& messages) {
    grpc::ClientContext context;
    auto stream = stub->SortStream(&context);
    for (const v1::SortRequest& m : messages) {
      if (!stream->Write(m)) break;
    }
    stream->WritesDone();
    v1::SortResponse response;
    size_t answers = 0;
    while (stream->Read(&response)) ++answers;
    grpc::Status s = stream->Finish();
    EXPECT_TRUE(s.ok() || answers == 0) << "an error after answers";
    return s;
  };
  v1::SortRequest u32, u64, with_values;
  u32.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{3, 1, 2}));
  u64.set_u64_keys(PackArray<uint64_t>(std::vector<uint64_t>{3, 1}));
  with_values = u32;
  with_values.set_u32_values(
      PackArray<uint32_t>(std::vector<uint32_t>{0, 1, 2}));

  grpc::Status s = run({u32, u64});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("message 2 sets u64_keys"));
  s = run({u32, with_values});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("same fields"));
  s = run({});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("before its first message"));
  v1::SortRequest partial;
  partial.set_u32_keys("12345");
  s = run({u32, partial});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("stream message 2"));
  // Beyond --max_stream_bytes (16 MiB): refused, and the server serves on.
  v1::SortRequest big;
  big.set_u32_keys(std::string(kUnary - 64, '\x01'));
  std::vector<v1::SortRequest> many(17, big);
  s = run(many);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max_stream_bytes"));
  EXPECT_TRUE(run({u32, u32}).ok());
  // An empty array streams back as one empty answer.
  v1::SortRequest empty;
  empty.set_f64_keys("");
  EXPECT_TRUE(run({empty}).ok());
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

// --- Hostile transport: bytes that are not a message, not HTTP/2, and
// clients that stall. The server answers or drops them and serves on.

TEST_F(E2ETest, GarbageBytesAreRefusedAndTheServerServesOn) {
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  {
    // The same path with a valid message is served (the path is right).
    v1::SortRequest valid;
    valid.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{2, 1}));
    const std::string bytes = valid.SerializeAsString();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, "/sortd.v1.SortService/Sort", {}, &request,
                      &response, [&](grpc::Status s) { done.set_value(s); });
    const grpc::Status s = done.get_future().get();
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  }
  std::mt19937_64 rng(77);
  std::map<int, int> codes;
  for (int i = 0; i < 20; ++i) {
    std::string junk(1 + rng() % 4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    // A field-1 varint where bytes belong makes any prefix unparseable.
    if (i % 2 == 0) junk[0] = 0x08;
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, "/sortd.v1.SortService/Sort", {}, &request,
                      &response, [&](grpc::Status s) { done.set_value(s); });
    const grpc::Status s = done.get_future().get();
    // Either it does not parse (sortd reads the bytes itself and says what
    // was wrong) or it parses into a request that validation refuses or
    // (rarely) a valid one; never a dropped server.
    EXPECT_THAT(s.error_code(),
                ::testing::AnyOf(grpc::StatusCode::INVALID_ARGUMENT,
                                 grpc::StatusCode::OK))
        << s.error_message();
    ++codes[s.error_code()];
  }
  // The unparseable half (field 1 as a varint) never reaches a sort.
  EXPECT_GE(codes[grpc::StatusCode::INVALID_ARGUMENT], 10);
  // Bytes that are not HTTP/2 at all, on a raw connection.
  const std::string& addr = server_->address();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port =
      htons(static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  const std::string noise = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02garbage";
  ASSERT_GT(write(fd, noise.data(), noise.size()), 0);
  char buf[256];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }  // the server closes the connection
  close(fd);
  EXPECT_TRUE(client_->CheckHealth().ok());
  auto sorted = client_->Sort<uint32_t>(std::vector<uint32_t>{3, 1, 2});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, (std::vector<uint32_t>{1, 2, 3}));
}

TEST_F(E2ETest, StalledClientsDoNotHoldUpOthers) {
  // A raw connection that never says anything.
  const std::string& addr = server_->address();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port =
      htons(static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  const int idle = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(idle, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  // A stream that sends one chunk and then stalls, never half-closing.
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::SortService::NewStub(channel);
  grpc::ClientContext stalled;
  stalled.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(1500));
  auto stream = stub->SortStream(&stalled);
  v1::SortRequest chunk;
  chunk.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{5, 4}));
  ASSERT_TRUE(stream->Write(chunk));
  // Meanwhile everyone else is served.
  for (int i = 0; i < 20; ++i) {
    auto sorted = client_->Sort<int64_t>(std::vector<int64_t>{i, -i, 0});
    ASSERT_TRUE(sorted.ok()) << sorted.status();
  }
  // The stalled stream ends at its deadline with nothing answered.
  v1::SortResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  close(idle);
  EXPECT_TRUE(client_->CheckHealth().ok());
}

}  // namespace
}  // namespace sortd
