// sortctl bench's report (client/bench_report.cc): the JSON line carries
// every count as it was, per second rates over the measured time and the
// percentiles in milliseconds; the text for people says the same; a sweep
// has a row per concurrency level.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/bench.h"

namespace sortd::cli {
namespace {

using ::testing::HasSubstr;

// 4 answered sorts of 1k keys in 2 s (latencies 1-4 ms), one UNAVAILABLE.
BenchReport FourAnswered() {
  BenchReport r;
  r.seconds = 2;
  for (int i = 1; i <= 4; ++i) {
    for (BenchStats* s : {&r.all, &r.by_size[1024]}) {
      ++s->ok;
      s->keys += 1024;
      s->bytes += 8192;
      s->latencies.push_back(i * 1e-3);
    }
  }
  r.all.errors = r.by_size[1024].errors = 1;
  r.errors_by_code["UNAVAILABLE"] = 1;
  r.paths["cpu"] = 4;
  r.routes["cpu"] = 4;
  r.batch_requests_sum = 6;
  r.batch_requests_max = 3;
  r.started = r.ended = 5;
  return r;
}

BenchOptions Options() {
  BenchOptions o;
  o.mix = {{1024, 3}, {65536, 1}};
  o.concurrency = 4;
  return o;
}

TEST(BenchReport, TheJsonLineCarriesEveryCount) {
  const std::string json = FormatReport(Options(), FourAnswered(), true);
  EXPECT_EQ(json.back(), '\n');
  EXPECT_EQ(json.find('\n'), json.size() - 1);
  for (const char* field :
       {"\"command\":\"bench\"", "\"op\":\"sort\"", "\"type\":\"u32\"",
        "\"sizes\":\"1k:3,64k:1\"", "\"concurrency\":4", "\"requests\":4",
        "\"errors\":1", "\"started\":5", "\"ended\":5",
        "\"requests_per_s\":2.000", "\"keys_per_s\":2048.000",
        "\"bytes_per_s\":16384.000", "\"max\":4.000000",
        "\"mean_batch_requests\":1.500", "\"max_batch_requests\":3",
        "\"loop\":\"closed\"", "\"errors_by_code\":{\"UNAVAILABLE\":1}",
        "\"paths\":{\"cpu\":4}",
        "\"by_size\":[{\"size\":1024,\"requests\":4,\"errors\":1"}) {
    EXPECT_THAT(json, HasSubstr(field));
  }
  // Without server metrics, no CPU figures and no error about them.
  EXPECT_THAT(json, ::testing::Not(HasSubstr("server_cpu")));
  BenchReport with_cpu = FourAnswered();
  with_cpu.server_cpu_seconds = 0.5;
  EXPECT_THAT(FormatReport(Options(), with_cpu, true),
              HasSubstr("\"server_cpu_seconds\":0.500000,"
                        "\"server_cpu_ms_per_request\":125.000000"));
}

TEST(BenchReport, TheTextSaysTheSameForPeople) {
  const std::string text = FormatReport(Options(), FourAnswered(), false);
  EXPECT_THAT(text, HasSubstr("1k:3,64k:1"));
  EXPECT_THAT(text, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("{\"command\"")));
}

TEST(BenchReport, ASweepHasARowPerLevel) {
  const std::string sweep = FormatSweep(
      Options(), {FourAnswered(), FourAnswered(), FourAnswered()}, {1, 2, 4});
  EXPECT_THAT(sweep, HasSubstr("sortctl bench sweep: sort u32"));
  EXPECT_THAT(sweep, HasSubstr("concurrency"));
  int rows = 0;
  for (char c : sweep) rows += c == '\n';
  EXPECT_EQ(rows, 2 + 3);
}

}  // namespace
}  // namespace sortd::cli
