#include "client/client.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace sortd {
namespace {

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

}  // namespace

namespace {

// The whole of a PEM file.
absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const std::string& target, const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("empty target");
  grpc::ChannelArguments args;
  // Responses can be larger than requests (permutations), and the server
  // enforces the request limit itself.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (!options.load_balancing.empty()) {
    args.SetLoadBalancingPolicyName(options.load_balancing);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (options.tls || !options.tls_ca.empty() || !options.tls_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca.empty()) {
      absl::StatusOr<std::string> ca = ReadPem(options.tls_ca);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs its key, and a key its certificate");
    }
    if (!options.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadPem(options.tls_cert);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem(options.tls_key);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  auto channel = grpc::CreateCustomChannel(target, credentials, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create a channel to ", target));
  }
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel,
               const ClientOptions& options)
    : channel_(std::move(channel)),
      stub_(v1::SortService::NewStub(channel_)),
      options_(options) {}

void Client::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  context->set_wait_for_ready(options_.wait_for_ready);
}

absl::StatusOr<v1::SortResponse> Client::Sort(const v1::SortRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SortResponse response;
  grpc::Status s = stub_->Sort(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<v1::TransposeResponse> Client::Transpose(
    const v1::TransposeRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::TransposeResponse response;
  grpc::Status s = stub_->Transpose(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<std::vector<uint32_t>> Client::Transpose(
    absl::Span<const uint32_t> rows) {
  v1::TransposeRequest request;
  request.set_matrices(PackArray(rows));
  absl::StatusOr<v1::TransposeResponse> response = Transpose(request);
  if (!response.ok()) return response.status();
  return UnpackArray<uint32_t>(response->matrices());
}

absl::Status Client::CheckHealth(const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  Prepare(&context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status s = stub->Check(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "health: ", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                        response.status())));
  }
  return absl::OkStatus();
}

}  // namespace sortd
