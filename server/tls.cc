#include "server/tls.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace sortd {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag,
                                    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert, const std::string& key,
    const std::string& client_ca) {
  if (cert.empty() && key.empty() && client_ca.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key (and --tls_client_ca only "
        "with them)");
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> pem_cert = ReadPem("tls_cert", cert);
  if (!pem_cert.ok()) return pem_cert.status();
  absl::StatusOr<std::string> pem_key = ReadPem("tls_key", key);
  if (!pem_key.ok()) return pem_key.status();
  pair.cert_chain = *pem_cert;
  pair.private_key = *pem_key;
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("tls_client_ca", client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  LogLine("gRPC port speaks TLS%s\n",
          client_ca.empty() ? "" : " and requires client certificates");
  return grpc::SslServerCredentials(ssl);
}

}  // namespace sortd
