#include "server/service.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/compact_keys.h"
#include "server/status.h"
#include "server/wire.h"
#include "tbb/parallel_for.h"

namespace sortd {
namespace {

v1::ExecutionPath WirePath(ExecutionPath path) {
  switch (path) {
    case ExecutionPath::kCpu:
      return v1::EXECUTION_PATH_CPU;
    case ExecutionPath::kGpu:
      return v1::EXECUTION_PATH_GPU;
    case ExecutionPath::kOpenClCpu:
      return v1::EXECUTION_PATH_OPENCL_CPU;
  }
  return v1::EXECUTION_PATH_UNSPECIFIED;
}

v1::ServedBy ServedBy(const TaskResult& result) {
  v1::ServedBy by;
  by.set_path(WirePath(result.path));
  by.set_device(result.device);
  by.set_queue_wait_ns(absl::ToInt64Nanoseconds(result.queue_wait));
  by.set_compute_ns(absl::ToInt64Nanoseconds(result.compute));
  by.set_batch_requests(result.batch_requests);
  by.set_route(RouteName(result.route));
  by.set_device_runs(result.device_runs);
  return by;
}

absl::Status Starting() {
  return absl::UnavailableError(
      "sortd is starting: its engine is not ready yet; retry shortly");
}

}  // namespace

// What one unary call holds while it runs: the request's bytes, what was
// parsed from them (pointing into them) and the arrays of the answer.
struct SortServiceImpl::UnaryCall {
  const char* method = "";
  grpc::CallbackServerContext* context = nullptr;
  grpc::ServerUnaryReactor* reactor = nullptr;
  grpc::ByteBuffer* response = nullptr;
  absl::Time received;
  wire::Received bytes;
  wire::SortRequest sort;
  SortOutputs sort_out;
  // With SortRequest.shared: the region (held while the call runs).
  std::shared_ptr<Region> region;
  v1::SharedArrays shared;
  wire::TransposeRequest transpose;
  wire::OutputArray matrices;
};

std::string SortServiceImpl::NewInstanceId() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrCat(absl::Hex(id, absl::kZeroPad16));
}

void SortServiceImpl::RecordEnd(const char* method, absl::Time received,
                                const absl::Status& status,
                                const TaskResult* result) {
  const bool ok = status.ok() && result != nullptr;
  const std::string path = ok ? PathName(result->path) : "none";
  const double seconds = absl::ToDoubleSeconds(absl::Now() - received);
  const std::string code = absl::StatusCodeToString(status.code());
  metrics_->RecordRequest(method, code, path, seconds);
  if (ok) {
    metrics_->ObserveQueueWait(method,
                               absl::ToDoubleSeconds(result->queue_wait));
  }
  if (options_.log_requests) {
    std::fprintf(
        stderr, "sortd: end %s %s path=%s route=%s batch=%d %.3f ms%s%s\n",
        method, code.c_str(), path.c_str(),
        result != nullptr ? RouteName(result->route) : "none",
        result != nullptr ? result->batch_requests : 0, seconds * 1e3,
        status.ok() ? "" : ": ", std::string(status.message()).c_str());
  }
}

grpc::ServerUnaryReactor* SortServiceImpl::Refuse(const UnaryCall& call,
                                                  const absl::Status& status) {
  RecordEnd(call.method, call.received, status, nullptr);
  call.reactor->Finish(ToGrpcStatus(status));
  return call.reactor;
}

absl::Status SortServiceImpl::RegionIntact(const UnaryCall& call) {
  if (call.region == nullptr || !call.region->broken()) {
    return absl::OkStatus();
  }
  return absl::DataLossError(
      "the shared-memory region's file shrank, or its file system ran out of "
      "memory, while this request used it: the answer is lost; register a "
      "new region (and keep the file at its size)");
}

