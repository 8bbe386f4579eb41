// The size classes of the request-duration histogram's `size` label, and
// gauges the scheduler's events set.
#include "server/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "prometheus/text_serializer.h"

namespace sortd {
namespace {

TEST(Metrics, SizeClassesAreUpperBoundsOfUnits) {
  EXPECT_EQ(Metrics::SizeClass(0), "none");
  EXPECT_EQ(Metrics::SizeClass(1), "1k");
  EXPECT_EQ(Metrics::SizeClass(1024), "1k");
  EXPECT_EQ(Metrics::SizeClass(1025), "64k");
  EXPECT_EQ(Metrics::SizeClass(65536), "64k");
  EXPECT_EQ(Metrics::SizeClass(65537), "1m");
  EXPECT_EQ(Metrics::SizeClass(size_t{1} << 20), "1m");
  EXPECT_EQ(Metrics::SizeClass((size_t{1} << 20) + 1), "16m");
  EXPECT_EQ(Metrics::SizeClass(size_t{1} << 24), "16m");
  EXPECT_EQ(Metrics::SizeClass((size_t{1} << 24) + 1), "over_16m");
}

TEST(Metrics, DeviceLatenessIsAGaugeByOperation) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->OnDeviceLateness(Op::kSort, 1);
  (*m)->OnDeviceLateness(Op::kTranspose, 1);
  (*m)->OnDeviceLateness(Op::kSort, 6.5);
  const std::string text =
      prometheus::TextSerializer().Serialize((*m)->registry().Collect());
  EXPECT_THAT(text, testing::HasSubstr(
                        "sortd_router_device_lateness{op=\"sort\"} 6.5\n"));
  EXPECT_THAT(text, testing::HasSubstr(
                        "sortd_router_device_lateness{op=\"transpose\"} 1\n"));
}

// The engine reports totals; the counter grows by what moved since, and an
// engine created again (its totals back at zero) adds what it moved since.
TEST(Metrics, DeviceTransfersAreCountedFromTheEnginesTotals) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->OnDeviceTransfers("gpu0", {.staged = 10, .direct = 100});
  (*m)->OnDeviceTransfers("gpu0", {.staged = 30, .direct = 150});
  (*m)->OnDeviceTransfers("gpu1", {.staged = 0, .direct = 7});
  (*m)->OnDeviceTransfers("gpu0", {.staged = 5, .direct = 8});
  const std::string text =
      prometheus::TextSerializer().Serialize((*m)->registry().Collect());
  for (const char* line :
       {"sortd_device_transfer_bytes_total{device=\"gpu0\",path=\"staged\"} "
        "35\n",
        "sortd_device_transfer_bytes_total{device=\"gpu0\",path=\"direct\"} "
        "158\n",
        "sortd_device_transfer_bytes_total{device=\"gpu1\",path=\"staged\"} "
        "0\n",
        "sortd_device_transfer_bytes_total{device=\"gpu1\",path=\"direct\"} "
        "7\n"}) {
    EXPECT_THAT(text, testing::HasSubstr(line));
  }
}

TEST(Metrics, DeviceLatenessIsReadFromItsSourceAtEachScrape) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->OnDeviceLateness(Op::kSort, 6.5);
  double sort_late = 3.25;
  (*m)->SetLatenessSource(
      [&sort_late](Op op) { return op == Op::kSort ? sort_late : 1.5; });
  auto scrape = [&] {
    return prometheus::TextSerializer().Serialize((*m)->Collect());
  };
  std::string text = scrape();
  EXPECT_THAT(text, testing::HasSubstr(
                        "sortd_router_device_lateness{op=\"sort\"} 3.25\n"));
  EXPECT_THAT(text,
              testing::HasSubstr(
                  "sortd_router_device_lateness{op=\"transpose\"} 1.5\n"));
  // The router's value fades between answers; no event reports that.
  sort_late = 1.125;
  EXPECT_THAT(
      scrape(),
      testing::HasSubstr("sortd_router_device_lateness{op=\"sort\"} 1.125\n"));
  // Without a source, the last value set stays.
  (*m)->SetLatenessSource(nullptr);
  (*m)->OnDeviceLateness(Op::kSort, 2);
  EXPECT_THAT(scrape(), testing::HasSubstr(
                            "sortd_router_device_lateness{op=\"sort\"} 2\n"));
}

TEST(Metrics, SharedMemoryCountsAreReadFromTheirSourceAtEachScrape) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  auto scrape = [&] {
    return prometheus::TextSerializer().Serialize((*m)->Collect());
  };
  EXPECT_THAT(scrape(), testing::HasSubstr("sortd_shm_regions 0\n"));
  Metrics::SharedMemoryCounts counts{.regions = 3, .adopted_bytes = 8192};
  (*m)->SetSharedMemorySource([&counts] { return counts; });
  std::string text = scrape();
  EXPECT_THAT(text, testing::HasSubstr("sortd_shm_regions 3\n"));
  EXPECT_THAT(text, testing::HasSubstr("sortd_shm_adopted_bytes 8192\n"));
  counts.adopted_bytes = 0;
  EXPECT_THAT(scrape(), testing::HasSubstr("sortd_shm_adopted_bytes 0\n"));
  (*m)->SetSharedMemorySource(nullptr);
}

}  // namespace
}  // namespace sortd
