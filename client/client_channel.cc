// The client's connections: the channels Client::Create opens (their
// load-balancing and retry policy, TLS credentials, one TCP connection
// each), and how calls are spread over them: small calls on the first,
// larger ones in turn, and which connections reach the same server (for
// sorts sent in parts).
#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "core/mutex.h"

namespace sortd {

namespace {

// The whole of a PEM file.
absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The default service config: the load-balancing policy (gRPC prefers a
// service config's to the channel argument's), and, with `max_attempts`
// above 1, a retry policy for calls refused for want of capacity or while
// a server is unreachable or draining. gRPC waits the server's retry
// pushback where the answer carries one.
std::string DefaultServiceConfig(const std::string& policy, int max_attempts) {
  std::string config =
      absl::StrCat(R"({"loadBalancingConfig": [{")", policy, R"(": {}}])");
  if (max_attempts > 1) {
    absl::StrAppend(
        &config,
        R"(, "methodConfig": [{"name": [{"service": "sortd.v1.SortService"},)",
        R"( {"service": "grpc.health.v1.Health"}], "retryPolicy": {)",
        R"("maxAttempts": )", std::min(max_attempts, 5),
        R"(, "initialBackoff": "0.1s", "maxBackoff": "2s",)",
        R"( "backoffMultiplier": 2, "retryableStatusCodes":)",
        R"( ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}])");
  }
  return config + "}";
}

// Whether `target` names one address (an IP literal, localhost or a Unix
// socket), so that every call of a channel reaches the same server.
bool OneAddress(absl::string_view target) {
  if (absl::ConsumePrefix(&target, "unix:") ||
      absl::ConsumePrefix(&target, "unix-abstract:")) {
    return true;
  }
  if (absl::ConsumePrefix(&target, "ipv4:") ||
      absl::ConsumePrefix(&target, "ipv6:")) {
    return !absl::StrContains(target, ',');
  }
  if (absl::ConsumePrefix(&target, "dns:")) {
    // dns:[//authority/]host[:port]
    if (absl::ConsumePrefix(&target, "//")) {
      const size_t slash = target.find('/');
      if (slash == absl::string_view::npos) return false;
      target.remove_prefix(slash + 1);
    }
  } else if (absl::StrContains(target, "://") ||
             absl::StrContains(target, ":///")) {
    return false;  // another resolver (xds, ...)
  }
  // host[:port], [v6]:port
  std::string host;
  if (absl::ConsumePrefix(&target, "[")) {
    host = std::string(target.substr(0, target.find(']')));
  } else {
    const size_t colon = target.rfind(':');
    host = std::string(target.substr(0, colon));
    if (absl::StrContains(host, ':')) host = std::string(target);  // bare v6
  }
  if (host == "localhost") return true;
  in6_addr v6;
  in_addr v4;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// The load-balancing policy the options ask for (round_robin when they
// name none), once it and `max_attempts` are checked.
absl::StatusOr<std::string> PolicyName(const ClientOptions& options) {
  if (options.max_attempts < 1 || options.max_attempts > 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_attempts=", options.max_attempts, ": expected 1 to 5"));
  }
  const std::string policy = options.load_balancing.empty()
                                 ? std::string("round_robin")
                                 : options.load_balancing;
  if (!std::all_of(policy.begin(), policy.end(),
                   [](char c) { return absl::ascii_isalnum(c) || c == '_'; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("load_balancing '", policy, "' is not a policy name"));
  }
  return policy;
}

// The channel's credentials: insecure, or TLS (with the CA, the client's
// certificate and key read from their PEM files) when the options ask for
// it, in which case `args` gets the name to check, if one is given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const ClientOptions& options, grpc::ChannelArguments& args) {
  if (!options.tls && options.tls_ca.empty() && options.tls_cert.empty()) {
    return grpc::InsecureChannelCredentials();
  }
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
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  return grpc::SslCredentials(ssl);
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
  absl::StatusOr<std::string> policy = PolicyName(options);
  if (!policy.ok()) return policy.status();
  args.SetServiceConfigJSON(
      DefaultServiceConfig(*policy, options.max_attempts));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options.max_attempts > 1 ? 1 : 0);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS,
              static_cast<int>(std::clamp<int64_t>(
                  absl::ToInt64Milliseconds(options.min_resolve_interval), 0,
                  int64_t{24} * 3600 * 1000)));
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(options, args);
  if (!credentials.ok()) return credentials.status();
  // Separate connections: gRPC would otherwise share one subchannel (one
  // TCP connection) among channels of equal arguments.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::max(1, options.connections); ++i) {
    auto channel = grpc::CreateCustomChannel(target, *credentials, args);
    if (channel == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create a channel to ", target));
    }
    channels.push_back(std::move(channel));
  }
  auto client =
      std::unique_ptr<Client>(new Client(std::move(channels), options));
  client->one_server_ = options.load_balancing == "pick_first" ||
                        (options.load_balancing.empty() && OneAddress(target));
  return client;
}

Client::Client(std::vector<std::shared_ptr<grpc::Channel>> channels,
               const ClientOptions& options)
    : options_(options) {
  for (auto& channel : channels) {
    Connection c;
    c.stub = v1::SortService::NewStub(channel);
    c.generic = std::make_unique<grpc::GenericStub>(channel);
    c.channel = std::move(channel);
    pool_.push_back(std::move(c));
  }
  instances_.resize(pool_.size());
}

void Client::NoteInstance(size_t i, const grpc::ClientContext& context) {
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find("sortd-instance");
  if (it == metadata.end()) return;
  MutexLock lock(&instances_mu_);
  instances_[i].assign(it->second.data(), it->second.size());
}

std::vector<size_t> Client::SameServerConnections() {
  for (size_t i = 0; i < pool_.size(); ++i) {
    {
      MutexLock lock(&instances_mu_);
      if (!instances_[i].empty()) continue;
    }
    // An empty sort: a few bytes each way, and the process's name back.
    const std::string empty_sort("\x0a\x00", 2);
    grpc::Slice slice(empty_sort);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    Prepare(&context);
    context.AddMetadata("sortd-want-instance", "1");
    std::promise<grpc::Status> done;
    pool_[i].generic->UnaryCall(&context, "/sortd.v1.SortService/Sort",
                                grpc::StubOptions(), &request, &response,
                                [&](grpc::Status s) { done.set_value(s); });
    if (done.get_future().get().ok()) NoteInstance(i, context);
  }
  MutexLock lock(&instances_mu_);
  std::map<std::string, std::vector<size_t>> by_instance;
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (!instances_[i].empty()) by_instance[instances_[i]].push_back(i);
  }
  std::vector<size_t> best;
  for (auto& [name, connections] : by_instance) {
    if (connections.size() > best.size()) best = connections;
  }
  return best;
}

size_t Client::ConnectionFor(size_t bytes) {
  if (bytes < options_.small_call_bytes || pool_.size() == 1) return 0;
  const size_t turn = next_.fetch_add(1, std::memory_order_relaxed);
  if (options_.small_call_bytes == 0) return turn % pool_.size();
  return 1 + turn % (pool_.size() - 1);
}

void Client::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  context->set_wait_for_ready(options_.wait_for_ready);
}

}  // namespace sortd
