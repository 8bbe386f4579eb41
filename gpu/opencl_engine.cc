#include "gpu/opencl_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/keys.h"
#include "server/transpose.h"

namespace sortd::gpu {
namespace {

size_t DivUp(size_t a, size_t b) { return (a + b - 1) / b; }

size_t NextPow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// radix_sort.cl's pass modes (MODE_FIRST, MODE_LAST).
constexpr cl_uint kModeFirst = 8;
constexpr cl_uint kModeLast = 16;

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

// How long a finished, profiled command ran; nullopt if the driver cannot
// say.
std::optional<double> EventSeconds(cl::Event& event) {
  cl_ulong start = 0, end = 0;
  if (event.getProfilingInfo(CL_PROFILING_COMMAND_START, &start) !=
          CL_SUCCESS ||
      event.getProfilingInfo(CL_PROFILING_COMMAND_END, &end) != CL_SUCCESS) {
    return std::nullopt;
  }
  return (end - start) * 1e-9;
}

bool WithIndex(const SortJob& job) {
  return job.value_type != ValueType::kNone || job.permutation_out != nullptr;
}

int KeyBits(const SortJob& job) {
  return static_cast<int>(KeySize(job.key_type) * 8);
}

}  // namespace

OpenClEngine::Run::~Run() {
  static const bool forward = EnvLong("SORTD_POOL_RELEASE_FORWARD") != 0;
  if (forward) return;  // the vector releases first to last
  while (!buffers.empty()) buffers.pop_back();
}

OpenClEngine::OpenClEngine(Device device, const Options& options)
    : device_(std::move(device)),
      options_(options),
      policy_(options.policy ? *options.policy
                             : EnginePolicy::For(device_.info)) {}

absl::StatusOr<std::unique_ptr<OpenClEngine>> OpenClEngine::Create(
    const Options& options) {
  absl::StatusOr<Device> device =
      options.device ? *options.device
                     : FindDevice(options.kind, options.device_index);
  if (!device.ok()) return device.status();
  std::unique_ptr<OpenClEngine> engine(new OpenClEngine(*device, options));
  SORTD_RETURN_IF_ERROR(engine->Init());
  SORTD_RETURN_IF_ERROR(engine->WarmUp());
  engine->faults_armed_ = true;  // injected faults count serving enqueues
  return engine;
}

absl::Status OpenClEngine::Init() {
  SORTD_RETURN_IF_ERROR(policy_.CheckFits(device_.info));
  if (options_.fail_build) {
    return absl::InternalError(absl::StrCat(
        "building radix_sort.cl for ", device_.info.name,
        " failed: injected program build failure (--inject_faults)"));
  }
  cl_int err = CL_SUCCESS;
  context_ = cl::Context(device_.device, nullptr, nullptr, nullptr, &err);
  SORTD_CL_RETURN_IF(err, "clCreateContext");
  cache_ =
      std::make_unique<ProgramCache>(context_, device_, options_.cache_dir);
  const size_t budget =
      options_.memory_budget_bytes > 0
          ? options_.memory_budget_bytes
          : static_cast<size_t>(device_.info.global_mem_bytes / 10 * 8);
  run_budget_ = budget / static_cast<size_t>(std::max(1, options_.lanes));
  size_t pool_bytes = options_.pool_bytes;
  if (pool_bytes == 0) {
    pool_bytes = device_.info.is_gpu ? budget : size_t{4} << 30;
  }
  pool_ = std::make_unique<BufferPool>(context_, std::min(pool_bytes, budget),
                                       budget);
  if (options_.pinned_staging) {
    auto pinned = PinnedHostMemory::Create(context_, device_.device);
    if (!pinned.ok()) return pinned.status();
    pinned_ = *std::move(pinned);
  }
  for (int l = 0; l < std::max(1, options_.lanes); ++l) {
    auto lane = std::make_unique<Lane>();
    lane->queue = cl::CommandQueue(context_, device_.device,
                                   CL_QUEUE_PROFILING_ENABLE, &err);
    SORTD_CL_RETURN_IF(err, "clCreateCommandQueue");
    if (options_.pinned_staging) {
      auto ring = StagingRing::Create(context_, lane->queue, options_.staging);
      if (!ring.ok()) return ring.status();
      lane->staging = std::move(*ring);
    }
    lanes_.push_back(std::move(lane));
  }
  for (auto& lane : lanes_) free_lanes_.push_back(lane.get());

  auto kernels =
      [&](const cl::Program& program,
          std::initializer_list<std::pair<cl::Kernel*, const char*>> list)
      -> absl::Status {
    for (auto [kernel, name] : list) {
      cl_int e = CL_SUCCESS;
      *kernel = cl::Kernel(program, name, &e);
      SORTD_CL_RETURN_IF(e, absl::StrCat("clCreateKernel(", name, ")"));
    }
    return absl::OkStatus();
  };
  const RadixSortPolicy& r = policy_.radix;
  const BitonicPolicy& b = policy_.bitonic;
  auto radix_options = [&](int bits, int with_index, int items) {
    return absl::StrCat(
        "-DKEY_BITS=", bits, " -DRADIX_BITS=", r.radix_bits,
        " -DLOCAL_BITS=", r.LocalBits(), " -DWG=", r.work_group,
        " -DITEMS=", items, " -DBANK_PAD=", r.bank_pad,
        " -DLOOKBACK=", r.lookback, " -DWARP_RANK=", r.WarpRank(bits),
        r.DirectPlace(bits) ? " -DDIRECT_PLACE=1" : "",
        " -DONESWEEP_EARLY=", r.onesweep == 2 ? 1 : 0,
        r.count_unroll > 1 ? absl::StrCat(" -DCOUNT_UNROLL=", r.count_unroll)
                           : std::string(),
        r.status_prefetch != 0 && r.onesweep != 0 ? " -DSTATUS_PREFETCH=1" : "",
        r.max_registers > 0
            ? absl::StrCat(" -cl-nv-maxrregcount=", r.max_registers)
            : std::string(),
        " -DHAS_INDEX=", with_index);
  };
  auto radix_kernels = [&](const cl::Program& program, RadixKernels& k,
                           int bits) -> absl::Status {
    SORTD_RETURN_IF_ERROR(
        kernels(program, {{&k.encode, "radix_encode"},
                          {&k.histogram, "radix_histogram"},
                          {&k.scan_blocks, "scan_blocks"},
                          {&k.scan_add, "scan_add"},
                          {&k.scatter, "radix_scatter"},
                          {&k.onesweep, "radix_onesweep"},
                          {&k.digit_starts, "radix_digit_starts"},
                          {&k.decode, "radix_decode"},
                          {&k.address, "buffer_address"}}));
    // Only warp-ranked builds have it.
    if (r.WarpRank(bits) == 0) return absl::OkStatus();
    return kernels(program, {{&k.segments, "radix_segments"}});
  };
  for (int wide = 0; wide < 2; ++wide) {
    for (int with_index = 0; with_index < 2; ++with_index) {
      const int bits = wide ? 64 : 32;
      auto radix = cache_->Get(
          "radix_sort",
          radix_options(bits, with_index, r.Items(bits, with_index)));
      if (!radix.ok()) return radix.status();
      absl::StatusOr<cl::Program> small = absl::NotFoundError("unused");
      if (r.small_items > 0) {
        small = cache_->Get("radix_sort",
                            radix_options(bits, with_index, r.small_items));
        if (!small.ok()) return small.status();
      }
      auto bitonic = cache_->Get(
          "bitonic_sort",
          absl::StrCat("-DKEY_BITS=", bits, " -DHAS_INDEX=", with_index,
                       " -DBLOCK=", b.Block(bits), " -DBWG=", b.work_group));
      if (!bitonic.ok()) return bitonic.status();
      // Kernel objects hold their arguments: each lane has its own.
      for (auto& lane : lanes_) {
        SORTD_RETURN_IF_ERROR(
            radix_kernels(*radix, lane->radix[wide][with_index], bits));
        if (small.ok()) {
          SORTD_RETURN_IF_ERROR(
              radix_kernels(*small, lane->radix_small[wide][with_index], bits));
        }
        BitonicKernels& bk = lane->bitonic[wide][with_index];
        SORTD_RETURN_IF_ERROR(
            kernels(*bitonic, {{&bk.pad, "bitonic_pad"},
                               {&bk.sort_blocks, "bitonic_sort_blocks"},
                               {&bk.merge_global, "bitonic_merge_global"},
                               {&bk.merge_local, "bitonic_merge_local"},
                               {&bk.segmented, "segmented_local_sort"}}));
      }
    }
  }
  return InitTranspose();
}

// The sub-group kernel needs shuffles and sub-groups of a multiple of 32
// work-items; anything else takes the portable kernel.
absl::Status OpenClEngine::InitTranspose() {
  using T = Options::Transpose;
  const int per_group = policy_.transpose.matrices_per_group;
  std::string define;
  if (device_.info.HasExtension("cl_khr_subgroup_shuffle") &&
      device_.info.HasExtension("cl_khr_subgroups")) {
    define = " -DSUBGROUP_KHR=1";
  } else if (device_.info.HasExtension("cl_intel_subgroups")) {
    define = " -DSUBGROUP_INTEL=1";
  }
  std::string why_not = "the device reports no sub-group shuffle";
  if (!define.empty() && options_.transpose != T::kPortable) {
    auto program = cache_->Get(
        "transpose", absl::StrCat("-DMATRICES_PER_WG=", per_group, define));
    if (!program.ok()) return program.status();
    cl_int err = CL_SUCCESS;
    cl::Kernel k(*program, "transpose32_subgroup", &err);
    SORTD_CL_RETURN_IF(err, "clCreateKernel(transpose32_subgroup)");
    size_t sub_group = 0;
    err = k.getSubGroupInfo(device_.device,
                            CL_KERNEL_MAX_SUB_GROUP_SIZE_FOR_NDRANGE,
                            cl::NDRange(per_group * 32), &sub_group);
    if (err == CL_SUCCESS && sub_group > 0 && sub_group % 32 == 0) {
      transpose_subgroup_ = true;
      for (auto& lane : lanes_) {
        lane->transpose = cl::Kernel(*program, "transpose32_subgroup", &err);
        SORTD_CL_RETURN_IF(err, "clCreateKernel(transpose32_subgroup)");
      }
      return absl::OkStatus();
    }
    why_not = absl::StrCat("its sub-groups hold ", sub_group,
                           " work-items, not a multiple of 32");
  }
  if (options_.transpose == T::kSubgroup) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sub-group transpose requested on ", device_.info.name, ": ", why_not));
  }
  auto program =
      cache_->Get("transpose", absl::StrCat("-DMATRICES_PER_WG=", per_group));
  if (!program.ok()) return program.status();
  cl_int err = CL_SUCCESS;
  for (auto& lane : lanes_) {
    lane->transpose = cl::Kernel(*program, "transpose32", &err);
    SORTD_CL_RETURN_IF(err, "clCreateKernel(transpose32)");
  }
  transpose_subgroup_ = false;
  return absl::OkStatus();
}