grpc::ServerUnaryReactor* SortServiceImpl::Submit(
    std::shared_ptr<UnaryCall> call, std::shared_ptr<Task> task,
    std::function<grpc::ByteBuffer(const TaskResult&)> finish) {
  grpc::ServerUnaryReactor* reactor = call->reactor;
  grpc::CallbackServerContext* context = call->context;
  task->deadline = absl::FromChrono(context->deadline());
  task->cancelled = [context] { return context->IsCancelled(); };
  task->done = [this, call,
                finish = std::move(finish)](const TaskResult& result) {
    const absl::Status status =
        result.status.ok() ? RegionIntact(*call) : result.status;
    if (status.ok()) {
      grpc::ByteBuffer answer = finish(result);
      call->response->Swap(&answer);
      RecordEnd(call->method, call->received, status, &result);
    } else {
      RecordEnd(call->method, call->received, status, nullptr);
    }
    call->reactor->Finish(ToGrpcStatus(status));
  };
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) {
    TaskResult result;
    result.status = Starting();
    task->done(result);
    return reactor;
  }
  scheduler->Submit(std::move(task));
  return reactor;
}

std::shared_ptr<SortServiceImpl::UnaryCall> SortServiceImpl::BeginCall(
    const char* method, grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
    absl::Status* read) {
  auto call = std::make_shared<UnaryCall>();
  call->method = method;
  call->context = context;
  call->reactor = context->DefaultReactor();
  call->response = response;
  call->received = absl::Now();
  context->AddInitialMetadata(kInstanceHeader, instance_);
  metrics_->AddRequestBytes(method, static_cast<double>(request->Length()));
  if (options_.log_requests) {
    std::fprintf(stderr, "sortd: start %s from %s\n", method,
                 context->peer().c_str());
  }
  absl::StatusOr<wire::Received> bytes =
      wire::Received::From(*request, options_.buffers);
  if (bytes.ok()) {
    call->bytes = *std::move(bytes);
    // gRPC's own copy of the request is not read again: free it now rather
    // than when the call ends, so a request in flight holds its bytes once.
    const_cast<grpc::ByteBuffer*>(request)->Clear();
  } else {
    *read = bytes.status();
  }
  return call;
}

namespace {

// Resolves SortRequest.shared: the region it names, held by the call.
template <typename Call>
absl::Status FindRegion(RegionRegistry* regions, Call& call) {
  if (!call.sort.shared.has_value()) return absl::OkStatus();
  if (regions == nullptr || !regions->enabled()) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start sortd with --shm_dir)");
  }
  call.shared = *call.sort.shared;
  call.region = regions->Find(call.shared.region());
  if (call.region == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "shared.region '", call.shared.region(),
        "' is not registered (never, or its SharedMemory stream has closed)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SortServiceImpl::PlaceSort(UnaryCall& call, SortJob& job) {
  if (call.region != nullptr &&
      (!call.sort.keys.empty() || !call.sort.values.empty())) {
    return absl::InvalidArgumentError(
        "with `shared`, the key and value fields name the types and must be "
        "empty: the arrays are in the region");
  }
  absl::StatusOr<SortJob> parsed =
      ParseSort(call.sort, options_.limits, call.bytes.data().size());
  if (!parsed.ok()) return parsed.status();
  job = *parsed;
  if (call.region != nullptr) {
    return PlaceInRegion(call.shared, call.sort.return_permutation,
                         *call.region, options_.limits, job);
  }
  call.sort_out =
      AllocateSortOutputs(job, call.sort.return_permutation, options_.buffers);
  return absl::OkStatus();
}

grpc::ByteBuffer SortServiceImpl::EncodeSort(UnaryCall& call,
                                             const SortJob& job,
                                             v1::ServedBy by) {
  if (call.region != nullptr) {
    // The arrays are in the region: the answer names the types only.
    return wire::EncodeSortResponse(
        {.key_type = job.key_type, .value_type = job.value_type}, &by);
  }
  if (call.sort.key_coding != v1::KEY_CODING_COMPACT) {
    return wire::EncodeSortResponse(call.sort_out.Slices(job, 0, job.count),
                                    &by);
  }
  wire::SortArrays arrays =
      call.sort_out.CompactSlices(job, 0, job.count, options_.buffers);
  RecordKeyBytesSaved(call.method, job, arrays, by);
  return wire::EncodeSortResponse(arrays, &by);
}

