#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/shared_memory.h"
#include "client/sortctl_lib.h"

namespace sortd::cli {
namespace {

const char* OpName(BenchOp op) {
  switch (op) {
    case BenchOp::kSort:
      return "sort";
    case BenchOp::kTranspose:
      return "transpose";
    case BenchOp::kEcho:
      return "echo";
  }
  return "?";
}

// The requests of one size: a few distinct random inputs.
struct Inputs {
  uint64_t size = 0;
  std::vector<v1::SortRequest> sorts;
  std::vector<v1::TransposeRequest> transposes;
};

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
  switch (r->keys_case()) {
    case v1::SortResponse::kI32Keys:
      return r->set_i32_keys(std::move(bytes));
    case v1::SortResponse::kF32Keys:
      return r->set_f32_keys(std::move(bytes));
    case v1::SortResponse::kU64Keys:
      return r->set_u64_keys(std::move(bytes));
    case v1::SortResponse::kI64Keys:
      return r->set_i64_keys(std::move(bytes));
    case v1::SortResponse::kF64Keys:
      return r->set_f64_keys(std::move(bytes));
    default:
      return r->set_u32_keys(std::move(bytes));
  }
}

// Echo answers with the input unchanged.
absl::Status VerifyEcho(const v1::SortRequest& request,
                        const v1::SortResponse& response) {
  const std::string* keys = nullptr;
  KeysOf(request, &keys);
  if (KeysOf(response) != *keys) {
    return absl::DataLossError("the echo differs from the request");
  }
  return absl::OkStatus();
}

struct Shared {
  std::mutex mu;
  BenchReport report;
  absl::Time last_end = absl::InfinitePast();
};

}  // namespace

absl::StatusOr<std::vector<SizeClass>> ParseSizeMix(std::string_view text) {
  std::vector<SizeClass> mix;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                      absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    SizeClass c;
    absl::string_view size = item;
    if (size_t colon = item.find(':'); colon != absl::string_view::npos) {
      size = item.substr(0, colon);
      if (!absl::SimpleAtod(item.substr(colon + 1), &c.weight) ||
          !(c.weight > 0) || !std::isfinite(c.weight)) {
        return absl::InvalidArgumentError(
            absl::StrCat("size mix: bad weight in '", item, "'"));
      }
    }
    uint64_t scale = 1;
    if (!size.empty()) {
      switch (absl::ascii_tolower(size.back())) {
        case 'k':
          scale = uint64_t{1} << 10;
          break;
        case 'm':
          scale = uint64_t{1} << 20;
          break;
        case 'g':
          scale = uint64_t{1} << 30;
          break;
      }
      if (scale > 1) size.remove_suffix(1);
    }
    uint64_t n = 0;
    if (!absl::SimpleAtoi(size, &n) || n > (uint64_t{1} << 32) / scale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size mix: bad size in '", item,
          "'; expected a count such as 4096, 64k or 16m, optionally with "
          ":weight"));
    }
    c.size = n * scale;
    mix.push_back(c);
  }
  if (mix.empty()) {
    return absl::InvalidArgumentError("size mix: no sizes given");
  }
  return mix;
}

std::string FormatSize(uint64_t n) {
  if (n >= (uint64_t{1} << 30) && n % (uint64_t{1} << 30) == 0) {
    return absl::StrCat(n >> 30, "g");
  }
  if (n >= (uint64_t{1} << 20) && n % (uint64_t{1} << 20) == 0) {
    return absl::StrCat(n >> 20, "m");
  }
  if (n >= 1024 && n % 1024 == 0) return absl::StrCat(n >> 10, "k");
  return absl::StrCat(n);
}

bool ShouldBackOff(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kResourceExhausted;
}

Backoff::Backoff(const BackoffPolicy& policy, uint64_t seed)
    : policy_(policy), nominal_(policy.initial), rng_(seed) {}

absl::Duration Backoff::Next() {
  const absl::Duration d = std::min(nominal_, policy_.max);
  if (d <= absl::ZeroDuration()) return absl::ZeroDuration();
  nominal_ = std::min(d * std::max(policy_.multiplier, 1.0), policy_.max);
  return d * std::uniform_real_distribution<double>(0.5, 1.0)(rng_);
}

void Backoff::Reset() { nominal_ = policy_.initial; }

