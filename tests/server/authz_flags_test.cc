// --authz_policy (server/authz_flags.h): no flag, no policy; a policy needs
// mutual TLS; an unreadable or malformed file is refused; a good one loads.
#include "server/authz_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"

ABSL_DECLARE_FLAG(std::string, authz_policy);

namespace sortd {
namespace {

using ::testing::HasSubstr;

// A policy file with `text`, removed at the end of the test.
class PolicyFile {
 public:
  explicit PolicyFile(const std::string& text) {
    char name[] = "/tmp/sortd_authz_XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~PolicyFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(AuthzFlags, NoFlagNoPolicy) {
  absl::FlagSaver saver;
  absl::StatusOr<std::unique_ptr<const AuthzPolicy>> p =
      AuthzPolicyFromFlags(/*mutual_tls=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, nullptr);
}

TEST(AuthzFlags, APolicyNeedsMutualTls) {
  absl::FlagSaver saver;
  PolicyFile file("[sort]\nclient a\n");
  absl::SetFlag(&FLAGS_authz_policy, file.path());
  absl::StatusOr<std::unique_ptr<const AuthzPolicy>> p =
      AuthzPolicyFromFlags(/*mutual_tls=*/false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("--tls_client_ca"));
  p = AuthzPolicyFromFlags(/*mutual_tls=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_NE(*p, nullptr);
}

TEST(AuthzFlags, UnreadableOrMalformedFilesAreRefused) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_authz_policy, "/nonexistent/sortd/authz.policy");
  EXPECT_EQ(AuthzPolicyFromFlags(true).status().code(),
            absl::StatusCode::kInvalidArgument);
  PolicyFile bad("[no_such_group]\nclient a\n");
  absl::SetFlag(&FLAGS_authz_policy, bad.path());
  EXPECT_EQ(AuthzPolicyFromFlags(true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sortd
