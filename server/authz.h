// AuthzPolicy: which client identities may call which of sortd's methods,
// over mutual TLS (--authz_policy). Identities are those of the verified
// client certificate (server/peer.h: its subject alternative names, else
// its common name). Methods come in groups:
//
//   sort           Sort (parts included), Transpose, Echo, SortStream
//   shared_memory  Sort and Echo requests that name a shared-memory region
//                  (SortRequest.shared), besides sort
//
// Health and reflection stay open to every client the TLS handshake
// admitted: they expose no one's data. Registering a region happens over
// --shm_socket, a local Unix socket that gRPC identities do not reach.
//
// The policy file: a group's name in brackets, then the identities allowed
// to call it, one a line (whole, spaces included; "*" allows every verified
// certificate); blank lines and lines starting with '#' are ignored. A
// group the file does not name is denied to everyone.
//
//   # sortd authorization policy
//   [sort]
//   spiffe://example.org/ns/batch/sa/indexer
//   indexer.batch.svc
//   [shared_memory]
//   spiffe://example.org/ns/batch/sa/indexer
//
//   absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Load(path);
//   absl::Status s = policy->Check(MethodGroup::kSort, PeerOf(*context));
#ifndef SORTD_SERVER_AUTHZ_H_
#define SORTD_SERVER_AUTHZ_H_

#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/peer.h"

namespace sortd {

enum class MethodGroup { kSort = 0, kSharedMemory = 1 };

// "sort", "shared_memory".
const char* MethodGroupName(MethodGroup group);

class AuthzPolicy {
 public:
  // INVALID_ARGUMENT naming the line of the first error.
  static absl::StatusOr<AuthzPolicy> Parse(std::string_view text);
  // Parse of the file's text; INVALID_ARGUMENT when it cannot be read.
  static absl::StatusOr<AuthzPolicy> Load(const std::string& path);

  // OK, or PERMISSION_DENIED naming the group (never the allow-list).
  absl::Status Check(MethodGroup group, const Peer& peer) const;

 private:
  static constexpr int kGroups = 2;
  std::set<std::string, std::less<>> allowed_[kGroups];
  bool any_[kGroups] = {false, false};
};

}  // namespace sortd

#endif  // SORTD_SERVER_AUTHZ_H_
