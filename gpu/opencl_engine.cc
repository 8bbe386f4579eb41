#include "gpu/opencl_engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "server/keys.h"
#include "server/transpose.h"

namespace sortd::gpu {
namespace {

size_t DivUp(size_t a, size_t b) { return (a + b - 1) / b; }

uint32_t KindCode(KeyType t) {
  switch (t) {
    case KeyType::kI32:
    case KeyType::kI64:
      return 1;
    case KeyType::kF32:
    case KeyType::kF64:
      return 2;
    default:
      return 0;
  }
}

long EnvLong(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : 0;
}

}  // namespace

OpenClEngine::OpenClEngine(Device device, const Options& options)
    : device_(std::move(device)),
      options_(options),
      policy_(options.policy ? *options.policy
                             : EnginePolicy::For(device_.info)) {
  if (options_.fail_enqueue == 0) {
    options_.fail_enqueue = EnvLong("SORTD_FAULT_ENQUEUE");
  }
}

absl::StatusOr<std::unique_ptr<OpenClEngine>> OpenClEngine::Create(
    const Options& options) {
  absl::StatusOr<Device> device = FindDevice(options.kind);
  if (!device.ok()) return device.status();
  std::unique_ptr<OpenClEngine> engine(new OpenClEngine(*device, options));
  SORTD_RETURN_IF_ERROR(engine->Init());
  SORTD_RETURN_IF_ERROR(engine->WarmUp());
  engine->faults_armed_ = true;  // injected faults count serving enqueues
  return engine;
}

absl::Status OpenClEngine::Init() {
  SORTD_RETURN_IF_ERROR(policy_.CheckFits(device_.info));
  cl_int err = CL_SUCCESS;
  context_ = cl::Context(device_.device, nullptr, nullptr, nullptr, &err);
  SORTD_CL_RETURN_IF(err, "clCreateContext");
  queue_ = cl::CommandQueue(context_, device_.device, CL_QUEUE_PROFILING_ENABLE,
                            &err);
  SORTD_CL_RETURN_IF(err, "clCreateCommandQueue");
  cache_ =
      std::make_unique<ProgramCache>(context_, device_, options_.cache_dir);

  const RadixSortPolicy& r = policy_.radix;
  for (int wide = 0; wide < 2; ++wide) {
    for (int with_index = 0; with_index < 2; ++with_index) {
      const int bits = wide ? 64 : 32;
      const std::string opts =
          absl::StrCat("-DKEY_BITS=", bits, " -DRADIX_BITS=", r.radix_bits,
                       " -DWG=", r.work_group, " -DITEMS=", r.Items(bits),
                       " -DHAS_INDEX=", with_index);
      absl::StatusOr<cl::Program> program = cache_->Get("radix_sort", opts);
      if (!program.ok()) return program.status();
      RadixKernels& k = radix_[wide][with_index];
      for (auto [kernel, name] : {std::pair{&k.encode, "radix_encode"},
                                  {&k.histogram, "radix_histogram"},
                                  {&k.scan_blocks, "scan_blocks"},
                                  {&k.scan_add, "scan_add"},
                                  {&k.scatter, "radix_scatter"},
                                  {&k.decode, "radix_decode"}}) {
        *kernel = cl::Kernel(*program, name, &err);
        SORTD_CL_RETURN_IF(err, absl::StrCat("clCreateKernel(", name, ")"));
      }
    }
  }
  absl::StatusOr<cl::Program> t = cache_->Get(
      "transpose",
      absl::StrCat("-DMATRICES_PER_WG=", policy_.transpose.matrices_per_group));
  if (!t.ok()) return t.status();
  transpose_ = cl::Kernel(*t, "transpose32", &err);
  SORTD_CL_RETURN_IF(err, "clCreateKernel(transpose32)");
  return absl::OkStatus();
}

// Runs every kernel variant once on a small input and checks the answers,
// so that a miscompiling driver is caught before health says SERVING.
absl::Status OpenClEngine::WarmUp() {
  const size_t n = 3 * static_cast<size_t>(policy_.radix.Tile(32)) + 17;
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i)
    keys[i] = (i * 0x9E3779B97F4A7C15ull) >> (i % 7);
  for (KeyType type : {KeyType::kU32, KeyType::kI64}) {
    for (bool with_index : {false, true}) {
      std::vector<uint64_t> out(n);
      std::vector<uint32_t> perm(n);
      SortJob job{
          .key_type = type,
          .count = n,
          .keys = reinterpret_cast<const std::byte*>(keys.data()),
          .keys_out = reinterpret_cast<std::byte*>(out.data()),
          .permutation_out =
              with_index ? reinterpret_cast<std::byte*>(perm.data()) : nullptr};
      SORTD_RETURN_IF_ERROR(Sort(job));
      const size_t ks = KeySize(type);
      for (size_t i = 1; i < n; ++i) {
        bool ordered = true;
        if (type == KeyType::kU32) {
          uint32_t a, b;
          std::memcpy(&a, reinterpret_cast<char*>(out.data()) + (i - 1) * ks,
                      4);
          std::memcpy(&b, reinterpret_cast<char*>(out.data()) + i * ks, 4);
          ordered = a <= b;
        } else {
          ordered =
              static_cast<int64_t>(out[i - 1]) <= static_cast<int64_t>(out[i]);
        }
        if (!ordered) {
          return absl::InternalError(
              absl::StrCat("warm-up sort on ", device_.info.name,
                           " returned unsorted keys at ", i));
        }
      }
    }
  }
  std::vector<uint32_t> m(32 * 3), t(32 * 3);
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = static_cast<uint32_t>(i * 2654435761u);
  SORTD_RETURN_IF_ERROR(
      Transpose({.count = 3,
                 .in = reinterpret_cast<const std::byte*>(m.data()),
                 .out = reinterpret_cast<std::byte*>(t.data())}));
  for (size_t x = 0; x < 3; ++x) {
    uint32_t want[32];
    std::copy(m.begin() + x * 32, m.begin() + x * 32 + 32, want);
    TransposeBits32(want);
    if (!std::equal(want, want + 32, t.begin() + x * 32)) {
      return absl::InternalError(absl::StrCat("warm-up transpose on ",
                                              device_.info.name, " is wrong"));
    }
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::InjectedFault(const char* what) {
  if (!faults_armed_) return absl::OkStatus();
  const long n = ++enqueues_;
  const long at = options_.fail_enqueue;
  if (at > 0 &&
      (n == at || (n > at && EnvLong("SORTD_FAULT_ENQUEUE_STICKY")))) {
    return ClStatus(CL_OUT_OF_RESOURCES,
                    absl::StrCat(what, " (injected fault at enqueue ", n, ")"));
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::Launch(cl::Kernel& kernel, size_t groups,
                                  size_t group_size, const char* stage,
                                  Events& events) {
  SORTD_RETURN_IF_ERROR(InjectedFault(stage));
  cl::Event event;
  cl_int err = queue_.enqueueNDRangeKernel(
      kernel, cl::NullRange, cl::NDRange(groups * group_size),
      cl::NDRange(group_size), nullptr, &event);
  SORTD_CL_RETURN_IF(err, absl::StrCat("enqueue ", stage, " kernel"));
  events.emplace_back(stage, event);
  return absl::OkStatus();
}

absl::Status OpenClEngine::Write(cl::Buffer& buffer, size_t bytes,
                                 const void* src, Events& events) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(InjectedFault("upload"));
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueWriteBuffer(buffer, CL_FALSE, 0, bytes, src,
                                               nullptr, &event),
                     "clEnqueueWriteBuffer");
  events.emplace_back("upload", event);
  return absl::OkStatus();
}

absl::Status OpenClEngine::Read(cl::Buffer& buffer, size_t bytes, void* dst,
                                Events& events) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(InjectedFault("download"));
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueReadBuffer(buffer, CL_FALSE, 0, bytes, dst,
                                              nullptr, &event),
                     "clEnqueueReadBuffer");
  events.emplace_back("download", event);
  return absl::OkStatus();
}