void SortServiceImpl::RecordKeyBytesSaved(const char* method,
                                          const SortJob& job,
                                          const wire::SortArrays& arrays,
                                          v1::ServedBy& by) {
  if (!arrays.compact.has_value()) return;
  const int64_t saved =
      static_cast<int64_t>(arrays.compact->count * KeySize(job.key_type)) -
      static_cast<int64_t>(arrays.compact->MessageBytes());
  by.set_key_bytes_saved(by.key_bytes_saved() + saved);
  metrics_->AddKeyBytesSaved(method, static_cast<double>(saved));
}

grpc::ServerUnaryReactor* SortServiceImpl::Sort(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::Status read;
  std::shared_ptr<UnaryCall> call =
      BeginCall("Sort", context, request, response, &read);
  if (!read.ok()) return Refuse(*call, read);
  absl::StatusOr<wire::SortRequest> parsed =
      wire::ParseSortRequest(call->bytes.data());
  if (!parsed.ok()) return Refuse(*call, parsed.status());
  call->sort = *parsed;

  if (absl::Status s = FindRegion(options_.regions, *call); !s.ok()) {
    return Refuse(*call, s);
  }
  if (call->sort.part.has_value()) return SortPart(std::move(call));
  auto task = std::make_shared<Task>();
  task->op = Op::kSort;
  task->units = call->region != nullptr ? call->shared.count()
                                        : SortRequestUnits(call->sort);
  UnaryCall* c = call.get();
  Task* t = task.get();
  task->prepare = [this, c, t] { return PlaceSort(*c, t->sort); };
  return Submit(std::move(call), std::move(task),
                [this, c, t](const TaskResult& result) {
                  const SortJob& job = t->sort;
                  metrics_->AddKeysSorted(PathName(result.path),
                                          KeyTypeName(job.key_type),
                                          static_cast<double>(job.count));
                  return EncodeSort(*c, job, ServedBy(result));
                });
}

// The calls of one array sent in parts, sorted together.
struct SortServiceImpl::PartGroup {
  std::vector<PartAssembler::Part> parts;  // in index order
  std::vector<size_t> first;               // each part's first element
  size_t count = 0;
  wire::OutputArray keys, values;  // the parts' arrays joined
  SortOutputs out;

  UnaryCall& Call(size_t i) {
    return *static_cast<UnaryCall*>(parts[i].call.get());
  }
};

grpc::ServerUnaryReactor* SortServiceImpl::SortPart(
    std::shared_ptr<UnaryCall> call) {
  if (call->region != nullptr) {
    return Refuse(*call, absl::InvalidArgumentError(
                             "`part` and `shared` do not go together: a "
                             "region holds its whole array"));
  }
  absl::StatusOr<SortJob> job =
      ParseSort(call->sort, options_.limits, call->bytes.data().size());
  if (!job.ok()) return Refuse(*call, job.status());
  PartAssembler::Part part;
  part.terms = {.key_type = job->key_type,
                .value_type = job->value_type,
                .order = job->order,
                .permutation = call->sort.return_permutation,
                .key_coding = call->sort.key_coding};
  part.job = *job;
  UnaryCall* c = call.get();
  part.fail = [this, c](const absl::Status& s) { Refuse(*c, s); };
  part.call = call;
  absl::StatusOr<std::vector<PartAssembler::Part>> whole =
      parts_.Add(*call->sort.part, std::move(part));
  if (!whole.ok()) return Refuse(*call, whole.status());
  if (!whole->empty()) SortWhole(*std::move(whole));
  return c->reactor;
}

