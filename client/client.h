// sortd::Client: the C++ client library of the sortd service.
//
// One Client holds one gRPC channel and is safe to share between threads.
// Results come back as absl::StatusOr; a failed call carries the server's
// gRPC status code and message.
//
//   auto client = sortd::Client::Create("127.0.0.1:50051");
//   if (!client.ok()) return client.status();
//   std::vector<float> keys = {3.5f, -1.0f, 2.0f};
//   auto sorted = (*client)->Sort<float>(keys, {.descending = true});
//   if (sorted.ok()) use(sorted->keys, sorted->served_by.path());
//
// Targets follow gRPC's naming: "host:port", or "dns:///name:port" to reach
// every address behind a name (round_robin by default: ClientOptions).
//
// A program that keeps dozens of large calls in flight should turn off
// Abseil's lock-order check where its Abseil is built without NDEBUG
// (Debian's is), as sortctl does:
// absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore) at the
// start of main. The check takes one process-wide lock on every gRPC lock;
// a library does not change that switch for the program that links it
// (docs/decisions/029-no-lock-order-graph.md). A short-lived program whose
// first calls are large should start with glibc's malloc on transparent
// huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, glibc 2.35 and
// later), as sortctl does: its first 16M-key call then takes under a
// third of the time (docs/decisions/031-client-malloc-huge-pages.md).
#ifndef SORTD_CLIENT_CLIENT_H_
#define SORTD_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/raw_call.h"
#include "core/key_fields.h"
#include "core/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "sortd/v1/sortd.grpc.pb.h"

namespace sortd {

struct ClientOptions {
  // Deadline of each call, counted from its start.
  absl::Duration timeout = absl::Seconds(60);
  // Wait for the server to become reachable instead of failing at once
  // while it is not (still bounded by the timeout).
  bool wait_for_ready = false;
  // gRPC load-balancing policy. Empty: round_robin, from the client's
  // default service config (calls spread over every address the target
  // resolves to, e.g. a dns:/// name of many replicas; one address: that
  // server alone).
  std::string load_balancing;
  // Attempts per call (2 to 5; 1: no retries): a call answered UNAVAILABLE
  // (server unreachable, starting or draining) or RESOURCE_EXHAUSTED
  // (overloaded) is tried again after an exponential back-off from 100 ms,
  // or after the delay the server's answer asks for (sortd's retry
  // pushback); sortd marks a refusal that a retry cannot cure (a request
  // beyond a size limit) as not to be retried. gRPC retries only calls
  // whose request it still holds (up to 256 KiB each by default); larger
  // ones fail at once.
  int max_attempts = 4;
  // The least time between two DNS resolutions of the target (a dns:///
  // name of many replicas). The client resolves again when a connection
  // ends, as sortd ends each after --grpc_max_connection_age: that is how
  // replicas added behind the name start getting calls. 30 s is gRPC's
  // own default.
  absl::Duration min_resolve_interval = absl::Seconds(30);

  // TLS: set tls_ca to the PEM file of the CA that signed the server's
  // certificate (empty with `tls` true: the system's roots). For mutual TLS
  // also tls_cert and tls_key, this client's certificate and key.
  // tls_server_name overrides the name checked against the server's
  // certificate (when the target is an address the certificate does not
  // name).
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;

