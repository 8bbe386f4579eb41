// The size classes of the request-duration histogram's `size` label.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cstddef>

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

}  // namespace
}  // namespace sortd
