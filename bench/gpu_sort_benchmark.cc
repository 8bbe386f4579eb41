// GPU benchmark of the OpenCL engine. Prints one JSON line per figure in the
// schema of bench/compare-anchors.py (impl, op, dtype, n, segments,
// ms, gkeys_per_s), so the two can be compared line by line:
//   span_ms           device time from the first kernel's start to the last
//                     one's end (profiling events), gaps between launches
//                     included: the figure comparable with CUB's in-place
//                     sort timed by events around it
//   ms / gkeys_per_s  the sum of the kernels' own durations (gaps left
//                     out); gkeys_per_s is n / span
//   e2e_ms            wall time of the whole call: upload from pageable host
//                     memory, kernels, download
//   stages            device time per stage
//
//   gpu_sort_benchmark [--device=gpu|gpu:N|opencl-cpu] [--sizes=16,20,24]
//                      [--reps=5] [--transpose_log2=24]
//                      [--policy=radix.pass=three-launch,radix.lookback=8,...]
//                      (the device's policy with these knobs changed: the
//                      keys and values its "policy" line prints; e.g.
//                      bitonic.max_keys=0,bitonic.max_keys_64=0,
//                      bitonic.max_keys_32_keys=0 sorts every size by
//                      radix)
//                      [--quick]
//                      [--cases=u32,u64,f32,i32,pairs] (the main cases to
//                      run; all by default)
//                      [--segmented=i32x4096x4096,i64x...] (segmented sorts
//                      of these shapes, also under --quick)
//                      [--trim_pool] (free the engine's idle buffers before
//                      each size)
//                      [--print_reps] (every repetition's kernel time and
//                      stages)
//                      [--pool_bytes=N] (the engine's idle-buffer budget;
//                      0: its default)
//                      [--keys=random|narrow|clustered[:K]] (integer keys:
//                      uniform bits; uniform below 4n, so that only the low
//                      digits differ; or the high half of each key one of K
//                      random values (default 4) and the low half uniform,
//                      so that passes over the highest digits leave runs of
//                      n/K keys unsorted; lines other than random name it
//                      in "keys")
//                      [--kernel_cache_dir=DIR] (keeps the built kernels,
//                      on NVIDIA their PTX, for inspection)
//                      [--hold_mib=N] (before the engine starts, allocates
//                      and fills N MiB of device memory in a context of
//                      its own and holds it to the end: another allocation
//                      history, so that other physical pages back the
//                      engine's buffers; lines carry "hold_mib"; see
//                      bench/device-placement.sh)
//   SORTD_KERNEL_EXTRA_OPTIONS and SORTD_KERNEL_BUILD_LOG as sortd reads
//   them (CONTRIBUTING.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gpu/cl.h"
#include "gpu/device.h"
#include "gpu/opencl_engine.h"