namespace {

// The stable ascending order of the n keys of `type` (u32 or i64) at
// `keys`, segment by segment (`offsets`), as indices into the whole array.
std::vector<uint32_t> ReferenceOrder(KeyType type, size_t n,
                                     const std::byte* keys,
                                     absl::Span<const uint32_t> offsets) {
  const size_t ks = KeySize(type);
  auto key = [&](uint32_t i) -> int64_t {
    if (type == KeyType::kU32) {
      uint32_t v = 0;
      std::memcpy(&v, keys + size_t{i} * ks, ks);
      return v;
    }
    int64_t v = 0;
    std::memcpy(&v, keys + size_t{i} * ks, ks);
    return v;
  };
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    std::stable_sort(order.begin() + offsets[s], order.begin() + offsets[s + 1],
                     [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  }
  return order;
}

}  // namespace

// Every warm-up answer is compared with the reference: the keys bit for bit,
// and the permutation where one was asked for. This runs whatever the build
// options (SORTD_KERNEL_EXTRA_OPTIONS included): kernels that do not sort
// stop Create(), and the device is not used.
absl::Status OpenClEngine::CheckWarmUpSort(const SortJob& job,
                                           const std::vector<uint32_t>& want,
                                           bool segmented) const {
  const size_t ks = KeySize(job.key_type);
  const auto* perm = reinterpret_cast<const uint32_t*>(job.permutation_out);
  for (size_t i = 0; i < job.count; ++i) {
    const bool key_ok = std::memcmp(job.keys_out + i * ks,
                                    job.keys + size_t{want[i]} * ks, ks) == 0;
    if (key_ok && (perm == nullptr || perm[i] == want[i])) continue;
    const std::string extra = ProgramCache::ExtraOptions();
    return absl::InternalError(absl::StrCat(
        "warm-up ", segmented ? "segmented " : "", "sort of ", job.count,
        job.key_type == KeyType::kU32 ? " u32" : " i64", " keys",
        perm != nullptr ? " with permutation" : "", " on ", device_.info.name,
        " gave a wrong answer: its ", key_ok ? "permutation" : "key",
        " at position ", i, " differs from the reference",
        extra.empty()
            ? std::string()
            : absl::StrCat(" (kernels built with SORTD_KERNEL_EXTRA_OPTIONS=",
                           extra, ")"),
        "; this device is not used"));
  }
  return absl::OkStatus();
}

// Runs every kernel once on inputs that cross tile and block boundaries and
// checks the answers, so that a miscompiling driver is caught before health
// says SERVING; the larger sorts also fill the buffer pool.
absl::Status OpenClEngine::WarmUp() {
  const size_t small =
      3 * static_cast<size_t>(policy_.radix.Tile(32, true)) + 17;
  // The widest kind of sort must fit a lane's share of the memory budget
  // at the warm-up's sizes; the segmented warm-up also holds a scratch copy
  // of its long segment, and buffers round up to powers of two, hence the
  // quarter.
  std::byte dummy{};
  const SortJob widest{.key_type = KeyType::kI64, .permutation_out = &dummy};
  if (SortFootprint(widest, small) > run_budget_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the device memory budget of ", device_.info.name, " leaves ",
        run_budget_, " bytes to each of its ", lanes_.size(),
        " lanes; a lane needs at least ", SortFootprint(widest, small),
        " (raise --device_memory_bytes)"));
  }
  const size_t large = std::max(
      small, std::min(options_.preallocate_keys, max_sort_keys(widest) / 2));
  std::vector<size_t> sizes = {size_t{100}, small, large};
  // With a second build of the radix kernels for short arrays, one size on
  // each side of its limit, so both builds are verified.
  const size_t above_small = policy_.radix.small_max + 1;
  if (policy_.radix.small_items > 0 && above_small > large &&
      SortFootprint(widest, above_small) <= run_budget_) {
    sizes.push_back(above_small);
  }
  for (size_t n : sizes) {
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = (i * 0x9E3779B97F4A7C15ull) >> (i % 7);
    }
    const std::vector<uint32_t> offsets = {0, static_cast<uint32_t>(n / 3),
                                           static_cast<uint32_t>(n)};
    const std::vector<uint32_t> whole = {0, static_cast<uint32_t>(n)};
    const auto* raw = reinterpret_cast<const std::byte*>(keys.data());
    for (KeyType type : {KeyType::kU32, KeyType::kI64}) {
      for (bool segmented : {false, true}) {
        // Segmented sorts of long segments hold scratch copies: their
        // warm-up stays at the small sizes, within any workable budget.
        if (segmented && n > small) continue;
        const std::vector<uint32_t> want =
            ReferenceOrder(type, n, raw, segmented ? offsets : whole);
        for (bool with_index : {false, true}) {
          // Filled with what no correct answer holds in every place, so
          // that a kernel that writes nothing cannot pass.
          std::vector<uint64_t> out(n, ~uint64_t{0});
          std::vector<uint32_t> perm(n, ~uint32_t{0});
          SortJob job{.key_type = type,
                      .count = n,
                      .keys = raw,
                      .keys_out = reinterpret_cast<std::byte*>(out.data()),
                      .permutation_out =
                          with_index ? reinterpret_cast<std::byte*>(perm.data())
                                     : nullptr};
          if (absl::Status s =
                  segmented ? SortSegments(job, offsets) : Sort(job);
              !s.ok()) {
            return absl::Status(
                s.code(),
                absl::StrCat("warm-up ", segmented ? "segmented " : "",
                             "sort of ", n, " keys: ", s.message()));
          }
          SORTD_RETURN_IF_ERROR(CheckWarmUpSort(job, want, segmented));
        }
      }
    }
  }
  std::vector<uint32_t> m(32 * 3), t(32 * 3);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = static_cast<uint32_t>(i * 2654435761u);
  }
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