  // Sort requests larger than this (serialized) go through the SortStream
  // RPC in chunks instead of one Sort message; set it to the server's
  // --max_request_bytes (sortd's default is 256 MiB).
  size_t max_unary_bytes = size_t{256} << 20;
  // Array bytes (keys and values together) per SortStream message.
  size_t stream_chunk_bytes = size_t{2} << 20;
  // TCP connections to the server. One HTTP/2 connection carries about
  // half of what the host's loopback can (docs/PERFORMANCE.md);
  // concurrent large calls need several.
  int connections = 5;
  // A sort or echo whose request is smaller than this goes on the pool's
  // first connection, and only those do: larger calls and parts take the
  // other connections in turn. Small calls cost CPU per call, not
  // bandwidth: on one connection gRPC writes many of them per system
  // call, and none waits behind a large array's frames (HTTP/2 sends one
  // connection's messages in turn: a 64 MiB message holds a connection
  // for tens of milliseconds). 0: every call takes every connection in
  // turn.
  size_t small_call_bytes = size_t{256} << 10;
  // A sort whose arrays hold at least this many bytes goes out as parts
  // over several connections at once (SortRequest.part; one part per
  // 8 MiB, at most `connections`), sorted by the server as one array and
  // answered part by part: one TCP connection does not carry what the
  // host can. Only a sort with no other sort of this client in flight is
  // split. Parts go only over connections that reached the same sortd
  // process (so behind an L4 balancer, e.g. a Kubernetes Service, they
  // stay together); never where calls may be spread over several
  // servers (`load_balancing` other than pick_first, or round_robin over
  // a target that is not one literal address), shared memory or
  // SortStream. 0: never.
  size_t split_bytes = size_t{16} << 20;
};

// One sort's arrays as the caller holds them, for sending in parts.
struct SortArraysView {
  int key_field = 1;  // sortd.proto's field number of the key type
  const char* keys = nullptr;
  size_t key_size = 4;
  int value_field = 0;  // 0: none, 8: u32_values, 9: u64_values
  const char* values = nullptr;
  size_t value_size = 0;
  size_t count = 0;
  bool descending = false;
  bool permutation = false;
  bool compact_keys = false;
};

struct SortOptions {
  bool descending = false;
  bool return_permutation = false;
  // Ask for the sorted keys in compact form (KEY_CODING_COMPACT: about a
  // third of the bytes for evenly spread 32-bit keys, at the cost of
  // encoding on the server and decoding here); the result is the same.
  bool compact_keys = false;
};

// The answer to a typed sort. `values` is filled by SortPairs, and
// `permutation` when it was asked for.
template <typename K, typename V = uint32_t>
struct SortResult {
  std::vector<K> keys;
  std::vector<V> values;
  std::vector<uint32_t> permutation;
  v1::ServedBy served_by;
};

// Key types the service sorts: uint32_t, int32_t, float, uint64_t, int64_t,
// double. Value types: uint32_t, uint64_t.
template <typename K>
concept SortKey = std::is_same_v<K, uint32_t> || std::is_same_v<K, int32_t> ||
    std::is_same_v<K, float> || std::is_same_v<K, uint64_t> ||
    std::is_same_v<K, int64_t> || std::is_same_v<K, double>;
template <typename V>
concept SortValue = std::is_same_v<V, uint32_t> || std::is_same_v<V, uint64_t>;

// Little-endian packing of arrays into and out of the wire's bytes fields.
template <typename T>
std::string PackArray(absl::Span<const T> items) {
  return std::string(reinterpret_cast<const char*>(items.data()),
                     items.size() * sizeof(T));
}
template <typename T>
std::vector<T> UnpackArray(const std::string& bytes) {
  std::vector<T> items(bytes.size() / sizeof(T));
  if (!items.empty()) {
    std::memcpy(items.data(), bytes.data(), items.size() * sizeof(T));
  }
  return items;
}

// The keys field of a request or response for key type K.
template <SortKey K>
std::string* MutableKeysField(v1::SortRequest* r) {
  return key_fields::MutableKeys(r, key_fields::TypeOf<K>());
}
template <SortKey K>
const std::string& KeysField(const v1::SortResponse& r) {
  static const std::string kNone;
  const std::string* keys = key_fields::Keys(r);
  return keys != nullptr && key_fields::TypeOf(r) == key_fields::TypeOf<K>()
             ? *keys
             : kNone;
}

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      const std::string& target, const ClientOptions& options = {});

  // The raw RPCs, for callers that build messages themselves. Sort sends a
  // request larger than ClientOptions::max_unary_bytes through SortStream.
  // The request's arrays are sent from its own memory (no serialization
  // copy), and the answer is read from gRPC's buffers in one copy.
  absl::StatusOr<v1::SortResponse> Sort(const v1::SortRequest& request);
  // The same into `response`, whose array buffers are reused: a caller that
  // sorts arrays of one size again and again allocates them once.
  absl::Status Sort(const v1::SortRequest& request, v1::SortResponse* response);
  // Sorts `request` through the SortStream RPC: its arrays go out in
  // chunks of ClientOptions::stream_chunk_bytes and the answer's chunks
  // are joined into one response.
  absl::StatusOr<v1::SortResponse> SortStream(const v1::SortRequest& request);
  // The request's arrays back unsorted, through the same path as Sort: the
  // baseline for end-to-end measurements.
  absl::StatusOr<v1::SortResponse> Echo(const v1::SortRequest& request);
  absl::Status Echo(const v1::SortRequest& request, v1::SortResponse* response);
  absl::StatusOr<v1::TransposeResponse> Transpose(
      const v1::TransposeRequest& request);

  // Sorts keys; stable.
  template <SortKey K>
  absl::StatusOr<SortResult<K>> Sort(absl::Span<const K> keys,
                                     const SortOptions& options = {});

  // Sorts keys with one payload value each; values move with their keys.
  template <SortKey K, SortValue V>
  absl::StatusOr<SortResult<K, V>> SortPairs(absl::Span<const K> keys,
                                             absl::Span<const V> values,
                                             const SortOptions& options = {});

  // Transposes 32x32 bit matrices given as consecutive runs of 32 rows.
  absl::StatusOr<std::vector<uint32_t>> Transpose(
      absl::Span<const uint32_t> rows);

  const ClientOptions& options() const { return options_; }

  // grpc.health.v1 Check for `service` ("" is the whole server): OK when
  // SERVING, UNAVAILABLE with the reported status otherwise.
  absl::Status CheckHealth(const std::string& service = "");

 private:
  Client(std::vector<std::shared_ptr<grpc::Channel>> channels,
         const ClientOptions& options);
  void Prepare(grpc::ClientContext* context) const;

  // One unary call of `method` ("Sort", "Echo") with raw bytes, on the
  // connection ConnectionFor picks.
  absl::StatusOr<grpc::ByteBuffer> CallRaw(const char* method,
                                           grpc::ByteBuffer request);
  // A unary sort or echo: `request` sent (its arrays borrowed through
  // `lease`), the answer decoded into `sink`.
  absl::Status SortRaw(const char* method, client_wire::OutgoingMessage request,
                       client_wire::Lease& lease,
                       client_wire::SortResponseSink& sink);

  // The connections a sort of `bytes` bytes goes out in parts over, one
  // part each; empty: one call.
  std::vector<size_t> SplitOver(size_t bytes);
  // Connections known to reach the same sortd process (its
  // "sortd-instance" metadata, sent when a call's "sortd-want-instance"
  // asks), the largest such set; a connection not yet known is asked once,
  // with an empty Sort.
  std::vector<size_t> SameServerConnections();
  // Remembers which sortd connection `i` reached, from a finished call.
  void NoteInstance(size_t i, const grpc::ClientContext& context);
  // Sends a sort as concurrent calls, one part on each of `connections`,
  // and decodes each answer into its place in `sink`'s arrays.
  absl::Status SortInParts(const SortArraysView& arrays,
                           const std::vector<size_t>& connections,
                           client_wire::SortResponseSink& sink);

  template <SortKey K, typename V>
  absl::StatusOr<SortResult<K, V>> SortSpans(absl::Span<const K> keys,
                                             absl::Span<const V> values,
                                             bool with_values,
                                             const SortOptions& options);

  // One connection of the pool.
  struct Connection {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::SortService::Stub> stub;
    std::unique_ptr<grpc::GenericStub> generic;
  };
  // The connection a call of `bytes` request bytes goes on: the first for
  // a small call, otherwise the next in turn.
  size_t ConnectionFor(size_t bytes);
  Connection& Next() { return pool_[ConnectionFor(SIZE_MAX)]; }

  std::vector<Connection> pool_;
  std::atomic<size_t> next_{0};
  // Sorts of this client in flight, the caller's own included: a sort is
  // split only when it is alone.
  std::atomic<int> sorts_in_flight_{0};
  struct SortInFlight {
    explicit SortInFlight(std::atomic<int>& n) : n_(n) { ++n_; }
    ~SortInFlight() { --n_; }
    std::atomic<int>& n_;
  };
  Mutex instances_mu_;
  // Per connection; "": not known.
  std::vector<std::string> instances_ ABSL_GUARDED_BY(instances_mu_);
  ClientOptions options_;
  // Whether every call reaches the same server (one literal address, or
  // pick_first): only then is a sort split into parts.
  bool one_server_ = false;
};

