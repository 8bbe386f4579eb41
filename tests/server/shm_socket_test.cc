// The shared-memory registration socket (server/shm_socket.h), in process
// with the client's own helpers as the peer: a sealed memfd registered and
// let go with its connection; malformed registrations refused while the
// connection stays usable; the bounds on connections, regions and idle
// time; the directory's checks; Stop.
#include "server/shm_socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "client/shared_memory.h"
#include "tests/sealed_memfd.h"
#include "tests/temp_dir.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::SealedMemfd;

// Whether `done` holds within 30 s, looked at every millisecond (the
// socket's thread acts on its own time).
bool Eventually(const std::function<bool()>& done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The next datagram sortd sends on `connection`, waiting at most 30 s.
std::string Reply(int connection) {
  const timeval timeout{.tv_sec = 30, .tv_usec = 0};
  setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char reply[256];
  const ssize_t n = recv(connection, reply, sizeof reply, 0);
  return n > 0 ? std::string(reply, n) : std::string();
}

class ShmSocketTest : public ::testing::Test {
 protected:
  // The socket at path_ (whatever `options` says of the path).
  void Start(ShmSocket::Options options = {}) {
    options.path = path_;
    absl::StatusOr<std::unique_ptr<ShmSocket>> s =
        ShmSocket::Start(options, &registry_);
    ASSERT_TRUE(s.ok()) << s.status();
    socket_ = *std::move(s);
  }
  int Connect() {
    absl::StatusOr<int> fd = ConnectShmSocket(path_);
    EXPECT_TRUE(fd.ok()) << fd.status();
    return fd.ok() ? *fd : -1;
  }
  // Registers a new sealed memfd of `bytes` over `connection`.
  absl::StatusOr<std::pair<std::string, size_t>> Register(int connection,
                                                          size_t bytes) {
    const int fd = SealedMemfd(bytes);
    auto registered = RegisterMemfd(connection, fd);
    close(fd);
    return registered;
  }

  testing::TempDirectory dir_;
  const std::string root_ = dir_.path();
  const std::string path_ = root_ + "/shm/sortd.sock";
  RegionRegistry registry_{{.enabled = true, .max_bytes = size_t{1} << 24}};
  std::unique_ptr<ShmSocket> socket_;  // stops before the rest goes
};

TEST_F(ShmSocketTest, ARegionLivesAsLongAsItsConnection) {
  Start();
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  const int connection = Connect();
  auto registered = Register(connection, 1 << 16);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->second, size_t{1} << 16);
  EXPECT_NE(registry_.Find(registered->first), nullptr);
  EXPECT_EQ(socket_->counts().registered, 1u);
  close(connection);
  EXPECT_TRUE(Eventually([&] { return registry_.regions() == 0; }));
  EXPECT_EQ(registry_.Find(registered->first), nullptr);
}

TEST_F(ShmSocketTest, MalformedRegistrationsAreRefusedAndTheConnectionServes) {
  Start();
  const int connection = Connect();
  // Unsealed: the registry says what to change.
  const int loose = memfd_create("loose", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(loose, 1 << 16), 0);
  auto refused = RegisterMemfd(connection, loose);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  close(loose);
  // Two descriptors, none, and another message.
  const int a = SealedMemfd(1 << 16), b = SealedMemfd(1 << 16);
  for (const auto& [text, fds] :
       {std::pair<std::string, std::vector<int>>{"REGISTER 1\n", {a, b}},
        {"REGISTER 1\n", {}},
        {"REGISTER 2\n", {a}}}) {
    ASSERT_TRUE(SendWithDescriptors(connection, text, fds).ok());
    EXPECT_THAT(Reply(connection), HasSubstr("ERROR 3 "));
  }
  close(a);
  close(b);
  EXPECT_EQ(socket_->counts().refused, 4u);
  EXPECT_EQ(registry_.regions(), 0u);
  EXPECT_TRUE(Register(connection, 1 << 16).ok());
  close(connection);
}

TEST_F(ShmSocketTest, ConnectionsAndRegionsAreBounded) {
  Start({.path = "", .max_connections = 1, .max_regions_per_connection = 2});
  const int first = Connect();
  ASSERT_TRUE(Register(first, 1 << 16).ok());
  ASSERT_TRUE(Register(first, 1 << 16).ok());
  EXPECT_EQ(Register(first, 1 << 16).status().code(),
            absl::StatusCode::kResourceExhausted);
  // The connection past the limit is answered at once and closed.
  const int second = Connect();
  const std::string reply = Reply(second);
  EXPECT_THAT(reply, HasSubstr("ERROR 8 "));
  EXPECT_THAT(reply, HasSubstr("clients are connected"));
  EXPECT_EQ(socket_->counts().dropped, 1u);
  EXPECT_EQ(registry_.regions(), 2u);
  close(second);
  close(first);
}

TEST_F(ShmSocketTest, AConnectionThatRegistersNothingIsClosed) {
  Start({.path = "", .idle_timeout = absl::Milliseconds(50)});
  const int connection = Connect();
  EXPECT_TRUE(Eventually([&] {
    const ShmSocket::Counts counts = socket_->counts();
    return counts.dropped == 1 && counts.open == 0;
  }));
  EXPECT_EQ(socket_->counts().connections, 1u);
  close(connection);
}

TEST_F(ShmSocketTest, StopClosesEveryConnectionAndRemovesTheFile) {
  Start();
  const int connection = Connect();
  ASSERT_TRUE(Register(connection, 1 << 16).ok());
  socket_->Stop();
  EXPECT_EQ(registry_.regions(), 0u);
  EXPECT_NE(access(path_.c_str(), F_OK), 0);
  socket_->Stop();  // again: nothing left to do
  EXPECT_FALSE(ConnectShmSocket(path_).ok());
  close(connection);
}

TEST_F(ShmSocketTest, UnsafeDirectoriesAreRefused) {
  const std::string open_dir = root_ + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  auto s = ShmSocket::Start({.path = open_dir + "/sortd.sock"}, &registry_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("writable by every user"));
  const std::string link = root_ + "/link";
  ASSERT_EQ(symlink(open_dir.c_str(), link.c_str()), 0);
  s = ShmSocket::Start({.path = link + "/sortd.sock"}, &registry_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("symbolic links"));
}

}  // namespace
}  // namespace sortd
