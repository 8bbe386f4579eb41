#include "server/connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace sortd {
namespace {

// 127.0.0.2: a loopback address no other test connects to, so that no
// stray client (one that took this port for free and connects to it on
// 127.0.0.1) adds a connection to the counts.
constexpr uint32_t kAddress = 0x7F000002;

// A listening socket on kAddress and an ephemeral port.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(kAddress);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { close(fd_); }
  int Accept() const { return accept(fd_, nullptr, nullptr); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(kAddress);
  a.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

PortConnections Count(int port) {
  absl::StatusOr<PortConnections> c = ConnectionsToPort(port);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.value_or(PortConnections{});
}

TEST(Connections, CountsTheServerEndsOfOnePort) {
  Listener listener;
  ASSERT_GT(listener.port(), 0);
  // The listening socket itself is no connection.
  EXPECT_EQ(Count(listener.port()).established, 0);
  const int first = Connect(listener.port());
  const int second = Connect(listener.port());
  const int accepted_first = listener.Accept();
  const int accepted_second = listener.Accept();
  ASSERT_GE(accepted_first, 0);
  ASSERT_GE(accepted_second, 0);
  // Only the server's ends count: the clients' local ports are others.
  EXPECT_EQ(Count(listener.port()).established, 2);
  EXPECT_EQ(Count(listener.port()).sending, 0);
  // A server that closed first leaves no established connection.
  close(accepted_first);
  EXPECT_EQ(Count(listener.port()).established, 1);
  close(first);
  close(second);
  close(accepted_second);
}

TEST(Connections, WaitsUntilTheClientHasReadTheAnswer) {
  Listener listener;
  const int client = Connect(listener.port());
  const int server = listener.Accept();
  ASSERT_GE(server, 0);
  // More than the socket buffers of both ends hold: the writer blocks
  // until the client reads.
  const std::string answer(32 << 20, 'x');
  std::thread writer([&] {
    size_t sent = 0;
    while (sent < answer.size()) {
      const ssize_t n =
          write(server, answer.data() + sent, answer.size() - sent);
      ASSERT_GT(n, 0);
      sent += static_cast<size_t>(n);
    }
  });
  // Before the client reads, bytes wait for its acknowledgement (the
  // first write fills the send queue before the writer blocks).
  std::string first(1, '\0');
  ASSERT_EQ(read(client, first.data(), 1), 1);
  EXPECT_EQ(WaitForAnswersAcknowledged(listener.port(), absl::Now()), 1);
  EXPECT_EQ(Count(listener.port()).sending, 1);

  size_t received = 1;
  std::string buf(1 << 20, '\0');
  while (received < answer.size()) {
    const ssize_t n = read(client, buf.data(), buf.size());
    ASSERT_GT(n, 0);
    received += static_cast<size_t>(n);
  }
  writer.join();
  EXPECT_EQ(WaitForAnswersAcknowledged(listener.port(),
                                       absl::Now() + absl::Seconds(30)),
            0);
  close(client);
  close(server);
}

}  // namespace
}  // namespace sortd
