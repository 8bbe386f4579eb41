// The client's unary calls: Sort and Echo (from the caller's arrays without
// protobuf copies, through shared memory where the request names a region,
// in parts over several connections when large, through SortStream when
// over the unary limit), Transpose and the health check. The connections
// are set up in client_channel.cc, SortStream is in client_stream.cc,
// sorts in parts in client_parts.cc.
#include "client/client.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace sortd {
using client_wire::FromGrpcStatus;

namespace {

// The raw key field `field` (1-6, as the wire decoder reports it) of a
// request or response.
template <typename Message>
std::string* MutableKeysByNumber(int field, Message* m) {
  return key_fields::MutableKeys(
      m, key_fields::TypeOfRaw(field).value_or(KeyType::kU32));
}

using key_fields::Keys;

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
    Mutex mu;
    CondVar cv;
    bool done = false;
    connection.generic->UnaryCall(&context, path, grpc::StubOptions(), &request,
                                  &response, [&](grpc::Status s) {
                                    MutexLock lock(&mu);
                                    status = std::move(s);
                                    done = true;
                                    cv.NotifyAll();
                                  });
    MutexLock lock(&mu);
    while (!done) cv.Wait(&mu);
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