// Key field numbers of requests and responses (sortd.proto).
template <SortKey K>
constexpr int KeyField() {
  return key_fields::Raw<K>();
}

// Writes a SortResponse's arrays into a SortResult's vectors.
template <typename K, typename V>
class SortResultSink final : public client_wire::SortResponseSink {
 public:
  explicit SortResultSink(SortResult<K, V>* result) : result_(result) {}
  char* Keys(int field, size_t bytes) override {
    return field == KeyField<K>() ? Into(result_->keys, bytes) : nullptr;
  }
  char* Values(int field, size_t bytes) override {
    const int want = std::is_same_v<V, uint64_t> ? 9 : 8;
    return field == want ? Into(result_->values, bytes) : nullptr;
  }
  char* Permutation(size_t bytes) override {
    return Into(result_->permutation, bytes);
  }
  void ServedBy(const std::string& bytes) override {
    result_->served_by.ParseFromString(bytes);
  }

 private:
  // Null (refused) unless `bytes` is a whole number of elements.
  template <typename T>
  static char* Into(std::vector<T>& v, size_t bytes) {
    if (bytes % sizeof(T) != 0) return nullptr;
    v.resize(bytes / sizeof(T));
    return reinterpret_cast<char*>(v.data());
  }
  SortResult<K, V>* result_;
};

