// End to end, the real sortd's log: --log_format=json writes every stderr
// line as one JSON object, request lines with their id; --log_level drops
// the less severe lines; a bad value stops startup naming the flag.
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e_util.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;

TEST(E2ELog, JsonLinesCarryLevelsAndRequestIds) {
  ServerProcess server({"--device=cpu", "--log_format=json", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  ExpectSorted<uint32_t>(*client, 1000, false);
  ASSERT_EQ(server.WaitForLines("end Sort", 1, std::chrono::seconds(30)).size(),
            1u)
      << server.Output();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();

  std::set<double> ids;
  int objects = 0;
  for (const std::string& line : server.Lines()) {
    if (line.starts_with("sortd: serving on ")) continue;  // stdout, text
    SCOPED_TRACE(line);
    google::protobuf::Struct object;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(line, &object).ok());
    const auto& f = object.fields();
    EXPECT_TRUE(f.contains("time") && f.contains("level") && f.contains("msg"));
    const std::string& msg = f.at("msg").string_value();
    if (msg.starts_with("start Sort") || msg.starts_with("end Sort")) {
      ASSERT_TRUE(f.contains("request"));
      ids.insert(f.at("request").number_value());
    }
    ++objects;
  }
  EXPECT_GT(objects, 5);
  EXPECT_EQ(ids.size(), 1u) << "a request's start and end share its id";
}

TEST(E2ELog, LevelDropsLessSevereLinesAndBadValuesStopStartup) {
  ServerProcess quiet(
      {"--device=cpu", "--log_level=warning", "--inject_faults=host_oom=1"});
  ASSERT_TRUE(quiet.Start()) << quiet.Output();
  EXPECT_EQ(quiet.Terminate(), 0) << quiet.Output();
  // The fault-injection warning is written; the info lines are not.
  EXPECT_THAT(quiet.Output(), HasSubstr("sortd: WARNING: FAULT INJECTION"));
  EXPECT_THAT(quiet.Output(), ::testing::Not(HasSubstr("starting")));
  EXPECT_THAT(quiet.Output(), ::testing::Not(HasSubstr("engines:")));

  for (const char* flag : {"--log_level=loud", "--log_format=xml"}) {
    SCOPED_TRACE(flag);
    ServerProcess server({"--device=cpu", flag});
    EXPECT_FALSE(server.Start(std::chrono::seconds(30)));
    const std::string name =
        std::string(flag).substr(0, std::string(flag).find('='));
    EXPECT_THAT(server.Output(), HasSubstr("ERROR: INVALID_ARGUMENT: " + name));
  }
}

}  // namespace
}  // namespace sortd
