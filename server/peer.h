// Who a call comes from: the identity that fair shares of the queues
// (server/fair_queue.h) are kept by and that the authorization policy
// (server/authz.h) allows or denies.
//
// Over mutual TLS a client is its verified certificate: the identities
// gRPC reads from it (its subject alternative names, else its common
// name). Without one, a client is the host it connects from, without the
// port: a port names one connection, and a client that opened many would
// otherwise win as many shares.
//
//   const sortd::Peer peer = sortd::PeerOf(*context);
//   task->client = peer.client;
#ifndef SORTD_SERVER_PEER_H_
#define SORTD_SERVER_PEER_H_

#include <string>
#include <string_view>
#include <vector>

#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"

namespace sortd {

struct Peer {
  // The key of the client's fair share: "x509:" and its first certificate
  // identity when authenticated, else the host of its address ("ipv4:
  // 127.0.0.1", "ipv6:[::1]", "unix:/path").
  std::string client;
  // The verified certificate's identities (empty: not authenticated).
  std::vector<std::string> identities;

  bool authenticated() const { return !identities.empty(); }
};

// The peer of a call being served.
Peer PeerOf(const grpc::ServerContextBase& context);

// The same from its parts: `auth` may be null (no security), `address` is
// gRPC's peer string ("ipv4:127.0.0.1:40312").
Peer PeerFrom(const grpc::AuthContext* auth, std::string_view address);

// gRPC's peer string without its port: "ipv4:10.0.0.7:5123" ->
// "ipv4:10.0.0.7", "ipv6:[::1]:5123" -> "ipv6:[::1]" (also when the
// brackets are percent-encoded); other schemes are returned whole.
std::string HostOf(std::string_view address);

}  // namespace sortd

#endif  // SORTD_SERVER_PEER_H_