void SortServiceImpl::SortWhole(std::vector<PartAssembler::Part> parts) {
  auto group = std::make_shared<PartGroup>();
  group->parts = std::move(parts);
  for (const PartAssembler::Part& p : group->parts) {
    group->first.push_back(group->count);
    group->count += p.job.count;
  }
  auto task = std::make_shared<Task>();
  task->op = Op::kSort;
  task->units = group->count;
  task->deadline = absl::InfiniteFuture();
  for (size_t i = 0; i < group->parts.size(); ++i) {
    task->deadline = std::min(
        task->deadline, absl::FromChrono(group->Call(i).context->deadline()));
  }
  PartGroup* g = group.get();
  Task* t = task.get();
  task->cancelled = [g] {
    for (size_t i = 0; i < g->parts.size(); ++i) {
      if (g->Call(i).context->IsCancelled()) return true;
    }
    return false;
  };
  task->prepare = [this, g, t] { return JoinParts(*g, t->sort); };
  task->done = [this, group, t](const TaskResult& result) {
    AnswerParts(*group, t->sort, result);
  };
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) {
    TaskResult result;
    result.status = Starting();
    task->done(result);
    return;
  }
  scheduler->Submit(std::move(task));
}

absl::Status SortServiceImpl::JoinParts(PartGroup& g, SortJob& job) {
  const SortJob& head = g.parts[0].job;
  if (g.count > std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the parts hold ", g.count, " keys; at most 2^32-1 are supported"));
  }
  const size_t ks = KeySize(head.key_type), vs = ValueSize(head.value_type);
  g.keys = wire::OutputArray(g.count * ks, options_.buffers);
  if (vs > 0) g.values = wire::OutputArray(g.count * vs, options_.buffers);
  // One copy per part, side by side; the parts' own bytes go as soon as
  // they are joined.
  tbb::parallel_for(size_t{0}, g.parts.size(), [&](size_t i) {
    const SortJob& p = g.parts[i].job;
    if (p.count > 0) {
      std::memcpy(g.keys.data() + g.first[i] * ks, p.keys, p.count * ks);
      if (vs > 0) {
        std::memcpy(g.values.data() + g.first[i] * vs, p.values, p.count * vs);
      }
    }
    g.Call(i).bytes = wire::Received();
  });
  job = SortJob{};
  job.key_type = head.key_type;
  job.order = head.order;
  job.count = g.count;
  job.keys = g.keys.data();
  job.value_type = head.value_type;
  job.values = vs > 0 ? g.values.data() : nullptr;
  g.out =
      AllocateSortOutputs(job, g.parts[0].terms.permutation, options_.buffers);
  return absl::OkStatus();
}

void SortServiceImpl::AnswerParts(PartGroup& g, const SortJob& job,
                                  const TaskResult& result) {
  if (result.status.ok()) {
    metrics_->AddKeysSorted(PathName(result.path), KeyTypeName(job.key_type),
                            static_cast<double>(job.count));
  }
  const bool compact = g.parts[0].terms.key_coding == v1::KEY_CODING_COMPACT;
  for (size_t i = 0; i < g.parts.size(); ++i) {
    UnaryCall& call = g.Call(i);
    if (!result.status.ok()) {
      Refuse(call, result.status);
      continue;
    }
    const size_t first = g.first[i], n = g.parts[i].job.count;
    // Compact keys code whole blocks in place: a part that starts
    // mid-block, or ends mid-block before the array's end, comes raw.
    const bool whole_blocks =
        first % compact::kBlockKeys == 0 &&
        (n % compact::kBlockKeys == 0 || first + n == g.count);
    wire::SortArrays arrays =
        compact && whole_blocks
            ? g.out.CompactSlices(job, first, n, options_.buffers)
            : g.out.Slices(job, first, n);
    v1::ServedBy by = ServedBy(result);
    RecordKeyBytesSaved(call.method, job, arrays, by);
    grpc::ByteBuffer answer = wire::EncodeSortResponse(arrays, &by);
    call.response->Swap(&answer);
    RecordEnd(call.method, call.received, absl::OkStatus(), &result);
    call.reactor->Finish(grpc::Status::OK);
  }
}

