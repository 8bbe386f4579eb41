#include "client/client.h"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace sortd {
using client_wire::FromGrpcStatus;

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

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const std::string& target, const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("empty target");
  grpc::ChannelArguments args;
  // Responses can be larger than requests (permutations), and the server
  // enforces the request limit itself.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
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
  args.SetServiceConfigJSON(DefaultServiceConfig(policy, options.max_attempts));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options.max_attempts > 1 ? 1 : 0);
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
  // Separate connections: gRPC would otherwise share one subchannel (one
  // TCP connection) among channels of equal arguments.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::max(1, options.connections); ++i) {
    auto channel = grpc::CreateCustomChannel(target, credentials, args);
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
  std::lock_guard<std::mutex> lock(instances_mu_);
  instances_[i].assign(it->second.data(), it->second.size());
}

std::vector<size_t> Client::SameServerConnections() {
  for (size_t i = 0; i < pool_.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(instances_mu_);
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
  std::lock_guard<std::mutex> lock(instances_mu_);
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

namespace {

// The raw key field `field` (1-6, as the wire decoder reports it) of a
// request or response.
template <typename Message>
std::string* MutableKeysByNumber(int field, Message* m) {
  return key_fields::MutableKeys(
      m, key_fields::TypeOfRaw(field).value_or(KeyType::kU32));
}

using key_fields::Keys;

}  // namespace

namespace {

// Writes a SortResponse's arrays into a SortResponse message, reusing the
// buffers its fields already hold; fields the answer lacks are cleared.
class MessageSink final : public client_wire::SortResponseSink {
 public:
  explicit MessageSink(v1::SortResponse* m) : m_(m) {}
  ~MessageSink() override {
    if (!keys_) m_->clear_keys();
    if (!values_) m_->clear_values();
    if (!permutation_) m_->mutable_permutation()->clear();
    if (!served_by_) m_->clear_served_by();
  }
  char* Keys(int field, size_t bytes) override {
    keys_ = true;
    return Sized(MutableKeysByNumber(field, m_), bytes);
  }
  char* Values(int field, size_t bytes) override {
    values_ = true;
    return Sized(
        field == 9 ? m_->mutable_u64_values() : m_->mutable_u32_values(),
        bytes);
  }
  char* Permutation(size_t bytes) override {
    permutation_ = true;
    return Sized(m_->mutable_permutation(), bytes);
  }
  void ServedBy(const std::string& bytes) override {
    served_by_ = true;
    m_->mutable_served_by()->ParseFromString(bytes);
  }

 private:
  static char* Sized(std::string* s, size_t bytes) {
    s->resize(bytes);
    return s->data();
  }
  v1::SortResponse* m_;
  bool keys_ = false, values_ = false, permutation_ = false, served_by_ = false;
};

// The request's fields in wire order, its arrays borrowed; `shared` holds
// the serialized SharedArrays while the call runs.
client_wire::OutgoingMessage Encode(const v1::SortRequest& request,
                                    client_wire::Lease* lease,
                                    std::string* shared) {
  client_wire::OutgoingMessage m;
  if (const std::string* keys = Keys(request); keys != nullptr) {
    m.Bytes(static_cast<int>(request.keys_case()), keys->data(), keys->size(),
            lease);
  }
  if (request.order() != 0) m.Varint(7, static_cast<uint32_t>(request.order()));
  if (request.has_u32_values()) {
    m.Bytes(8, request.u32_values().data(), request.u32_values().size(), lease);
  } else if (request.has_u64_values()) {
    m.Bytes(9, request.u64_values().data(), request.u64_values().size(), lease);
  }
  if (request.return_permutation()) m.Varint(10, 1);
  if (request.response_key_coding() != 0) {
    m.Varint(12, static_cast<uint32_t>(request.response_key_coding()));
  }
  if (request.has_shared()) {
    *shared = request.shared().SerializeAsString();
    m.Bytes(11, shared->data(), shared->size(), lease);
  }
  return m;
}

}  // namespace

absl::StatusOr<grpc::ByteBuffer> Client::CallRaw(const char* method,
                                                 grpc::ByteBuffer request) {
  grpc::ClientContext context;
  Prepare(&context);
  grpc::ByteBuffer response;
  grpc::Status status;
  const size_t bytes = request.Length();
  Connection& connection = pool_[ConnectionFor(bytes)];
  const std::string path = absl::StrCat("/sortd.v1.SortService/", method);
  if (bytes < options_.small_call_bytes) {
    // A small call waits on a completion queue of its own, which its
    // thread polls, rather than on gRPC's shared callback threads: while
    // those read other calls' large answers, its answer is not held up
    // behind them. (Large calls keep the callback threads: their requests
    // may borrow the caller's arrays, and a write cut short must still be
    // driven to its end after the call, with no caller left polling.)
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> call =
        connection.generic->PrepareUnaryCall(&context, path, request, &cq);
    call->StartCall();
    call->Finish(&response, &status, &cq);
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok) && tag != &cq) {
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  } else {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    connection.generic->UnaryCall(&context, path, grpc::StubOptions(), &request,
                                  &response, [&](grpc::Status s) {
                                    std::lock_guard<std::mutex> lock(mu);
                                    status = std::move(s);
                                    done = true;
                                    cv.notify_all();
                                  });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status Client::SortRaw(const char* method,
                             client_wire::OutgoingMessage request,
                             client_wire::Lease& lease,
                             client_wire::SortResponseSink& sink) {
  absl::StatusOr<grpc::ByteBuffer> response = CallRaw(method, request.Take());
  // gRPC has released the request by now, or is about to: the caller's
  // arrays must not be freed before it has.
  lease.Wait();
  if (!response.ok()) return response.status();
  return client_wire::DecodeSortResponse(*response, sink);
}

std::vector<size_t> Client::SplitOver(size_t bytes) {
  constexpr size_t kPartBytes = size_t{8} << 20;
  // With client-side load balancing over several addresses a
  // connection's calls go to several servers in turn: parts could not be
  // kept together. While other sorts
  // are in flight the connections are busy already, and splitting costs
  // the server a join copy for nothing (16 concurrent 16M-key sorts on an
  // H100 host: 49 req/s split, 63 whole).
  if (options_.split_bytes == 0 || bytes < options_.split_bytes ||
      pool_.size() < 2 || !one_server_ ||
      sorts_in_flight_.load(std::memory_order_relaxed) > 1) {
    return {};
  }
  size_t parts = std::min(pool_.size(), bytes / kPartBytes);
  // The first connection is kept for small calls (ConnectionFor).
  if (parts < 2) return {};
  std::vector<size_t> connections = SameServerConnections();
  if (options_.small_call_bytes > 0) std::erase(connections, size_t{0});
  parts = std::min(parts, connections.size());
  // Each part must fit one message, or the sort goes through SortStream.
  if (parts < 2 || bytes / parts + 4096 > options_.max_unary_bytes) return {};
  connections.resize(parts);
  return connections;
}

absl::Status Client::Sort(const v1::SortRequest& request,
                          v1::SortResponse* response) {
  const SortInFlight counted(sorts_in_flight_);
  client_wire::Lease lease;
  std::string shared;
  client_wire::OutgoingMessage m = Encode(request, &lease, &shared);
  if (const std::vector<size_t> parts =
          request.has_shared() || request.has_part() ? std::vector<size_t>{}
                                                     : SplitOver(m.size());
      !parts.empty()) {
    const std::string* keys = Keys(request);
    if (keys != nullptr) {
      const int field = static_cast<int>(request.keys_case());
      const size_t ks = field <= 3 ? 4 : 8;
      const std::string* values =
          request.has_u32_values()   ? &request.u32_values()
          : request.has_u64_values() ? &request.u64_values()
                                     : nullptr;
      const SortArraysView view{
          .key_field = field,
          .keys = keys->data(),
          .key_size = ks,
          .value_field = request.has_u32_values()   ? 8
                         : request.has_u64_values() ? 9
                                                    : 0,
          .values = values != nullptr ? values->data() : nullptr,
          .value_size = request.has_u32_values()   ? size_t{4}
                        : request.has_u64_values() ? size_t{8}
                                                   : size_t{0},
          .count = keys->size() / ks,
          .descending = request.order() == v1::ORDER_DESCENDING,
          .permutation = request.return_permutation(),
          .compact_keys =
              request.response_key_coding() == v1::KEY_CODING_COMPACT};
      // Whole keys and values as many as keys: otherwise one call, whose
      // answer says what is wrong.
      if (keys->size() % ks == 0 &&
          (values == nullptr ||
           values->size() == view.count * view.value_size)) {
        MessageSink sink(response);
        return SortInParts(view, parts, sink);
      }
    }
  }
  if (m.size() > options_.max_unary_bytes) {
    absl::StatusOr<v1::SortResponse> streamed = SortStream(request);
    if (!streamed.ok()) return streamed.status();
    *response = *std::move(streamed);
    return absl::OkStatus();
  }
  MessageSink sink(response);
  return SortRaw("Sort", std::move(m), lease, sink);
}

absl::StatusOr<v1::SortResponse> Client::Sort(const v1::SortRequest& request) {
  v1::SortResponse response;
  if (absl::Status s = Sort(request, &response); !s.ok()) return s;
  return response;
}

absl::Status Client::Echo(const v1::SortRequest& request,
                          v1::SortResponse* response) {
  client_wire::Lease lease;
  std::string shared;
  MessageSink sink(response);
  return SortRaw("Echo", Encode(request, &lease, &shared), lease, sink);
}

absl::StatusOr<v1::SortResponse> Client::Echo(const v1::SortRequest& request) {
  v1::SortResponse response;
  if (absl::Status s = Echo(request, &response); !s.ok()) return s;
  return response;
}

namespace {

// One SortStream answer message appended to the whole answer: its keys
// (decoded if compact) to `out_keys`, values, permutation, served_by.
absl::Status AppendStreamAnswer(const v1::SortResponse& chunk,
                                std::string* out_keys,
                                v1::SortResponse* response) {
  if (const std::string* k = Keys(chunk); k != nullptr) {
    out_keys->append(*k);
  } else if (KeyType type = KeyType::kU32;
             const v1::CompactKeys* c = key_fields::CompactKeys(chunk, &type)) {
    const compact::Encoded encoded{c->count(), c->widths(), c->bases(),
                                   c->deltas()};
    absl::Status s = client_wire::AppendCompactKeys(encoded, type,
                                                    c->descending(), out_keys);
    if (!s.ok()) return s;
  }
  if (chunk.has_u32_values()) {
    response->mutable_u32_values()->append(chunk.u32_values());
  } else if (chunk.has_u64_values()) {
    response->mutable_u64_values()->append(chunk.u64_values());
  }
  response->mutable_permutation()->append(chunk.permutation());
  if (chunk.has_served_by()) {
    *response->mutable_served_by() = chunk.served_by();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::SortResponse> Client::SortStream(
    const v1::SortRequest& request) {
  const std::string* keys = Keys(request);
  if (keys == nullptr) {
    return absl::InvalidArgumentError("the request has no keys set");
  }
  const int field = static_cast<int>(request.keys_case());
  const size_t ks = field <= 3 ? 4 : 8;
  const std::string* values = nullptr;
  size_t vs = 0;
  if (request.has_u32_values()) {
    values = &request.u32_values();
    vs = 4;
  } else if (request.has_u64_values()) {
    values = &request.u64_values();
    vs = 8;
  }
  const size_t n = keys->size() / ks;
  // Each message stays within the server's request limit (a few bytes of
  // framing aside).
  const size_t chunk_bytes =
      std::min(options_.stream_chunk_bytes, options_.max_unary_bytes > 64
                                                ? options_.max_unary_bytes - 64
                                                : options_.max_unary_bytes);
  const size_t per_chunk = std::max<size_t>(1, chunk_bytes / (ks + vs));

  grpc::ClientContext context;
  Prepare(&context);
  std::unique_ptr<grpc::ClientReaderWriter<v1::SortRequest, v1::SortResponse>>
      stream = Next().stub->SortStream(&context);
  // Every message carries the key field, the first also order and
  // permutation; a trailing partial key goes with the last chunk so that
  // the server's own check reports it.
  for (size_t at = 0; at == 0 || at < n; at += per_chunk) {
    v1::SortRequest chunk;
    if (at == 0) {
      chunk.set_order(request.order());
      chunk.set_return_permutation(request.return_permutation());
      chunk.set_response_key_coding(request.response_key_coding());
    }
    const size_t m = std::min(per_chunk, n - at);
    const size_t end = at + m >= n ? keys->size() : (at + m) * ks;
    MutableKeysByNumber(field, &chunk)->assign(*keys, at * ks, end - at * ks);
    if (values != nullptr) {
      const size_t vend = at + m >= n ? values->size() : (at + m) * vs;
      std::string* out =
          vs == 4 ? chunk.mutable_u32_values() : chunk.mutable_u64_values();
      out->assign(*values, std::min(at * vs, values->size()),
                  vend - std::min(at * vs, vend));
    }
    if (!stream->Write(chunk)) break;  // the server ended the call
    if (n == 0) break;
  }
  stream->WritesDone();
  v1::SortResponse response, chunk;
  std::string* out_keys = MutableKeysByNumber(field, &response);
  out_keys->reserve(keys->size());
  while (stream->Read(&chunk)) {
    if (absl::Status s = AppendStreamAnswer(chunk, out_keys, &response);
        !s.ok()) {
      context.TryCancel();
      stream->Finish();
      return s;
    }
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<v1::TransposeResponse> Client::Transpose(
    const v1::TransposeRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::TransposeResponse response;
  grpc::Status s = pool_[ConnectionFor(request.ByteSizeLong())].stub->Transpose(
      &context, request, &response);
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
  auto stub =
      grpc::health::v1::Health::NewStub(pool_[ConnectionFor(0)].channel);
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