// Steps of Client::SortSpans, not part of the client's interface.
namespace internal {

// The field number of value type V (u32_values or u64_values).
template <typename V>
constexpr int ValueField() {
  return std::is_same_v<V, uint64_t> ? 9 : 8;
}

// A typed sort's request, its arrays borrowed through `lease`.
template <SortKey K, typename V>
client_wire::OutgoingMessage SortMessage(absl::Span<const K> keys,
                                         absl::Span<const V> values,
                                         bool with_values,
                                         const SortOptions& options,
                                         client_wire::Lease* lease) {
  client_wire::OutgoingMessage m;
  m.Bytes(KeyField<K>(), keys.data(), keys.size() * sizeof(K), lease);
  if (options.descending) m.Varint(7, v1::ORDER_DESCENDING);
  if (with_values) {
    m.Bytes(ValueField<V>(), values.data(), values.size() * sizeof(V), lease);
  }
  if (options.return_permutation) m.Varint(10, 1);
  if (options.compact_keys) m.Varint(12, v1::KEY_CODING_COMPACT);
  return m;
}

// A typed sort's arrays, for sending in parts.
template <SortKey K, typename V>
SortArraysView ArraysView(absl::Span<const K> keys, absl::Span<const V> values,
                          bool with_values, const SortOptions& options) {
  return SortArraysView{.key_field = KeyField<K>(),
                        .keys = reinterpret_cast<const char*>(keys.data()),
                        .key_size = sizeof(K),
                        .value_field = with_values ? ValueField<V>() : 0,
                        .values = reinterpret_cast<const char*>(values.data()),
                        .value_size = with_values ? sizeof(V) : 0,
                        .count = keys.size(),
                        .descending = options.descending,
                        .permutation = options.return_permutation,
                        .compact_keys = options.compact_keys};
}

// A typed sort's request as a message of copies, for SortStream.
template <SortKey K, typename V>
v1::SortRequest CopiedSortRequest(absl::Span<const K> keys,
                                  absl::Span<const V> values, bool with_values,
                                  const SortOptions& options) {
  v1::SortRequest request;
  *MutableKeysField<K>(&request) = PackArray(keys);
  if (with_values) {
    *(std::is_same_v<V, uint64_t> ? request.mutable_u64_values()
                                  : request.mutable_u32_values()) =
        PackArray(values);
  }
  request.set_order(options.descending ? v1::ORDER_DESCENDING
                                       : v1::ORDER_ASCENDING);
  request.set_return_permutation(options.return_permutation);
  if (options.compact_keys) {
    request.set_response_key_coding(v1::KEY_CODING_COMPACT);
  }
  return request;
}

// A SortResponse's arrays copied into a SortResult.
template <SortKey K, typename V>
SortResult<K, V> ResultOf(const v1::SortResponse& response) {
  SortResult<K, V> result;
  result.keys = UnpackArray<K>(KeysField<K>(response));
  result.values =
      UnpackArray<V>(std::is_same_v<V, uint64_t> ? response.u64_values()
                                                 : response.u32_values());
  result.permutation = UnpackArray<uint32_t>(response.permutation());
  result.served_by = response.served_by();
  return result;
}

}  // namespace internal

template <SortKey K, typename V>
absl::StatusOr<SortResult<K, V>> Client::SortSpans(absl::Span<const K> keys,
                                                   absl::Span<const V> values,
                                                   bool with_values,
                                                   const SortOptions& options) {
  const SortInFlight counted(sorts_in_flight_);
  client_wire::Lease lease;
  client_wire::OutgoingMessage m =
      internal::SortMessage(keys, values, with_values, options, &lease);
  SortResult<K, V> result;
  if (const std::vector<size_t> parts = SplitOver(m.size()); !parts.empty()) {
    SortResultSink<K, V> sink(&result);
    const SortArraysView view =
        internal::ArraysView(keys, values, with_values, options);
    if (absl::Status s = SortInParts(view, parts, sink); !s.ok()) return s;
    return result;
  }
  if (m.size() > options_.max_unary_bytes) {
    // Beyond one message: through SortStream, from a message of copies.
    absl::StatusOr<v1::SortResponse> response = SortStream(
        internal::CopiedSortRequest(keys, values, with_values, options));
    if (!response.ok()) return response.status();
    return internal::ResultOf<K, V>(*response);
  }
  SortResultSink<K, V> sink(&result);
  if (absl::Status s = SortRaw("Sort", std::move(m), lease, sink); !s.ok()) {
    return s;
  }
  return result;
}

template <SortKey K>
absl::StatusOr<SortResult<K>> Client::Sort(absl::Span<const K> keys,
                                           const SortOptions& options) {
  return SortSpans<K, uint32_t>(keys, {}, false, options);
}

template <SortKey K, SortValue V>
absl::StatusOr<SortResult<K, V>> Client::SortPairs(absl::Span<const K> keys,
                                                   absl::Span<const V> values,
                                                   const SortOptions& options) {
  return SortSpans<K, V>(keys, values, true, options);
}

}  // namespace sortd

#endif  // SORTD_CLIENT_CLIENT_H_