grpc::ServerUnaryReactor* SortServiceImpl::Transpose(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::Status read;
  std::shared_ptr<UnaryCall> call =
      BeginCall("Transpose", context, request, response, &read);
  if (!read.ok()) return Refuse(*call, read);
  absl::StatusOr<wire::TransposeRequest> parsed =
      wire::ParseTransposeRequest(call->bytes.data());
  if (!parsed.ok()) return Refuse(*call, parsed.status());
  call->transpose = *parsed;

  auto task = std::make_shared<Task>();
  task->op = Op::kTranspose;
  task->units = TransposeRequestUnits(call->transpose);
  UnaryCall* c = call.get();
  Task* t = task.get();
  task->prepare = [this, c, t] {
    absl::StatusOr<TransposeJob> job =
        ParseTranspose(c->transpose, options_.limits, c->bytes.data().size());
    if (!job.ok()) return job.status();
    t->transpose = *job;
    c->matrices =
        wire::OutputArray(c->transpose.matrices.size(), options_.buffers);
    t->transpose.out = c->matrices.data();
    return absl::OkStatus();
  };
  return Submit(
      std::move(call), std::move(task), [this, c, t](const TaskResult& result) {
        metrics_->AddMatricesTransposed(
            PathName(result.path), static_cast<double>(t->transpose.count));
        return wire::EncodeTransposeResponse(c->matrices.Share(),
                                             ServedBy(result));
      });
}

grpc::ServerUnaryReactor* SortServiceImpl::Echo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (!options_.echo) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "Echo is disabled on this server (--echo)"));
    return reactor;
  }
  absl::Status read;
  std::shared_ptr<UnaryCall> call =
      BeginCall("Echo", context, request, response, &read);
  if (!read.ok()) return Refuse(*call, read);
  absl::StatusOr<wire::SortRequest> parsed =
      wire::ParseSortRequest(call->bytes.data());
  if (!parsed.ok()) return Refuse(*call, parsed.status());
  call->sort = *parsed;
  if (call->sort.part.has_value()) {
    return Refuse(*call, absl::InvalidArgumentError(
                             "`part` is for Sort: Echo answers each call "
                             "with its own arrays"));
  }
  if (absl::Status s = FindRegion(options_.regions, *call); !s.ok()) {
    return Refuse(*call, s);
  }
  // What Sort does, less the sort: the same parsing, validation, output
  // placement and response encoding, with the arrays copied as they came.
  SortJob placed;
  if (absl::Status s = PlaceSort(*call, placed); !s.ok()) {
    return Refuse(*call, s);
  }
  SortJob* job = &placed;
  const size_t ks = KeySize(job->key_type), vs = ValueSize(job->value_type);
  if (job->count > 0) {
    std::memcpy(job->keys_out, job->keys, job->count * ks);
    if (vs > 0) std::memcpy(job->values_out, job->values, job->count * vs);
  }
  if (job->permutation_out != nullptr) {
    for (uint32_t i = 0; i < job->count; ++i) {
      std::memcpy(job->permutation_out + size_t{i} * 4, &i, 4);
    }
  }
  TaskResult result;
  result.path = ExecutionPath::kCpu;
  result.device = "echo (no sort)";
  result.batch_requests = 1;
  result.compute = absl::Now() - call->received;
  if (absl::Status s = RegionIntact(*call); !s.ok()) return Refuse(*call, s);
  v1::ServedBy by = ServedBy(result);
  by.set_route("echo");
  grpc::ByteBuffer answer = EncodeSort(*call, *job, std::move(by));
  response->Swap(&answer);
  RecordEnd("Echo", call->received, absl::OkStatus(), &result);
  call->reactor->Finish(grpc::Status::OK);
  return call->reactor;
}

