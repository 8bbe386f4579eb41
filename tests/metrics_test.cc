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

}  // namespace
}  // namespace sortd
