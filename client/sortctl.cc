// sortctl: the command-line client of sortd.
//
//   sortctl [--target HOST:PORT] sort --type f32 --random 1000000 --verify
//   sortctl sort --type i64 --desc --input keys.txt --output sorted.txt
//   sortctl transpose --random 1024 --verify --json
//   sortctl health
//   sortctl bench --sizes 1k:70,64k:25,16m:5 --concurrency 64 --duration 60s
//   sortctl bench --op echo --sizes 16m --concurrency 1 --requests 20
//
// --target defaults to $SORTD_TARGET when that is set and not empty.
//
// Exit status: 0 success; 1 a call returned an error status, printed as
// "server: CODE: message" (bench: no request was answered, or more than
// half of its calls failed); 2 bad usage (an unknown command, flag or value;
// a missing or conflicting argument); 3 the answer did not match the local
// reference (--verify; bench: a sampled answer); 4 a local failure, printed
// as "sortctl: message" (an input that cannot be read or parsed, an output
// that cannot be written, a TLS file that cannot be loaded).
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/bench.h"
#include "client/cli_io.h"
#include "client/client.h"
#include "client/sortctl_help.h"
#include "client/sortctl_lib.h"
#include "core/version.h"

namespace cli = sortd::cli;
using sortd::cli::Progress;
using sortd::cli::ReadInput;
using sortd::cli::WriteOutput;

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "sortd address: host:port, or a gRPC target such as "
          "dns:///sortd.example:50051; when not given, $SORTD_TARGET if that "
          "is set and not empty, else this default");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(300), "Deadline of the call");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: PEM file of the CA that signed sortd's certificate (turns "
          "TLS on)");
ABSL_FLAG(std::string, tls_cert, "",
          "mutual TLS: this client's certificate (PEM); with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "mutual TLS: this client's key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "",
          "TLS: the name to check in sortd's certificate, when the target "
          "address is not one it names");
ABSL_FLAG(std::string, lb, "",
          "gRPC load-balancing policy; empty: round_robin, over every "
          "address of the target (a dns:/// name of many replicas, e.g. a "
          "Kubernetes headless Service); pick_first: one server");
ABSL_FLAG(std::string, type, "u32", "sort: key type, u32|i32|f32|u64|i64|f64");
ABSL_FLAG(bool, desc, false, "sort: descending order (still stable)");
ABSL_FLAG(std::string, values, "",
          "sort: attach a payload of this type (u32|u64), one value per key; "
          "with --random the values are random, with --input the payload is "
          "each key's input position");
ABSL_FLAG(bool, permutation, false,
          "sort: ask for the permutation (argsort indices)");
ABSL_FLAG(std::string, input, "",
          "Read whitespace-separated numbers from this file ('-' = stdin): "
          "keys for sort, uint32 rows (decimal or 0x hex) for transpose");
ABSL_FLAG(int64_t, random, -1,
          "Generate this many random keys (sort) or matrices (transpose)");
ABSL_FLAG(uint64_t, seed, 1, "Seed for --random");
ABSL_FLAG(std::string, output, "",
          "Write the answer to this file ('-' = stdout): sort writes one key "
          "per line, followed by its value and its input index when "
          "requested; transpose writes one 0x-hex row per line");
ABSL_FLAG(bool, verify, false,
          "Check the answer against a local reference; exit 3 on mismatch");
ABSL_FLAG(bool, json, false, "Print the summary as one JSON object");
ABSL_FLAG(bool, stream, false,
          "sort: send the array through the SortStream RPC in chunks, "
          "whatever its size (larger than --max_unary_bytes always is)");
ABSL_FLAG(int64_t, max_unary_bytes, int64_t{256} << 20,
          "sort: requests larger than this go through SortStream; set to "
          "the server's --max_request_bytes");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{2} << 20,
          "sort: array bytes (keys and values) per SortStream message");
ABSL_FLAG(std::string, op, "sort",
          "bench: what to send, sort|transpose|echo (echo: the Echo RPC with "
          "the same sort requests, the baseline)");
ABSL_FLAG(std::string, sizes, "1k",
          "bench: request sizes in keys (matrices for transpose): one size "
          "(4096, 64k, 16m) or a weighted mix such as 1k:70,64k:25,16m:5");
