// Client::SortStream: one array sent through the SortStream RPC in chunks
// (each message within the server's request limit), and the answer's
// messages joined into one SortResponse, compact keys decoded.
#include <algorithm>
#include <memory>
#include <string>

#include "client/client.h"

namespace sortd {
using client_wire::FromGrpcStatus;

namespace {

using key_fields::Keys;

// The arrays of a request that go out in chunks: its keys (their raw field
// number, 1-6 as the wire decoder reports it, and type) and its values,
// where it has them.
struct StreamedArrays {
  const std::string* keys = nullptr;
  int field = 0;
  KeyType type = KeyType::kU32;
  size_t ks = 0;  // bytes a key
  const std::string* values = nullptr;
  size_t vs = 0;  // bytes a value
};

StreamedArrays ArraysOf(const v1::SortRequest& request,
                        const std::string* keys) {
  StreamedArrays a;
  a.keys = keys;
  a.field = static_cast<int>(request.keys_case());
  a.type = key_fields::TypeOfRaw(a.field).value_or(KeyType::kU32);
  a.ks = a.field <= 3 ? 4 : 8;
  if (request.has_u32_values()) {
    a.values = &request.u32_values();
    a.vs = 4;
  } else if (request.has_u64_values()) {
    a.values = &request.u64_values();
    a.vs = 8;
  }
  return a;
}

// The message of keys [at, at + m) of `n`: every message carries the key
// field, the first also order and permutation; a trailing partial key goes
// with the last chunk so that the server's own check reports it.
v1::SortRequest StreamChunk(const v1::SortRequest& request,
                            const StreamedArrays& a, size_t at, size_t m,
                            size_t n) {
  v1::SortRequest chunk;
  if (at == 0) {
    chunk.set_order(request.order());
    chunk.set_return_permutation(request.return_permutation());
    chunk.set_response_key_coding(request.response_key_coding());
  }
  const size_t end = at + m >= n ? a.keys->size() : (at + m) * a.ks;
  key_fields::MutableKeys(&chunk, a.type)
      ->assign(*a.keys, at * a.ks, end - at * a.ks);
  if (a.values != nullptr) {
    const size_t vend = at + m >= n ? a.values->size() : (at + m) * a.vs;
    std::string* out =
        a.vs == 4 ? chunk.mutable_u32_values() : chunk.mutable_u64_values();
    out->assign(*a.values, std::min(at * a.vs, a.values->size()),
                vend - std::min(at * a.vs, vend));
  }
  return chunk;
}

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
  const StreamedArrays a = ArraysOf(request, keys);
  const size_t n = keys->size() / a.ks;
  // Each message stays within the server's request limit (a few bytes of
  // framing aside).
  const size_t chunk_bytes =
      std::min(options_.stream_chunk_bytes, options_.max_unary_bytes > 64
                                                ? options_.max_unary_bytes - 64
                                                : options_.max_unary_bytes);
  const size_t per_chunk = std::max<size_t>(1, chunk_bytes / (a.ks + a.vs));

  grpc::ClientContext context;
  Prepare(&context);
  std::unique_ptr<grpc::ClientReaderWriter<v1::SortRequest, v1::SortResponse>>
      stream = Next().stub->SortStream(&context);
  for (size_t at = 0; at == 0 || at < n; at += per_chunk) {
    const size_t m = std::min(per_chunk, n - at);
    if (!stream->Write(StreamChunk(request, a, at, m, n))) {
      break;  // the server ended the call
    }
    if (n == 0) break;
  }
  stream->WritesDone();
  v1::SortResponse response, chunk;
  std::string* out_keys = key_fields::MutableKeys(&response, a.type);
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

}  // namespace sortd
