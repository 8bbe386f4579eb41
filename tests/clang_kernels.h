// The embedded kernels compiled with this machine's clang for targets no
// device here runs (NVIDIA's PTX, SPIR for Intel GPUs), so that tests can
// check what the vendor fast paths compile to. Each compiler object works
// in a temporary directory of its own, removed with it.
//
//   if (!ClangKernels::Available()) GTEST_SKIP() << "no clang";
//   ClangKernels clang("sortd-nvptx");
//   std::string ptx = clang.Compile("radix_sort",
//       "-cl-std=CL1.2 -target nvptx64-nvidia-nvcl -S", options, ".ptx");
#ifndef SORTD_TESTS_CLANG_KERNELS_H_
#define SORTD_TESTS_CLANG_KERNELS_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gpu/kernel_sources.h"
#include "gtest/gtest.h"

namespace sortd::testing {

class ClangKernels {
 public:
  static bool Available() {
    return std::system("clang --version > /dev/null 2>&1") == 0;
  }

  explicit ClangKernels(const std::string& tag)
      : dir_(std::filesystem::temp_directory_path() /
             absl::StrCat(tag, "-", ::getpid())) {
    std::filesystem::create_directories(dir_);
  }
  ~ClangKernels() { std::filesystem::remove_all(dir_); }
  ClangKernels(const ClangKernels&) = delete;
  ClangKernels& operator=(const ClangKernels&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  // What `clang FLAGS -o OUT OPTIONS -x cl SOURCE` writes for program
  // `name` (its embedded source), OUT named with `extension`; fails the
  // calling test, with clang's messages, and returns "" when clang refuses.
  std::string Compile(const std::string& name, const std::string& flags,
                      const std::string& options,
                      const std::string& extension) {
    const char* source = gpu::FindKernelSource(name);
    EXPECT_NE(source, nullptr) << name;
    if (source == nullptr) return "";
    const auto cl = dir_ / (name + ".cl");
    const auto out = dir_ / (name + extension);
    const auto log = dir_ / (name + ".log");
    std::ofstream(cl) << source;
    const std::string command =
        absl::StrCat("clang ", flags, " -o ", out.string(), " ", options,
                     " -x cl ", cl.string(), " 2> ", log.string());
    const int rc = std::system(command.c_str());
    std::stringstream text, err;
    err << std::ifstream(log).rdbuf();
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0)
        << name << " with " << options << ":\n"
        << err.str();
    text << std::ifstream(out).rdbuf();
    return text.str();
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_CLANG_KERNELS_H_