// One SortStream call: gathers the chunks, sorts the whole array through
// the scheduler as one task, and streams the answer back in chunks. Lives
// until gRPC calls OnDone, which is after Finish: Finish is called only
// once the task is answered, so the task never outlives its buffers.
class SortStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SortStreamReactor(SortServiceImpl* service,
                    grpc::CallbackServerContext* context)
      : service_(service),
        context_(context),
        limits_(service->options_.limits),
        received_(absl::Now()) {
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (context_->IsCancelled()) {
        End(absl::CancelledError("the client cancelled the stream"));
      } else {
        Sort();  // the client half-closed: the array is complete
      }
      return;
    }
    service_->metrics_->AddRequestBytes("SortStream",
                                        static_cast<double>(chunk_.Length()));
    absl::Status appended = Append();
    chunk_.Clear();
    if (!appended.ok()) {
      End(appended);
      return;
    }
    StartRead(&chunk_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client went away while answers were sent"));
    } else if (sent_ < count_) {
      WriteNext();
    } else {
      End(absl::OkStatus());
    }
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Append() {
    const size_t number = messages_ + 1;
    auto failed = [number](const absl::Status& s) {
      return absl::Status(
          s.code(), absl::StrCat("stream message ", number, ": ", s.message()));
    };
    absl::StatusOr<wire::Received> bytes =
        wire::Received::From(chunk_, service_->options_.buffers);
    if (!bytes.ok()) return failed(bytes.status());
    absl::StatusOr<wire::SortRequest> parsed =
        wire::ParseSortRequest(bytes->data());
    if (!parsed.ok()) return failed(parsed.status());
    if (parsed->shared.has_value()) {
      return failed(absl::InvalidArgumentError(
          "`shared` is for Sort and Echo: a stream carries its arrays"));
    }
    if (parsed->part.has_value()) {
      return failed(absl::InvalidArgumentError(
          "`part` is for Sort: a stream carries its whole array"));
    }
    // `order` and `return_permutation` are read from the first message and
    // ignored in later ones (the contract, sortd.proto).
    if (messages_ > 0) {
      parsed->order = first_order_;
      parsed->key_coding = first_key_coding_;
    }
    absl::StatusOr<SortJob> part =
        ParseSort(*parsed, limits_, bytes->data().size());
    if (!part.ok()) return failed(part.status());
    if (messages_ == 0) {
      key_type_ = part->key_type;
      value_type_ = part->value_type;
      order_ = part->order;
      first_order_ = parsed->order;
      first_key_coding_ = parsed->key_coding;
      permutation_ = parsed->return_permutation;
    } else if (part->key_type != key_type_ || part->value_type != value_type_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream message ", number, " sets ",
          wire::KeyFieldName(part->key_type), " with ",
          wire::ValueFieldName(part->value_type), "; the first message set ",
          wire::KeyFieldName(key_type_), " with ",
          wire::ValueFieldName(value_type_),
          ": every message of a stream uses the same fields"));
    }
    ++messages_;
    const size_t ks = KeySize(key_type_), vs = ValueSize(value_type_);
    if ((count_ + part->count) * (ks + vs) > limits_.max_stream_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the stream's array has grown past ", limits_.max_stream_bytes,
          " bytes of keys and values, the most this server sorts in one "
          "stream (--max_stream_bytes)"));
    }
    if (count_ + part->count > std::numeric_limits<uint32_t>::max()) {
      return absl::ResourceExhaustedError(
          "the stream's array has grown past 2^32-1 keys, the most one sort "
          "takes");
    }
    keys_.append(reinterpret_cast<const char*>(part->keys), part->count * ks);
    if (vs > 0) {
      values_.append(reinterpret_cast<const char*>(part->values),
                     part->count * vs);
    }
    count_ += part->count;
    return absl::OkStatus();
  }

  void Sort() {
    if (messages_ == 0) {
      End(absl::InvalidArgumentError(
          "the stream ended before its first message; send at least one "
          "message with a key field set (an empty one sorts an empty "
          "array)"));
      return;
    }
    Scheduler* scheduler = service_->scheduler_.load();
    if (scheduler == nullptr) {
      End(Starting());
      return;
    }
    auto task = std::make_shared<Task>();
    task->op = Op::kSort;
    task->units = count_;
    task->deadline = absl::FromChrono(context_->deadline());
    grpc::CallbackServerContext* context = context_;
    task->cancelled = [context] { return context->IsCancelled(); };
    Task* raw = task.get();
    task->prepare = [this, raw] {
      SortJob& job = raw->sort;
      job.key_type = key_type_;
      job.order = order_;
      job.count = count_;
      job.keys = reinterpret_cast<const std::byte*>(keys_.data());
      job.value_type = value_type_;
      job.values = value_type_ != ValueType::kNone
                       ? reinterpret_cast<const std::byte*>(values_.data())
                       : nullptr;
      out_ = AllocateSortOutputs(job, permutation_, service_->options_.buffers);
      job_ = job;
      return absl::OkStatus();
    };
    task->done = [this](const TaskResult& result) {
      if (!result.status.ok()) {
        End(result.status);
        return;
      }
      result_ = result;
      // The input is no longer needed while the answer streams out.
      std::string().swap(keys_);
      std::string().swap(values_);
      WriteNext();
    };
    scheduler->Submit(std::move(task));
  }

  // Sends the next chunk; the last one carries served_by.
  void WriteNext() {
    const size_t ks = KeySize(key_type_), vs = ValueSize(value_type_);
    size_t per_chunk = std::max<size_t>(
        1, limits_.stream_chunk_bytes / (ks + vs + (permutation_ ? 4 : 0)));
    if (first_key_coding_ == v1::KEY_CODING_COMPACT) {
      // Compact chunks cover whole blocks (SortOutputs::CompactSlices).
      per_chunk =
          std::max(compact::kBlockKeys,
                   per_chunk / compact::kBlockKeys * compact::kBlockKeys);
    }
    const size_t at = sent_, n = std::min(per_chunk, count_ - sent_);
    sent_ += n;
    wire::SortArrays arrays =
        first_key_coding_ == v1::KEY_CODING_COMPACT
            ? out_.CompactSlices(job_, at, n, service_->options_.buffers)
            : out_.Slices(job_, at, n);
    v1::ServedBy by;
    by.set_key_bytes_saved(key_bytes_saved_);
    service_->RecordKeyBytesSaved("SortStream", job_, arrays, by);
    key_bytes_saved_ = by.key_bytes_saved();
    if (sent_ == count_) {
      by = ServedBy(result_);
      by.set_key_bytes_saved(key_bytes_saved_);
    }
    response_ =
        wire::EncodeSortResponse(arrays, sent_ == count_ ? &by : nullptr);
    StartWrite(&response_);
  }

  // Ends the call once, with metrics.
  void End(const absl::Status& status) {
    const bool ok = status.ok();
    const std::string path = ok ? PathName(result_.path) : "none";
    Metrics* metrics = service_->metrics_;
    if (ok) {
      metrics->ObserveQueueWait("SortStream",
                                absl::ToDoubleSeconds(result_.queue_wait));
      metrics->AddKeysSorted(path, KeyTypeName(key_type_),
                             static_cast<double>(count_));
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - received_);
    metrics->RecordRequest(
        "SortStream", absl::StatusCodeToString(status.code()), path, seconds);
    if (service_->options_.log_requests) {
      std::fprintf(stderr,
                   "sortd: end SortStream %s path=%s keys=%zu messages=%zu "
                   "runs=%d %.3f ms%s%s\n",
                   absl::StatusCodeToString(status.code()).c_str(),
                   path.c_str(), count_, messages_, result_.device_runs,
                   seconds * 1e3, ok ? "" : ": ",
                   std::string(status.message()).c_str());
    }
    Finish(ToGrpcStatus(status));
  }

  SortServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  const RequestLimits limits_;
  const absl::Time received_;

  grpc::ByteBuffer chunk_;
  size_t messages_ = 0;
  KeyType key_type_ = KeyType::kU32;
  ValueType value_type_ = ValueType::kNone;
  Order order_ = Order::kAscending;
  int32_t first_order_ = 0;
  int32_t first_key_coding_ = 0;
  int64_t key_bytes_saved_ = 0;  // by the chunks sent so far
  bool permutation_ = false;
  size_t count_ = 0;
  std::string keys_, values_;

  SortJob job_;
  SortOutputs out_;
  TaskResult result_;
  size_t sent_ = 0;
  grpc::ByteBuffer response_;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
