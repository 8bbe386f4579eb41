// sortctl bench's counting (client/bench_tally.cc): each call recorded in
// its worker's report and by size, the workers' reports merged, the
// latency percentiles, and the verdict a run exits with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "client/bench.h"
#include "client/bench_internal.h"

namespace sortd::cli {
namespace {

using ::testing::HasSubstr;

TEST(RecordCall, CountsAnswersErrorsAndHowTheyWereServed) {
  BenchReport local;
  bench_internal::CallResult ok;
  ok.bytes = 100;
  ok.served_by.set_path(v1::EXECUTION_PATH_GPU);
  ok.served_by.set_route("batched");
  ok.served_by.set_batch_requests(4);
  bench_internal::RecordCall(ok, 1024, /*checked=*/true, 0.002, local);
  bench_internal::CallResult wrong = ok;
  wrong.verdict = absl::DataLossError("keys differ at position 7");
  bench_internal::RecordCall(wrong, 1024, /*checked=*/true, 0.004, local);
  bench_internal::CallResult failed;
  failed.status = absl::UnavailableError("down");
  bench_internal::RecordCall(failed, 64, /*checked=*/false, 0.001, local);

  EXPECT_EQ(local.all.ok, 2u);
  EXPECT_EQ(local.all.errors, 1u);
  EXPECT_EQ(local.all.keys, 2048u);
  EXPECT_EQ(local.all.bytes, 200u);
  EXPECT_EQ(local.by_size[1024].ok, 2u);
  EXPECT_EQ(local.by_size[64].errors, 1u);
  EXPECT_EQ(local.errors_by_code["UNAVAILABLE"], 1u);
  EXPECT_EQ(local.paths["gpu"], 2u);
  EXPECT_EQ(local.routes["batched"], 2u);
  EXPECT_EQ(local.batch_requests_max, 4);
  EXPECT_EQ(local.batch_requests_sum, 8u);
  EXPECT_EQ(local.verified, 2u);
  EXPECT_EQ(local.mismatches, 1u);
  EXPECT_THAT(local.first_mismatch, HasSubstr("position 7"));
  EXPECT_EQ(local.all.latencies.size(), 2u);
}

TEST(MergeReport, AddsAWorkersCountsAndClearsThem) {
  BenchReport run, worker;
  for (int i = 0; i < 2; ++i) {
    bench_internal::CallResult ok;
    ok.served_by.set_path(v1::EXECUTION_PATH_CPU);
    bench_internal::RecordCall(ok, 10, false, 0.001 * (i + 1), worker);
    bench_internal::MergeReport(worker, run);
    EXPECT_EQ(worker.all.ok, 0u);
    EXPECT_TRUE(worker.by_size.empty());
  }
  EXPECT_EQ(run.all.ok, 2u);
  EXPECT_EQ(run.by_size[10].ok, 2u);
  EXPECT_EQ(run.paths["cpu"], 2u);
  EXPECT_EQ(run.all.latencies.size(), 2u);
}

TEST(BenchStats, PercentilesOfSortedLatencies) {
  BenchStats s;
  for (int i = 1; i <= 100; ++i) s.latencies.push_back(i);
  EXPECT_NEAR(s.Percentile(50), 50, 1);
  EXPECT_NEAR(s.Percentile(99), 99, 1);
  EXPECT_EQ(s.Percentile(100), 100);
  EXPECT_EQ(s.Percentile(0), 1);
  EXPECT_EQ(BenchStats().Percentile(50), 0);
}

BenchReport Ended(uint64_t ok, uint64_t errors) {
  BenchReport r;
  r.all.ok = ok;
  r.all.errors = errors;
  r.started = r.ended = ok + errors;
  if (errors > 0) r.errors_by_code["UNAVAILABLE"] = errors;
  return r;
}

TEST(JudgeBench, ExitsOneWhenMoreThanHalfOfTheCallsFailed) {
  EXPECT_EQ(JudgeBench(Ended(10, 0)).exit_code, 0);
  EXPECT_EQ(JudgeBench(Ended(10, 0)).reason, "");
  EXPECT_EQ(JudgeBench(Ended(5, 4)).exit_code, 0);
  EXPECT_EQ(JudgeBench(Ended(4, 4)).exit_code, 0);  // half is not most

  const BenchVerdict most = JudgeBench(Ended(4, 5));
  EXPECT_EQ(most.exit_code, 1);
  EXPECT_THAT(most.reason, HasSubstr("5 of 9 calls failed"));
  EXPECT_THAT(most.reason, HasSubstr("UNAVAILABLE 5"));

  const BenchVerdict none = JudgeBench(Ended(0, 3));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.reason, HasSubstr("no request was answered"));
  EXPECT_THAT(none.reason, HasSubstr("all 3 calls failed"));
  EXPECT_EQ(JudgeBench(Ended(0, 0)).exit_code, 1);
}

TEST(JudgeBench, AWrongAnswerIsThreeBeforeFailures) {
  BenchReport r = Ended(2, 10);
  r.verified = 2;
  r.mismatches = 1;
  r.first_mismatch = "1k keys: keys differ at position 3";
  const BenchVerdict v = JudgeBench(r);
  EXPECT_EQ(v.exit_code, 3);
  EXPECT_THAT(v.reason, HasSubstr("1 of 2 sampled answers were wrong"));
  EXPECT_THAT(v.reason, HasSubstr("position 3"));
}

}  // namespace
}  // namespace sortd::cli
