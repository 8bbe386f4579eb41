// Test support: a fresh directory under /tmp, removed with everything in
// it when the object goes.
#ifndef SORTD_TESTS_TEMP_DIR_H_
#define SORTD_TESTS_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace sortd::testing {

class TempDirectory {
 public:
  TempDirectory() {
    char tmpl[] = "/tmp/sortd_test_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    path_ = tmpl;
  }
  ~TempDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_TEMP_DIR_H_
