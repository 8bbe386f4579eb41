// sortctl's one-call commands: sort, transpose and health. Each builds its
// request from the flags (reading or generating the input), makes the call
// with a progress line, checks the answer against a local reference with
// --verify, writes it with --output, and prints a one-line summary (with
// --json, one JSON object).
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cli_io.h"
#include "client/client.h"
#include "client/sortctl_help.h"
#include "client/sortctl_internal.h"
#include "client/sortctl_lib.h"

namespace cli = sortd::cli;
using sortd::cli::Progress;
using sortd::cli::ReadInput;
using sortd::cli::WriteOutput;

namespace sortctl {
namespace {

using cli::kExitMismatch;
using cli::LocalError;
using cli::ServerError;
using cli::Usage;

template <typename Response, typename Call>
absl::StatusOr<Response> CallWithProgress(Progress& progress, Call call,
                                          const std::string& what) {
  std::future<absl::StatusOr<Response>> result =
      std::async(std::launch::async, call);
  return progress.Wait(result, what);
}

// The summary fields both output styles share.
struct Summary {
  std::string command;
  std::string description;  // human-readable subject, e.g. "1000 f32 keys"
  std::vector<std::pair<std::string, std::string>> json_fields;
  sortd::v1::ServedBy served_by;
  double wall_ms = 0;
  bool verified = false;
};

void PrintSummary(const Summary& s) {
  const double queue_ms = s.served_by.queue_wait_ns() / 1e6;
  const double compute_ms = s.served_by.compute_ns() / 1e6;
  if (absl::GetFlag(FLAGS_json)) {
    std::string out = absl::StrCat("{\"command\":", cli::JsonString(s.command));
    for (const auto& [k, v] : s.json_fields) {
      absl::StrAppend(&out, ",", cli::JsonString(k), ":", v);
    }
    absl::StrAppendFormat(
        &out,
        ",\"path\":\"%s\",\"device\":%s,\"route\":%s,\"batch_requests\":%d,"
        "\"queue_wait_ms\":%.6f,\"compute_ms\":%.6f,\"wall_ms\":%.6f,"
        "\"verified\":%s}\n",
        cli::PathText(s.served_by.path()),
        cli::JsonString(s.served_by.device()),
        cli::JsonString(s.served_by.route()), s.served_by.batch_requests(),
        queue_ms, compute_ms, s.wall_ms, s.verified ? "true" : "false");
    std::fputs(out.c_str(), stdout);
    return;
  }
  const std::string batch =
      s.served_by.batch_requests() > 1
          ? absl::StrCat(", batched with ", s.served_by.batch_requests() - 1,
                         " other request(s)")
          : "";
  std::printf(
      "%s %s on %s [%s], route %s%s: queue %.3f ms, compute %.3f ms, wall "
      "%.3f ms%s\n",
      s.command == "sort" ? "sorted" : "transposed", s.description.c_str(),
      cli::PathText(s.served_by.path()), s.served_by.device().c_str(),
      s.served_by.route().c_str(), batch.c_str(), queue_ms, compute_ms,
      s.wall_ms, s.verified ? "; verified" : "");
}

absl::StatusOr<sortd::v1::SortRequest> BuildSortRequest(
    sortd::KeyType type, sortd::ValueType value_type, Progress& progress) {
  namespace cli = sortd::cli;

  absl::StatusOr<std::string> keys;
  if (!absl::GetFlag(FLAGS_input).empty()) {
    progress.Step("reading " + absl::GetFlag(FLAGS_input));
    absl::StatusOr<std::string> text = ReadInput(absl::GetFlag(FLAGS_input));
    if (!text.ok()) return text.status();
    progress.Step("parsing keys");
    keys = cli::ParseKeys(type, *text);
    if (!keys.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::GetFlag(FLAGS_input), ": ", keys.status().message(),
          " (--type ", sortd::KeyTypeName(type), ")"));
    }
  } else {
    progress.Step("generating keys");
    keys = cli::RandomKeys(type, absl::GetFlag(FLAGS_random),
                           absl::GetFlag(FLAGS_seed));
  }
  if (!keys.ok()) return keys.status();
  const size_t n = keys->size() / sortd::KeySize(type);

