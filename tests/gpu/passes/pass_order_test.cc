// Which radix passes run and how each reads and stores its keys
// (gpu/passes/pass_order.h), on the host alone: the first and last pass
// from the skipped ones, the last left open until the digit totals are
// read, the raw ends' mode bits, the unranked first pass, and each pass's
// shift by digit or by picked slot.
#include "gpu/passes/pass_order.h"

#include <gtest/gtest.h>

#include <vector>

#include "gpu/kernels/sort_constants.h"
#include "gpu/policy.h"
#include "gpu/sort_plan.h"

namespace sortd::gpu {
namespace {

RadixPassPlan EarlyCountsPlan(bool unordered_first) {
  RadixSortPolicy r;
  r.radix_bits = 8;
  r.pass = RadixPass::kOneLaunchEarlyCounts;
  r.ranking = TileRanking::kWarpEmulated;
  r.unordered_first = unordered_first;
  return PlanRadixPasses(r, 32, /*with_index=*/false, 1 << 20,
                         /*has_totals=*/true);
}

TEST(PassOrder, FirstAndLastAreTheOuterPassesThatRun) {
  const RadixPassPlan plan = EarlyCountsPlan(false);
  const PassOrder all =
      PassOrder::Of({false, false, false, false}, nullptr, nullptr, plan);
  EXPECT_EQ(all.first, 0u);
  EXPECT_EQ(all.last, 3u);
  const PassOrder middle =
      PassOrder::Of({true, false, false, true}, nullptr, nullptr, plan);
  EXPECT_EQ(middle.first, 1u);
  EXPECT_EQ(middle.last, 2u);
  const PassOrder one =
      PassOrder::Of({true, true, false, true}, nullptr, nullptr, plan);
  EXPECT_EQ(one.first, 2u);
  EXPECT_EQ(one.last, 2u);
}

// Until the digit totals say which later passes are skipped, the first pass
// is not taken for the last: it must leave its keys for a next pass.
TEST(PassOrder, TheFirstIsNotTheLastUntilTheTotalsAreRead) {
  const RadixPassPlan plan = EarlyCountsPlan(false);
  const SkipLater later = [](std::vector<bool>&) { return absl::OkStatus(); };
  const PassOrder o =
      PassOrder::Of({false, true, true, true}, nullptr, &later, plan);
  EXPECT_EQ(o.first, 0u);
  EXPECT_EQ(o.last, 4u);  // past every pass
  // Several passes known to run: the last is already known.
  const PassOrder two =
      PassOrder::Of({false, true, false, true}, nullptr, &later, plan);
  EXPECT_EQ(two.last, 2u);
}

TEST(PassOrder, RawEndsMarkTheFirstAndLastPassesMode) {
  const RadixPassPlan plan = EarlyCountsPlan(false);
  const RawEnds raw{.keys = cl::Buffer(),
                    .kind_order = 2u | SORTD_MODE_DESCENDING};
  const PassOrder o =
      PassOrder::Of({false, false, true, false}, &raw, nullptr, plan);
  EXPECT_EQ(o.Mode(0), 2u | SORTD_MODE_DESCENDING | SORTD_MODE_FIRST);
  EXPECT_EQ(o.Mode(1), 2u | SORTD_MODE_DESCENDING);
  EXPECT_EQ(o.Mode(3), 2u | SORTD_MODE_DESCENDING | SORTD_MODE_LAST);
  EXPECT_EQ(o.SampledKindOrder(), 2u | SORTD_MODE_DESCENDING);
  const PassOrder single = PassOrder::Of({true, false}, &raw, nullptr, plan);
  EXPECT_EQ(single.Mode(1),
            2u | SORTD_MODE_DESCENDING | SORTD_MODE_FIRST | SORTD_MODE_LAST);
  // Without raw ends the keys are already ordered: no mode at all.
  const PassOrder ordered =
      PassOrder::Of({false, false}, nullptr, nullptr, plan);
  EXPECT_EQ(ordered.Mode(0), 0u);
  EXPECT_EQ(ordered.SampledKindOrder(), 0u);
}

// The first pass places keys unranked only where the plan has that pass,
// the keys are raw, and they are in no order to keep.
TEST(PassOrder, TheUnrankedFirstPassNeedsThePlanAndUnorderedRawKeys) {
  RawEnds raw{.keys = cl::Buffer(), .kind_order = 0, .unordered = true};
  const std::vector<bool> skip(4, false);
  EXPECT_TRUE(PassOrder::Of(skip, &raw, nullptr, EarlyCountsPlan(true))
                  .unordered_first);
  EXPECT_FALSE(PassOrder::Of(skip, &raw, nullptr, EarlyCountsPlan(false))
                   .unordered_first);
  EXPECT_FALSE(PassOrder::Of(skip, nullptr, nullptr, EarlyCountsPlan(true))
                   .unordered_first);
  raw.unordered = false;  // continuing earlier passes
  EXPECT_FALSE(PassOrder::Of(skip, &raw, nullptr, EarlyCountsPlan(true))
                   .unordered_first);
}

TEST(PassOrder, ShiftIsTheDigitsFirstBitOrItsPickedSlot) {
  RadixSortPolicy r;
  r.radix_bits = 8;
  EXPECT_EQ(PassOrder::Shift(0, r, nullptr), 0u);
  EXPECT_EQ(PassOrder::Shift(3, r, nullptr), 24u);
  r.radix_bits = 4;
  EXPECT_EQ(PassOrder::Shift(7, r, nullptr), 28u);
  const PickedDigits picked{.buffer = cl::Buffer(), .slots = 3};
  EXPECT_EQ(PassOrder::Shift(0, r, &picked), SORTD_PICKED_SLOT);
  EXPECT_EQ(PassOrder::Shift(2, r, &picked), SORTD_PICKED_SLOT + 2);
}

}  // namespace
}  // namespace sortd::gpu
