// sortd's gRPC server (server/grpc_server.h): it starts NOT_SERVING and the
// service refuses calls until it has its scheduler; an address it cannot
// bind and TLS files it cannot use are refused naming the flag; requests
// over the receive limit are refused; the serving line names the bound
// addresses.
#include "server/grpc_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/held_port.h"
#include "tests/in_process_service.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// Health and calls before the engines are up, then after: NOT_SERVING and
// UNAVAILABLE, then SERVING and answered.
TEST(GrpcServer, StartsNotServingAndServesOnceMarked) {
  testing::InProcessService::Options options;
  options.serving = false;
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  EXPECT_GT(sortd.port(), 0);
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->CheckHealth().ok());
  EXPECT_FALSE(client->CheckHealth("sortd.v1.SortService").ok());
  absl::StatusOr<SortResult<uint32_t>> sorted =
      client->Sort<uint32_t>(std::vector<uint32_t>{3, 1, 2});
  EXPECT_EQ(sorted.status().code(), absl::StatusCode::kUnavailable);

  sortd.MarkServing();
  EXPECT_TRUE(client->CheckHealth().ok());
  EXPECT_TRUE(client->CheckHealth("sortd.v1.SortService").ok());
  sorted = client->Sort<uint32_t>(std::vector<uint32_t>{3, 1, 2});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, (std::vector<uint32_t>{1, 2, 3}));
}

TEST(GrpcServer, AnAddressInUseIsUnavailableNamingTheFlag) {
  const testing::HeldPort taken;
  ASSERT_TRUE(taken.ok());
  testing::InProcessService::Options options;
  options.grpc.listen = taken.target();
  testing::InProcessService sortd(std::move(options));
  const absl::Status started = sortd.Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kUnavailable) << started;
  EXPECT_THAT(started.message(), HasSubstr(taken.target()));
  EXPECT_THAT(started.message(), HasSubstr("--listen"));
}

TEST(GrpcServer, TlsFilesThatCannotBeUsedAreInvalidArguments) {
  testing::InProcessService::Options options;
  options.grpc.tls.cert = "/nonexistent/server.pem";
  options.grpc.tls.key = "/nonexistent/server.key";
  testing::InProcessService sortd(std::move(options));
  const absl::Status started = sortd.Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kInvalidArgument) << started;
  EXPECT_THAT(started.message(), HasSubstr("--tls_cert"));
}

// A message over max_receive_bytes is refused by gRPC before the service
// reads it; one under it is sorted.
TEST(GrpcServer, RequestsOverTheReceiveLimitAreRefused) {
  testing::InProcessService::Options options;
  options.grpc.max_receive_bytes = 4096;
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<uint32_t> small(500, 7), large(2000, 7);
  EXPECT_TRUE(client->Sort<uint32_t>(small).ok());
  absl::StatusOr<SortResult<uint32_t>> refused = client->Sort<uint32_t>(large);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("larger than max"));
  // The service never saw it: only the sort that fitted is counted.
  EXPECT_THAT(sortd.MetricsText(),
              ::testing::Not(HasSubstr("code=\"RESOURCE_EXHAUSTED\"")));
}

TEST(GrpcServer, TheServingLineNamesTheBoundAddresses) {
  ::testing::internal::CaptureStdout();
  PrintServing("127.0.0.1:0", 5001, "0.0.0.0:0", {9464, 9465});
  PrintServing("[::1]:0", 5002, "", {});
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "sortd: serving on 127.0.0.1:5001 (metrics on "
            "0.0.0.0:9464/metrics)\n"
            "sortd: serving on [::1]:5002 (metrics disabled)\n");
}

}  // namespace
}  // namespace sortd