ABSL_FLAG(int, concurrency, 16, "bench: concurrent calls (one thread each)");
ABSL_FLAG(double, rate, 0,
          "bench: open loop, calls a second due at fixed times whatever the "
          "answers do (latency from when each was due); 0: closed loop, each "
          "worker calling again once answered");
ABSL_FLAG(std::vector<std::string>, server_metrics, {},
          "bench: sortd metrics endpoints (host:port of --metrics_listen, "
          "comma-separated: every replica the target reaches); the report "
          "gives their CPU seconds over the run and per request");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10),
          "bench: measured time (0 with --requests: until that many); at "
          "most 24h");
ABSL_FLAG(int64_t, requests, 0,
          "bench: stop after this many measured requests (0: --duration "
          "alone bounds the run)");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "bench: unmeasured calls before the measured part");
ABSL_FLAG(int64_t, verify_every, 16,
          "bench with --verify: check every N-th answer of each worker");
ABSL_FLAG(int, variants, 4,
          "bench: distinct random inputs per size (1 to 64); with "
          "--shm_socket each worker's region holds every one of them and "
          "its answer");
ABSL_FLAG(std::string, shm_socket, "",
          "bench: send sorts through shared memory, one region per worker, "
          "registered over this Unix socket (the server's --shm_socket; "
          "same host only)");
ABSL_FLAG(bool, compact, false,
          "sort, bench: ask for the sorted keys in compact form (32-bit "
          "keys: about a third of the bytes back; the result is the same)");
ABSL_FLAG(int, connections, 5,
          "TCP connections to the server: the first for calls smaller than "
          "--small_call_bytes, the others taken in turn by larger calls");
ABSL_FLAG(int64_t, small_call_bytes, int64_t{256} << 10,
          "Calls smaller than this many bytes all go on the first "
          "connection (0: every call takes its turn)");
ABSL_FLAG(int64_t, split_bytes, int64_t{16} << 20,
          "Sorts of at least this many bytes go out in parts over several "
          "connections at once, sorted by the server as one array (0: never)");

namespace {

using cli::kExitMismatch;
using cli::LocalError;
using cli::ServerError;
using cli::Usage;

// The flags every command uses to reach the server. Empty when they are
// fine, else the usage message.
std::string CheckConnectionFlags() {
  if (absl::GetFlag(FLAGS_target).empty()) return "--target: empty";
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    return absl::StrCat("--timeout: expected a positive duration, got ",
                        absl::FormatDuration(absl::GetFlag(FLAGS_timeout)));
  }
  if (absl::GetFlag(FLAGS_tls_cert).empty() !=
      absl::GetFlag(FLAGS_tls_key).empty()) {
    return absl::GetFlag(FLAGS_tls_cert).empty()
               ? "--tls_key needs --tls_cert (this client's certificate)"
               : "--tls_cert needs --tls_key (this client's key)";
  }
  if (absl::GetFlag(FLAGS_max_unary_bytes) < 0) {
    return absl::StrCat("--max_unary_bytes: negative (",
                        absl::GetFlag(FLAGS_max_unary_bytes), ")");
  }
  if (absl::GetFlag(FLAGS_chunk_bytes) < 1) {
    return absl::StrCat("--chunk_bytes: expected at least 1, got ",
                        absl::GetFlag(FLAGS_chunk_bytes));
  }
  return "";
}

absl::StatusOr<std::unique_ptr<sortd::Client>> Connect() {
  sortd::ClientOptions options;
  options.max_unary_bytes = static_cast<size_t>(
      std::max<int64_t>(absl::GetFlag(FLAGS_max_unary_bytes), 0));
  options.stream_chunk_bytes = static_cast<size_t>(
      std::max<int64_t>(absl::GetFlag(FLAGS_chunk_bytes), 8));
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.load_balancing = absl::GetFlag(FLAGS_lb);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.connections = std::max(1, absl::GetFlag(FLAGS_connections));
  options.small_call_bytes = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_small_call_bytes)));
  options.split_bytes = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_split_bytes)));
  return sortd::Client::Create(absl::GetFlag(FLAGS_target), options);
}

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

