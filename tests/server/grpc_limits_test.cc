// The gRPC connection limits from the --grpc_* flags (server/grpc_limits.h):
// the defaults as documented, every bad value refused naming its flag, the
// memory quota against the largest request, and the startup log's line.
#include "server/grpc_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"

ABSL_DECLARE_FLAG(int, max_concurrent_streams);
ABSL_DECLARE_FLAG(absl::Duration, grpc_keepalive_time);
ABSL_DECLARE_FLAG(absl::Duration, grpc_keepalive_timeout);
ABSL_DECLARE_FLAG(absl::Duration, grpc_min_ping_interval);
ABSL_DECLARE_FLAG(int, grpc_max_ping_strikes);
ABSL_DECLARE_FLAG(absl::Duration, grpc_max_connection_idle);
ABSL_DECLARE_FLAG(absl::Duration, grpc_max_connection_age);
ABSL_DECLARE_FLAG(absl::Duration, grpc_max_connection_age_grace);
ABSL_DECLARE_FLAG(int64_t, grpc_memory_bytes);
ABSL_DECLARE_FLAG(int, grpc_max_threads);
ABSL_DECLARE_FLAG(int, grpc_max_metadata_bytes);

namespace sortd {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMaxRequest = int64_t{256} << 20;

TEST(GrpcLimits, TheDefaultsAreTheDocumentedOnes) {
  absl::FlagSaver saver;
  GrpcLimits limits;
  limits.max_threads = 0;  // overwritten on success
  ASSERT_TRUE(GrpcLimitsFromFlags(kMaxRequest, &limits).ok());
  const GrpcLimits want;
  EXPECT_EQ(limits.max_concurrent_streams, want.max_concurrent_streams);
  EXPECT_EQ(limits.keepalive_time, absl::Minutes(1));
  EXPECT_EQ(limits.min_ping_interval, absl::Seconds(10));
  EXPECT_EQ(limits.max_connection_age, absl::Minutes(30));
  EXPECT_EQ(limits.memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(limits.max_threads, 32);
  EXPECT_EQ(limits.max_metadata_bytes, 8 << 10);
  const std::string line = DescribeGrpcLimits(limits);
  EXPECT_THAT(line, HasSubstr("keepalive ping after 1m"));
  EXPECT_THAT(line, HasSubstr("at most 2147483648 bytes"));
}

struct BadFlag {
  std::string flag;  // as the error names it
  std::function<void()> set;
};

TEST(GrpcLimits, EveryBadValueIsRefusedNamingItsFlag) {
  const std::vector<BadFlag> bad = {
      {"--max_concurrent_streams",
       [] { absl::SetFlag(&FLAGS_max_concurrent_streams, 0); }},
      {"--grpc_keepalive_time",
       [] { absl::SetFlag(&FLAGS_grpc_keepalive_time, absl::ZeroDuration()); }},
      {"--grpc_keepalive_timeout",
       [] { absl::SetFlag(&FLAGS_grpc_keepalive_timeout, -absl::Seconds(1)); }},
      {"--grpc_max_connection_idle",
       [] {
         absl::SetFlag(&FLAGS_grpc_max_connection_idle, absl::ZeroDuration());
       }},
      {"--grpc_max_connection_age",
       [] {
         absl::SetFlag(&FLAGS_grpc_max_connection_age, absl::ZeroDuration());
       }},
      {"--grpc_min_ping_interval",
       [] { absl::SetFlag(&FLAGS_grpc_min_ping_interval, -absl::Seconds(1)); }},
      {"--grpc_max_connection_age_grace",
       [] {
         absl::SetFlag(&FLAGS_grpc_max_connection_age_grace, -absl::Seconds(1));
       }},
      {"--grpc_max_ping_strikes",
       [] { absl::SetFlag(&FLAGS_grpc_max_ping_strikes, -1); }},
      {"--grpc_memory_bytes",
       [] { absl::SetFlag(&FLAGS_grpc_memory_bytes, int64_t{-1}); }},
      {"--grpc_memory_bytes",
       [] { absl::SetFlag(&FLAGS_grpc_memory_bytes, kMaxRequest - 1); }},
      {"--grpc_max_threads", [] { absl::SetFlag(&FLAGS_grpc_max_threads, 1); }},
      {"--grpc_max_metadata_bytes",
       [] { absl::SetFlag(&FLAGS_grpc_max_metadata_bytes, 1023); }},
  };
  for (const BadFlag& b : bad) {
    absl::FlagSaver saver;
    b.set();
    GrpcLimits limits;
    limits.max_threads = 7;
    const absl::Status s = GrpcLimitsFromFlags(kMaxRequest, &limits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.flag;
    EXPECT_THAT(s.message(), HasSubstr(b.flag));
    EXPECT_EQ(limits.max_threads, 7) << b.flag << ": left as it was";
  }
}

TEST(GrpcLimits, NoMemoryLimitAndConnectionsThatNeverAge) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_grpc_memory_bytes, int64_t{0});
  absl::SetFlag(&FLAGS_grpc_max_connection_age, absl::InfiniteDuration());
  absl::SetFlag(&FLAGS_grpc_min_ping_interval, absl::ZeroDuration());
  GrpcLimits limits;
  ASSERT_TRUE(GrpcLimitsFromFlags(kMaxRequest, &limits).ok());
  EXPECT_EQ(limits.memory_bytes, 0);
  const std::string line = DescribeGrpcLimits(limits);
  EXPECT_THAT(line, HasSubstr("without limit"));
  EXPECT_THAT(line, HasSubstr("never old"));
  // A quota of exactly the largest request is enough.
  absl::SetFlag(&FLAGS_grpc_memory_bytes, kMaxRequest);
  EXPECT_TRUE(GrpcLimitsFromFlags(kMaxRequest, &limits).ok());
}

}  // namespace
}  // namespace sortd
