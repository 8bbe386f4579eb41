// Test support for the tests of the sortctl binary (client/sortctl*.cc):
// sortctl run as a user runs it, against a target or with SORTD_TARGET,
// numbers read out of its JSON, input files written for it.
#ifndef SORTD_TESTS_CLIENT_SORTCTL_RUN_H_
#define SORTD_TESTS_CLIENT_SORTCTL_RUN_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/server_process.h"

namespace sortd::testing {

inline CommandResult Sortctl(const std::string& target,
                             const std::string& args) {
  return RunCommand(std::string(SORTCTL_BINARY) + " --target=" + target + " " +
                    args);
}

// The unsigned number after "name": in sortctl's JSON; -1 when absent.
inline int64_t JsonCount(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = json.find(key);
  if (at == std::string::npos) return -1;
  size_t i = at + key.size();
  if (i >= json.size() || json[i] < '0' || json[i] > '9') return -1;
  int64_t n = 0;
  for (; i < json.size() && json[i] >= '0' && json[i] <= '9'; ++i) {
    n = n * 10 + (json[i] - '0');
  }
  return n;
}

// The number after "name": in sortctl's JSON; NaN when absent.
inline double JsonNumber(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = json.find(key);
  if (at == std::string::npos) return std::nan("");
  char* end = nullptr;
  const char* begin = json.c_str() + at + key.size();
  const double v = std::strtod(begin, &end);
  return end == begin ? std::nan("") : v;
}

// Writes `text` to a new file in the test's temporary directory.
inline std::string WriteTempFile(const std::string& name,
                                 const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  return path;
}

// sortctl run with SORTD_TARGET set to `env_target` in its environment.
inline CommandResult SortctlWithEnv(const std::string& env_target,
                                    const std::string& args) {
  return RunCommand("SORTD_TARGET='" + env_target + "' " +
                    std::string(SORTCTL_BINARY) + " " + args);
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_CLIENT_SORTCTL_RUN_H_
