// The Unix socket over which co-located clients register shared-memory
// regions by handing sortd a sealed memfd (server/shared_memory.h).
//
// Protocol (SOCK_SEQPACKET, one datagram each way): the client sends
// "REGISTER 1\n" with exactly one file descriptor attached (SCM_RIGHTS);
// sortd answers "OK <token> <bytes>\n", the region's token for
// SharedArrays.region and its size, or "ERROR <code> <message>\n", <code>
// being a google.rpc.Code number. A connection may register several
// regions; they all end when it closes (or sortd stops), and requests still
// using one keep its mapping until they are answered.
//
// One thread serves every connection with non-blocking calls, so no client
// can hold it (nor any gRPC thread) up: a client that does not read its
// answers is disconnected; a connection that registers nothing within
// `idle_timeout` is closed; connections and regions per connection are
// bounded. Who may connect is decided by the socket file's permissions
// (mode 0660: sortd's user and group) inside a directory sortd owns.
//
//   auto socket = ShmSocket::Start({.path = "/run/sortd/shm/sortd.sock"},
//                                  &registry);
//   ...
//   (*socket)->Stop();   // closes every connection, removes the file
#ifndef SORTD_SERVER_SHM_SOCKET_H_
#define SORTD_SERVER_SHM_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/shared_memory.h"

namespace sortd {

class ShmSocket {
 public:
  struct Options {
    std::string path;
    size_t max_connections = 256;
    size_t max_regions_per_connection = 64;
    // A connection that has registered no region this long after it
    // opened is closed.
    absl::Duration idle_timeout = absl::Seconds(10);
  };
  struct Counts {
    // Registrations answered OK and refused; connections accepted, and
    // closed by sortd (idle, over the limit, not reading); connections
    // open now.
    uint64_t registered = 0, refused = 0, connections = 0, dropped = 0,
             open = 0;
  };

  // Prepares the socket's directory (made mode 02770 when missing; refused
  // when it is a symbolic link, belongs to another user than sortd's or
  // root, or is writable by others), binds and starts serving.
  static absl::StatusOr<std::unique_ptr<ShmSocket>> Start(
      const Options& options, RegionRegistry* regions);
  ~ShmSocket();
  ShmSocket(const ShmSocket&) = delete;
  ShmSocket& operator=(const ShmSocket&) = delete;

  // Closes every connection (unregistering their regions) and removes the
  // socket file. Idempotent.
  void Stop();

  Counts counts() const;

 private:
  ShmSocket(const Options& options, RegionRegistry* regions, int listen_fd,
            int wake_fd);
  struct Connection;  // one client's, owned by the loop thread
  // The loop thread: accepts connections, reads and answers their
  // messages, and closes those idle too long, until Stop().
  void Loop();
  // The loop's steps; each runs on the loop thread only.
  // Closes connections[i], unregistering its regions.
  void Drop(std::vector<Connection>& connections, size_t i);
  // Closes the connections that registered nothing within idle_timeout;
  // returns when the next of the others would time out (or never).
  absl::Time DropIdle(std::vector<Connection>& connections, absl::Time now);
  // Accepts a waiting client, or refuses it when max_connections are open.
  void Accept(std::vector<Connection>& connections);
  // Reads and answers one message of `c`; false when the connection is to
  // be closed.
  bool Serve(Connection& c);
  // The region a message (`request`, with descriptors `fds`; `truncated`
  // when either did not fit) registers, or why it is refused.
  absl::StatusOr<RegionRegistry::Registered> Registration(
      const Connection& c, std::string_view request, bool truncated,
      const std::vector<int>& fds);

  const Options options_;
  RegionRegistry* const regions_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: Stop() wakes the loop
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> registered_{0}, refused_{0}, connections_{0},
      dropped_{0}, open_{0};
  std::thread thread_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_SHM_SOCKET_H_
