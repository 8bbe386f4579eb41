// sortctl's inputs and outputs (client/cli_io.h): files and "-" (stdin,
// stdout) carry bytes unchanged, NULs included; what cannot be read or
// written is an error, a full disk too, however short the text; the
// progress line waits for its result and stays silent off a terminal.
#include "client/cli_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace sortd::cli {
namespace {

// Bytes of every value, NULs and newlines among them.
std::string AllBytes() {
  std::string text;
  for (int i = 0; i < 3 * 256; ++i) text.push_back(static_cast<char>(i));
  return text;
}

// A temporary file, removed with this.
class TempFile {
 public:
  TempFile() {
    char name[] = "/tmp/sortd_cli_io_XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    if (fd >= 0) close(fd);
    path_ = name;
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  std::string Contents() const {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string path_;
};

// Runs `f` with file descriptor `target` (0, 1 or 2) pointing at `path`,
// and puts it back after.
template <typename F>
auto WithFd(int target, const std::string& path, int flags, F f) {
  std::fflush(stdout);
  const int fd = open(path.c_str(), flags);
  if (fd < 0) {
    ADD_FAILURE() << "cannot open " << path;
    return decltype(f())();
  }
  const int saved = dup(target);
  dup2(fd, target);
  close(fd);
  auto result = f();
  std::fflush(stdout);
  std::clearerr(stdout);
  std::clearerr(stdin);
  std::cin.clear();
  dup2(saved, target);
  close(saved);
  return result;
}

TEST(CliIo, FilesCarryEveryByte) {
  TempFile file;
  ASSERT_TRUE(WriteOutput(file.path(), AllBytes()).ok());
  absl::StatusOr<std::string> read = ReadInput(file.path());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, AllBytes());
}

TEST(CliIo, DashIsStdinAndStdout) {
  TempFile file;
  absl::Status written = WithFd(1, file.path(), O_WRONLY | O_TRUNC,
                                [] { return WriteOutput("-", AllBytes()); });
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(file.Contents(), AllBytes());
  absl::StatusOr<std::string> read =
      WithFd(0, file.path(), O_RDONLY, [] { return ReadInput("-"); });
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, AllBytes());
}

TEST(CliIo, WhatCannotBeReadOrWrittenIsAnError) {
  EXPECT_EQ(ReadInput("/nonexistent/keys.bin").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(WriteOutput("/nonexistent/out.bin", "x").code(),
            absl::StatusCode::kUnavailable);
  // A short text fits the stream's buffer: the full disk shows only when
  // it is flushed.
  for (const std::string& text :
       {std::string("x"), std::string(1 << 20, 'k')}) {
    SCOPED_TRACE(text.size());
    EXPECT_EQ(WriteOutput("/dev/full", text).code(),
              absl::StatusCode::kUnavailable);
    absl::Status to_full = WithFd(1, "/dev/full", O_WRONLY,
                                  [&] { return WriteOutput("-", text); });
    EXPECT_EQ(to_full.code(), absl::StatusCode::kUnavailable);
  }
}

TEST(CliIo, ProgressWaitsForItsResultAndIsSilentOffATerminal) {
  TempFile err;
  const int result = WithFd(2, err.path(), O_WRONLY, [] {
    Progress progress(/*quiet=*/false);
    progress.Step("generating keys");
    std::promise<int> promise;
    std::future<int> future = promise.get_future();
    std::thread worker([&] { promise.set_value(42); });
    const int value = progress.Wait(future, "sorting");
    worker.join();
    progress.Clear();
    return value;
  });
  EXPECT_EQ(result, 42);
  EXPECT_EQ(err.Contents(), "");
}

}  // namespace
}  // namespace sortd::cli
