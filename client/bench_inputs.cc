// `sortctl bench`'s requests, made before the run: a few distinct random
// inputs per size class, and, with shared memory, one region per worker
// holding every input and room for its answer, with the requests that name
// them instead of carrying the keys.
#include <algorithm>
#include <cstring>

#include "client/bench_internal.h"
#include "client/sortctl_lib.h"
#include "core/key_fields.h"

namespace sortd::cli::bench_internal {

Inputs MakeInputs(const BenchOptions& o, uint64_t size, size_t class_index) {
  Inputs in;
  in.size = size;
  // Large inputs take memory and time to make: fewer variants of them.
  const int variants = std::max(
      1, size >= (uint64_t{1} << 22) ? std::min(o.variants, 2) : o.variants);
  for (int v = 0; v < variants; ++v) {
    const uint64_t seed = o.seed + 7919 * class_index + 104729 * v;
    if (o.op == BenchOp::kTranspose) {
      v1::TransposeRequest r;
      r.set_matrices(RandomWords(size * 32, seed));
      in.transposes.push_back(std::move(r));
    } else {
      v1::SortRequest r;
      SetKeys(o.key_type, RandomKeys(o.key_type, size, seed), &r);
      if (o.compact_keys) r.set_response_key_coding(v1::KEY_CODING_COMPACT);
      in.sorts.push_back(std::move(r));
    }
  }
  return in;
}

const std::string& RequestKeys(const v1::SortRequest& r) {
  const std::string* bytes = nullptr;
  KeysOf(r, &bytes);
  static const std::string kNone;
  return bytes != nullptr ? *bytes : kNone;
}

// The answer's key field (of the type it names) set to `bytes`.
void SetAnswerKeys(std::string bytes, v1::SortResponse* r) {
  *key_fields::MutableKeys(r, key_fields::TypeOf(*r).value_or(KeyType::kU32)) =
      std::move(bytes);
}

absl::StatusOr<WorkerRegion> MakeRegion(const BenchOptions& o,
                                        const std::vector<Inputs>& inputs) {
  WorkerRegion w;
  size_t bytes = 0;
  for (const Inputs& in : inputs) {
    for (const v1::SortRequest& r : in.sorts)
      bytes += 2 * RequestKeys(r).size();
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::Create(o.shm_socket, std::max<size_t>(bytes, 1));
  if (!region.ok()) return region.status();
  w.region = *std::move(region);
  size_t at = 0;
  for (const Inputs& in : inputs) {
    w.sorts.emplace_back();
    w.out_offsets.emplace_back();
    for (const v1::SortRequest& r : in.sorts) {
      const std::string& keys = RequestKeys(r);
      std::memcpy(w.region->data() + at, keys.data(), keys.size());
      v1::SortRequest named = r;
      SetKeys(o.key_type, "", &named);
      v1::SharedArrays* a = named.mutable_shared();
      a->set_region(w.region->token());
      a->set_count(keys.size() / KeySize(o.key_type));
      a->set_keys_offset(at);
      a->set_keys_out_offset(at + keys.size());
      w.sorts.back().push_back(std::move(named));
      w.out_offsets.back().push_back(at + keys.size());
      at += 2 * keys.size();
    }
  }
  return w;
}

}  // namespace sortd::cli::bench_internal
