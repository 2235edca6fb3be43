#include "worker/coordinator_values.h"

#include <limits>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(CoordinatorValues, KillGraceIsBoundedSoATaskIsAlwaysKilled) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(KillGraceOf(3), absl::Seconds(3));
  EXPECT_EQ(KillGraceOf(0), absl::ZeroDuration());
  EXPECT_EQ(KillGraceOf(-5), absl::ZeroDuration());
  EXPECT_EQ(KillGraceOf(-inf), absl::ZeroDuration());
  EXPECT_EQ(KillGraceOf(inf), kMaxKillGrace);
  EXPECT_EQ(KillGraceOf(std::numeric_limits<double>::quiet_NaN()), kMaxKillGrace);
  EXPECT_EQ(KillGraceOf(1e300), kMaxKillGrace);
}

TEST(CoordinatorValues, HeartbeatIntervalIsBoundedOrIgnored) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(HeartbeatIntervalOf(1.5), absl::Milliseconds(1500));
  EXPECT_EQ(HeartbeatIntervalOf(1e-9), absl::Milliseconds(50));
  EXPECT_EQ(HeartbeatIntervalOf(1e9), absl::Seconds(60));
  EXPECT_FALSE(HeartbeatIntervalOf(0).has_value());
  EXPECT_FALSE(HeartbeatIntervalOf(-1).has_value());
  EXPECT_FALSE(HeartbeatIntervalOf(inf).has_value());
  EXPECT_FALSE(HeartbeatIntervalOf(std::numeric_limits<double>::quiet_NaN()).has_value());
}

}  // namespace
}  // namespace frameworm