BenchVerdict JudgeBench(const BenchReport& r) {
  std::string codes;
  for (const auto& [code, n] : r.errors_by_code) {
    absl::StrAppend(&codes, codes.empty() ? "" : ", ", code, " ", n);
  }
  if (r.mismatches > 0) {
    return {3, absl::StrCat(r.mismatches, " of ", r.verified,
                            " sampled answers were wrong (first: ",
                            r.first_mismatch, ")")};
  }
  if (r.all.ok == 0) {
    return {1, r.all.errors == 0
                   ? std::string("no request was answered")
                   : absl::StrCat("no request was answered: all ", r.all.errors,
                                  " calls failed (", codes, ")")};
  }
  if (2 * r.all.errors > r.ended) {
    return {1, absl::StrCat(r.all.errors, " of ", r.ended,
                            " calls failed, more than half (", codes, ")")};
  }
  return {};
}

double BenchStats::Percentile(double p) const {
  if (latencies.empty()) return 0;
  const double rank = p / 100.0 * static_cast<double>(latencies.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, latencies.size() - 1);
  const double f = rank - static_cast<double>(lo);
  return latencies[lo] * (1 - f) + latencies[hi] * f;
}

absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& o,
                                     const BenchProgress& progress) {
  if (o.concurrency < 1) {
    return absl::InvalidArgumentError("--concurrency must be at least 1");
  }
  if (o.duration <= absl::ZeroDuration() && o.max_requests == 0) {
    return absl::InvalidArgumentError(
        "a bench is bounded: give --duration and/or --requests");
  }
  if (o.mix.empty()) return absl::InvalidArgumentError("no sizes");
  std::vector<Inputs> inputs;
  double total_weight = 0;
  for (size_t c = 0; c < o.mix.size(); ++c) {
    inputs.push_back(MakeInputs(o, o.mix[c].size, c));
    total_weight += o.mix[c].weight;
  }

  // Shared memory: per worker, a region with every input and room for its
  // answer, and the requests that name them.
  struct WorkerRegion {
    std::unique_ptr<SharedRegion> region;
    std::vector<std::vector<v1::SortRequest>> sorts;  // [class][variant]
    std::vector<std::vector<uint64_t>> out_offsets;
  };
  std::vector<WorkerRegion> regions(o.shm_dir.empty() ? 0 : o.concurrency);
  if (!o.shm_dir.empty() && o.op == BenchOp::kTranspose) {
    return absl::InvalidArgumentError("--shm_dir serves sorts and echoes");
  }
  for (WorkerRegion& w : regions) {
    size_t bytes = 0;
    for (const Inputs& in : inputs) {
      for (const v1::SortRequest& r : in.sorts) {
        bytes += 2 * RequestKeys(r).size();
      }
    }
    absl::StatusOr<std::unique_ptr<SharedRegion>> region =
        SharedRegion::Create(client, o.shm_dir, std::max<size_t>(bytes, 1));
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
        a->set_region(w.region->handle());
        a->set_count(keys.size() / KeySize(o.key_type));
        a->set_keys_offset(at);
        a->set_keys_out_offset(at + keys.size());
        w.sorts.back().push_back(std::move(named));
        w.out_offsets.back().push_back(at + keys.size());
        at += 2 * keys.size();
      }
    }
  }

  Shared shared;
  std::atomic<uint64_t> issued{0};
  std::atomic<bool> measuring{o.warmup <= absl::ZeroDuration()};
  std::atomic<int> active{o.concurrency};
  // Set (under stop_mu, with a notify) when the run ends: by time, or once
  // the request count is issued. Back-off waits end with it.
  std::atomic<bool> stop{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  auto stop_all = [&] {
    {
      std::lock_guard<std::mutex> lock(stop_mu);
      stop = true;
    }
    stop_cv.notify_all();
  };
  auto wait_unless_stopped = [&](absl::Duration d) {
    std::unique_lock<std::mutex> lock(stop_mu);
    stop_cv.wait_for(lock, absl::ToChronoNanoseconds(d),
                     [&] { return stop.load(); });
  };

  auto worker = [&](int id) {
    std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(id));
    std::uniform_real_distribution<double> pick(0, total_weight);
    Backoff backoff(o.backoff,
                    o.seed * 2654435761u + static_cast<uint64_t>(id));
    BenchReport local;
    uint64_t calls = 0;
    absl::Time last_end = absl::InfinitePast();
    auto flush = [&] {
      std::lock_guard<std::mutex> lock(shared.mu);
      BenchReport& r = shared.report;
      auto add = [](BenchStats& into, BenchStats& from) {
        into.ok += from.ok;
        into.errors += from.errors;
        into.keys += from.keys;
        into.bytes += from.bytes;
        into.latencies.insert(into.latencies.end(), from.latencies.begin(),
                              from.latencies.end());
        from = BenchStats();
      };
      add(r.all, local.all);
      for (auto& [size, s] : local.by_size) add(r.by_size[size], s);
      for (auto& [k, v] : local.errors_by_code) r.errors_by_code[k] += v;
      for (auto& [k, v] : local.paths) r.paths[k] += v;
      for (auto& [k, v] : local.routes) r.routes[k] += v;
      r.batch_requests_sum += local.batch_requests_sum;
      r.batch_requests_max =
          std::max(r.batch_requests_max, local.batch_requests_max);
      r.device_runs_max = std::max(r.device_runs_max, local.device_runs_max);
      r.verified += local.verified;
      r.mismatches += local.mismatches;
      if (r.first_mismatch.empty()) r.first_mismatch = local.first_mismatch;
      r.started += local.started;
      r.ended += local.ended;
      shared.last_end = std::max(shared.last_end, last_end);
      local = BenchReport();
    };
    v1::SortResponse answer;
    while (!stop.load()) {
      const bool measured = measuring.load();
      if (measured && o.max_requests > 0 &&
          issued.fetch_add(1) >= o.max_requests) {
        stop_all();  // wakes workers backing off: nothing is left to send
        break;
      }
      double w = pick(rng);
      size_t c = 0;
      while (c + 1 < o.mix.size() && w >= o.mix[c].weight) {
        w -= o.mix[c].weight;
        ++c;
      }
      const Inputs& in = inputs[c];
      const size_t variant =
          rng() % std::max(in.sorts.size(), in.transposes.size());
      const bool check = o.verify_every > 0 && ++calls % o.verify_every == 0;
      if (measured) ++local.started;
      const absl::Time start = absl::Now();
      absl::Status status;
      v1::ServedBy served_by;
      uint64_t bytes = 0;
      absl::Status verdict;
      if (o.op == BenchOp::kTranspose) {
        const v1::TransposeRequest& req = in.transposes[variant];
        absl::StatusOr<v1::TransposeResponse> resp = client.Transpose(req);
        status = resp.status();
        if (resp.ok()) {
          served_by = resp->served_by();
          bytes = req.ByteSizeLong() + resp->ByteSizeLong();
          if (check)
            verdict = VerifyTranspose(req.matrices(), resp->matrices());
        }
      } else {
        const v1::SortRequest& req = in.sorts[variant];
        const v1::SortRequest& sent =
            regions.empty() ? req : regions[id].sorts[c][variant];
        // One answer message per worker, its buffers reused call after
        // call, as a client that sorts arrays of one size would.
        status = o.op == BenchOp::kEcho ? client.Echo(sent, &answer)
                                        : client.Sort(sent, &answer);
        if (status.ok()) {
          served_by = answer.served_by();
          // On the wire: compact keys arrive decoded into `answer`.
          bytes = sent.ByteSizeLong() + answer.ByteSizeLong() -
                  static_cast<uint64_t>(
                      std::max<int64_t>(0, served_by.key_bytes_saved()));
          if (!regions.empty() && check) {
            // The answer is in the region: read it back for the check.
            const std::byte* out = regions[id].region->data() +
                                   regions[id].out_offsets[c][variant];
            SetAnswerKeys(std::string(reinterpret_cast<const char*>(out),
                                      RequestKeys(req).size()),
                          &answer);
          }
          if (check) {
            verdict = o.op == BenchOp::kEcho ? VerifyEcho(req, answer)
                                             : VerifySort(req, answer);
          }
        }
      }
      const absl::Time finished = absl::Now();
      const double seconds = absl::ToDoubleSeconds(finished - start);
      // Down or overloaded: wait before the next call (the run's end cuts
      // the wait short). A success resets the schedule.
      const bool back_off = ShouldBackOff(status.code());
      if (status.ok()) backoff.Reset();
      if (!measured) {
        if (back_off) wait_unless_stopped(backoff.Next());
        continue;
      }
      ++local.ended;
      last_end = std::max(last_end, finished);
      BenchStats& by = local.by_size[in.size];
      if (status.ok()) {
        for (BenchStats* s : {&local.all, &by}) {
          ++s->ok;
          s->keys += in.size;
          s->bytes += bytes;
          s->latencies.push_back(seconds);
        }
        ++local.paths[PathText(served_by.path())];
        ++local.routes[served_by.route().empty() ? "unknown"
                                                 : served_by.route()];
        local.batch_requests_sum +=
            static_cast<uint64_t>(std::max(1, served_by.batch_requests()));
        local.batch_requests_max =
            std::max(local.batch_requests_max, served_by.batch_requests());
        local.device_runs_max =
            std::max<uint64_t>(local.device_runs_max,
                               static_cast<uint64_t>(served_by.device_runs()));
        if (check) {
          ++local.verified;
          if (!verdict.ok()) {
            ++local.mismatches;
            if (local.first_mismatch.empty()) {
              local.first_mismatch = absl::StrCat(FormatSize(in.size),
                                                  " keys: ", verdict.message());
            }
          }
        }
      } else {
        ++local.all.errors;
        ++by.errors;
        ++local.errors_by_code[absl::StatusCodeToString(status.code())];
      }
      if (back_off) {
        flush();  // the progress line shows the errors while this waits
        wait_unless_stopped(backoff.Next());
      } else if (local.ended % 64 == 0) {
        flush();
      }
    }
    flush();
    --active;
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < o.concurrency; ++i) threads.emplace_back(worker, i);
  if (o.warmup > absl::ZeroDuration()) {
    absl::SleepFor(o.warmup);  // a bench phase, not a synchronisation
  }
  measuring = true;
  const absl::Time start = absl::Now();
  const absl::Time end = o.duration > absl::ZeroDuration()
                             ? start + o.duration
                             : absl::InfiniteFuture();
  // The workers stop at the deadline, or on their own once the count is
  // issued; meanwhile the progress line is redrawn every quarter second.
  // The measured time ends with the last answer, not with this loop.
  for (;;) {
    const absl::Time now = absl::Now();
    if (now >= end || active.load() == 0) break;
    absl::SleepFor(std::min(absl::Milliseconds(250), end - now));
    if (progress) {
      std::lock_guard<std::mutex> lock(shared.mu);
      BenchReport partial;
      partial.all.ok = shared.report.all.ok;
      partial.all.errors = shared.report.all.errors;
      partial.all.keys = shared.report.all.keys;
      partial.all.bytes = shared.report.all.bytes;
      progress(absl::ToDoubleSeconds(absl::Now() - start), partial);
    }
  }
  stop_all();
  for (std::thread& t : threads) t.join();
  BenchReport report = std::move(shared.report);
  report.seconds = shared.last_end > start
                       ? absl::ToDoubleSeconds(shared.last_end - start)
                       : 0;
  std::sort(report.all.latencies.begin(), report.all.latencies.end());
  for (auto& [size, s] : report.by_size) {
    std::sort(s.latencies.begin(), s.latencies.end());
  }
  return report;
}

