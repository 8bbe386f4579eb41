// End to end: the real sortd binary on a free loopback port, driven through
// the C++ client library and the sortctl binary over the real gRPC stack:
// every request kind on the CPU path, metrics, sortctl, Echo, bench,
// hostile transports. The device, batching, TLS and SortStream suites are
// beside it (*_e2e_test.cc); the binary's start and stop are
// tests/server/sortd_main_test.cc's.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "core/transpose.h"
#include "core/version.h"
#include "grpcpp/generic/generic_stub.h"
#include "tests/e2e_util.h"
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
  // Latency by size class: the refused request was never read, the 3-key
  // sort is of the smallest class.
  EXPECT_THAT(body, HasSubstr("sortd_request_duration_seconds_count{method="
                              "\"Sort\",path=\"none\",size=\"none\"}"));
  EXPECT_THAT(body, HasSubstr("sortd_request_duration_seconds_count{method="
                              "\"Sort\",path=\"cpu\",size=\"1k\"}"));
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

// Arrays of most of a MiB arrive in many slices and are answered from the
// buffer they were joined into: the same bytes back, with values, the
// identity permutation, and in compact coding.
TEST_F(E2ETest, EchoReturnsLargeArraysAsTheyCame) {
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 60000, 9);
  std::vector<uint64_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = keys[i] * 3ull + i;
  v1::SortRequest request;
  request.set_u32_keys(PackArray<uint32_t>(keys));
  request.set_u64_values(PackArray<uint64_t>(values));
  request.set_return_permutation(true);
  absl::StatusOr<v1::SortResponse> echo = client_->Echo(request);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->u32_keys(), request.u32_keys());
  EXPECT_EQ(echo->u64_values(), request.u64_values());
  const std::vector<uint32_t> permutation =
      UnpackArray<uint32_t>(echo->permutation());
  ASSERT_EQ(permutation.size(), keys.size());
  for (uint32_t i = 0; i < permutation.size(); ++i) {
    ASSERT_EQ(permutation[i], i) << "at " << i;
  }
  request.clear_u64_values();
  request.set_return_permutation(false);
  request.set_response_key_coding(v1::KEY_CODING_COMPACT);
  echo = client_->Echo(request);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->u32_keys(), request.u32_keys());
}

// With every request handled on sortd's own threads (one of them), not
// gRPC's: sorts, echoes and transposes are answered right, side by side
// from many callers; bad requests get their status.
TEST(E2EHandlers, RequestsHandledOnSortdsThreadsAreAnsweredRight) {
  ServerProcess server({"--device=cpu", "--large_request_bytes=1",
                        "--large_request_threads=1",
                        "--max_request_bytes=4194304"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      ExpectSorted<float>(*client, 1000 + 4000 * t, t % 2 == 1);
      ExpectSorted<uint64_t>(*client, 50000, false);
    });
  }
  for (std::thread& t : callers) t.join();
  v1::SortRequest echo_request;
  echo_request.set_u32_keys(PackArray<uint32_t>({7, 1, 5}));
  absl::StatusOr<v1::SortResponse> echo = client->Echo(echo_request);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->u32_keys(), echo_request.u32_keys());
  std::vector<uint32_t> rows(32 * 10, 0x80000001u);
  auto transposed = client->Transpose(rows);
  ASSERT_TRUE(transposed.ok()) << transposed.status();
  EXPECT_EQ((*transposed)[0], 0xffffffffu);
  v1::SortRequest partial;
  partial.set_f32_keys(std::string(6, 'k'));
  EXPECT_EQ(client->Sort(partial).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::SortRequest oversize;
  oversize.set_u64_keys(std::string((4 << 20) + 8, 'k'));
  EXPECT_EQ(client->Sort(oversize).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Calls that arrived before SIGTERM are served, even those still waiting
// for the one handler thread when the drain begins: a drain refuses only
// calls that come after it.
TEST(E2EHandlers, CallsWaitingForAHandlerWhenTheDrainBeginsAreServed) {
  ServerProcess server({"--device=cpu", "--large_request_bytes=1",
                        "--large_request_threads=1", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 500000, 6);
  constexpr int kCalls = 16;
  std::vector<std::future<absl::StatusOr<SortResult<uint32_t>>>> pending;
  for (int i = 0; i < kCalls; ++i) {
    pending.push_back(std::async(std::launch::async,
                                 [&] { return client->Sort<uint32_t>(keys); }));
  }
  ASSERT_EQ(
      server.WaitForLines("sortd: start Sort", kCalls, std::chrono::seconds(60))
          .size(),
      static_cast<size_t>(kCalls))
      << server.Output();
  EXPECT_EQ(server.Terminate(SIGTERM), 0) << server.Output();
  std::vector<uint32_t> expected = keys;
  std::sort(expected.begin(), expected.end());
  for (auto& p : pending) {
    auto result = p.get();
    ASSERT_TRUE(result.ok()) << result.status() << server.Output();
    EXPECT_EQ(result->keys, expected);
  }
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

  // A concurrency sweep: one run a level, in order; JSON lines or a table
  // with a row a level.
  r = RunCommand(Sortctl(*server_,
                         "bench --sizes=1k --sweep=1,3 --requests=30 "
                         "--duration=0 --warmup=0 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      std::vector<std::string>(absl::StrSplit(r.out, '\n', absl::SkipEmpty())),
      ::testing::ElementsAre(HasSubstr("\"concurrency\":1,\"seconds\""),
                             HasSubstr("\"concurrency\":3,\"seconds\"")));
  r = RunCommand(Sortctl(*server_,
                         "bench --sizes=1k --sweep=2,4 --requests=20 "
                         "--duration=0 --warmup=0"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> rows =
      absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 4u) << r.out;  // title, heading, two levels
  EXPECT_THAT(rows[1], HasSubstr("concurrency"));
  EXPECT_THAT(rows[2], ::testing::StartsWith("          2 "));
  EXPECT_THAT(rows[3], ::testing::StartsWith("          4 "));
  EXPECT_THAT(rows[3], ::testing::EndsWith(" 0"));  // no errors

  // Unbounded or malformed runs are refused before any call.
  r = RunCommand(Sortctl(*server_, "bench --duration=0"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bounded"));
  r = RunCommand(Sortctl(*server_, "bench --sizes=1q:5"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad size"));
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
