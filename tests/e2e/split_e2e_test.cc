// End to end: one shared-memory sort cut across two OpenCL devices (two
// engines on PoCL's CPU device, as --device=gpu opens every GPU), its parts
// sorted at once and merged into the region; and devices lost during their
// parts, after which the answer is still whole and right.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/shared_memory.h"
#include "tests/e2e_util.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;

constexpr size_t kSplitMin = size_t{1} << 16;

class SplitE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sortd_split_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> Args(std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--device=opencl-cpu,opencl-cpu", "--metrics_listen=127.0.0.1:0",
        "--shm_socket=" + socket(),
        absl::StrCat("--split_min_keys=", kSplitMin)};
    args.insert(args.end(), extra.begin(), extra.end());
    return OpenClArgs(args);
  }
  std::string socket() const { return dir_ + "/sortd.sock"; }

  // Sorts `keys` (descending with `desc`) through a region laid out as
  // [keys | keys out], checks the keys out against std::sort and that
  // the input is as it was, and returns who served it.
  template <typename K>
  v1::ServedBy SortInRegion(Client& client, const std::vector<K>& keys,
                            bool desc) {
    const size_t n = keys.size();
    auto region = SharedRegion::Create(socket(), n * 2 * sizeof(K));
    EXPECT_TRUE(region.ok()) << region.status();
    if (!region.ok()) return {};
    std::byte* base = (*region)->data();
    std::memcpy(base, keys.data(), n * sizeof(K));
    v1::SortRequest request;
    if constexpr (std::is_same_v<K, uint32_t>) {
      request.set_u32_keys("");
    } else {
      request.set_f64_keys("");
    }
    if (desc) request.set_order(v1::ORDER_DESCENDING);
    v1::SharedArrays* shared = request.mutable_shared();
    shared->set_region((*region)->token());
    shared->set_count(n);
    shared->set_keys_offset(0);
    shared->set_keys_out_offset(n * sizeof(K));
    absl::StatusOr<v1::SortResponse> r = client.Sort(request);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    const std::vector<uint32_t> want = testing::RefPermutation(keys, desc);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(
          0, std::memcmp(base + (n + i) * sizeof(K), &keys[want[i]], sizeof(K)))
          << "key at " << i;
      if (::testing::Test::HasFailure()) break;
    }
    EXPECT_EQ(0, std::memcmp(base, keys.data(), n * sizeof(K)))
        << "the input keys changed";
    return r->served_by();
  }

  std::string dir_;
};

// With --shm_pinned=false regions stay pageable: the arrays go through
// staging, and the answers are the same.
TEST_F(SplitE2E, PageableRegionsSortAlike) {
  ServerProcess server(Args({"--shm_pinned=false"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const std::vector<uint32_t> keys = testing::Generate<uint32_t>(
      testing::Shape::kRandom, kSplitMin * 2 + 5, 21);
  const v1::ServedBy by = SortInRegion(*client, keys, true);
  EXPECT_EQ(by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  EXPECT_THAT(server.Output(), ::testing::Not(HasSubstr("regions: adopted")));
}

// A sort of split_min_keys or more is answered by both devices (its
// served_by names both, and two device runs), a shorter one by one; both
// right, the metrics show the split's stages. The second split sorts in
// the scratch the first left (--split_scratch_bytes).
TEST_F(SplitE2E, SharedMemorySortIsSplitAcrossTwoDevices) {
  ServerProcess server(
      Args({"--split_scratch_bytes=67108864", "--shm_pinned=true"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const std::vector<uint32_t> keys = testing::Generate<uint32_t>(
      testing::Shape::kRandom, kSplitMin * 4 + 3, 11);
  v1::ServedBy by = SortInRegion(*client, keys, false);
  EXPECT_EQ(by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_EQ(by.device_runs(), 2);
  EXPECT_THAT(by.device(), HasSubstr("+"));

  const std::vector<double> special = testing::Generate<double>(
      testing::Shape::kSpecial, kSplitMin * 2 + 1, 12);
  by = SortInRegion(*client, special, true);
  EXPECT_EQ(by.device_runs(), 2);

  const std::vector<uint32_t> few = testing::Generate<uint32_t>(
      testing::Shape::kFewDistinct, kSplitMin - 1, 13);
  by = SortInRegion(*client, few, false);
  EXPECT_EQ(by.device_runs(), 1);
  EXPECT_THAT(by.device(), ::testing::Not(HasSubstr("+")));

  const std::string body = HttpGet(server.metrics_address(), "/metrics");
  EXPECT_THAT(body, HasSubstr("kernel=\"split_sort\",stage=\"host_merge\""))
      << body;
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  // --shm_pinned asks only devices whose driver page-locks adopted memory
  // (NVIDIA's): PoCL's regions stay pageable, and the split is the same.
  EXPECT_THAT(server.Output(), HasSubstr("shared-memory regions: pageable"));
}

// Both devices lost during their parts: nothing half-sorted reaches the
// region, the CPU path sorts the request again, and the log says why.
TEST_F(SplitE2E, DevicesLostDuringTheirPartsStillAnswerRight) {
  ServerProcess server(Args({"--inject_faults=device_lost=1"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kReversed, kSplitMin * 3, 14);
  const v1::ServedBy by = SortInRegion(*client, keys, false);
  EXPECT_EQ(by.path(), v1::EXECUTION_PATH_CPU);
  EXPECT_EQ(by.route(), "failover");
  EXPECT_TRUE(server.WaitForLine("split across 2 devices failed",
                                 std::chrono::seconds(30)))
      << server.Output();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

}  // namespace
}  // namespace sortd
