// libFuzzer target: arbitrary bytes as SortRequest and TransposeRequest,
// through the server's own parser (server/wire.h) and validation
// (server/request.h) and, when a request is accepted, the CPU path, the
// response encoder and the reference check. Any crash, sanitizer report,
// refusal without a message, message accepted that protobuf refuses, or
// accepted request answered wrongly is a finding. Allocation is bounded by
// the input: sizes are checked before buffers are.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "client/raw_call.h"
#include "client/sortctl_lib.h"
#include "core/key_fields.h"
#include "cpu/cpu_sorter.h"
#include "server/request.h"

namespace {

sortd::CpuSorter& Cpu() {
  static sortd::CpuSorter* cpu = new sortd::CpuSorter({.threads = 1});
  return *cpu;
}

void Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "fuzz_request: %s: %s\n", what, s.ToString().c_str());
  std::abort();
}

// A response as its receiver parses it.
template <typename Message>
Message Decode(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  Message m;
  if (!m.ParseFromString(bytes)) Fail("response", absl::DataLossError(""));
  return m;
}

// Compact keys (fields 12-14) decoded, as the client does, into the raw
// key field of their type.
void DecodeCompactKeys(sortd::v1::SortResponse& response) {
  sortd::KeyType type = sortd::KeyType::kU32;
  const sortd::v1::CompactKeys* c =
      sortd::key_fields::CompactKeys(response, &type);
  if (c == nullptr) return;
  std::string keys;
  const sortd::compact::Encoded e{c->count(), c->widths(), c->bases(),
                                  c->deltas()};
  const bool descending = c->descending();
  if (absl::Status s =
          sortd::client_wire::AppendCompactKeys(e, type, descending, &keys);
      !s.ok()) {
    Fail("compact keys", s);
  }
  *sortd::key_fields::MutableKeys(&response, type) = std::move(keys);
}

void CheckRefusal(const absl::Status& s) {
  if (s.message().empty()) Fail("a refusal without a message", s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const sortd::RequestLimits limits{.max_request_bytes = 1 << 16};
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  sortd::v1::SortRequest sort;
  const bool protobuf_sort = sort.ParseFromArray(data, static_cast<int>(size));
  absl::StatusOr<sortd::wire::SortRequest> parsed =
      sortd::wire::ParseSortRequest(bytes);
  if (parsed.ok() && !protobuf_sort) {
    Fail("a SortRequest protobuf refuses was accepted", absl::OkStatus());
  }
  if (parsed.ok()) {
    (void)sortd::SortRequestUnits(*parsed);
    absl::StatusOr<sortd::SortJob> job =
        sortd::ParseSort(*parsed, limits, size);
    if (job.ok()) {
      sortd::SortOutputs out =
          sortd::AllocateSortOutputs(*job, parsed->return_permutation);
      if (absl::Status s = Cpu().Sort(*job); !s.ok()) Fail("cpu sort", s);
      // Compact keys asked for: encoded by the server's code, decoded by
      // the client's, checked like raw ones.
      const bool compact = parsed->key_coding == sortd::v1::KEY_CODING_COMPACT;
      auto response =
          Decode<sortd::v1::SortResponse>(sortd::wire::EncodeSortResponse(
              compact ? out.CompactSlices(*job, 0, job->count, nullptr)
                      : out.Slices(*job, 0, job->count),
              nullptr));
      DecodeCompactKeys(response);
      if (absl::Status s = sortd::cli::VerifySort(sort, response); !s.ok()) {
        Fail("verify", s);
      }
    } else {
      CheckRefusal(job.status());
    }
  } else {
    CheckRefusal(parsed.status());
  }

  sortd::v1::TransposeRequest transpose;
  const bool protobuf_transpose =
      transpose.ParseFromArray(data, static_cast<int>(size));
  absl::StatusOr<sortd::wire::TransposeRequest> t =
      sortd::wire::ParseTransposeRequest(bytes);
  if (t.ok() && !protobuf_transpose) {
    Fail("a TransposeRequest protobuf refuses was accepted", absl::OkStatus());
  }
  if (t.ok()) {
    (void)sortd::TransposeRequestUnits(*t);
    absl::StatusOr<sortd::TransposeJob> job =
        sortd::ParseTranspose(*t, limits, size);
    if (job.ok()) {
      sortd::wire::OutputArray out(t->matrices.size());
      job->out = out.data();
      if (absl::Status s = Cpu().Transpose(*job); !s.ok()) {
        Fail("cpu transpose", s);
      }
      const auto response = Decode<sortd::v1::TransposeResponse>(
          sortd::wire::EncodeTransposeResponse(out.Share(), {}));
      if (absl::Status s = sortd::cli::VerifyTranspose(transpose.matrices(),
                                                       response.matrices());
          !s.ok()) {
        Fail("verify transpose", s);
      }
    } else {
      CheckRefusal(job.status());
    }
  } else {
    CheckRefusal(t.status());
  }
  return 0;
}