std::vector<std::pair<std::string, double>> OpenClEngine::memory_bytes() const {
  const BufferPool::Stats pool = pool_->stats();
  double pinned = 0;
  if (options_.pinned_staging) {
    pinned = static_cast<double>(lanes_.size()) * options_.staging.slots *
             static_cast<double>(options_.staging.chunk_bytes);
  }
  return {{"total", static_cast<double>(device_.info.global_mem_bytes)},
          {"in_use", static_cast<double>(pool.in_use_bytes)},
          {"pooled", static_cast<double>(pool.pooled_bytes)},
          {"pinned_staging", pinned},
          {"pinned_host",
           pinned_ ? static_cast<double>(pinned_->stats().bytes) : 0.0}};
}

absl::Status OpenClEngine::InjectedFault(const char* what, bool kernel) {
  if (!faults_armed_) return absl::OkStatus();
  // fail_stage narrows the count to one kind of enqueue: upload, download,
  // copy, kernel (any launch) or one kernel stage's name.
  if (const std::string& want = options_.fail_stage; !want.empty()) {
    if (want != what && !(kernel && want == "kernel")) {
      return absl::OkStatus();
    }
  }
  const long n = ++enqueues_;
  const long at = options_.fail_enqueue;
  if (at > 0 && (n == at || (n > at && options_.fail_enqueue_sticky))) {
    return ClStatus(CL_OUT_OF_RESOURCES,
                    absl::StrCat(what, kernel ? " kernel" : "",
                                 " (injected fault at enqueue ", n, ")"));
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::Launch(Run& run, cl::Kernel& kernel, size_t groups,
                                  size_t group_size, const char* stage) {
  if (groups == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(InjectedFault(stage, /*kernel=*/true));
  cl::Event event;
  cl_int err = run.lane->queue.enqueueNDRangeKernel(
      kernel, cl::NullRange, cl::NDRange(groups * group_size),
      cl::NDRange(group_size), nullptr, &event);
  SORTD_CL_RETURN_IF(err, absl::StrCat("enqueue ", stage, " kernel"));
  run.events.emplace_back(stage, event);
  return absl::OkStatus();
}

absl::Status OpenClEngine::Write(Run& run, cl::Buffer& buffer, size_t bytes,
                                 const void* src) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(InjectedFault("upload"));
  // Pinned memory (an array in a HostBufferPool buffer from host_memory())
  // goes straight; pageable memory through the staging ring.
  if (run.lane->staging && !pinned_->Holds(src, bytes)) {
    staged_bytes_ += bytes;
    return run.lane->staging->Upload(buffer, src, bytes, &run.events);
  }
  direct_bytes_ += bytes;
  cl::Event event;
  SORTD_CL_RETURN_IF(run.lane->queue.enqueueWriteBuffer(
                         buffer, CL_FALSE, 0, bytes, src, nullptr, &event),
                     "clEnqueueWriteBuffer");
  run.events.emplace_back("upload", event);
  return absl::OkStatus();
}

absl::Status OpenClEngine::Read(Run& run, cl::Buffer& buffer, size_t bytes,
                                void* dst) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(InjectedFault("download"));
  if (run.lane->staging && !pinned_->Holds(dst, bytes)) {
    staged_bytes_ += bytes;
    return run.lane->staging->Download(buffer, dst, bytes, &run.events);
  }
  direct_bytes_ += bytes;
  cl::Event event;
  SORTD_CL_RETURN_IF(run.lane->queue.enqueueReadBuffer(
                         buffer, CL_FALSE, 0, bytes, dst, nullptr, &event),
                     "clEnqueueReadBuffer");
  run.events.emplace_back("download", event);
  return absl::OkStatus();
}

absl::Status OpenClEngine::Copy(Run& run, cl::Buffer& src, size_t src_offset,
                                cl::Buffer& dst, size_t dst_offset,
                                size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(InjectedFault("copy"));
  cl::Event event;
  SORTD_CL_RETURN_IF(
      run.lane->queue.enqueueCopyBuffer(src, dst, src_offset, dst_offset, bytes,
                                        nullptr, &event),
      "clEnqueueCopyBuffer");
  run.events.emplace_back("copy", event);
  return absl::OkStatus();
}

absl::StatusOr<cl::Buffer> OpenClEngine::Allocate(Run& run, size_t bytes,
                                                  const char* what) {
  if (bytes > device_.info.max_alloc_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs ", bytes, " bytes; ", device_.info.name,
        " allocates at most ", device_.info.max_alloc_bytes, " at once"));
  }
  const size_t capacity = BufferPool::SizeClass(bytes);
  if (run.bytes + capacity > run_budget_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating ", what, " (", capacity, " bytes) would take this run to ",
        run.bytes + capacity, " device bytes; each of the ", lanes_.size(),
        " lanes of ", device_.info.name, " may hold ", run_budget_,
        " (--device_memory_bytes)"));
  }
  run.bytes += capacity;
  if (faults_armed_ && options_.fail_allocation > 0 &&
      ++allocations_ == options_.fail_allocation) {
    return ClStatus(CL_MEM_OBJECT_ALLOCATION_FAILURE,
                    absl::StrCat("allocating ", what,
                                 " (injected: out of "
                                 "device memory at allocation ",
                                 options_.fail_allocation, ")"));
  }
  absl::StatusOr<PooledBuffer> b = pool_->Acquire(bytes, what);
  if (!b.ok()) return b.status();
  run.buffers.push_back(std::move(*b));
  return run.buffers.back().buffer();
}

