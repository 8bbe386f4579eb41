// --authz_policy: the authorization policy (server/authz.h) sortd starts
// with, read once at start.
#ifndef SORTD_SERVER_AUTHZ_FLAGS_H_
#define SORTD_SERVER_AUTHZ_FLAGS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/authz.h"

namespace sortd {

// The policy the flag names (null: no --authz_policy, every client the TLS
// handshake admits may call every method). INVALID_ARGUMENT when the file
// cannot be read or parsed, or without mutual TLS (`mutual_tls`: whether
// --tls_client_ca is set), which the policy's identities come from.
absl::StatusOr<std::unique_ptr<const AuthzPolicy>> AuthzPolicyFromFlags(
    bool mutual_tls);

}  // namespace sortd

#endif  // SORTD_SERVER_AUTHZ_FLAGS_H_
