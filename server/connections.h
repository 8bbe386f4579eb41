// The TCP connections clients hold to a port of this host, read from
// /proc/net/tcp and /proc/net/tcp6 (Linux).
//
// A gRPC server that has sent GOAWAY closes each connection as soon as its
// last call is done, and a socket closed with unread input (the client's
// flow-control updates) is reset: answers still in the socket buffers are
// lost. So a draining sortd sends GOAWAY only once every answer has been
// acknowledged by its client's host:
//
//   service.WaitForCalls(deadline);
//   WaitForAnswersAcknowledged(port, deadline);
//   server->Shutdown(...);
#ifndef SORTD_SERVER_CONNECTIONS_H_
#define SORTD_SERVER_CONNECTIONS_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sortd {

struct PortConnections {
  int established = 0;  // connections to the port, neither end closed
  int sending = 0;      // of those, with bytes not yet acknowledged
};

// The connections whose local end is `port` (IPv4 and IPv6).
absl::StatusOr<PortConnections> ConnectionsToPort(int port);

// Polls until no connection to `port` has unacknowledged bytes, or until
// `deadline`; returns how many still have some (0 also when the tables
// cannot be read).
int WaitForAnswersAcknowledged(int port, absl::Time deadline);

}  // namespace sortd

#endif  // SORTD_SERVER_CONNECTIONS_H_