absl::Status OpenClEngine::Finish(Run& run, StageTimes* stages) {
  cl_int err = run.lane->queue.finish();
  if (faults_armed_ && ++runs_ == options_.lose_device_at) {
    err = CL_DEVICE_NOT_AVAILABLE;  // injected: the device is gone
  }
  if (err != CL_SUCCESS) {
    // A queue that cannot finish is broken (device lost, kernel fault): the
    // engine is not to be trusted with more work.
    healthy_ = false;
    pool_->Trim();
    return ClStatus(err, "clFinish");
  }
  for (const Run::PassWrite& w : run.pass_writes) {
    if (auto t = EventSeconds(run.events[w.event].second)) {
      pool_->RateWrite(w.buffer, w.capacity, w.tag, *t);
    }
  }
  if (stages == nullptr) return absl::OkStatus();
  std::map<std::string, double> seconds;
  std::vector<std::string> order;
  // SORTD_STAGE_EVENTS=1 (a diagnostic): every event its own stage,
  // "scatter.0", "scatter.1", ... in the order enqueued.
  static const bool each = EnvLong("SORTD_STAGE_EVENTS") != 0;
  std::map<std::string, int> seen;
  for (auto& [stage_name, event] : run.events) {
    const std::string stage =
        each ? absl::StrCat(stage_name, ".", seen[stage_name]++) : stage_name;
    const std::optional<double> t = EventSeconds(event);
    if (!t) continue;
    if (!seconds.count(stage)) order.push_back(stage);
    seconds[stage] += *t;
  }
  for (const std::string& s : order) stages->push_back({s, seconds[s]});
  return absl::OkStatus();
}

absl::Status OpenClEngine::ScanInPlace(Run& run, RadixKernels& k, size_t tile,
                                       cl::Buffer& data, size_t count) {
  const size_t wg = policy_.radix.work_group;
  const size_t blocks = DivUp(count, tile);
  absl::StatusOr<cl::Buffer> sums = Allocate(run, blocks * 4, "scan sums");
  if (!sums.ok()) return sums.status();
  const cl_uint n = static_cast<cl_uint>(count);
  k.scan_blocks.setArg(0, data);
  k.scan_blocks.setArg(1, n);
  k.scan_blocks.setArg(2, *sums);
  SORTD_RETURN_IF_ERROR(Launch(run, k.scan_blocks, blocks, wg, "scan"));
  if (blocks == 1) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, tile, *sums, blocks));
  k.scan_add.setArg(0, data);
  k.scan_add.setArg(1, n);
  k.scan_add.setArg(2, *sums);
  return Launch(run, k.scan_add, blocks, wg, "scan");
}

// Allocates the sort's arrays (keys and indices for `padded` elements),
// uploads keys and values, and turns keys into ordered bits with iota
// indices; with `count_digits` it also counts every pass's digits into
// `totals`.
absl::Status OpenClEngine::Upload(Run& run, const SortJob& job, size_t padded,
                                  bool count_digits, bool encode, Arrays& a,
                                  cl::Buffer* totals) {
  const int bits = KeyBits(job);
  const bool with_index = WithIndex(job);
  const size_t n = job.count;
  const size_t ks = KeySize(job.key_type);
  const size_t value_bytes = n * ValueSize(job.value_type);
  const size_t passes = DivUp(bits, policy_.radix.radix_bits);
  const size_t radix = size_t{1} << policy_.radix.radix_bits;
  for (auto [buffer, bytes, what] :
       {std::tuple{&a.raw, n * ks, "raw keys"},
        {&a.keys[0], padded * ks, "keys"},
        {&a.keys[1], padded * ks, "keys (alternate)"},
        {&a.index[0], with_index ? padded * 4 : 0, "indices"},
        {&a.index[1], with_index ? padded * 4 : 0, "indices (alternate)"},
        {&a.values, value_bytes, "values"},
        {&a.values_out, value_bytes, "sorted values"},
        {totals, passes * radix * 4, "digit totals"}}) {
    absl::StatusOr<cl::Buffer> b = Allocate(run, bytes, what);
    if (!b.ok()) return b.status();
    *buffer = *b;
  }
  SORTD_RETURN_IF_ERROR(Write(run, a.raw, n * ks, job.keys));
  SORTD_RETURN_IF_ERROR(Write(run, a.values, value_bytes, job.values));
  if (count_digits) {
    cl::Event e;
    SORTD_CL_RETURN_IF(
        run.lane->queue.enqueueFillBuffer(*totals, cl_uint{0}, 0,
                                          passes * radix * 4, nullptr, &e),
        "clEnqueueFillBuffer");
    run.events.emplace_back("histogram", e);
  }
  a.cur = 0;
  a.keys_raw = false;
  return Encode(run, job, a, *totals, count_digits, encode);
}

// Raw keys -> ordered keys and indices in keys[0] and index[0] (`encode`),
// and/or every pass's digit counts into `totals` (`count_digits`).
absl::Status OpenClEngine::Encode(Run& run, const SortJob& job, Arrays& a,
                                  cl::Buffer& totals, bool count_digits,
                                  bool encode) {
  const int bits = KeyBits(job);
  RadixKernels& k = run.lane->radix[bits == 64][WithIndex(job)];
  k.encode.setArg(0, a.raw);
  k.encode.setArg(1, a.keys[0]);
  k.encode.setArg(2, a.index[0]);
  k.encode.setArg(3, static_cast<cl_uint>(job.count));
  k.encode.setArg(4, KindCode(job.key_type));
  k.encode.setArg(5, cl_uint{job.order == Order::kDescending});
  k.encode.setArg(6, totals);
  k.encode.setArg(7, cl_uint{count_digits});
  k.encode.setArg(8, cl_uint{encode});
  const size_t groups = std::min<size_t>(
      DivUp(job.count, policy_.radix.Tile(bits, WithIndex(job))),
      std::max<size_t>(1, size_t{device_.info.compute_units} *
                              policy_.radix.count_groups_per_cu));
  return Launch(run, k.encode, groups, policy_.radix.work_group,
                count_digits ? "histogram" : "transform");
}

bool OpenClEngine::UsesOnesweep(size_t count, bool has_totals) const {
  return policy_.radix.onesweep != 0 && has_totals && count < (size_t{1} << 30);
}