SortServiceImpl::SortStream(grpc::CallbackServerContext* context) {
  return new SortStreamReactor(this, context);
}

// One SharedMemory stream: registers a region per message and unregisters
// all of them when the stream ends, however it ends (the client closing or
// going away, a refused registration, the server draining).
class SharedMemoryReactor final
    : public grpc::ServerBidiReactor<v1::SharedMemoryRequest,
                                     v1::SharedMemoryResponse> {
 public:
  SharedMemoryReactor(SortServiceImpl* service, RegionRegistry* regions)
      : service_(service), regions_(regions) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed: its regions are gone before it hears so.
      End(grpc::Status::OK);
      return;
    }
    absl::StatusOr<std::string> handle =
        regions_->Register(request_.file(), request_.bytes());
    if (!handle.ok()) {
      End(ToGrpcStatus(handle.status()));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) {  // the server began draining meanwhile
        regions_->Unregister(*handle);
        return;
      }
      handles_.push_back(*handle);
    }
    response_.set_region(*handle);
    response_.set_bytes(request_.bytes());
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    // Finish has run (End called it): only what is left to release.
    End(grpc::Status::OK);
    service_->ForgetSharedMemory(this);
    delete this;
  }

  // Unregisters every region and ends the stream with `status`, once.
  void End(const grpc::Status& status) {
    std::vector<std::string> handles;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handles.swap(handles_);
      finish = !ended_;
      ended_ = true;
    }
    for (const std::string& h : handles) regions_->Unregister(h);
    if (finish) Finish(status);
  }

 private:
  SortServiceImpl* service_;
  RegionRegistry* regions_;
  v1::SharedMemoryRequest request_;
  v1::SharedMemoryResponse response_;
  std::mutex mu_;
  bool ended_ = false;  // Finish called
  std::vector<std::string> handles_;
};

