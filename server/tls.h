// The gRPC port's credentials from sortd's TLS flags: plaintext, TLS
// (--tls_cert and --tls_key, PEM files) or mutual TLS (plus
// --tls_client_ca: client certificates required and verified against it).
//
//   auto creds = sortd::ServerCredentials(cert_path, key_path, ca_path);
//   if (!creds.ok()) ... INVALID_ARGUMENT naming the flag ...
#ifndef SORTD_SERVER_TLS_H_
#define SORTD_SERVER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace sortd {

// The PEM files of --tls_cert, --tls_key and --tls_client_ca (empty: not
// given).
struct TlsFiles {
  std::string cert, key, client_ca;
  // Whether clients must present a certificate (mutual TLS).
  bool mutual() const { return !client_ca.empty(); }
};

// Empty paths: plaintext. A key without a certificate (or the reverse), a
// CA without both, or an unreadable file: INVALID_ARGUMENT.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert, const std::string& key,
    const std::string& client_ca);
inline absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ServerCredentials(const TlsFiles& files) {
  return ServerCredentials(files.cert, files.key, files.client_ca);
}

}  // namespace sortd

#endif  // SORTD_SERVER_TLS_H_