// Usage messages naming the bad value of --type and --values.
std::string BadType() {
  return absl::StrCat("--type: '", absl::GetFlag(FLAGS_type),
                      "' is not a key type; expected u32|i32|f32|u64|i64|f64");
}

std::string BadValues() {
  return absl::StrCat("--values: '", absl::GetFlag(FLAGS_values),
                      "' is not a value type; expected u32 or u64");
}

// --input or --random: exactly one, and --random not negative. Empty when
// they are fine, else the usage message.
std::string CheckInputFlags(const char* command) {
  const int64_t random = absl::GetFlag(FLAGS_random);
  if (random < -1) {
    return absl::StrCat(command, ": --random: expected a count, got ", random);
  }
  if (absl::GetFlag(FLAGS_input).empty() == (random < 0)) {
    return absl::StrCat(command,
                        ": give exactly one of --input FILE or --random N");
  }
  return "";
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
  if (absl::GetFlag(FLAGS_verify)) {
    progress.Step("verifying");
    absl::Status s = sortd::cli::VerifySort(*request, *response);
    progress.Clear();
    if (!s.ok()) {
      std::fprintf(stderr, "sortctl: verification FAILED: %s\n",
                   std::string(s.message()).c_str());
      return kExitMismatch;
    }
    summary.verified = true;
  }
  if (!absl::GetFlag(FLAGS_output).empty()) {
    absl::Status s = WriteOutput(absl::GetFlag(FLAGS_output),
                                 SortOutputText(*request, *response));
    if (!s.ok()) return LocalError(s);
  }
  PrintSummary(summary);
  return 0;
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
  if (absl::GetFlag(FLAGS_verify)) {
    absl::Status s =
        sortd::cli::VerifyTranspose(request.matrices(), response->matrices());
    if (!s.ok()) {
      std::fprintf(stderr, "sortctl: verification FAILED: %s\n",
                   std::string(s.message()).c_str());
      return kExitMismatch;
    }
    summary.verified = true;
  }
  if (!absl::GetFlag(FLAGS_output).empty()) {
    std::string text;
    const std::string& m = response->matrices();
    for (size_t i = 0; i < m.size() / 4; ++i) {
      uint32_t row;
      std::memcpy(&row, m.data() + 4 * i, 4);
      absl::StrAppendFormat(&text, "0x%08x\n", row);
    }
    absl::Status s = WriteOutput(absl::GetFlag(FLAGS_output), text);
    if (!s.ok()) return LocalError(s);
  }
  PrintSummary(summary);
  return 0;
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

// bench's options from its flags; a usage message when they do not hold.
absl::StatusOr<cli::BenchOptions> BenchOptionsFromFlags() {
  cli::BenchOptions o;
  const std::string op = absl::GetFlag(FLAGS_op);
  if (op == "sort") {
    o.op = cli::BenchOp::kSort;
  } else if (op == "transpose") {
    o.op = cli::BenchOp::kTranspose;
  } else if (op == "echo") {
    o.op = cli::BenchOp::kEcho;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --op: '", op,
                     "' is not an op; expected sort, transpose or "
                     "echo"));
  }
  const auto type = cli::ParseKeyTypeName(absl::GetFlag(FLAGS_type));
  if (!type)
    return absl::InvalidArgumentError(absl::StrCat("bench: ", BadType()));
  o.key_type = *type;
  absl::StatusOr<std::vector<cli::SizeClass>> mix =
      cli::ParseSizeMix(absl::GetFlag(FLAGS_sizes));
  if (!mix.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --sizes: ", mix.status().message()));
  }
  o.mix = *mix;
  if (absl::GetFlag(FLAGS_requests) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --requests: expected a count, got ",
                     absl::GetFlag(FLAGS_requests)));
  }
  if (absl::GetFlag(FLAGS_warmup) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --warmup: negative (",
                     absl::FormatDuration(absl::GetFlag(FLAGS_warmup)), ")"));
  }
  if (absl::GetFlag(FLAGS_verify_every) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --verify_every: expected at least 1, got ",
                     absl::GetFlag(FLAGS_verify_every)));
  }
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.duration = absl::GetFlag(FLAGS_duration);
  o.max_requests = static_cast<uint64_t>(absl::GetFlag(FLAGS_requests));
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.variants = absl::GetFlag(FLAGS_variants);
  if (o.variants < 1 || o.variants > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --variants must be 1 to 64, got ", o.variants));
  }
  o.shm_socket = absl::GetFlag(FLAGS_shm_socket);
  o.compact_keys = absl::GetFlag(FLAGS_compact);
  o.rate = absl::GetFlag(FLAGS_rate);
  o.server_metrics = absl::GetFlag(FLAGS_server_metrics);
  if (!(o.rate >= 0) || !std::isfinite(o.rate) || o.rate > 1e7) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench: --rate: calls a second, 0 (closed loop) to 1e7, got ",
        absl::GetFlag(FLAGS_rate)));
  }
  if (absl::GetFlag(FLAGS_verify)) {
    o.verify_every = static_cast<uint64_t>(absl::GetFlag(FLAGS_verify_every));
  }
  if (o.concurrency < 1 || o.concurrency > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench: --concurrency must be 1 to 4096, got ", o.concurrency));
  }
  if (o.duration > absl::Hours(24) || o.duration < absl::ZeroDuration() ||
      (o.duration == absl::ZeroDuration() && o.max_requests == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench: --duration ", absl::FormatDuration(o.duration),
        ": a run is bounded: --duration up to 24h, or 0 with --requests N"));
  }
  return o;
}