  sortd::v1::SortRequest request;
  sortd::cli::SetKeys(type, std::move(*keys), &request);
  request.set_order(absl::GetFlag(FLAGS_desc) ? sortd::v1::ORDER_DESCENDING
                                              : sortd::v1::ORDER_ASCENDING);
  request.set_return_permutation(absl::GetFlag(FLAGS_permutation));
  if (absl::GetFlag(FLAGS_compact)) {
    request.set_response_key_coding(sortd::v1::KEY_CODING_COMPACT);
  }
  if (value_type != sortd::ValueType::kNone) {
    std::string values;
    if (absl::GetFlag(FLAGS_input).empty()) {
      values = cli::RandomValues(value_type, n, absl::GetFlag(FLAGS_seed));
    } else {
      for (size_t i = 0; i < n; ++i) {
        if (value_type == sortd::ValueType::kU32) {
          uint32_t v = static_cast<uint32_t>(i);
          values.append(reinterpret_cast<const char*>(&v), 4);
        } else {
          uint64_t v = i;
          values.append(reinterpret_cast<const char*>(&v), 8);
        }
      }
    }
    if (value_type == sortd::ValueType::kU32) {
      request.set_u32_values(std::move(values));
    } else {
      request.set_u64_values(std::move(values));
    }
  }
  progress.Clear();
  return request;
}

std::string SortOutputText(const sortd::v1::SortRequest& request,
                           const sortd::v1::SortResponse& response) {
  const std::string* unused;
  const sortd::KeyType type = sortd::cli::KeysOf(request, &unused);
  const std::string& keys = sortd::cli::KeysOf(response);
  const size_t n = keys.size() / sortd::KeySize(type);
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += sortd::cli::FormatKey(type, keys, i);
    if (response.has_u32_values()) {
      uint32_t v;
      std::memcpy(&v, response.u32_values().data() + 4 * i, 4);
      absl::StrAppend(&out, " ", v);
    } else if (response.has_u64_values()) {
      uint64_t v;
      std::memcpy(&v, response.u64_values().data() + 8 * i, 8);
      absl::StrAppend(&out, " ", v);
    }
    if (!response.permutation().empty()) {
      uint32_t p;
      std::memcpy(&p, response.permutation().data() + 4 * i, 4);
      absl::StrAppend(&out, " ", p);
    }
    out += '\n';
  }
  return out;
}

// The summary line of a sort of `n` keys of `type` and its answer.
Summary SortSummary(const sortd::v1::SortResponse& response, size_t n,
                    sortd::KeyType type, bool stream, double wall_ms) {
  Summary summary;
  summary.command = "sort";
  summary.served_by = response.served_by();
  summary.wall_ms = wall_ms;
  const std::string type_name(sortd::KeyTypeName(type));
  const std::string values = absl::GetFlag(FLAGS_values).empty()
                                 ? "none"
                                 : absl::GetFlag(FLAGS_values);
  const bool desc = absl::GetFlag(FLAGS_desc);
  summary.description = absl::StrCat(
      n, " ", type_name, " keys (", desc ? "descending" : "ascending",
      values == "none" ? "" : absl::StrCat(", ", values, " values"),
      absl::GetFlag(FLAGS_permutation) ? ", with permutation" : "", ")");
  if (stream) absl::StrAppend(&summary.description, " via SortStream");
  if (response.served_by().device_runs() > 1) {
    absl::StrAppend(&summary.description, " in ",
                    response.served_by().device_runs(),
                    " device runs merged on the CPU");
  }
  const int64_t saved = response.served_by().key_bytes_saved();
  if (saved != 0) {
    absl::StrAppendFormat(&summary.description,
                          ", keys sent compact (%.1f MB saved)", saved / 1e6);
  }
  summary.json_fields = {
      {"keys", absl::StrCat(n)},
      {"stream", stream ? "true" : "false"},
      {"device_runs", absl::StrCat(response.served_by().device_runs())},
      {"key_bytes_saved", absl::StrCat(saved)},
      {"type", sortd::cli::JsonString(type_name)},
      {"order", desc ? "\"descending\"" : "\"ascending\""},
      {"values", sortd::cli::JsonString(values)},
      {"permutation", absl::GetFlag(FLAGS_permutation) ? "true" : "false"}};

  return summary;
}

// The answer's matrices as --output has them: one 0x-hex row per line.
std::string TransposeOutputText(const std::string& m) {
  std::string text;
  for (size_t i = 0; i < m.size() / 4; ++i) {
    uint32_t row;
    std::memcpy(&row, m.data() + 4 * i, 4);
    absl::StrAppendFormat(&text, "0x%08x\n", row);
  }
  return text;
}

