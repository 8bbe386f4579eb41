#include "server/authz_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "server/log.h"

ABSL_FLAG(std::string, authz_policy, "",
          "File of the client certificate identities allowed each method "
          "group (sort, shared_memory); needs --tls_client_ca. Empty: every "
          "client the TLS handshake admits may call every method.");

namespace sortd {

absl::StatusOr<std::unique_ptr<const AuthzPolicy>> AuthzPolicyFromFlags(
    bool mutual_tls) {
  const std::string path = absl::GetFlag(FLAGS_authz_policy);
  if (path.empty()) return nullptr;
  if (!mutual_tls) {
    return absl::InvalidArgumentError(
        "--authz_policy allows client certificate identities: it needs "
        "mutual TLS (--tls_cert, --tls_key and --tls_client_ca)");
  }
  absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Load(path);
  if (!policy.ok()) return policy.status();
  LogLine("authorization: method groups allowed by %s\n", path.c_str());
  return std::make_unique<const AuthzPolicy>(*std::move(policy));
}

}  // namespace sortd
