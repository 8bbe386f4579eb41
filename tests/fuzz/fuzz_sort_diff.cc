// libFuzzer target, differential: the input chooses a key type, order,
// payload, permutation and a length near a tile boundary, and supplies the
// key bits (repeated to length: runs, equal keys, NaNs and extremes come
// from the bytes). The CPU path, the OpenCL engine on the OpenCL CPU device
// (PoCL, with small tiles so every level of its scans is reached) and the
// sort in runs with its merge must each agree with std::stable_sort; any
// difference aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "client/sortctl_lib.h"
#include "core/key_fields.h"
#include "cpu/cpu_sorter.h"
#include "gpu/opencl_engine.h"
#include "server/request.h"
#include "server/runs.h"

namespace {

using sortd::KeyType;

sortd::CpuSorter& Cpu() {
  static sortd::CpuSorter* cpu = new sortd::CpuSorter({.threads = 2});
  return *cpu;
}

// The OpenCL CPU device with tiles of 64 keys; null when there is none.
sortd::Sorter* OpenCl() {
  static sortd::Sorter* engine = []() -> sortd::Sorter* {
    sortd::gpu::OpenClEngine::Options o;
    o.kind = sortd::gpu::DeviceKind::kCpu;
    auto device = sortd::gpu::FindDevice(o.kind);
    if (!device.ok()) return nullptr;
    sortd::gpu::EnginePolicy p = sortd::gpu::EnginePolicy::For(device->info);
    p.radix.work_group = 16;
    p.radix.items_32 = 4;
    p.radix.items_64 = 4;
    p.bitonic.block_32 = p.bitonic.block_64 = 256;
    p.bitonic.work_group = 64;
    p.bitonic.max_keys = 512;
    o.policy = p;
    o.cache_dir = "";
    o.preallocate_keys = 1024;
    auto e = sortd::gpu::OpenClEngine::Create(o);
    if (!e.ok()) {
      std::fprintf(stderr, "fuzz_sort_diff: no OpenCL engine: %s\n",
                   e.status().ToString().c_str());
      return nullptr;
    }
    return e->release();
  }();
  return engine;
}

// Lengths around the boundaries of the tiles above (64 keys radix, 256
// bitonic block, 512 bitonic limit) and of the merge's runs.
constexpr size_t kLengths[] = {0,    1,    2,    3,    63,   64,   65,   127,
                               128,  255,  256,  257,  511,  512,  513,  1000,
                               1023, 1024, 1025, 4095, 4096, 4097, 10007};

void Check(const char* path, const sortd::v1::SortRequest& request,
           const sortd::v1::SortResponse& response, const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_sort_diff: %s failed: %s\n", path,
                 s.ToString().c_str());
    std::abort();
  }
  if (absl::Status v = sortd::cli::VerifySort(request, response); !v.ok()) {
    std::fprintf(stderr, "fuzz_sort_diff: %s differs from the reference: %s\n",
                 path, v.ToString().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const KeyType type = static_cast<KeyType>(data[0] % 6);
  const bool descending = data[1] & 1;
  const int values = (data[1] >> 1) % 3;  // none, u32, u64
  const bool permutation = data[1] & 8;
  const size_t n = kLengths[data[2] % std::size(kLengths)];
  const size_t run_keys = 1 + data[3] % 200;
  const size_t ks = sortd::KeySize(type);
  // Key bytes: the rest of the input, repeated (with a twist per copy so
  // that long inputs are not all runs of one pattern).
  std::string keys(n * ks, '\0');
  const size_t avail = size - 4;
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = avail ? static_cast<char>(data[4 + i % avail] ^ (i / avail))
                    : static_cast<char>(i);
  }
  sortd::v1::SortRequest request;
  *sortd::key_fields::MutableKeys(&request, type) = keys;
  request.set_order(descending ? sortd::v1::ORDER_DESCENDING
                               : sortd::v1::ORDER_ASCENDING);
  std::string v;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t x = i * 0x9E3779B97F4A7C15ull;
    v.append(reinterpret_cast<const char*>(&x), values == 2 ? 8 : 4);
  }
  if (values == 1) request.set_u32_values(v);
  if (values == 2) request.set_u64_values(v);
  request.set_return_permutation(permutation);

  const sortd::RequestLimits limits{.max_request_bytes = size_t{1} << 30};
  const std::string bytes = request.SerializeAsString();
  auto run = [&](const char* path, auto sort) {
    absl::StatusOr<sortd::wire::SortRequest> parsed =
        sortd::wire::ParseSortRequest(bytes);
    absl::StatusOr<sortd::SortJob> job =
        parsed.ok() ? sortd::ParseSort(*parsed, limits, bytes.size())
                    : absl::StatusOr<sortd::SortJob>(parsed.status());
    if (!job.ok()) {
      std::fprintf(stderr, "fuzz_sort_diff: refused: %s\n",
                   job.status().ToString().c_str());
      std::abort();
    }
    sortd::SortOutputs out =
        sortd::AllocateSortOutputs(*job, parsed->return_permutation);
    const absl::Status sorted = sort(*job);
    std::vector<grpc::Slice> slices;
    (void)sortd::wire::EncodeSortResponse(out.Slices(*job, 0, job->count),
                                          nullptr)
        .Dump(&slices);
    std::string answer;
    for (const grpc::Slice& s : slices) {
      answer.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    sortd::v1::SortResponse response;
    response.ParseFromString(answer);
    Check(path, request, response, sorted);
  };
  run("cpu", [](const sortd::SortJob& j) { return Cpu().Sort(j); });
  run("runs", [&](const sortd::SortJob& j) {
    return sortd::SortInRuns(Cpu(), j, run_keys);
  });
  if (sortd::Sorter* cl = OpenCl(); cl != nullptr) {
    run("opencl", [cl](const sortd::SortJob& j) { return cl->Sort(j); });
  }
  return 0;
}
