// One real sortd for every test of a suite: started before the suite's
// first test with the suite's flags, stopped (and required to exit 0)
// after its last.
//
//   class CompactTest : public testing::SharedServerTest<CompactTest> {
//    public:
//     static std::vector<std::string> ServerArgs() {
//       return {"--device=cpu", "--metrics_listen=127.0.0.1:0"};
//     }
//   };
//   TEST_F(CompactTest, X) { auto c = Client::Create(server().address()); }
#ifndef SORTD_TESTS_SERVER_FIXTURE_H_
#define SORTD_TESTS_SERVER_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/server_process.h"

namespace sortd::testing {

// `Suite` names the suite and provides static ServerArgs().
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(Suite::ServerArgs());
    ASSERT_TRUE(server_->Start()) << server_->Output();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Terminate(), 0) << server_->Output();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the suite's sortd did not start";
  }
  static ServerProcess& server() { return *server_; }

  static ServerProcess* server_;
};

template <typename Suite>
ServerProcess* SharedServerTest<Suite>::server_ = nullptr;

}  // namespace sortd::testing

#endif  // SORTD_TESTS_SERVER_FIXTURE_H_
