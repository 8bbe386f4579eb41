// The client's channels (client/client_channel.cc): options it cannot use
// are refused when the client is made, naming what is wrong; an unreachable
// server fails at once, or after the timeout for a client that waits; TLS
// reaches a server whose certificate its CA signed; refusals the client
// may retry are retried as many times as it was told.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/held_port.h"
#include "tests/in_process_service.h"
#include "tests/test_certs.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// Default options with one change.
ClientOptions With(const std::function<void(ClientOptions&)>& change) {
  ClientOptions o;
  change(o);
  return o;
}

TEST(ClientChannel, OptionsItCannotUseAreRefusedNamingWhatIsWrong) {
  struct Case {
    std::string target;
    ClientOptions options;
    absl::StatusCode code;
    const char* says;
  };
  const absl::StatusCode invalid = absl::StatusCode::kInvalidArgument;
  const std::vector<Case> cases = {
      {"", ClientOptions(), invalid, "empty target"},
      {"127.0.0.1:1", With([](auto& o) { o.max_attempts = 0; }), invalid,
       "max_attempts=0"},
      {"127.0.0.1:1", With([](auto& o) { o.max_attempts = 6; }), invalid,
       "expected 1 to 5"},
      {"127.0.0.1:1", With([](auto& o) { o.load_balancing = "round robin"; }),
       invalid, "not a policy name"},
      {"127.0.0.1:1", With([](auto& o) { o.tls_cert = "/dev/null"; }), invalid,
       "needs its key"},
      {"127.0.0.1:1", With([](auto& o) { o.tls_ca = "/nonexistent/ca.pem"; }),
       absl::StatusCode::kNotFound, "/nonexistent/ca.pem"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(c.target, c.options);
    ASSERT_FALSE(client.ok()) << c.says;
    EXPECT_EQ(client.status().code(), c.code) << client.status();
    EXPECT_THAT(client.status().message(), HasSubstr(c.says));
  }
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST(ClientChannel, AnUnreachableServerFailsAtOnceOrAfterTheTimeoutIfWaiting) {
  const testing::HeldPort dead;
  ASSERT_TRUE(dead.ok());
  auto client = Client::Create(dead.target(), testing::OneAttempt());
  ASSERT_TRUE(client.ok()) << client.status();
  auto start = std::chrono::steady_clock::now();
  absl::Status health = (*client)->CheckHealth();
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable) << health;
  EXPECT_LT(SecondsSince(start), 10);

  ClientOptions wait = testing::OneAttempt();
  wait.timeout = absl::Milliseconds(300);
  wait.wait_for_ready = true;
  auto waiting = Client::Create(dead.target(), wait);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  start = std::chrono::steady_clock::now();
  health = (*waiting)->CheckHealth();
  EXPECT_EQ(health.code(), absl::StatusCode::kDeadlineExceeded) << health;
  EXPECT_GE(SecondsSince(start), 0.29);
}

// A TLS server: a client with the CA that signed its certificate sorts;
// a plaintext client does not get through.
TEST(ClientChannel, TlsReachesAServerItsCaSigned) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.Make({})) << certs.error();
  testing::InProcessService::Options options;
  options.grpc.tls.cert = certs.Path("server.pem");
  options.grpc.tls.key = certs.Path("server.key");
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  ClientOptions with_ca = testing::OneAttempt();
  with_ca.tls_ca = certs.Path("ca.pem");
  std::unique_ptr<Client> tls = sortd.Connect(with_ca);
  ASSERT_NE(tls, nullptr);
  absl::StatusOr<SortResult<uint32_t>> sorted =
      tls->Sort<uint32_t>(std::vector<uint32_t>{9, 4, 6});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, (std::vector<uint32_t>{4, 6, 9}));

  std::unique_ptr<Client> plaintext = sortd.Connect();
  ASSERT_NE(plaintext, nullptr);
  EXPECT_EQ(plaintext->CheckHealth().code(), absl::StatusCode::kUnavailable);
}

// A server that is still starting answers UNAVAILABLE, which the client
// retries: each attempt reaches the service and is counted there.
TEST(ClientChannel, RetryableRefusalsAreTriedMaxAttemptsTimes) {
  testing::InProcessService::Options options;
  options.serving = false;
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  for (int attempts : {1, 3}) {
    ClientOptions retrying;
    retrying.max_attempts = attempts;
    std::unique_ptr<Client> client = sortd.Connect(retrying);
    ASSERT_NE(client, nullptr);
    absl::StatusOr<SortResult<uint32_t>> refused =
        client->Sort<uint32_t>(std::vector<uint32_t>{2, 1});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(refused.status().message(), HasSubstr("starting"));
  }
  EXPECT_THAT(sortd.MetricsText(),
              HasSubstr("sortd_requests_total{code=\"UNAVAILABLE\","
                        "method=\"Sort\",path=\"none\"} 4"));
}

}  // namespace
}  // namespace sortd