// LSD passes over `count` elements of a.keys[a.cur] (and indices), except
// the passes marked in `skip`.
absl::Status OpenClEngine::RadixPasses(Run& run, int key_bits, bool with_index,
                                       size_t count, Arrays& a,
                                       const std::vector<bool>& skip,
                                       const cl::Buffer* totals,
                                       const RawEnds* raw_ends) {
  const RadixSortPolicy& p = policy_.radix;
  // Short arrays take the kernels built for small tiles.
  RadixKernels& k = p.Small(count)
                        ? run.lane->radix_small[key_bits == 64][with_index]
                        : run.lane->radix[key_bits == 64][with_index];
  const size_t tile = p.Tile(key_bits, with_index, count);
  const size_t tiles = DivUp(count, tile);
  const size_t radix = size_t{1} << p.radix_bits;
  const cl_uint n = static_cast<cl_uint>(count);
  const cl_uint tiles32 = static_cast<cl_uint>(tiles);
  // With raw ends, the first pass that runs reads the raw keys and the
  // last stores raw keys (the kernels' pass mode).
  size_t first = skip.size(), last = 0;
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    first = std::min(first, pass);
    last = pass;
  }
  if (raw_ends != nullptr && first == skip.size()) {
    return absl::InternalError("radix passes with raw ends but no pass to run");
  }
  // SORTD_BUFFER_ADDRESSES=1 (a diagnostic): the device addresses of the
  // arrays the passes read and write, on stderr.
  static const bool addresses = EnvLong("SORTD_BUFFER_ADDRESSES") != 0;
  if (addresses) {
    absl::StatusOr<cl::Buffer> out = Allocate(run, 3 * 8, "addresses");
    if (!out.ok()) return out.status();
    const cl::Buffer* arrays[3] = {raw_ends ? &raw_ends->keys : &a.keys[a.cur],
                                   &a.keys[0], &a.keys[1]};
    for (cl_uint i = 0; i < 3; ++i) {
      k.address.setArg(0, *arrays[i]);
      k.address.setArg(1, *out);
      k.address.setArg(2, i);
      SORTD_RETURN_IF_ERROR(Launch(run, k.address, 1, 1, "diagnostic"));
    }
    cl_ulong at[3] = {0, 0, 0};
    SORTD_CL_RETURN_IF(
        run.lane->queue.enqueueReadBuffer(*out, CL_TRUE, 0, sizeof(at), at),
        "clEnqueueReadBuffer(addresses)");
    std::fprintf(stderr,
                 "sortd: radix n=%zu first input 0x%llx keys[0] 0x%llx "
                 "keys[1] 0x%llx\n",
                 count, static_cast<unsigned long long>(at[0]),
                 static_cast<unsigned long long>(at[1]),
                 static_cast<unsigned long long>(at[2]));
  }
  auto mode = [&](size_t pass) -> cl_uint {
    if (raw_ends == nullptr) return 0;
    return raw_ends->kind_order | (pass == first ? kModeFirst : 0) |
           (pass == last ? kModeLast : 0);
  };
  auto keys_in = [&](size_t pass) -> const cl::Buffer& {
    return raw_ends != nullptr && pass == first ? raw_ends->keys
                                                : a.keys[a.cur];
  };
  // The arguments radix_scatter and radix_onesweep share: keys and indices
  // in and out (the current buffers and their alternates), n, the shift.
  auto pass_args = [&](cl::Kernel& kernel, size_t pass) {
    kernel.setArg(0, keys_in(pass));
    kernel.setArg(1, a.keys[1 - a.cur]);
    kernel.setArg(2, a.index[a.cur]);
    kernel.setArg(3, a.index[1 - a.cur]);
    kernel.setArg(4, n);
    kernel.setArg(5, static_cast<cl_uint>(pass * p.radix_bits));
  };
  if (raw_ends != nullptr) a.keys_raw = true;
  if (UsesOnesweep(count, totals != nullptr)) {
    // Per pass: the look-back status words and a tile counter. Three ways
    // to have them zero (or stale) when a pass starts:
    //  - marked: one area of status words and a counter per pass, zeroed
    //    once; each pass marks its words with its parity, so the previous
    //    pass's words read as not published (radix_onesweep);
    //  - alternate: two areas of words and counter, zeroed once; each pass
    //    zeroes the other area for the next;
    //  - otherwise one area of words and counter, zeroed before every pass.
    const bool marked = p.MarkedStatus(count);
    const bool alternate = !marked && count <= p.alternate_status_max;
    const size_t passes = skip.size();
    const size_t status_words =
        marked ? tiles * radix + passes : tiles * radix + 1;
    const size_t areas = alternate ? 2 : 1;
    absl::StatusOr<cl::Buffer> status =
        Allocate(run, areas * status_words * 4, "look-back status");
    if (!status.ok()) return status.status();
    auto zero_status = [&]() -> absl::Status {
      cl::Event zeroed;
      SORTD_CL_RETURN_IF(run.lane->queue.enqueueFillBuffer(
                             *status, cl_uint{0}, 0, areas * status_words * 4,
                             nullptr, &zeroed),
                         "clEnqueueFillBuffer(look-back status)");
      run.events.emplace_back("scatter", zeroed);
      return absl::OkStatus();
    };
    const bool zero_once = marked || alternate;
    if (zero_once) SORTD_RETURN_IF_ERROR(zero_status());
    cl_uint area = 0;
    cl_uint run_pass = 0;  // passes run so far (marked: the parity)
    // Where each digit starts in each pass's output, from the totals.
    absl::StatusOr<cl::Buffer> starts =
        Allocate(run, passes * radix * 4, "digit starts");
    if (!starts.ok()) return starts.status();
    k.digit_starts.setArg(0, *totals);
    k.digit_starts.setArg(1, *starts);
    SORTD_RETURN_IF_ERROR(
        Launch(run, k.digit_starts, passes, p.work_group, "scan"));
    for (size_t pass = 0; pass < skip.size(); ++pass) {
      if (skip[pass]) continue;
      if (!zero_once) SORTD_RETURN_IF_ERROR(zero_status());
      pass_args(k.onesweep, pass);
      k.onesweep.setArg(6, *starts);
      k.onesweep.setArg(7, static_cast<cl_uint>(pass * radix));
      k.onesweep.setArg(8, *status);
      k.onesweep.setArg(9, tiles32);
      k.onesweep.setArg(10, mode(pass));
      k.onesweep.setArg(11, static_cast<cl_uint>(area * status_words));
      k.onesweep.setArg(12, static_cast<cl_uint>((1 - area) * status_words));
      k.onesweep.setArg(13, cl_uint{alternate});
      k.onesweep.setArg(14, static_cast<cl_uint>(
                                marked ? tiles * radix + run_pass
                                       : area * status_words + tiles * radix));
      k.onesweep.setArg(15, marked ? (run_pass & 1) << 29 : cl_uint{0});
      k.onesweep.setArg(
          16, marked ? (cl_uint{1} << 29) - 1 : (cl_uint{1} << 30) - 1);
      ++run_pass;
      SORTD_RETURN_IF_ERROR(
          Launch(run, k.onesweep, tiles, p.work_group, "scatter"));
      static const bool qualify = EnvLong("SORTD_QUALIFY") != 0;
      const size_t key_bytes = count * static_cast<size_t>(key_bits / 8);
      if (qualify && key_bytes >= (size_t{256} << 20)) {
        run.pass_writes.push_back({run.events.size() - 1, a.keys[1 - a.cur](),
                                   BufferPool::SizeClass(key_bytes),
                                   key_bits * 2 + (with_index ? 1 : 0)});
      }
      a.cur = 1 - a.cur;
      if (alternate) area = 1 - area;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<cl::Buffer> offsets =
      Allocate(run, tiles * radix * 4, "tile offsets");
  if (!offsets.ok()) return offsets.status();
  for (size_t pass = 0; pass < skip.size(); ++pass) {
    if (skip[pass]) continue;
    const cl_uint shift = static_cast<cl_uint>(pass * p.radix_bits);
    k.histogram.setArg(0, keys_in(pass));
    k.histogram.setArg(1, n);
    k.histogram.setArg(2, shift);
    k.histogram.setArg(3, *offsets);
    k.histogram.setArg(4, tiles32);
    k.histogram.setArg(5, mode(pass));
    SORTD_RETURN_IF_ERROR(
        Launch(run, k.histogram, tiles, p.work_group, "histogram"));
    SORTD_RETURN_IF_ERROR(ScanInPlace(run, k, tile, *offsets, tiles * radix));
    pass_args(k.scatter, pass);
    k.scatter.setArg(6, *offsets);
    k.scatter.setArg(7, tiles32);
    k.scatter.setArg(8, mode(pass));
    SORTD_RETURN_IF_ERROR(
        Launch(run, k.scatter, tiles, p.work_group, "scatter"));
    a.cur = 1 - a.cur;
  }
  return absl::OkStatus();
}

// Bitonic network over `padded` (a power of two) elements of a.keys[a.cur]:
// sentinels past the real keys, blocks sorted in local memory, then for each
// larger stage the strides of at least a block in global memory and the
// rest in local memory.
absl::Status OpenClEngine::BitonicSort(Run& run, int key_bits, bool with_index,
                                       size_t padded, Arrays& a) {
  const BitonicPolicy& p = policy_.bitonic;
  BitonicKernels& k = run.lane->bitonic[key_bits == 64][with_index];
  const size_t block = p.Block(key_bits);
  const size_t wg = p.work_group;
  cl::Buffer& keys = a.keys[a.cur];
  cl::Buffer& index = a.index[a.cur];
  const size_t total = std::max(block, padded);
  k.sort_blocks.setArg(0, keys);
  k.sort_blocks.setArg(1, index);
  SORTD_RETURN_IF_ERROR(
      Launch(run, k.sort_blocks, total / block, wg, "local_sort"));
  for (size_t stage = 2 * block; stage <= total; stage <<= 1) {
    for (size_t j = stage / 2; j >= block; j >>= 1) {
      k.merge_global.setArg(0, keys);
      k.merge_global.setArg(1, index);
      k.merge_global.setArg(2, static_cast<cl_uint>(j));
      k.merge_global.setArg(3, static_cast<cl_uint>(stage));
      SORTD_RETURN_IF_ERROR(
          Launch(run, k.merge_global, total / 2 / wg, wg, "merge"));
    }
    k.merge_local.setArg(0, keys);
    k.merge_local.setArg(1, index);
    k.merge_local.setArg(2, static_cast<cl_uint>(stage));
    SORTD_RETURN_IF_ERROR(
        Launch(run, k.merge_local, total / block, wg, "merge"));
  }
  return absl::OkStatus();
}

// Ordered keys back to raw bits, payload gathered, then everything down.
absl::Status OpenClEngine::Download(Run& run, const SortJob& job, Arrays& a) {
  const int bits = KeyBits(job);
  const bool with_index = WithIndex(job);
  const size_t n = job.count;
  RadixKernels& k = run.lane->radix[bits == 64][with_index];
  const cl_uint value_words =
      static_cast<cl_uint>(ValueSize(job.value_type) / 4);
  // Where the last pass stored raw keys, they are read from where they are;
  // a kernel runs only for what is left (ordering back, payload gather).
  cl::Buffer& keys_out = a.keys_raw ? a.keys[a.cur] : a.raw;
  k.decode.setArg(0, a.keys[a.cur]);
  k.decode.setArg(1, a.raw);
  k.decode.setArg(2, a.index[a.cur]);
  k.decode.setArg(3, a.values);
  k.decode.setArg(4, a.values_out);
  k.decode.setArg(5, static_cast<cl_uint>(n));
  k.decode.setArg(6, KindCode(job.key_type));
  k.decode.setArg(7, cl_uint{job.order == Order::kDescending});
  k.decode.setArg(8, value_words);
  k.decode.setArg(9, cl_uint{!a.keys_raw});
  if (!a.keys_raw || value_words != 0) {
    const size_t wg = policy_.radix.work_group;
    SORTD_RETURN_IF_ERROR(Launch(run, k.decode, DivUp(n, wg), wg, "transform"));
  }
  SORTD_RETURN_IF_ERROR(
      Read(run, keys_out, n * KeySize(job.key_type), job.keys_out));
  SORTD_RETURN_IF_ERROR(
      Read(run, a.values_out, n * ValueSize(job.value_type), job.values_out));
  if (job.permutation_out != nullptr) {
    SORTD_RETURN_IF_ERROR(
        Read(run, a.index[a.cur], n * 4, job.permutation_out));
  }
  return absl::OkStatus();
}

absl::Status OpenClEngine::Sort(const SortJob& job) {
  if (job.count == 0) return absl::OkStatus();
  if (job.count >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError("the OpenCL engine sorts < 2^31 keys");
  }
  LaneLease lease(this);
  Run run;
  run.lane = lease.lane;
  absl::Status status = SortLocked(run, job);
  // Whatever happened, nothing may still be queued when we return: the
  // caller's buffers are about to be reused or freed.
  absl::Status finished = Finish(run, status.ok() ? job.stages : nullptr);
  return status.ok() ? finished : status;
}

absl::Status OpenClEngine::SortLocked(Run& run, const SortJob& job) {
  const int bits = KeyBits(job);
  const bool with_index = WithIndex(job);
  const size_t n = job.count;
  bool bitonic = n <= policy_.bitonic.MaxKeys(bits);
  if (options_.algorithm == Options::Algorithm::kRadix) bitonic = false;
  if (options_.algorithm == Options::Algorithm::kBitonic) bitonic = true;

  Arrays a;
  cl::Buffer totals;
  if (bitonic) {
    const size_t padded =
        std::max<size_t>(NextPow2(n), policy_.bitonic.Block(bits));
    SORTD_RETURN_IF_ERROR(Upload(run, job, padded, false, true, a, &totals));
    BitonicKernels& k = run.lane->bitonic[bits == 64][with_index];
    k.pad.setArg(0, a.keys[0]);
    k.pad.setArg(1, a.index[0]);
    k.pad.setArg(2, static_cast<cl_uint>(n));
    k.pad.setArg(3, static_cast<cl_uint>(padded));
    const size_t wg = policy_.bitonic.work_group;
    SORTD_RETURN_IF_ERROR(
        Launch(run, k.pad, DivUp(padded - n, wg), wg, "local_sort"));
    SORTD_RETURN_IF_ERROR(BitonicSort(run, bits, with_index, padded, a));
    return Download(run, job, a);
  }

  // Digits counted, keys left raw: the first pass orders them as it reads.
  SORTD_RETURN_IF_ERROR(Upload(run, job, n, true, false, a, &totals));
  // One small read-back: passes whose digit every key shares are skipped.
  const size_t radix = size_t{1} << policy_.radix.radix_bits;
  const size_t passes = DivUp(bits, policy_.radix.radix_bits);
  std::vector<cl_uint> counts(passes * radix);
  SORTD_RETURN_IF_ERROR(InjectedFault("download"));
  SORTD_CL_RETURN_IF(run.lane->queue.enqueueReadBuffer(
                         totals, CL_TRUE, 0, counts.size() * 4, counts.data()),
                     "clEnqueueReadBuffer(digit totals)");
  std::vector<bool> skip(passes);
  for (size_t p = 0; p < passes; ++p) {
    const cl_uint* c = counts.data() + p * radix;
    skip[p] = std::find(c, c + radix, static_cast<cl_uint>(n)) != c + radix;
  }
  if (std::find(skip.begin(), skip.end(), false) == skip.end()) {
    // Every key the same: no pass runs, so the keys and indices are put in
    // ordered form here (and back in Download).
    SORTD_RETURN_IF_ERROR(Encode(run, job, a, totals, false, true));
    return Download(run, job, a);
  }
  const RawEnds raw_ends{
      .keys = a.raw,
      .kind_order = KindCode(job.key_type) |
                    (cl_uint{job.order == Order::kDescending} << 2)};
  SORTD_RETURN_IF_ERROR(
      RadixPasses(run, bits, with_index, n, a, skip, &totals, &raw_ends));
  return Download(run, job, a);
}

absl::Status OpenClEngine::SortSegments(const SortJob& job,
                                        absl::Span<const uint32_t> offsets) {
  SORTD_RETURN_IF_ERROR(CheckSegmentOffsets(job.count, offsets));
  if (job.count == 0) return absl::OkStatus();
  if (job.count >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError("the OpenCL engine sorts < 2^31 keys");
  }
  LaneLease lease(this);
  Run run;
  run.lane = lease.lane;
  absl::Status status = SegmentsLocked(run, job, offsets);
  absl::Status finished = Finish(run, status.ok() ? job.stages : nullptr);
  return status.ok() ? finished : status;
}

// Short segments (up to a bitonic block) are sorted by one work-group each
// in a single launch; longer ones by radix passes on a scratch copy, all
// enqueued without waiting on the host.
absl::Status OpenClEngine::SegmentsLocked(Run& run, const SortJob& job,
                                          absl::Span<const uint32_t> offsets) {
  const int bits = KeyBits(job);
  const bool with_index = WithIndex(job);
  const size_t ks = KeySize(job.key_type);
  const size_t block = policy_.bitonic.Block(bits);
  // Segments of more than segment_radix_above keys that fit one radix tile
  // are sorted by radix_segments (one work-group each); others of up to a
  // bitonic block by the bitonic kernel; longer ones by radix passes.
  const RadixSortPolicy& rp = policy_.radix;
  const size_t radix_above = rp.warp_rank != 0 && rp.segment_radix_above > 0
                                 ? rp.segment_radix_above
                                 : std::numeric_limits<size_t>::max();
  const size_t radix_tile = rp.Tile(bits, with_index);
  std::vector<uint32_t> short_segments, radix_segments, long_segments;
  size_t longest = 0;
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const size_t len = offsets[s + 1] - offsets[s];
    if (len <= 1) continue;
    if (len > radix_above && len <= radix_tile) {
      radix_segments.push_back(static_cast<uint32_t>(s));
    } else if (len <= block) {
      short_segments.push_back(static_cast<uint32_t>(s));
    } else {
      long_segments.push_back(static_cast<uint32_t>(s));
      longest = std::max(longest, len);
    }
  }

  Arrays a;
  cl::Buffer totals;
  SORTD_RETURN_IF_ERROR(Upload(run, job, job.count, false, true, a, &totals));
  absl::StatusOr<cl::Buffer> d_offsets = absl::NotFoundError("unused");
  if (!short_segments.empty() || !radix_segments.empty()) {
    d_offsets = Allocate(run, offsets.size() * 4, "segment offsets");
    if (!d_offsets.ok()) return d_offsets.status();
    // Small arrays go straight from host memory: the queue copies them
    // before these calls return (blocking writes).
    SORTD_RETURN_IF_ERROR(InjectedFault("upload"));
    SORTD_CL_RETURN_IF(
        run.lane->queue.enqueueWriteBuffer(*d_offsets, CL_TRUE, 0,
                                           offsets.size() * 4, offsets.data()),
        "clEnqueueWriteBuffer(offsets)");
  }
  // One work-group per listed segment: `kernel` takes keys, indices, the
  // offsets and the list.
  auto per_segment = [&](const std::vector<uint32_t>& list, cl::Kernel& kernel,
                         size_t group_size) -> absl::Status {
    if (list.empty()) return absl::OkStatus();
    absl::StatusOr<cl::Buffer> d_list =
        Allocate(run, list.size() * 4, "segment list");
    if (!d_list.ok()) return d_list.status();
    SORTD_CL_RETURN_IF(run.lane->queue.enqueueWriteBuffer(
                           *d_list, CL_TRUE, 0, list.size() * 4, list.data()),
                       "clEnqueueWriteBuffer(segment list)");
    kernel.setArg(0, a.keys[0]);
    kernel.setArg(1, a.index[0]);
    kernel.setArg(2, *d_offsets);
    kernel.setArg(3, *d_list);
    return Launch(run, kernel, list.size(), group_size, "local_sort");
  };
  SORTD_RETURN_IF_ERROR(per_segment(
      short_segments, run.lane->bitonic[bits == 64][with_index].segmented,
      policy_.bitonic.work_group));
  SORTD_RETURN_IF_ERROR(per_segment(
      radix_segments, run.lane->radix[bits == 64][with_index].segments,
      rp.work_group));
  if (!long_segments.empty()) {
    Arrays scratch;
    for (auto [buffer, bytes, what] :
         {std::tuple{&scratch.keys[0], longest * ks, "segment keys"},
          {&scratch.keys[1], longest * ks, "segment keys (alternate)"},
          {&scratch.index[0], with_index ? longest * 4 : 0, "segment indices"},
          {&scratch.index[1], with_index ? longest * 4 : 0,
           "segment indices (alternate)"}}) {
      absl::StatusOr<cl::Buffer> b = Allocate(run, bytes, what);
      if (!b.ok()) return b.status();
      *buffer = *b;
    }
    const std::vector<bool> all_passes(DivUp(bits, policy_.radix.radix_bits));
    for (uint32_t s : long_segments) {
      const size_t begin = offsets[s];
      const size_t len = offsets[s + 1] - begin;
      scratch.cur = 0;
      SORTD_RETURN_IF_ERROR(
          Copy(run, a.keys[0], begin * ks, scratch.keys[0], 0, len * ks));
      if (with_index) {
        SORTD_RETURN_IF_ERROR(
            Copy(run, a.index[0], begin * 4, scratch.index[0], 0, len * 4));
      }
      SORTD_RETURN_IF_ERROR(RadixPasses(run, bits, with_index, len, scratch,
                                        all_passes, nullptr, nullptr));
      SORTD_RETURN_IF_ERROR(Copy(run, scratch.keys[scratch.cur], 0, a.keys[0],
                                 begin * ks, len * ks));
      if (with_index) {
        SORTD_RETURN_IF_ERROR(Copy(run, scratch.index[scratch.cur], 0,
                                   a.index[0], begin * 4, len * 4));
      }
    }
  }
  return Download(run, job, a);
}

