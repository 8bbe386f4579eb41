// sortd's flags into the daemon's options (server/flags.h): the defaults
// and what is derived from them, every flag out of range refused naming
// itself, the log flags, and which files --help lists.
#include "server/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "server/flags_internal.h"
#include "server/log.h"

ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(std::string, log_format);

namespace sortd {
namespace {

using ::testing::HasSubstr;

TEST(Flags, TheDefaultsGiveTheDocumentedOptions) {
  absl::FlagSaver saver;
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->grpc.listen, "127.0.0.1:50051");
  EXPECT_EQ(o->metrics_listen, "127.0.0.1:9464");
  EXPECT_FALSE(o->engines.base.faults.any());
  EXPECT_TRUE(o->grpc.tls.cert.empty());
  // One call holds at most half the budget, one client as much as a call.
  EXPECT_EQ(o->service.max_call_bytes, o->service.max_held_bytes / 2);
  EXPECT_EQ(o->service.max_client_bytes, o->service.max_call_bytes);
  EXPECT_EQ(o->scheduler.max_call_units, o->scheduler.max_queued_units / 4);
  EXPECT_EQ(o->scheduler.max_client_queued_units,
            o->scheduler.max_queued_units / 2);
  EXPECT_EQ(o->scheduler.max_client_queued_requests,
            o->scheduler.max_queued_requests / 2);
  EXPECT_GT(o->cpu.threads, 0);
  EXPECT_FALSE(o->regions.enabled);
  // Every router threshold is calibrated unless pinned.
  EXPECT_LT(o->router.cpu_max_keys, 0);
  EXPECT_LT(o->router.solo_min_keys, 0);
}

TEST(Flags, LimitsGivenAreTakenAsGiven) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_max_held_bytes, int64_t{1} << 30);
  absl::SetFlag(&FLAGS_max_call_bytes, int64_t{1} << 28);
  absl::SetFlag(&FLAGS_max_client_held_bytes, int64_t{1} << 27);
  absl::SetFlag(&FLAGS_max_client_queued_requests, 7);
  absl::SetFlag(&FLAGS_cpu_threads, 3);
  absl::SetFlag(&FLAGS_cpu_max_keys, int64_t{5000});
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->service.max_held_bytes, size_t{1} << 30);
  EXPECT_EQ(o->service.max_call_bytes, size_t{1} << 28);
  EXPECT_EQ(o->service.max_client_bytes, size_t{1} << 27);
  EXPECT_EQ(o->scheduler.max_client_queued_requests, 7u);
  EXPECT_EQ(o->cpu.threads, 3);
  EXPECT_EQ(o->router.cpu_max_keys, 5000);
}

TEST(Flags, SharedMemoryIsOnWithASocketAndConnectionsAreAtLeastOne) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_shm_socket, "/run/sortd/shm/sortd.sock");
  absl::SetFlag(&FLAGS_shm_max_connections, 0);
  absl::SetFlag(&FLAGS_shm_max_bytes, int64_t{-5});
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->regions.enabled);
  EXPECT_EQ(o->shm.path, "/run/sortd/shm/sortd.sock");
  EXPECT_EQ(o->shm.max_connections, 1u);
  EXPECT_EQ(o->regions.max_bytes, 0u);
}

TEST(Flags, PinnedPoolArraysAreBatchedWhereTheyLieOnlyWithAPool) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_host_pool_pinned, true);
  absl::SetFlag(&FLAGS_host_pool_bytes, int64_t{1} << 30);
  absl::SetFlag(&FLAGS_host_pool_min_bytes, int64_t{1} << 20);
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->router.pinned_min_bytes, size_t{1} << 20);
  absl::SetFlag(&FLAGS_host_pool_bytes, int64_t{0});
  o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->router.pinned_min_bytes, 0u);
}

// One flag set out of range, and a flag the message must name.
struct OutOfRange {
  std::string named;
  std::function<void()> set;
};

