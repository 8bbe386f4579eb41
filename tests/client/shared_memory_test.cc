// The client's shared-memory region (client/shared_memory.h) against an
// in-process registration socket: made sealed, mapped and registered; its
// bytes are the server's; destroying it ends the registration; the
// server's refusals and a missing socket come back as statuses.
#include "client/shared_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "server/shm_socket.h"
#include "tests/temp_dir.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

class SharedRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ShmSocket::Start({.path = path_}, &registry_);
    ASSERT_TRUE(s.ok()) << s.status();
    socket_ = *std::move(s);
  }

  testing::TempDirectory dir_;
  const std::string root_ = dir_.path();
  const std::string path_ = root_ + "/shm/sortd.sock";
  RegionRegistry registry_{{.enabled = true, .max_bytes = size_t{1} << 22}};
  std::unique_ptr<ShmSocket> socket_;  // stops before the rest goes
};

TEST_F(SharedRegionTest, TheRegionsBytesAreTheServersAndEndWithIt) {
  auto region = SharedRegion::Create(path_, 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->size(), size_t{1} << 20);
  std::memset((*region)->data(), 0x5a, 4096);
  std::shared_ptr<Region> server = registry_.Find((*region)->token());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(std::to_integer<int>(server->base()[0]), 0x5a);
  EXPECT_EQ(std::to_integer<int>(server->base()[4095]), 0x5a);
  server.reset();
  EXPECT_EQ(registry_.mapped_bytes(), size_t{1} << 20);
  region->reset();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (registry_.regions() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(registry_.regions(), 0u);
}

TEST_F(SharedRegionTest, RefusalsComeBackWithTheServersCode) {
  EXPECT_EQ(SharedRegion::Create(path_, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = SharedRegion::Create(path_, size_t{1} << 23);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  auto missing = SharedRegion::Create(root_ + "/no/such.sock", 1 << 16);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("such.sock"));
}

}  // namespace
}  // namespace sortd