void SortServiceImpl::ForgetSharedMemory(SharedMemoryReactor* reactor) {
  std::lock_guard<std::mutex> lock(shm_mu_);
  shm_streams_.erase(reactor);
}

void SortServiceImpl::EndWaitingCalls() {
  parts_.Close(absl::UnavailableError(
      "sortd is shutting down: it takes no more parts of arrays; send the "
      "array again (to another replica)"));
  std::lock_guard<std::mutex> lock(shm_mu_);
  for (SharedMemoryReactor* r : shm_streams_) {
    r->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "sortd is shutting down: its shared-memory regions "
                        "are unregistered"));
  }
}

grpc::ServerBidiReactor<v1::SharedMemoryRequest, v1::SharedMemoryResponse>*
SortServiceImpl::SharedMemory(grpc::CallbackServerContext* context) {
  if (options_.regions == nullptr || !options_.regions->enabled()) {
    // A reactor that refuses at once.
    class Refused final
        : public grpc::ServerBidiReactor<v1::SharedMemoryRequest,
                                         v1::SharedMemoryResponse> {
     public:
      Refused() {
        Finish(grpc::Status(
            grpc::StatusCode::FAILED_PRECONDITION,
            "shared memory is off on this server (start sortd with "
            "--shm_dir)"));
      }
      void OnDone() override { delete this; }
    };
    (void)context;
    return new Refused;
  }
  auto* reactor = new SharedMemoryReactor(this, options_.regions);
  std::lock_guard<std::mutex> lock(shm_mu_);
  shm_streams_.insert(reactor);
  return reactor;
}

}  // namespace sortd