std::vector<OutOfRange> BadFlags() {
  return {
      {"--max_request_bytes",
       [] { absl::SetFlag(&FLAGS_max_request_bytes, 0); }},
      {"--max_request_bytes",
       [] { absl::SetFlag(&FLAGS_max_request_bytes, int64_t{1} << 32); }},
      {"--cpu_threads", [] { absl::SetFlag(&FLAGS_cpu_threads, -1); }},
      {"--request_threads", [] { absl::SetFlag(&FLAGS_request_threads, -1); }},
      {"--max_batch_keys", [] { absl::SetFlag(&FLAGS_max_batch_keys, 0); }},
      {"--max_batch_keys",
       [] { absl::SetFlag(&FLAGS_max_batch_keys, (int64_t{1} << 31) + 1); }},
      {"--pipeline_depth", [] { absl::SetFlag(&FLAGS_pipeline_depth, 0); }},
      {"--full_pipeline_depth",
       [] { absl::SetFlag(&FLAGS_full_pipeline_depth, 17); }},
      {"--max_client_queued_requests",
       [] { absl::SetFlag(&FLAGS_max_client_queued_requests, 5000); }},
      {"--max_client_queued_keys",
       [] { absl::SetFlag(&FLAGS_max_client_queued_keys, int64_t{-1}); }},
      {"--stream_chunk_bytes",
       [] { absl::SetFlag(&FLAGS_stream_chunk_bytes, 8); }},
      {"--host_pool_min_bytes",
       [] { absl::SetFlag(&FLAGS_host_pool_min_bytes, 0); }},
      {"--device_memory_bytes",
       [] { absl::SetFlag(&FLAGS_device_memory_bytes, -1); }},
      {"--max_call_bytes",
       [] {
         absl::SetFlag(&FLAGS_max_held_bytes, int64_t{1} << 20);
         absl::SetFlag(&FLAGS_max_call_bytes, int64_t{1} << 21);
       }},
      {"--max_client_held_bytes",
       [] { absl::SetFlag(&FLAGS_max_client_held_bytes, int64_t{-1}); }},
      {"--stream_idle_timeout",
       [] { absl::SetFlag(&FLAGS_stream_idle_timeout, absl::Seconds(-1)); }},
      {"--large_request_threads",
       [] { absl::SetFlag(&FLAGS_large_request_threads, 1025); }},
      {"--max_batch_delay",
       [] { absl::SetFlag(&FLAGS_max_batch_delay, absl::Microseconds(-1)); }},
      {"--kernel_profile_interval",
       [] {
         absl::SetFlag(&FLAGS_kernel_profile_interval, absl::Seconds(-1));
       }},
      {"--host_pinned_max_bytes",
       [] { absl::SetFlag(&FLAGS_host_pinned_max_bytes, int64_t{-1}); }},
      {"--warm_up_keys", [] { absl::SetFlag(&FLAGS_warm_up_keys, -1); }},
      {"--kernel_policy",
       [] { absl::SetFlag(&FLAGS_kernel_policy, "no-such-policy"); }},
      {"--kernel_policy_overrides",
       [] { absl::SetFlag(&FLAGS_kernel_policy_overrides, "no.such=1"); }},
      {"enqueue", [] { absl::SetFlag(&FLAGS_inject_faults, "enqueue=x"); }},
  };
}

TEST(Flags, EveryFlagOutOfRangeIsRefusedNamingIt) {
  for (const OutOfRange& bad : BadFlags()) {
    SCOPED_TRACE(bad.named);
    absl::FlagSaver saver;
    bad.set();
    absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(o.status().message(), HasSubstr(bad.named));
  }
}

TEST(Flags, AnUnknownPolicyIsRefusedListingTheKnownOnes) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_kernel_policy, "no-such-policy");
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_FALSE(o.ok());
  for (const std::string& name : gpu::EnginePolicy::Names()) {
    EXPECT_THAT(o.status().message(), HasSubstr(name));
  }
}

TEST(Flags, FaultInjectionIsOnlyWhatTheFlagSays) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_inject_faults, "enqueue=2,stage=upload");
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->engines.base.faults.any());
  EXPECT_EQ(o->inject_faults, "enqueue=2,stage=upload");
}

TEST(Flags, LogFlagsAreCheckedAndApplied) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_log_level, "loud");
  absl::Status s = SetLogOptionsFromFlags();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_log_level, "info");
  absl::SetFlag(&FLAGS_log_format, "xml");
  s = SetLogOptionsFromFlags();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_log_format, "text");
  EXPECT_TRUE(SetLogOptionsFromFlags().ok());
}

TEST(Flags, HelpListsTheFlagsOfEverySubjectsFile) {
  for (const char* name : {"listen", "max_request_bytes", "device",
                           "max_batch_keys", "shm_socket"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_TRUE(IsSortdFlagsFile(flag->Filename())) << flag->Filename();
  }
  EXPECT_FALSE(IsSortdFlagsFile(""));
  EXPECT_FALSE(IsSortdFlagsFile("server/sortd_main.cc"));
  EXPECT_FALSE(IsSortdFlagsFile("lags.cc"));
}

}  // namespace
}  // namespace sortd
