// Client::SortInParts: one array sent as several calls over several
// connections, which the server joins, sorts once and answers in slices.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/raw_call.h"
#include "core/mutex.h"

namespace sortd {
namespace {

using client_wire::FromGrpcStatus;

// Writes one part's answer into its place in the whole answer's arrays,
// which the caller has sized; anything else is refused (DATA_LOSS).
class PartSink final : public client_wire::SortResponseSink {
 public:
  PartSink(const SortArraysView& a, char* keys, char* values, char* permutation,
           size_t first, size_t n)
      : a_(a),
        keys_(keys),
        values_(values),
        permutation_(permutation),
        first_(first),
        n_(n) {}
  char* Keys(int field, size_t bytes) override {
    return field == a_.key_field && bytes == n_ * a_.key_size
               ? keys_ + first_ * a_.key_size
               : nullptr;
  }
  char* Values(int field, size_t bytes) override {
    return values_ != nullptr && field == a_.value_field &&
                   bytes == n_ * a_.value_size
               ? values_ + first_ * a_.value_size
               : nullptr;
  }
  char* Permutation(size_t bytes) override {
    return permutation_ != nullptr && bytes == n_ * 4
               ? permutation_ + first_ * 4
               : nullptr;
  }
  void ServedBy(const std::string& bytes) override {
    served_by.ParseFromString(bytes);
  }
  v1::ServedBy served_by;

 private:
  const SortArraysView& a_;
  char *keys_, *values_, *permutation_;
  size_t first_, n_;
};

// One part of a split sort, on its own connection.
struct PartCall {
  grpc::ClientContext context;
  grpc::ByteBuffer request, response;
  grpc::Status status;
  std::string part;  // the serialized Part
  size_t first = 0, n = 0;
};

// The Sort request of keys [c.first, c.first + c.n) of `a`, its arrays
// sent from the caller's memory (held until `lease` is released).
grpc::ByteBuffer PartRequest(const SortArraysView& a, const PartCall& c,
                             client_wire::Lease* lease) {
  client_wire::OutgoingMessage m;
  m.Bytes(a.key_field, a.keys + c.first * a.key_size, c.n * a.key_size, lease);
  if (a.descending) m.Varint(7, v1::ORDER_DESCENDING);
  if (a.value_field != 0) {
    m.Bytes(a.value_field, a.values + c.first * a.value_size,
            c.n * a.value_size, lease);
  }
  if (a.permutation) m.Varint(10, 1);
  if (a.compact_keys) m.Varint(12, v1::KEY_CODING_COMPACT);
  m.Bytes(13, c.part.data(), c.part.size(), lease);
  return m.Take();
}

// Each part's answer decoded into its place in the whole answer's arrays,
// the parts side by side; the served_by of the first, with the bytes every
// part saved.
absl::Status DecodeParts(const SortArraysView& a, char* keys, char* values,
                         char* permutation, std::vector<PartCall>& calls,
                         client_wire::SortResponseSink& sink) {
  const size_t parts = calls.size();
  std::vector<PartSink> sinks;
  sinks.reserve(parts);
  for (const PartCall& c : calls) {
    sinks.emplace_back(a, keys, values, permutation, c.first, c.n);
  }
  std::vector<absl::Status> decoded(parts);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < parts; ++i) {
    threads.emplace_back([&, i] {
      decoded[i] = client_wire::DecodeSortResponse(calls[i].response, sinks[i]);
    });
  }
  decoded[0] = client_wire::DecodeSortResponse(calls[0].response, sinks[0]);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : decoded) {
    if (!s.ok()) return s;
  }
  v1::ServedBy by = sinks[0].served_by;
  for (size_t i = 1; i < parts; ++i) {
    by.set_key_bytes_saved(by.key_bytes_saved() +
                           sinks[i].served_by.key_bytes_saved());
  }
  sink.ServedBy(by.SerializeAsString());
  return absl::OkStatus();
}

// Keys per part when `count` keys go out as `parts` parts: whole 128-key
// blocks, so that compact keys apply to each.
size_t KeysPerPart(size_t count, size_t parts) {
  constexpr size_t kBlock = 128;
  return ((count + parts - 1) / parts + kBlock - 1) / kBlock * kBlock;
}

// A new random group id, which joins one sort's parts on the server.
std::string NewPartGroup() {
  std::string group(16, '\0');
  std::random_device rd;
  for (char& c : group) c = static_cast<char>(rd());
  return group;
}

// Fills `c` as part `index` of `count` of `a` in parts of `per` keys (of
// `group`): its range, its serialized Part and its request, not yet sent.
void PlanPart(const SortArraysView& a, size_t index, size_t count, size_t per,
              const std::string& group, client_wire::Lease* lease,
              PartCall& c) {
  c.first = index * per;
  c.n = std::min(per, a.count - c.first);
  v1::Part part;
  part.set_group(group);
  part.set_index(static_cast<uint32_t>(index));
  part.set_count(static_cast<uint32_t>(count));
  c.part = part.SerializeAsString();
  c.request = PartRequest(a, c, lease);
}

}  // namespace

absl::Status Client::SortInParts(const SortArraysView& a,
                                 const std::vector<size_t>& connections,
                                 client_wire::SortResponseSink& sink) {
  const size_t per = KeysPerPart(a.count, connections.size());
  const size_t parts = std::max<size_t>(1, (a.count + per - 1) / per);
  // The whole answer's arrays, sized once; each part's lands in its place.
  char* keys = sink.Keys(a.key_field, a.count * a.key_size);
  char* values = a.value_field != 0
                     ? sink.Values(a.value_field, a.count * a.value_size)
                     : nullptr;
  char* permutation = a.permutation ? sink.Permutation(a.count * 4) : nullptr;
  if (keys == nullptr && a.count > 0) {
    return absl::InternalError("the answer's key buffer was refused");
  }
  const std::string group = NewPartGroup();

  std::vector<PartCall> calls(parts);
  client_wire::Lease lease;
  Mutex mu;
  CondVar cv;
  size_t pending = parts;
  for (size_t i = 0; i < parts; ++i) {
    PartCall& c = calls[i];
    PlanPart(a, i, parts, per, group, &lease, c);
    Prepare(&c.context);
    // The answers name the process again: a connection that now reaches
    // another one is split over no more.
    c.context.AddMetadata("sortd-want-instance", "1");
    pool_[connections[i]].generic->UnaryCall(
        &c.context, "/sortd.v1.SortService/Sort", grpc::StubOptions(),
        &c.request, &c.response, [&, i](grpc::Status s) {
          MutexLock lock(&mu);
          calls[i].status = std::move(s);
          if (--pending == 0) cv.NotifyAll();
        });
  }
  {
    MutexLock lock(&mu);
    while (pending != 0) cv.Wait(&mu);
  }
  for (size_t i = 0; i < parts; ++i) {
    calls[i].request.Clear();
    if (calls[i].status.ok()) NoteInstance(connections[i], calls[i].context);
  }
  lease.Wait();
  for (const PartCall& c : calls) {
    if (!c.status.ok()) return FromGrpcStatus(c.status);
  }
  return DecodeParts(a, keys, values, permutation, calls, sink);
}

}  // namespace sortd
