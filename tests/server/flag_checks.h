// Test support for the tests of sortd's flag files (server/flags*.cc): a
// flag set out of range with the flag its refusal must name, and the check
// that the daemon's options are refused for each, naming it.
//
//   ExpectEachRefused({{"--cpu_threads",
//                       [] { absl::SetFlag(&FLAGS_cpu_threads, -1); }}});
#ifndef SORTD_TESTS_SERVER_FLAG_CHECKS_H_
#define SORTD_TESTS_SERVER_FLAG_CHECKS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "server/flags.h"

namespace sortd::testing {

struct OutOfRange {
  std::string named;
  std::function<void()> set;
};

// Each setting alone (the others at their defaults) makes
// SortdOptionsFromFlags fail INVALID_ARGUMENT with a message that names
// its flag.
inline void ExpectEachRefused(const std::vector<OutOfRange>& settings) {
  for (const OutOfRange& bad : settings) {
    SCOPED_TRACE(bad.named);
    absl::FlagSaver saver;
    bad.set();
    absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(o.status().message(), ::testing::HasSubstr(bad.named));
  }
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_SERVER_FLAG_CHECKS_H_
