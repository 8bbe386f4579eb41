// sortd's flags into the daemon's options (server/flags.h): the defaults
// and what is derived from them, the log flags, and which files --help
// lists. Each subject's flags have their tests beside it: flags_memory,
// flags_scheduling, flags_devices and flags_shm_test.cc.
#include "server/flags.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "server/flags_internal.h"
#include "server/log.h"

ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(std::string, log_format);

namespace sortd {
namespace {

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

TEST(Flags, TheServicesOwnFlagsAreTakenAsGiven) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_listen, "0.0.0.0:6000");
  absl::SetFlag(&FLAGS_metrics_listen, "");
  absl::SetFlag(&FLAGS_echo, false);
  absl::SetFlag(&FLAGS_part_timeout, absl::Seconds(3));
  absl::SetFlag(&FLAGS_drain_timeout, absl::Seconds(5));
  absl::SetFlag(&FLAGS_tls_cert, "/etc/sortd/server.pem");
  absl::SetFlag(&FLAGS_tls_key, "/etc/sortd/server.key");
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->grpc.listen, "0.0.0.0:6000");
  EXPECT_EQ(o->metrics_listen, "");
  EXPECT_FALSE(o->service.echo);
  EXPECT_EQ(o->service.part_timeout, absl::Seconds(3));
  EXPECT_EQ(o->drain_timeout, absl::Seconds(5));
  EXPECT_EQ(o->grpc.tls.cert, "/etc/sortd/server.pem");
  EXPECT_EQ(o->grpc.tls.key, "/etc/sortd/server.key");
  EXPECT_FALSE(o->grpc.tls.mutual());
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
