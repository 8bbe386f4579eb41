#include "server/peer.h"

#include "absl/strings/str_cat.h"

namespace sortd {

std::string HostOf(std::string_view address) {
  if (address.starts_with("ipv4:")) {
    const size_t colon = address.rfind(':');
    if (colon > 4) return std::string(address.substr(0, colon));
    return std::string(address);
  }
  if (address.starts_with("ipv6:")) {
    // "ipv6:[addr]:port", brackets maybe as %5B and %5D.
    for (std::string_view close : {"]:", "%5D:", "%5d:"}) {
      const size_t at = address.rfind(close);
      if (at != std::string_view::npos) {
        return std::string(address.substr(0, at + close.size() - 1));
      }
    }
    return std::string(address);
  }
  return std::string(address);
}

Peer PeerFrom(const grpc::AuthContext* auth, std::string_view address) {
  Peer peer;
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
      if (id.empty()) continue;
      peer.identities.emplace_back(id.data(), id.size());
    }
  }
  peer.client = peer.identities.empty()
                    ? HostOf(address)
                    : absl::StrCat("x509:", peer.identities.front());
  return peer;
}

Peer PeerOf(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return PeerFrom(auth.get(), context.peer());
}

}  // namespace sortd