size_t OpenClEngine::SortFootprint(const SortJob& shape, size_t n) const {
  auto sc = [](size_t bytes) { return BufferPool::SizeClass(bytes); };
  const int bits = KeyBits(shape);
  const size_t ks = KeySize(shape.key_type);
  const size_t vs = ValueSize(shape.value_type);
  const bool with_index = WithIndex(shape);
  const RadixSortPolicy& p = policy_.radix;
  const size_t radix = size_t{1} << p.radix_bits;
  const size_t passes = DivUp(bits, p.radix_bits);
  bool bitonic = n <= policy_.bitonic.MaxKeys(bits);
  if (options_.algorithm == Options::Algorithm::kRadix) bitonic = false;
  if (options_.algorithm == Options::Algorithm::kBitonic) bitonic = true;
  const size_t padded =
      bitonic ? std::max<size_t>(NextPow2(n), policy_.bitonic.Block(bits)) : n;
  // What Upload() allocates.
  size_t total = sc(n * ks) + 2 * sc(padded * ks) +
                 2 * sc(with_index ? padded * 4 : 0) + 2 * sc(n * vs) +
                 sc(passes * radix * 4);
  if (!bitonic && UsesOnesweep(n, true)) {
    // RadixPasses(): the digit starts and the look-back status words.
    total += sc(passes * radix * 4);
    const size_t tiles =
        DivUp(n, static_cast<size_t>(p.Tile(bits, with_index, n)));
    if (p.MarkedStatus(n)) {
      total += sc((tiles * radix + passes) * 4);
    } else {
      total +=
          sc((n <= p.alternate_status_max ? 2 : 1) * (tiles * radix + 1) * 4);
    }
  } else if (!bitonic) {
    // RadixPasses(): tile offsets, and ScanInPlace()'s block sums, which
    // every pass allocates anew.
    const size_t tile = static_cast<size_t>(p.Tile(bits, with_index, n));
    size_t count = DivUp(n, tile) * radix;
    total += sc(count * 4);
    size_t sums = 0;
    for (;;) {
      const size_t blocks = DivUp(count, tile);
      sums += sc(blocks * 4);
      if (blocks <= 1) break;
      count = blocks;
    }
    total += passes * sums;
  }
  return total;
}