int RunBench() {
  absl::StatusOr<cli::BenchOptions> options = BenchOptionsFromFlags();
  if (!options.ok()) return Usage(std::string(options.status().message()));
  const cli::BenchOptions& o = *options;
  auto client = Connect();
  if (!client.ok()) return LocalError(client.status());
  if (absl::Status h = (*client)->CheckHealth(); !h.ok()) {
    return ServerError(h);
  }
  Progress progress(absl::GetFlag(FLAGS_json));
  const std::string bound =
      o.duration > absl::ZeroDuration()
          ? absl::StrFormat("/%.0f s", absl::ToDoubleSeconds(o.duration))
          : absl::StrCat(" s, ", o.max_requests, " requests");
  absl::StatusOr<cli::BenchReport> report = cli::RunBench(
      **client, o, [&](double seconds, const cli::BenchReport& r) {
        progress.Step(absl::StrFormat(
            "bench %.1f%s: %u answered (%.0f req/s), %u errors", seconds, bound,
            r.all.ok, r.all.ok / std::max(seconds, 1e-9), r.all.errors));
      });
  progress.Clear();
  if (!report.ok()) return ServerError(report.status());
  std::fputs(cli::FormatReport(o, *report, absl::GetFlag(FLAGS_json)).c_str(),
             stdout);
  const cli::BenchVerdict verdict = cli::JudgeBench(*report);
  if (verdict.exit_code != 0) {
    std::fprintf(stderr, "sortctl: bench: exit %d: %s\n", verdict.exit_code,
                 verdict.reason.c_str());
  }
  return verdict.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Keep blocks of up to 32 MiB (glibc's largest setting) in the heap and
  // freed memory there, so that gRPC's buffers of large calls are reused
  // without page faults, as sortd does (server/memory.h).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  cli::SetUsageMessages();
  // $SORTD_TARGET stands in for the built-in default; a --target on the
  // command line, parsed after, still wins.
  if (const char* env = std::getenv(cli::kTargetEnv);
      env != nullptr && *env != '\0') {
    absl::SetFlag(&FLAGS_target, std::string(env));
  }
  if (int help = cli::CommandHelp(argc, argv); help >= 0) return help;
  std::vector<char*> args = cli::ParseFlags(argc, argv);
  if (args.size() < 2) {
    return Usage("expected a command: sort, transpose, health or bench");
  }
  const std::string command = args[1];
  if (command != "sort" && command != "transpose" && command != "health" &&
      command != "bench") {
    return Usage(absl::StrCat("unknown command '", command,
                              "'; expected sort, transpose, health or bench"));
  }
  if (args.size() > 2) {
    return Usage(absl::StrCat(command, ": unexpected argument '", args[2],
                              "' (flags start with --)"));
  }
  if (std::string bad = CheckConnectionFlags(); !bad.empty()) {
    return Usage(bad);
  }
  if (command == "sort") return RunSort();
  if (command == "transpose") return RunTranspose();
  if (command == "health") return RunHealth();
  return RunBench();
}
