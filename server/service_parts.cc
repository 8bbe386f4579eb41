// SortServiceImpl: one array sent as several Sort calls (SortRequest.part).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compact_keys.h"
#include "core/parallel.h"
#include "server/out_of_memory.h"
#include "server/service.h"
#include "server/service_internal.h"
#include "server/status.h"
#include "server/wire.h"

namespace sortd {

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
  // Groups are the client's own (its verified certificate's identity
  // under mutual TLS, else its host: server/peer.h), not the
  // connection's: parts of one array come over several connections.
  const std::string& scope = call->peer.client;
  absl::StatusOr<SortJob> job =
      ParseSort(call->sort, options_.limits, call->bytes.data().size());
  if (!job.ok()) {
    // The array cannot be whole: its parts already waiting fail with it.
    return Refuse(*call, parts_.Refuse(scope, *call->sort.part, job.status()));
  }
  // What sorting its share of the array will hold, charged now: the part
  // holds its message while it waits (charged as it came), and the group
  // is sorted as soon as the last part comes.
  if (absl::Status s = call->hold->Grow(SortWorkBytes(*call, job->count));
      !s.ok()) {
    return Refuse(*call, parts_.Refuse(scope, *call->sort.part, s));
  }
  PartAssembler::Part part;
  part.terms = {.key_type = job->key_type,
                .value_type = job->value_type,
                .order = job->order,
                .permutation = call->sort.return_permutation,
                .key_coding = call->sort.key_coding};
  part.job = *job;
  part.bytes = call->bytes.data().size();
  call->units = job->count;
  UnaryCall* c = call.get();
  part.fail = [this, c](const absl::Status& s) { Refuse(*c, s); };
  part.call = call;
  absl::StatusOr<std::vector<PartAssembler::Part>> whole =
      parts_.Add(scope, *call->sort.part, std::move(part));
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
  task->client = group->Call(0).peer.client;
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
  parallel::For(size_t{0}, g.parts.size(), [&](size_t i) {
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
    grpc::ByteBuffer answer;
    const absl::Status encoded = CatchOutOfMemory("this part's answer", [&] {
      wire::SortArrays arrays =
          compact && whole_blocks
              ? g.out.CompactSlices(job, first, n, options_.buffers)
              : g.out.Slices(job, first, n);
      v1::ServedBy by = ServedBy(result);
      RecordKeyBytesSaved(call.method, job, arrays, by);
      answer = wire::EncodeSortResponse(arrays, &by);
      return absl::OkStatus();
    });
    if (!encoded.ok()) {
      Refuse(call, encoded);
      continue;
    }
    call.response->Swap(&answer);
    metrics_->AddKeysSorted(PathName(result.path), KeyTypeName(job.key_type),
                            static_cast<double>(n));
    RecordEnd(call, absl::OkStatus(), &result);
    call.reactor->Finish(grpc::Status::OK);
  }
}

}  // namespace sortd