size_t OpenClEngine::max_sort_keys(const SortJob& shape) const {
  const size_t ks = KeySize(shape.key_type);
  const size_t widest = std::max<size_t>(ks, WithIndex(shape) ? 4 : 0);
  auto fits = [&](size_t n) {
    return SortFootprint(shape, n) <= run_budget_ &&
           BufferPool::SizeClass(NextPow2(n) * widest) <=
               device_.info.max_alloc_bytes;
  };
  // The largest n that fits; footprints grow with n.
  size_t lo = 0, hi = (size_t{1} << 31) - 1;
  if (fits(hi)) return hi;
  while (lo + 1 < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return std::max<size_t>(lo, 1);
}

size_t OpenClEngine::max_transpose_matrices() const {
  // Input and output of one size class each.
  size_t cls = size_t{1} << 16;
  while (2 * (cls << 1) <= run_budget_ &&
         (cls << 1) <= device_.info.max_alloc_bytes) {
    cls <<= 1;
  }
  return std::max<size_t>(cls / 128, 1);
}

absl::Status OpenClEngine::Transpose(const TransposeJob& job) {
  if (job.count == 0) return absl::OkStatus();
  LaneLease lease(this);
  Run run;
  run.lane = lease.lane;
  absl::Status status = [&]() -> absl::Status {
    const size_t bytes = job.count * 128;
    absl::StatusOr<cl::Buffer> in = Allocate(run, bytes, "matrices");
    if (!in.ok()) return in.status();
    absl::StatusOr<cl::Buffer> out = Allocate(run, bytes, "transposed");
    if (!out.ok()) return out.status();
    SORTD_RETURN_IF_ERROR(Write(run, *in, bytes, job.in));
    const size_t per_group = policy_.transpose.matrices_per_group;
    run.lane->transpose.setArg(0, *in);
    run.lane->transpose.setArg(1, *out);
    run.lane->transpose.setArg(2, static_cast<cl_uint>(job.count));
    // The sub-group kernel runs one work-item per row, the portable one
    // one per matrix.
    const size_t group_size = transpose_subgroup_ ? per_group * 32 : per_group;
    SORTD_RETURN_IF_ERROR(Launch(run, run.lane->transpose,
                                 DivUp(job.count, per_group), group_size,
                                 "transpose"));
    return Read(run, *out, bytes, job.out);
  }();
  absl::Status finished = Finish(run, status.ok() ? job.stages : nullptr);
  return status.ok() ? finished : status;
}

absl::Status ParseFaultSpec(const std::string& spec,
                            OpenClEngine::Options* options) {
  OpenClEngine::Options parsed = *options;
  parsed.fail_enqueue = 0;
  parsed.fail_enqueue_sticky = false;
  parsed.fail_stage.clear();
  parsed.lose_device_at = 0;
  parsed.fail_allocation = 0;
  parsed.fail_build = false;
  auto bad = [&](absl::string_view item, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject_faults: '", item, "' ", why,
        "; expected a comma-separated list of enqueue=N, sticky, "
        "stage=upload|download|copy|kernel|<stage>, device_lost=N, oom=N, "
        "build=1"));
  };
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const absl::string_view name = item.substr(0, eq);
    const absl::string_view value = eq == absl::string_view::npos
                                        ? absl::string_view()
                                        : item.substr(eq + 1);
    if (name == "sticky") {
      if (eq != absl::string_view::npos) return bad(item, "takes no value");
      parsed.fail_enqueue_sticky = true;
      continue;
    }
    if (eq == absl::string_view::npos || value.empty()) {
      return bad(item, "needs a value");
    }
    if (name == "stage") {
      parsed.fail_stage = std::string(value);
      continue;
    }
    long n = 0;
    if (!absl::SimpleAtoi(value, &n) || n < 1) {
      return bad(item, "needs a positive count");
    }
    if (name == "enqueue") {
      parsed.fail_enqueue = n;
    } else if (name == "device_lost") {
      parsed.lose_device_at = n;
    } else if (name == "oom") {
      parsed.fail_allocation = n;
    } else if (name == "build") {
      if (n != 1) return bad(item, "takes only 1");
      parsed.fail_build = true;
    } else {
      return bad(item, "is not a fault");
    }
  }
  if ((parsed.fail_enqueue_sticky || !parsed.fail_stage.empty()) &&
      parsed.fail_enqueue == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject_faults=", spec,
        ": sticky and stage= qualify enqueue=N, which is missing"));
  }
  *options = std::move(parsed);
  return absl::OkStatus();
}

bool InjectsFaults(const OpenClEngine::Options& options) {
  return options.fail_enqueue > 0 || options.lose_device_at > 0 ||
         options.fail_allocation > 0 || options.fail_build;
}

}  // namespace sortd::gpu
