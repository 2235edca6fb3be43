#include "common/line_budget.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(LineBudgetTest, ABurstThenTheRateAndTheRefusedAreCounted) {
  LineBudget budget(/*per_second=*/2, /*burst=*/3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(budget.Take(t0, &suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  // A flood in the same instant: all refused, counted.
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(budget.Take(t0, &suppressed));
  // Half a second later one more line (2 per second), saying 1000 were not written.
  EXPECT_TRUE(budget.Take(t0 + absl::Milliseconds(500), &suppressed));
  EXPECT_EQ(suppressed, 1000);
  EXPECT_FALSE(budget.Take(t0 + absl::Milliseconds(500), &suppressed));
  // A long quiet refills only up to the burst.
  const absl::Time later = t0 + absl::Hours(1);
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += budget.Take(later, &suppressed) ? 1 : 0;
  EXPECT_EQ(allowed, 3);
  // A clock that steps back gives nothing extra.
  EXPECT_FALSE(budget.Take(later - absl::Hours(1), &suppressed));
}

}  // namespace
}  // namespace frameworm
