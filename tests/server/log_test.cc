// The log's two formats, its levels and the flags' values: each line is
// checked as text and, for --log_format=json, parsed as JSON.
#include "server/log.h"

#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/time/time.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

const absl::Time kWhen = absl::FromUnixMillis(1795000000123);

google::protobuf::Struct Parse(const std::string& line) {
  google::protobuf::Struct object;
  EXPECT_TRUE(line.ends_with("}\n")) << line;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &object).ok())
      << line;
  return object;
}

TEST(Log, TextNamesTheLevelOnlyWhenItIsNotInfo) {
  EXPECT_EQ(
      FormatLogLine(LogLevel::kInfo, LogFormat::kText, kWhen, "engines: cpu\n"),
      "2026-11-18T11:06:40.123Z sortd: engines: cpu\n");
  EXPECT_EQ(FormatLogLine(LogLevel::kWarning, LogFormat::kText, kWhen,
                          "device lost\n"),
            "2026-11-18T11:06:40.123Z sortd: WARNING: device lost\n");
  EXPECT_THAT(FormatLogLine(LogLevel::kError, LogFormat::kText, kWhen, "x"),
              HasSubstr("sortd: ERROR: x\n"));
}

// A message quoting a client's text cannot start a line of its own.
TEST(Log, TextEscapesControlCharactersInsideTheMessage) {
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, LogFormat::kText, kWhen,
                          "bad name 'a\n2026-01-01T00:00:00.000Z sortd: "
                          "forged\r\x1b[1m'\n"),
            "2026-11-18T11:06:40.123Z sortd: bad name 'a\\x0a2026-01-01T00:00:"
            "00.000Z sortd: forged\\x0d\\x1b[1m'\n");
}

TEST(Log, JsonCarriesTimeLevelMessageAndTheRequestId) {
  const google::protobuf::Struct line = Parse(
      FormatLogLine(LogLevel::kInfo, LogFormat::kJson, kWhen,
                    "end Sort OK request=17 path=cpu \"quoted\" \\ tab\t\n"));
  const auto& f = line.fields();
  EXPECT_EQ(f.at("time").string_value(), "2026-11-18T11:06:40.123Z");
  EXPECT_EQ(f.at("level").string_value(), "info");
  EXPECT_EQ(f.at("request").number_value(), 17);
  EXPECT_EQ(f.at("msg").string_value(),
            "end Sort OK request=17 path=cpu \"quoted\" \\ tab\t");

  const google::protobuf::Struct plain = Parse(FormatLogLine(
      LogLevel::kWarning, LogFormat::kJson, kWhen, "two\nlines\n"));
  EXPECT_EQ(plain.fields().at("level").string_value(), "warning");
  EXPECT_EQ(plain.fields().at("msg").string_value(), "two\nlines");
  EXPECT_FALSE(plain.fields().contains("request"));
}

TEST(Log, FlagValuesAreParsedOrRefusedByName) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_THAT(ParseLogLevel("loud").status().message(),
              HasSubstr("--log_level"));
  EXPECT_THAT(ParseLogFormat("xml").status().message(),
              HasSubstr("--log_format"));
}

}  // namespace
}  // namespace sortd