// The end of a sort or a transpose: the answer checked when --verify asks
// (a wrong one exits kExitMismatch), written to --output when one is named,
// and the summary printed.
int Finish(Summary& summary, Progress& progress,
           const std::function<absl::Status()>& verify,
           const std::function<std::string()>& output_text) {
  if (absl::GetFlag(FLAGS_verify)) {
    progress.Step("verifying");
    absl::Status s = verify();
    progress.Clear();
    if (!s.ok()) {
      std::fprintf(stderr, "sortctl: verification FAILED: %s\n",
                   std::string(s.message()).c_str());
      return kExitMismatch;
    }
    summary.verified = true;
  }
  if (!absl::GetFlag(FLAGS_output).empty()) {
    absl::Status s = WriteOutput(absl::GetFlag(FLAGS_output), output_text());
    if (!s.ok()) return LocalError(s);
  }
  PrintSummary(summary);
  return 0;
}

}  // namespace

int RunSort() {
  const auto key_type = sortd::cli::ParseKeyTypeName(absl::GetFlag(FLAGS_type));
  if (!key_type) return Usage(absl::StrCat("sort: ", BadType()));
  const auto value_type =
      sortd::cli::ParseValueTypeName(absl::GetFlag(FLAGS_values));
  if (!value_type) return Usage(absl::StrCat("sort: ", BadValues()));
  if (std::string bad = CheckInputFlags("sort"); !bad.empty()) {
    return Usage(bad);
  }
  Progress progress(absl::GetFlag(FLAGS_json));
  absl::StatusOr<sortd::v1::SortRequest> request =
      BuildSortRequest(*key_type, *value_type, progress);
  if (!request.ok()) return LocalError(request.status());
  auto client = Connect();
  if (!client.ok()) return LocalError(client.status());

  const std::string* keys;
  const sortd::KeyType type = sortd::cli::KeysOf(*request, &keys);
  const size_t n = keys->size() / sortd::KeySize(type);
  const absl::Time start = absl::Now();
  const bool stream =
      absl::GetFlag(FLAGS_stream) ||
      request->ByteSizeLong() > (*client)->options().max_unary_bytes;
  auto response = CallWithProgress<sortd::v1::SortResponse>(
      progress,
      [&] {
        return stream ? (*client)->SortStream(*request)
                      : (*client)->Sort(*request);
      },
      absl::StrCat("sorting ", n, " keys on ", absl::GetFlag(FLAGS_target)));
  const double wall_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  if (!response.ok()) return ServerError(response.status());

  Summary summary = SortSummary(*response, n, type, stream, wall_ms);
  return Finish(
      summary, progress,
      [&] { return sortd::cli::VerifySort(*request, *response); },
      [&] { return SortOutputText(*request, *response); });
}

int RunTranspose() {
  if (std::string bad = CheckInputFlags("transpose"); !bad.empty()) {
    return Usage(bad);
  }
  Progress progress(absl::GetFlag(FLAGS_json));
  sortd::v1::TransposeRequest request;
  if (!absl::GetFlag(FLAGS_input).empty()) {
    absl::StatusOr<std::string> text = ReadInput(absl::GetFlag(FLAGS_input));
    if (!text.ok()) return LocalError(text.status());
    absl::StatusOr<std::string> words = sortd::cli::ParseWords(*text);
    if (!words.ok()) {
      return LocalError(absl::InvalidArgumentError(absl::StrCat(
          absl::GetFlag(FLAGS_input), ": ", words.status().message(),
          " (transpose reads uint32 rows)")));
    }
    request.set_matrices(std::move(*words));
  } else {
    request.set_matrices(sortd::cli::RandomWords(
        static_cast<size_t>(absl::GetFlag(FLAGS_random)) * 32,
        absl::GetFlag(FLAGS_seed)));
  }
  auto client = Connect();
  if (!client.ok()) return LocalError(client.status());
  const size_t count = request.matrices().size() / 128;
  const absl::Time start = absl::Now();
  auto response = CallWithProgress<sortd::v1::TransposeResponse>(
      progress, [&] { return (*client)->Transpose(request); },
      absl::StrCat("transposing ", count, " matrices"));
  const double wall_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  if (!response.ok()) return ServerError(response.status());

  Summary summary{.command = "transpose",
                  .description = absl::StrCat(count, " 32x32 bit matrices"),
                  .json_fields = {{"matrices", absl::StrCat(count)}},
                  .served_by = response->served_by(),
                  .wall_ms = wall_ms};
  return Finish(
      summary, progress,
      [&] {
        return sortd::cli::VerifyTranspose(request.matrices(),
                                           response->matrices());
      },
      [&] { return TransposeOutputText(response->matrices()); });
}

int RunHealth() {
  auto client = Connect();
  if (!client.ok()) return LocalError(client.status());
  absl::Status s = (*client)->CheckHealth();
  if (!s.ok()) return ServerError(s);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"command\":\"health\",\"status\":\"SERVING\"}\n");
  } else {
    std::printf("%s: SERVING\n", absl::GetFlag(FLAGS_target).c_str());
  }
  return 0;
}

}  // namespace sortctl