namespace {

using sortd::KeyType;
using sortd::gpu::OpenClEngine;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Gkeys/s from a span in ms; 0 where profiling gave no span (JSON has no
// infinity).
double KeysPerNs(size_t n, double span_ms) {
  return span_ms > 0 ? static_cast<double>(n) / span_ms / 1e6 : 0.0;
}

// Kernel time: every stage but the transfers and the run's wall and span
// times (host_*, device_span).
bool IsKernelTime(const std::string& stage) {
  for (const char* other : {"upload", "download", "host_", "device_span"}) {
    if (stage.rfind(other, 0) == 0) return false;
  }
  return true;
}

struct Case {
  const char* op;  // sort_keys, sort_pairs (u32 payload), argsort
  KeyType type;
};

std::vector<uint64_t> RandomWords(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> v(n);
  for (uint64_t& x : v) x = rng();
  return v;
}

bool g_print_reps = false;
std::string g_keys = "random";  // --keys
long g_hold_mib = 0;            // --hold_mib
size_t g_clusters = 4;          // --keys=clustered:K

// Integer keys of --keys' shape in place of the random words' first n
// keys of ks bytes.
void ShapeKeys(std::vector<uint64_t>& words, size_t n, size_t ks,
               uint64_t seed) {
  if (g_keys == "random") return;
  std::mt19937_64 rng(seed);
  const int half = static_cast<int>(ks * 4);
  std::vector<uint64_t> tops(g_clusters);
  for (uint64_t& t : tops) t = rng() << half;
  auto key = [&](uint64_t i) -> uint64_t {
    if (g_keys == "narrow") return rng() % (4 * static_cast<uint64_t>(n));
    const uint64_t low = rng() & ((uint64_t{1} << half) - 1);
    return tops[i % tops.size()] | low;
  };
  if (ks == 8) {
    for (size_t i = 0; i < n; ++i) words[i] = key(i);
  } else {
    uint32_t* k = reinterpret_cast<uint32_t*>(words.data());
    for (size_t i = 0; i < n; ++i) k[i] = static_cast<uint32_t>(key(i));
  }
}

// Whether `out` holds `in`'s n integer keys of `type` in ascending order:
// in order, and with the same sum, sum of squares and xor of the keys (a
// key lost or doubled shows).
template <typename T>
bool SortedPermutationOf(const void* in, const void* out, size_t n) {
  const T* a = static_cast<const T*>(in);
  const T* b = static_cast<const T*>(out);
  if (!std::is_sorted(b, b + n)) return false;
  uint64_t sums[2][3] = {};
  for (size_t i = 0; i < n; ++i) {
    for (int side = 0; side < 2; ++side) {
      const auto k = static_cast<uint64_t>(side == 0 ? a[i] : b[i]);
      sums[side][0] += k;
      sums[side][1] += k * k;
      sums[side][2] ^= k;
    }
  }
  return std::equal(sums[0], sums[0] + 3, sums[1]);
}

// Whether `out` holds `in`'s n keys in ascending order as argsort returns
// them: each the input's key at its index in `perm` (bit for bit), every
// index once, and equal keys in input order. Keys compare by `<`, so for
// floats -0.0 and +0.0 are equal and NaNs unordered, where the device
// orders them by their bits: the benchmark's floats are neither.
template <typename T>
bool StableArgsortOf(const void* in, const void* out, const uint32_t* perm,
                     size_t n) {
  const T* a = static_cast<const T*>(in);
  const T* b = static_cast<const T*>(out);
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t p = perm[i];
    if (p >= n || seen[p]) return false;
    seen[p] = true;
    if (std::memcmp(&a[p], &b[i], sizeof(T)) != 0) return false;
    if (i > 0 && (b[i] < b[i - 1] || (!(b[i - 1] < b[i]) && perm[i - 1] > p))) {
      return false;
    }
  }
  return true;
}

// "verified": true or false for the benchmark's cases (ascending): keys
// only (integer keys), argsort (keys and indices) and pairs of u32 keys
// and their input indices (checked as an argsort); nothing for others.
std::string Verified(const Case& c, const void* in, const void* out,
                     const std::vector<uint32_t>& perm,
                     const std::vector<uint32_t>& values_out, size_t n) {
  const std::string op = c.op;
  bool ok = false;
  if (op == "sort_pairs" && c.type == KeyType::kU32) {
    ok = values_out.size() == n &&
         StableArgsortOf<uint32_t>(in, out, values_out.data(), n);
    return ok ? ",\"verified\":true" : ",\"verified\":false";
  }
  if (op == "argsort") {
    const uint32_t* p = perm.data();
    switch (c.type) {
      case KeyType::kF32:
        ok = StableArgsortOf<float>(in, out, p, n);
        break;
      case KeyType::kI32:
        ok = StableArgsortOf<int32_t>(in, out, p, n);
        break;
      default:
        return "";
    }
    return ok ? ",\"verified\":true" : ",\"verified\":false";
  }
  if (op != "sort_keys") return "";
  switch (c.type) {
    case KeyType::kU32:
      ok = SortedPermutationOf<uint32_t>(in, out, n);
      break;
    case KeyType::kI32:
      ok = SortedPermutationOf<int32_t>(in, out, n);
      break;
    case KeyType::kU64:
      ok = SortedPermutationOf<uint64_t>(in, out, n);
      break;
    case KeyType::kI64:
      ok = SortedPermutationOf<int64_t>(in, out, n);
      break;
    default:
      return "";
  }
  return ok ? ",\"verified\":true" : ",\"verified\":false";
}

void Run(OpenClEngine& engine, const Case& c, int log2n, int reps,
         const char* impl = "sortd") {
  const size_t n = size_t{1} << log2n;
  const size_t ks = sortd::KeySize(c.type);
  // Random bits as keys; floats get a uniform value instead, so that the
  // share of NaNs is realistic.
  std::vector<uint64_t> words = RandomWords((n * ks + 7) / 8, log2n);
  if (c.type == KeyType::kF32) {
    float* f = reinterpret_cast<float*>(words.data());
    std::mt19937 rng(log2n);
    std::uniform_real_distribution<float> u(-1e6f, 1e6f);
    for (size_t i = 0; i < n; ++i) f[i] = u(rng);
  } else {
    ShapeKeys(words, n, ks, log2n);
  }
  // Pairs carry each key's input index as its value, so that the values'
  // order can be checked like an argsort's.
  std::vector<uint32_t> values(std::string(c.op) == "sort_pairs" ? n : 0);
  std::iota(values.begin(), values.end(), uint32_t{0});
  std::vector<uint32_t> vout(values.size()), perm(n);
  std::vector<char> out(n * ks);
  std::vector<double> kernel_ms, span_ms, e2e_ms;
  std::map<std::string, std::vector<double>> stage_ms;
  std::string rep_stages;  // --print_reps: each repetition's stages
  for (int r = 0; r < reps + 1; ++r) {
    sortd::StageTimes stages;
    sortd::SortJob job;
    job.key_type = c.type;
    job.count = n;
    job.keys = reinterpret_cast<const std::byte*>(words.data());
    job.keys_out = reinterpret_cast<std::byte*>(out.data());
    if (!values.empty()) {
      job.value_type = sortd::ValueType::kU32;
      job.values = reinterpret_cast<const std::byte*>(values.data());
      job.values_out = reinterpret_cast<std::byte*>(vout.data());
    }
    if (std::string(c.op) == "argsort") {
      job.permutation_out = reinterpret_cast<std::byte*>(perm.data());
    }
    double span = 0;
    job.stages = &stages;
    job.kernel_span_seconds = &span;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = engine.Sort(job);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::printf("{\"impl\":\"%s\",\"op\":\"%s\",\"error\":\"%s\"}\n", impl,
                  c.op, std::string(s.message()).c_str());
      return;
    }
    if (r == 0) continue;  // warm-up
    double k = 0;
    if (g_print_reps) rep_stages += rep_stages.empty() ? "[{" : "},{";
    for (const auto& st : stages) {
      if (g_print_reps) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%s\"%s\":%.4f",
                      rep_stages.back() == '{' ? "" : ",", st.stage.c_str(),
                      st.seconds * 1e3);
        rep_stages += buf;
      }
      stage_ms[st.stage].push_back(st.seconds * 1e3);
      if (IsKernelTime(st.stage)) k += st.seconds * 1e3;
    }
    kernel_ms.push_back(k);
    span_ms.push_back(span * 1e3);
    e2e_ms.push_back(
        std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double ms = Median(kernel_ms);
  const double span = Median(span_ms);
  std::string extra;
  if (g_print_reps) {
    char when[48];  // wall-clock seconds, to line up with nvidia-smi's log
    std::snprintf(when, sizeof(when), ",\"unix_s\":%.1f",
                  std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
    extra += when;
    extra += ",\"rep_ms\":[";
    for (size_t i = 0; i < kernel_ms.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%s%.4f", i ? "," : "", kernel_ms[i]);
      extra += buf;
    }
    extra += "],\"rep_stages\":" + rep_stages + "}]";
  }
  extra += Verified(c, words.data(), out.data(), perm, vout, n);
  if (g_hold_mib > 0) extra += absl::StrCat(",\"hold_mib\":", g_hold_mib);
  std::string stages_json;
  for (auto& [name, v] : stage_ms) {
    if (!stages_json.empty()) stages_json += ",";
    char buf[96];
    std::snprintf(buf, sizeof(buf), "\"%s\":%.4f", name.c_str(), Median(v));
    stages_json += buf;
  }
  std::printf(
      "{\"impl\":\"%s\",\"op\":\"%s\",\"dtype\":\"%s\",\"n\":%zu,"
      "\"segments\":1,\"span_ms\":%.4f,\"ms\":%.4f,\"gkeys_per_s\":%.3f,"
      "\"e2e_ms\":%.3f,\"stages\":{%s}%s%s}\n",
      impl, c.op, sortd::KeyTypeName(c.type), n, span, ms, KeysPerNs(n, span),
      Median(e2e_ms), stages_json.c_str(), extra.c_str(),
      g_keys == "random" || c.type == KeyType::kF32
          ? ""
          : (",\"keys\":\"" + g_keys +
             (g_keys == "clustered" ? absl::StrCat(":", g_clusters) : "") +
             "\"")
                .c_str());
  std::fflush(stdout);
}

// Segmented sort of `segments` equal segments of random i32 (or i64) keys
// (the shape of torch.sort(dim=1) in the anchors).
void RunSegmented(OpenClEngine& engine, size_t segments, size_t length,
                  int reps, KeyType type = KeyType::kI32) {
  const size_t n = segments * length;
  const size_t width = type == KeyType::kI64 ? 8 : 4;
  std::vector<uint64_t> words = RandomWords((n * width + 7) / 8, segments);
  std::vector<uint32_t> offsets(segments + 1);
  for (size_t s = 0; s <= segments; ++s)
    offsets[s] = static_cast<uint32_t>(s * length);
  std::vector<char> out(n * width);
  std::vector<double> kernel_ms, span_ms, e2e_ms;
  for (int r = 0; r < reps + 1; ++r) {
    sortd::StageTimes stages;
    sortd::SortJob job;
    job.key_type = type;
    job.count = n;
    job.keys = reinterpret_cast<const std::byte*>(words.data());
    job.keys_out = reinterpret_cast<std::byte*>(out.data());
    double span = 0;
    job.stages = &stages;
    job.kernel_span_seconds = &span;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = engine.SortSegments(job, offsets);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::printf(
          "{\"impl\":\"sortd\",\"op\":\"segmented_sort\",\"error\":\"%s\"}\n",
          std::string(s.message()).c_str());
      return;
    }
    if (r == 0) continue;
    double k = 0;
    for (const auto& st : stages) {
      if (IsKernelTime(st.stage)) k += st.seconds * 1e3;
    }
    kernel_ms.push_back(k);
    span_ms.push_back(span * 1e3);
    e2e_ms.push_back(
        std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double ms = Median(kernel_ms);
  const double span = Median(span_ms);
  std::printf(
      "{\"impl\":\"sortd\",\"op\":\"segmented_sort\",\"dtype\":\"%s\","
      "\"n\":%zu,\"segments\":%zu,\"span_ms\":%.4f,\"ms\":%.4f,"
      "\"gkeys_per_s\":%.3f,\"e2e_ms\":%.3f}\n",
      sortd::KeyTypeName(type), n, segments, span, ms, KeysPerNs(n, span),
      Median(e2e_ms));
  std::fflush(stdout);
}

void RunTranspose(OpenClEngine& engine, int log2n, int reps) {
  const size_t count = size_t{1} << log2n;
  std::vector<uint64_t> in = RandomWords(count * 16, 99);
  std::vector<uint64_t> out(count * 16);
  std::vector<double> kernel_ms, span_ms, e2e_ms;
  for (int r = 0; r < reps + 1; ++r) {
    sortd::StageTimes stages;
    sortd::TransposeJob job{.count = count,
                            .in = reinterpret_cast<const std::byte*>(in.data()),
                            .out = reinterpret_cast<std::byte*>(out.data()),
                            .stages = &stages};
    double span = 0;
    job.kernel_span_seconds = &span;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = engine.Transpose(job);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::printf(
          "{\"impl\":\"sortd\",\"op\":\"transpose32\",\"error\":\"%s\"}\n",
          std::string(s.message()).c_str());
      return;
    }
    if (r == 0) continue;
    for (const auto& st : stages) {
      if (st.stage == "transpose") kernel_ms.push_back(st.seconds * 1e3);
    }
    span_ms.push_back(span * 1e3);
    e2e_ms.push_back(
        std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double ms = Median(kernel_ms);
  std::printf(
      "{\"impl\":\"sortd\",\"op\":\"transpose32\",\"dtype\":\"u32\",\"n\":%zu,"
      "\"segments\":%zu,\"span_ms\":%.4f,\"ms\":%.4f,\"gbytes_per_s\":%.1f,"
      "\"e2e_ms\":%.3f}\n",
      count * 32, count, Median(span_ms), ms,
      2.0 * count * 128 / (Median(span_ms) > 0 ? Median(span_ms) : ms) / 1e6,
      Median(e2e_ms));
  std::fflush(stdout);
}

// The device's own policy or transpose kernel refused (one that does not
// build or fails the warm-up check) leaves its portable twin measured in
// its place: said on stderr. True if the policy was.
bool WarnFallbacks(const OpenClEngine& engine) {
  for (const std::string* f :
       {&engine.policy_fallback(), &engine.transpose_fallback()}) {
    if (!f->empty()) {
      std::fprintf(stderr, "gpu_sort_benchmark: WARNING: %s\n", f->c_str());
    }
  }
  if (const std::vector<std::string> idle = engine.policy().radix.IdleKnobs();
      !idle.empty()) {
    std::fprintf(stderr,
                 "gpu_sort_benchmark: WARNING: policy knobs set without "
                 "effect under the policy's pass form and ranking: %s\n",
                 absl::StrJoin(idle, " ").c_str());
  }
  return !engine.policy_fallback().empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "gpu";
  std::vector<int> sizes = {16, 20, 24, 26};
  int reps = 5;
  int transpose_log2 = 24;
  std::string policy_spec;
  bool quick = false;
  bool trim_pool = false;
  long pool_bytes = 0;
  std::string case_names = "u32,u64,f32,i32,pairs";
  std::string kernel_cache_dir;
  std::string segmented;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--policy=", 0) == 0) policy_spec = a.substr(9);
    if (a.rfind("--segmented=", 0) == 0) segmented = a.substr(12);
    if (a == "--quick") quick = true;
    if (a == "--trim_pool") trim_pool = true;
    if (a == "--print_reps") g_print_reps = true;
    if (a.rfind("--pool_bytes=", 0) == 0) pool_bytes = std::stol(a.substr(13));
    if (a.rfind("--cases=", 0) == 0) case_names = a.substr(8);
    if (a.rfind("--hold_mib=", 0) == 0 &&
        (!absl::SimpleAtoi(a.substr(11), &g_hold_mib) || g_hold_mib < 0)) {
      std::fprintf(stderr,
                   "gpu_sort_benchmark: --hold_mib takes a whole number of "
                   "MiB, 0 or more\n");
      return 2;
    }
    if (a.rfind("--keys=", 0) == 0) {
      g_keys = a.substr(7);
      if (g_keys.rfind("clustered:", 0) == 0 &&
          absl::SimpleAtoi(g_keys.substr(10), &g_clusters) && g_clusters > 0) {
        g_keys = "clustered";
      }
      if (g_keys != "random" && g_keys != "narrow" && g_keys != "clustered") {
        std::fprintf(stderr, "gpu_sort_benchmark: unknown --keys=%s\n",
                     g_keys.c_str());
        return 2;
      }
    }
    if (a.rfind("--kernel_cache_dir=", 0) == 0) {
      kernel_cache_dir = a.substr(19);
    }
    if (a.rfind("--device=", 0) == 0) device = a.substr(9);
    if (a.rfind("--reps=", 0) == 0) reps = std::stoi(a.substr(7));
    if (a.rfind("--transpose_log2=", 0) == 0)
      transpose_log2 = std::stoi(a.substr(17));
    if (a.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(a.substr(8), ',')) {
        int v;
        if (absl::SimpleAtoi(s, &v)) sizes.push_back(v);
      }
    }
  }
  OpenClEngine::Options options;
  // "gpu" (the first GPU), "gpu:N" (the N-th), else an OpenCL CPU device.
  options.kind = device.rfind("gpu", 0) == 0 ? sortd::gpu::DeviceKind::kGpu
                                             : sortd::gpu::DeviceKind::kCpu;
  if (device.rfind("gpu:", 0) == 0) {
    int index = 0;
    if (!absl::SimpleAtoi(device.substr(4), &index) || index < 0) {
      std::fprintf(stderr, "gpu_sort_benchmark: --device=%s: expected gpu:N\n",
                   device.c_str());
      return 2;
    }
    options.device_index = index;
  }
  // --hold_mib: memory taken before the engine's, held to the end.
  cl::Context hold_context;
  cl::Buffer hold;
  if (g_hold_mib > 0) {
    absl::StatusOr<sortd::gpu::Device> d =
        sortd::gpu::FindDevice(options.kind, options.device_index);
    if (!d.ok()) {
      std::fprintf(stderr, "gpu_sort_benchmark: --hold_mib: %s\n",
                   d.status().ToString().c_str());
      return 1;
    }
    cl_int err = CL_SUCCESS;
    hold_context = cl::Context(d->device, nullptr, nullptr, nullptr, &err);
    const size_t bytes = static_cast<size_t>(g_hold_mib) << 20;
    if (err == CL_SUCCESS) {
      hold = cl::Buffer(hold_context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
    }
    if (err == CL_SUCCESS) {
      cl::CommandQueue q(hold_context, d->device, cl::QueueProperties::None,
                         &err);
      if (err == CL_SUCCESS)
        err = q.enqueueFillBuffer(hold, cl_uint{0}, 0, bytes);
      if (err == CL_SUCCESS) err = q.finish();
    }
    if (err != CL_SUCCESS) {
      std::fprintf(stderr,
                   "gpu_sort_benchmark: --hold_mib=%ld: OpenCL error %d\n",
                   g_hold_mib, err);
      return 1;
    }
  }
  options.cache_dir = kernel_cache_dir;
  options.pool_bytes = static_cast<size_t>(pool_bytes);
  // The kernel build diagnostics sortd takes (CONTRIBUTING.md), so that a
  // kernel experiment is timed here as it would run there.
  if (const char* extra = std::getenv("SORTD_KERNEL_EXTRA_OPTIONS")) {
    options.kernel_diagnostics.extra_options = extra;
  }
  if (const char* log = std::getenv("SORTD_KERNEL_BUILD_LOG")) {
    options.kernel_diagnostics.print_build_log = std::string(log) == "1";
  }
  auto engine = OpenClEngine::Create(options);
  if (engine.ok() && !policy_spec.empty()) {
    // Another shape on the same device (policy experiments).
    sortd::gpu::EnginePolicy policy = (*engine)->policy();
    if (absl::Status s = sortd::gpu::ApplyPolicyOverrides(policy_spec, &policy);
        !s.ok()) {
      std::fprintf(stderr, "gpu_sort_benchmark: %s\n", s.ToString().c_str());
      return 2;
    }
    options.policy = policy;
    engine = OpenClEngine::Create(options);
  }
  if (!engine.ok()) {
    std::fprintf(stderr, "gpu_sort_benchmark: %s\n",
                 engine.status().ToString().c_str());
    return 1;
  }
  const bool fallback = WarnFallbacks(**engine);
  std::printf(
      "{\"impl\":\"sortd\",\"op\":\"info\",\"name\":\"%s\",\"policy\":\"%s\","
      "\"policy_fallback\":%s%s}\n",
      (*engine)->info().ToString().c_str(),
      (*engine)->policy().ToString().c_str(), fallback ? "true" : "false",
      g_hold_mib > 0 ? absl::StrCat(",\"hold_mib\":", g_hold_mib).c_str() : "");
  const std::pair<const char*, Case> all_cases[] = {
      {"u32", {"sort_keys", KeyType::kU32}},
      {"u64", {"sort_keys", KeyType::kU64}},
      {"f32", {"argsort", KeyType::kF32}},
      {"i32", {"argsort", KeyType::kI32}},
      {"pairs", {"sort_pairs", KeyType::kU32}}};
  std::vector<Case> cases;
  for (absl::string_view name : absl::StrSplit(case_names, ',')) {
    bool known = false;
    for (const auto& [n, c] : all_cases) {
      if (name == n) {
        cases.push_back(c);
        known = true;
      }
    }
    if (!known) {
      std::fprintf(stderr, "gpu_sort_benchmark: unknown case '%.*s'\n",
                   static_cast<int>(name.size()), name.data());
      return 2;
    }
  }
  for (int lg : sizes) {
    // --trim_pool: each size starts with no idle device buffers (a
    // diagnostic of allocation history).
    if (trim_pool) (*engine)->TrimPool();
    for (const Case& c : cases) Run(**engine, c, lg, reps);
  }
  // Segment shapes of one's own (for example to time radix_segments with
  // segments of exactly a tile): TYPExSEGMENTSxLENGTH, comma-separated.
  for (absl::string_view shape :
       absl::StrSplit(segmented, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(shape, 'x');
    size_t segments = 0, length = 0;
    if (f.size() != 3 || (f[0] != "i32" && f[0] != "i64") ||
        !absl::SimpleAtoi(f[1], &segments) ||
        !absl::SimpleAtoi(f[2], &length)) {
      std::fprintf(stderr, "gpu_sort_benchmark: bad --segmented shape '%.*s'\n",
                   static_cast<int>(shape.size()), shape.data());
      return 2;
    }
    RunSegmented(**engine, segments, length, reps,
                 f[0] == "i64" ? KeyType::kI64 : KeyType::kI32);
  }
  if (quick) return 0;  // policy sweeps: the main cases only
  for (auto [segments, length] :
       {std::pair<size_t, size_t>{65536, 256}, {16384, 1024}, {4096, 4096}}) {
    RunSegmented(**engine, segments, length, reps);
  }
  if (transpose_log2 > 0) RunTranspose(**engine, transpose_log2, reps);

  // Where bitonic wins: both algorithms forced, small sizes.
  for (auto [algorithm, impl] :
       {std::pair{sortd::gpu::SortAlgorithm::kBitonic, "sortd-bitonic"},
        {sortd::gpu::SortAlgorithm::kRadix, "sortd-radix"}}) {
    OpenClEngine::Options forced = options;
    forced.algorithm = algorithm;
    auto e = OpenClEngine::Create(forced);
    if (!e.ok()) continue;
    WarnFallbacks(**e);
    for (int lg : {8, 10, 12, 14, 16, 17, 18, 20}) {
      Run(**e, {"sort_keys", KeyType::kU32}, lg, reps, impl);
      Run(**e, {"argsort", KeyType::kF32}, lg, reps, impl);
      Run(**e, {"sort_keys", KeyType::kU64}, lg, reps, impl);
    }
  }
  // End to end through pageable memory, for comparison with pinned staging.
  OpenClEngine::Options pageable = options;
  pageable.pinned_staging = false;
  if (auto e = OpenClEngine::Create(pageable); e.ok()) {
    WarnFallbacks(**e);
    for (int lg : sizes)
      Run(**e, {"sort_keys", KeyType::kU32}, lg, reps, "sortd-pageable");
  }
  return 0;
}
