#include "server/authz.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Peer Client(std::vector<std::string> identities) {
  Peer p;
  p.client = "x509:" + identities.front();
  p.identities = std::move(identities);
  return p;
}

TEST(AuthzPolicyTest, AllowsListedIdentitiesTheirGroupsOnly) {
  auto policy = AuthzPolicy::Parse(
      "# sortd policy\n"
      "[sort]\n"
      "  indexer.batch.svc  \n"
      "sortd test client\n"
      "\n"
      "[shared_memory]\n"
      "spiffe://example.org/sa/colocated\r\n");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(
      policy->Check(MethodGroup::kSort, Client({"indexer.batch.svc"})).ok());
  EXPECT_TRUE(
      policy->Check(MethodGroup::kSort, Client({"sortd test client"})).ok());
  EXPECT_TRUE(policy
                  ->Check(MethodGroup::kSharedMemory,
                          Client({"spiffe://example.org/sa/colocated"}))
                  .ok());
  const absl::Status denied =
      policy->Check(MethodGroup::kSharedMemory, Client({"indexer.batch.svc"}));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("shared_memory"));
  // The message names the group, never who is allowed.
  EXPECT_THAT(denied.message(), Not(HasSubstr("spiffe")));
  EXPECT_EQ(policy->Check(MethodGroup::kSort, Client({"stranger"})).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(AuthzPolicyTest, AnyOfACertificatesIdentitiesMatches) {
  auto policy = AuthzPolicy::Parse("[sort]\nspiffe://b\n");
  ASSERT_TRUE(policy.ok());
  EXPECT_TRUE(
      policy->Check(MethodGroup::kSort, Client({"b.example", "spiffe://b"}))
          .ok());
  // Identities match whole, not as prefixes or case-blind.
  EXPECT_FALSE(
      policy->Check(MethodGroup::kSort, Client({"spiffe://b/x"})).ok());
  EXPECT_FALSE(policy->Check(MethodGroup::kSort, Client({"SPIFFE://b"})).ok());
}

TEST(AuthzPolicyTest, AStarAllowsEveryVerifiedCertificate) {
  auto policy = AuthzPolicy::Parse("[sort]\n*\n[shared_memory]\n");
  ASSERT_TRUE(policy.ok());
  EXPECT_TRUE(policy->Check(MethodGroup::kSort, Client({"anyone"})).ok());
  // A group listed empty is denied to all.
  EXPECT_FALSE(
      policy->Check(MethodGroup::kSharedMemory, Client({"anyone"})).ok());
  // An unauthenticated peer has no identity to allow.
  Peer anonymous;
  anonymous.client = "ipv4:127.0.0.1";
  const absl::Status s = policy->Check(MethodGroup::kSort, anonymous);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("client certificate"));
}

TEST(AuthzPolicyTest, AGroupNotNamedIsDenied) {
  auto policy = AuthzPolicy::Parse("[sort]\nclient\n");
  ASSERT_TRUE(policy.ok());
  EXPECT_FALSE(
      policy->Check(MethodGroup::kSharedMemory, Client({"client"})).ok());
}

TEST(AuthzPolicyTest, MalformedPoliciesNameTheLine) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"client\n[sort]\n", "line 1: an identity before any group header"},
      {"[sort]\nok\n[admin]\nx\n", "line 3: unknown method group 'admin'"},
      {"# c\n[sort\n", "line 2: a group header is a name in brackets"},
      {"", "names no method group"},
      {"# only comments\n\n", "names no method group"},
  };
  for (const Case& c : cases) {
    auto policy = AuthzPolicy::Parse(c.text);
    ASSERT_FALSE(policy.ok()) << c.text;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(policy.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(AuthzPolicyTest, LoadNamesTheFileThatCannotBeRead) {
  auto missing = AuthzPolicy::Load("/nonexistent/sortd-policy");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("--authz_policy=/nonexistent/sortd-policy: cannot "
                        "read the file"));
  const std::string path = ::testing::TempDir() + "/authz_test_policy";
  std::ofstream(path) << "[sort]\n[nope]\n";
  auto bad = AuthzPolicy::Load(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ": line 2"));
  std::ofstream(path) << "[sort]\nclient\n";
  auto good = AuthzPolicy::Load(path);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->Check(MethodGroup::kSort, Client({"client"})).ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sortd