absl::StatusOr<cl::Buffer> OpenClEngine::Allocate(size_t bytes,
                                                  const char* what) {
  if (bytes > device_.info.max_alloc_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs ", bytes, " bytes; ", device_.info.name,
        " allocates at most ", device_.info.max_alloc_bytes, " at once"));
  }
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 4),
                    nullptr, &err);
  SORTD_CL_RETURN_IF(err, absl::StrCat("clCreateBuffer(", what, ")"));
  return buffer;
}

absl::Status OpenClEngine::Finish(Events& events, StageTimes* stages) {
  SORTD_CL_RETURN_IF(queue_.finish(), "clFinish");
  if (stages == nullptr) return absl::OkStatus();
  std::map<std::string, double> seconds;
  std::vector<std::string> order;
  for (auto& [stage, event] : events) {
    cl_ulong start = 0, end = 0;
    if (event.getProfilingInfo(CL_PROFILING_COMMAND_START, &start) !=
            CL_SUCCESS ||
        event.getProfilingInfo(CL_PROFILING_COMMAND_END, &end) != CL_SUCCESS) {
      continue;
    }
    if (!seconds.count(stage)) order.push_back(stage);
    seconds[stage] += (end - start) * 1e-9;
  }
  for (const std::string& s : order) stages->push_back({s, seconds[s]});
  return absl::OkStatus();
}

