// sortctl's inputs and outputs (client/cli_io.h): files and "-" (stdin,
// stdout) carry bytes unchanged, NULs included; what cannot be read or
// written is an error, a full disk too; the progress line waits for its
// result and stays silent off a terminal.
#include "client/cli_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <future>
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

std::string TempPath() {
  char name[] = "/tmp/sortd_cli_io_XXXXXX";
  const int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  close(fd);
  return name;
}

// Runs `f` with file descriptor `target` (0 or 1) pointing at `path`.
template <typename F>
auto WithFd(int target, const std::string& path, int flags, F f) {
  std::fflush(stdout);
  const int saved = dup(target);
  const int fd = open(path.c_str(), flags);
  EXPECT_GE(fd, 0) << path;
  dup2(fd, target);
  close(fd);
  auto result = f();
  std::fflush(stdout);
  std::clearerr(stdout);
  dup2(saved, target);
  close(saved);
  return result;
}

TEST(CliIo, FilesCarryEveryByte) {
  const std::string path = TempPath();
  ASSERT_TRUE(WriteOutput(path, AllBytes()).ok());
  absl::StatusOr<std::string> read = ReadInput(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, AllBytes());
  unlink(path.c_str());
}

TEST(CliIo, DashIsStdinAndStdout) {
  const std::string path = TempPath();
  absl::Status written = WithFd(1, path, O_WRONLY | O_TRUNC,
                                [] { return WriteOutput("-", AllBytes()); });
  ASSERT_TRUE(written.ok()) << written;
  absl::StatusOr<std::string> read =
      WithFd(0, path, O_RDONLY, [] { return ReadInput("-"); });
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, AllBytes());
  unlink(path.c_str());
}

TEST(CliIo, WhatCannotBeReadOrWrittenIsAnError) {
  EXPECT_EQ(ReadInput("/nonexistent/keys.bin").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(WriteOutput("/nonexistent/out.bin", "x").code(),
            absl::StatusCode::kUnavailable);
  const std::string big(1 << 20, 'k');
  EXPECT_EQ(WriteOutput("/dev/full", big).code(),
            absl::StatusCode::kUnavailable);
  absl::Status to_full =
      WithFd(1, "/dev/full", O_WRONLY, [&] { return WriteOutput("-", big); });
  EXPECT_EQ(to_full.code(), absl::StatusCode::kUnavailable);
}

TEST(CliIo, ProgressWaitsForItsResult) {
  Progress progress(/*quiet=*/false);
  std::promise<int> promise;
  std::future<int> future = promise.get_future();
  std::thread worker([&] { promise.set_value(42); });
  EXPECT_EQ(progress.Wait(future, "sorting"), 42);
  worker.join();
  progress.Step("done");
}

}  // namespace
}  // namespace sortd::cli