std::string FormatReport(const BenchOptions& o, const BenchReport& r,
                         bool json) {
  const double secs = std::max(r.seconds, 1e-9);
  const BenchStats& a = r.all;
  std::string mix;
  for (const SizeClass& c : o.mix) {
    absl::StrAppend(&mix, mix.empty() ? "" : ",", FormatSize(c.size));
    if (o.mix.size() > 1) absl::StrAppend(&mix, ":", c.weight);
  }
  const double mean_batch = a.ok > 0
                                ? static_cast<double>(r.batch_requests_sum) /
                                      static_cast<double>(a.ok)
                                : 0;
  const char* unit = o.op == BenchOp::kTranspose ? "matrices" : "keys";
  if (json) {
    std::string out = absl::StrFormat(
        "{\"command\":\"bench\",\"op\":\"%s\",\"type\":\"%s\",\"sizes\":%s,"
        "\"concurrency\":%d,\"seconds\":%.6f,\"requests\":%u,\"errors\":%u,"
        "\"started\":%u,\"ended\":%u,\"requests_per_s\":%.3f,"
        "\"%s_per_s\":%.3f,\"bytes_per_s\":%.3f,\"latency_ms\":{\"p50\":%.6f,"
        "\"p90\":%.6f,\"p99\":%.6f,\"max\":%.6f},\"mean_batch_requests\":%.3f,"
        "\"max_batch_requests\":%d,\"max_device_runs\":%u,\"verified\":%u,"
        "\"mismatches\":%u",
        OpName(o.op),
        o.op == BenchOp::kTranspose ? "matrix" : KeyTypeName(o.key_type),
        JsonString(mix), o.concurrency, r.seconds, a.ok, a.errors, r.started,
        r.ended, a.ok / secs, unit, a.keys / secs, a.bytes / secs,
        a.Percentile(50) * 1e3, a.Percentile(90) * 1e3, a.Percentile(99) * 1e3,
        a.latencies.empty() ? 0.0 : a.latencies.back() * 1e3, mean_batch,
        r.batch_requests_max, r.device_runs_max, r.verified, r.mismatches);
    auto map = [&](const char* name, const std::map<std::string, uint64_t>& m) {
      absl::StrAppend(&out, ",\"", name, "\":{");
      bool first = true;
      for (const auto& [k, v] : m) {
        absl::StrAppend(&out, first ? "" : ",", JsonString(k), ":", v);
        first = false;
      }
      absl::StrAppend(&out, "}");
    };
    map("errors_by_code", r.errors_by_code);
    map("paths", r.paths);
    map("routes", r.routes);
    absl::StrAppend(&out, ",\"by_size\":[");
    bool first = true;
    for (const auto& [size, s] : r.by_size) {
      absl::StrAppendFormat(
          &out,
          "%s{\"size\":%u,\"requests\":%u,\"errors\":%u,\"requests_per_s\":%."
          "3f,\"%s_per_s\":%.3f,\"p50_ms\":%.6f,\"p99_ms\":%.6f,\"max_ms\":%."
          "6f}",
          first ? "" : ",", size, s.ok, s.errors, s.ok / secs, unit,
          s.keys / secs, s.Percentile(50) * 1e3, s.Percentile(99) * 1e3,
          s.latencies.empty() ? 0.0 : s.latencies.back() * 1e3);
      first = false;
    }
    absl::StrAppend(&out, "]}\n");
    return out;
  }

  auto rate = [](double v) {
    if (v >= 1e9) return absl::StrFormat("%.2f G", v / 1e9);
    if (v >= 1e6) return absl::StrFormat("%.2f M", v / 1e6);
    if (v >= 1e3) return absl::StrFormat("%.2f k", v / 1e3);
    return absl::StrFormat("%.2f ", v);
  };
  auto share = [&](const std::map<std::string, uint64_t>& m) {
    std::string s;
    for (const auto& [k, v] : m) {
      absl::StrAppendFormat(
          &s, "%s%s %.0f%%", s.empty() ? "" : ", ", k,
          100.0 * static_cast<double>(v) /
              static_cast<double>(std::max<uint64_t>(a.ok, 1)));
    }
    return s.empty() ? std::string("-") : s;
  };
  std::string out = absl::StrFormat(
      "sortctl bench: %s %s, sizes %s, concurrency %d, %.1f s\n", OpName(o.op),
      o.op == BenchOp::kTranspose ? "32x32 bit matrices"
                                  : KeyTypeName(o.key_type),
      mix, o.concurrency, r.seconds);
  absl::StrAppendFormat(&out, "  requests  %u answered, %u errors (%sreq/s)\n",
                        a.ok, a.errors, rate(a.ok / secs));
  absl::StrAppendFormat(&out, "  %-9s %s%s/s, %sB/s on the wire\n", unit,
                        rate(a.keys / secs), unit, rate(a.bytes / secs));
  absl::StrAppendFormat(
      &out, "  latency   p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms\n",
      a.Percentile(50) * 1e3, a.Percentile(90) * 1e3, a.Percentile(99) * 1e3,
      a.latencies.empty() ? 0.0 : a.latencies.back() * 1e3);
  absl::StrAppendFormat(&out, "  served    paths: %s; routes: %s\n",
                        share(r.paths), share(r.routes));
  absl::StrAppendFormat(&out,
                        "  batches   %.1f requests per device run on average "
                        "(largest %d)%s\n",
                        mean_batch, r.batch_requests_max,
                        r.device_runs_max > 1
                            ? absl::StrCat("; up to ", r.device_runs_max,
                                           " runs per request (beyond device "
                                           "memory)")
                                  .c_str()
                            : "");
  if (r.by_size.size() > 1) {
    for (const auto& [size, s] : r.by_size) {
      absl::StrAppendFormat(
          &out, "  %-9s %u answered, %sreq/s, p50 %.3f ms, p99 %.3f ms\n",
          FormatSize(size), s.ok, rate(s.ok / secs), s.Percentile(50) * 1e3,
          s.Percentile(99) * 1e3);
    }
  }
  if (!r.errors_by_code.empty()) {
    std::string e;
    for (const auto& [k, v] : r.errors_by_code) {
      absl::StrAppend(&e, e.empty() ? "" : ", ", k, " ", v);
    }
    absl::StrAppend(&out, "  errors    ", e, "\n");
  }
  if (o.verify_every > 0) {
    if (r.mismatches == 0) {
      absl::StrAppendFormat(
          &out, "  verified  %u sampled answers, all correct\n", r.verified);
    } else {
      absl::StrAppendFormat(&out,
                            "  verified  %u sampled answers, %u WRONG (first: "
                            "%s)\n",
                            r.verified, r.mismatches, r.first_mismatch);
    }
  }
  if (r.started != r.ended) {
    absl::StrAppendFormat(&out, "  LOST      %u calls never ended\n",
                          r.started - r.ended);
  }
  return out;
}

}  // namespace sortd::cli
