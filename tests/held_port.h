// Test support: a loopback port that refuses connections for as long as the
// test needs it to. A port that is only closed can be handed to the next
// socket that binds port 0, in this or a parallel test, and calls meant to
// fail would then reach that server. A HeldPort keeps a socket bound to the
// port without listening: connecting is refused, and the kernel gives the
// port to no other socket until the HeldPort goes.
//
//   HeldPort dead;                  // a fresh port nothing listens on
//   Call(dead.target());            // fails UNAVAILABLE
//
//   HeldPort after(server_port);    // shares a live gRPC server's port
//   KillTheServer();                // the port now refuses, and stays ours
#ifndef SORTD_TESTS_HELD_PORT_H_
#define SORTD_TESTS_HELD_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace sortd::testing {

class HeldPort {
 public:
  // A fresh port; ok() says whether it was bound.
  HeldPort() : HeldPort(0) {}

  // Port `port` on 127.0.0.1, bound with SO_REUSEPORT so that it can join a
  // listener that set it too (gRPC servers do, as the same user).
  explicit HeldPort(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    const int on = 1;
    if (port != 0 &&
        setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0) {
      return;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() {
    if (fd_ >= 0) close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;

  bool ok() const { return port_ != 0; }
  int port() const { return port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The port of a "host:port" address; 0 if there is none.
inline int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return 0;
  return std::atoi(address.c_str() + colon + 1);
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_HELD_PORT_H_
