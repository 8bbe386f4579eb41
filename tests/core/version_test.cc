// What the build says it is (core/version.h): the project's version, a
// revision, and the two in one line.
#include "core/version.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace sortd {
namespace {

TEST(Version, IsTheProjectsAndTheTextNamesBoth) {
  EXPECT_STREQ(Version(), SORTD_TEST_PROJECT_VERSION);
  const std::string revision = GitRevision();
  ASSERT_FALSE(revision.empty());
  EXPECT_EQ(revision.find_first_of(" \t\n"), std::string::npos) << revision;
  EXPECT_EQ(VersionText("sortctl"), std::string("sortctl ") +
                                        SORTD_TEST_PROJECT_VERSION + " (git " +
                                        revision + ")");
}

}  // namespace
}  // namespace sortd