absl::Status OpenClEngine::ScanInPlace(RadixKernels& k, int key_bits,
                                       cl::Buffer& data, size_t count,
                                       Events& events) {
  const size_t wg = policy_.radix.work_group;
  const size_t blocks = DivUp(count, policy_.radix.Tile(key_bits));
  absl::StatusOr<cl::Buffer> sums = Allocate(blocks * 4, "scan block sums");
  if (!sums.ok()) return sums.status();
  const cl_uint n = static_cast<cl_uint>(count);
  k.scan_blocks.setArg(0, data);
  k.scan_blocks.setArg(1, n);
  k.scan_blocks.setArg(2, *sums);
  SORTD_RETURN_IF_ERROR(Launch(k.scan_blocks, blocks, wg, "scan", events));
  if (blocks == 1) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(ScanInPlace(k, key_bits, *sums, blocks, events));
  k.scan_add.setArg(0, data);
  k.scan_add.setArg(1, n);
  k.scan_add.setArg(2, *sums);
  return Launch(k.scan_add, blocks, wg, "scan", events);
}

absl::Status OpenClEngine::Sort(const SortJob& job) {
  if (job.count == 0) return absl::OkStatus();
  if (job.count >= (size_t{1} << 32)) {
    return absl::InvalidArgumentError("the OpenCL engine sorts < 2^32 keys");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Events events;
  absl::Status status = SortLocked(job, events);
  // Whatever happened, nothing may still be queued when we return: the
  // caller's buffers are about to be reused or freed.
  absl::Status finished = Finish(events, status.ok() ? job.stages : nullptr);
  return status.ok() ? finished : status;
}

absl::Status OpenClEngine::SortLocked(const SortJob& job, Events& events) {
  const RadixSortPolicy& policy = policy_.radix;
  const size_t n = job.count;
  const int bits = static_cast<int>(KeySize(job.key_type) * 8);
  const size_t key_bytes = n * KeySize(job.key_type);
  const size_t value_bytes = n * ValueSize(job.value_type);
  const bool with_index =
      job.value_type != ValueType::kNone || job.permutation_out != nullptr;
  RadixKernels& k = radix_[bits == 64][with_index];
  const size_t wg = policy.work_group;
  const size_t tiles = DivUp(n, policy.Tile(bits));
  const size_t radix = size_t{1} << policy.radix_bits;
  const size_t passes = DivUp(bits, policy.radix_bits);
  const cl_uint n32 = static_cast<cl_uint>(n);
  const cl_uint kind = KindCode(job.key_type);
  const cl_uint descending = job.order == Order::kDescending;

  std::vector<cl::Buffer> buf;
  for (auto [bytes, what] : {std::pair{key_bytes, "raw keys"},
                             {key_bytes, "keys"},
                             {key_bytes, "keys (alternate)"},
                             {with_index ? n * 4 : 0, "indices"},
                             {with_index ? n * 4 : 0, "indices (alternate)"},
                             {value_bytes, "values"},
                             {value_bytes, "sorted values"},
                             {passes * radix * 4, "digit totals"},
                             {tiles * radix * 4, "tile offsets"}}) {
    absl::StatusOr<cl::Buffer> b = Allocate(bytes, what);
    if (!b.ok()) return b.status();
    buf.push_back(*b);
  }
  cl::Buffer &d_raw = buf[0], &d_values = buf[5], &d_values_out = buf[6],
             &d_totals = buf[7], &d_offsets = buf[8];
  cl::Buffer* keys[2] = {&buf[1], &buf[2]};
  cl::Buffer* index[2] = {&buf[3], &buf[4]};

  SORTD_RETURN_IF_ERROR(Write(d_raw, key_bytes, job.keys, events));
  SORTD_RETURN_IF_ERROR(Write(d_values, value_bytes, job.values, events));
  {
    cl::Event e;
    SORTD_CL_RETURN_IF(
        queue_.enqueueFillBuffer(d_totals, cl_uint{0}, 0, passes * radix * 4,
                                 nullptr, &e),
        "clEnqueueFillBuffer");
    events.emplace_back("transform", e);
  }
  k.encode.setArg(0, d_raw);
  k.encode.setArg(1, *keys[0]);
  k.encode.setArg(2, *index[0]);
  k.encode.setArg(3, n32);
  k.encode.setArg(4, kind);
  k.encode.setArg(5, descending);
  k.encode.setArg(6, d_totals);
  SORTD_RETURN_IF_ERROR(Launch(k.encode, tiles, wg, "transform", events));

  // One small read-back: which passes have a digit shared by every key.
  std::vector<cl_uint> totals(passes * radix);
  SORTD_RETURN_IF_ERROR(InjectedFault("download"));
  SORTD_CL_RETURN_IF(queue_.enqueueReadBuffer(d_totals, CL_TRUE, 0,
                                              totals.size() * 4, totals.data()),
                     "clEnqueueReadBuffer(digit totals)");

  int cur = 0;
  for (size_t pass = 0; pass < passes; ++pass) {
    const cl_uint* t = totals.data() + pass * radix;
    if (std::find(t, t + radix, n32) != t + radix) continue;
    const cl_uint shift = static_cast<cl_uint>(pass * policy.radix_bits);
    const cl_uint tiles32 = static_cast<cl_uint>(tiles);
    k.histogram.setArg(0, *keys[cur]);
    k.histogram.setArg(1, n32);
    k.histogram.setArg(2, shift);
    k.histogram.setArg(3, d_offsets);
    k.histogram.setArg(4, tiles32);
    SORTD_RETURN_IF_ERROR(Launch(k.histogram, tiles, wg, "histogram", events));
    SORTD_RETURN_IF_ERROR(
        ScanInPlace(k, bits, d_offsets, tiles * radix, events));
    k.scatter.setArg(0, *keys[cur]);
    k.scatter.setArg(1, *keys[1 - cur]);
    k.scatter.setArg(2, *index[cur]);
    k.scatter.setArg(3, *index[1 - cur]);
    k.scatter.setArg(4, n32);
    k.scatter.setArg(5, shift);
    k.scatter.setArg(6, d_offsets);
    k.scatter.setArg(7, tiles32);
    SORTD_RETURN_IF_ERROR(Launch(k.scatter, tiles, wg, "scatter", events));
    cur = 1 - cur;
  }

  k.decode.setArg(0, *keys[cur]);
  k.decode.setArg(1, d_raw);
  k.decode.setArg(2, *index[cur]);
  k.decode.setArg(3, d_values);
  k.decode.setArg(4, d_values_out);
  k.decode.setArg(5, *index[1 - cur]);  // unused: permutation is the index
  k.decode.setArg(6, n32);
  k.decode.setArg(7, kind);
  k.decode.setArg(8, descending);
  k.decode.setArg(9, static_cast<cl_uint>(ValueSize(job.value_type) / 4));
  k.decode.setArg(10, cl_uint{0});
  SORTD_RETURN_IF_ERROR(
      Launch(k.decode, DivUp(n, wg), wg, "transform", events));

  SORTD_RETURN_IF_ERROR(Read(d_raw, key_bytes, job.keys_out, events));
  SORTD_RETURN_IF_ERROR(
      Read(d_values_out, value_bytes, job.values_out, events));
  if (job.permutation_out != nullptr) {
    SORTD_RETURN_IF_ERROR(
        Read(*index[cur], n * 4, job.permutation_out, events));
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::Transpose(const TransposeJob& job) {
  if (job.count == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  Events events;
  absl::Status status = [&]() -> absl::Status {
    const size_t bytes = job.count * 128;
    absl::StatusOr<cl::Buffer> in = Allocate(bytes, "matrices");
    if (!in.ok()) return in.status();
    absl::StatusOr<cl::Buffer> out = Allocate(bytes, "transposed matrices");
    if (!out.ok()) return out.status();
    SORTD_RETURN_IF_ERROR(Write(*in, bytes, job.in, events));
    const size_t per_group = policy_.transpose.matrices_per_group;
    transpose_.setArg(0, *in);
    transpose_.setArg(1, *out);
    transpose_.setArg(2, static_cast<cl_uint>(job.count));
    SORTD_RETURN_IF_ERROR(Launch(transpose_, DivUp(job.count, per_group),
                                 per_group, "transpose", events));
    return Read(*out, bytes, job.out, events);
  }();
  absl::Status finished = Finish(events, status.ok() ? job.stages : nullptr);
  return status.ok() ? finished : status;
}

}  // namespace sortd::gpu
