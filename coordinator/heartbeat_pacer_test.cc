#include "coordinator/heartbeat_pacer.h"

#include <gtest/gtest.h>

namespace frameworm::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(HeartbeatPacerTest, AWorkerAtItsIntervalNeverWaits) {
  HeartbeatPacer p(absl::Seconds(1));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.Admit(kT0 + absl::Seconds(i)), absl::ZeroDuration());
}

TEST(HeartbeatPacerTest, ABurstOfTenPassesThenAFloodIsPacedToTenPerInterval) {
  HeartbeatPacer p(absl::Seconds(1));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p.Admit(kT0), absl::ZeroDuration()) << i;
  // The 11th at the same instant waits a tenth of the interval.
  EXPECT_EQ(p.Admit(kT0), absl::Milliseconds(100));
  // A flood that honours every wait gets 10 per second, not more.
  absl::Time t = kT0 + absl::Milliseconds(100);
  int admitted = 0;
  while (t < kT0 + absl::Seconds(10)) {
    absl::Duration wait = p.Admit(t);
    ++admitted;
    t += std::max(wait, absl::Microseconds(1));  // the flooder sends again at once
  }
  EXPECT_LE(admitted, 10 * 10 + 1);
  EXPECT_GE(admitted, 10 * 10 - 2);
}

TEST(HeartbeatPacerTest, QuietTimeRefillsOnlyUpToTheBurst) {
  HeartbeatPacer p(absl::Seconds(1));
  for (int i = 0; i < 10; ++i) p.Admit(kT0);
  // An hour of silence buys 10, not 36,000.
  const absl::Time later = kT0 + absl::Hours(1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p.Admit(later), absl::ZeroDuration()) << i;
  EXPECT_GT(p.Admit(later), absl::ZeroDuration());
}

TEST(HeartbeatPacerTest, AClockGoingBackwardsGivesNothingAndBreaksNothing) {
  HeartbeatPacer p(absl::Seconds(1));
  for (int i = 0; i < 10; ++i) p.Admit(kT0);
  EXPECT_GT(p.Admit(kT0 - absl::Hours(1)), absl::ZeroDuration());
  EXPECT_EQ(p.Admit(kT0 + absl::Seconds(5)), absl::ZeroDuration());
}

// A message that weighs several tokens (a log chunk: one per 64 KiB
// begun) takes them all: a budget of 4,096 a second lets 4,096 one-token
// chunks through at once but only 1,024 four-token ones, and the next
// waits as long as its weight takes to refill.
TEST(HeartbeatPacerTest, AHeavierMessageCostsItsWeight) {
  HeartbeatPacer light(absl::Seconds(1), 4096), heavy(absl::Seconds(1), 4096);
  for (int i = 0; i < 4096; ++i) EXPECT_EQ(light.Admit(kT0), absl::ZeroDuration()) << i;
  for (int i = 0; i < 1024; ++i) EXPECT_EQ(heavy.Admit(kT0, 4), absl::ZeroDuration()) << i;
  EXPECT_GT(light.Admit(kT0), absl::ZeroDuration());
  EXPECT_EQ(heavy.Admit(kT0, 4), absl::Seconds(4.0 / 4096));
}

TEST(HeartbeatPacerTest, OffWhenTheIntervalIsNotPositive) {
  HeartbeatPacer p(absl::ZeroDuration());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(p.Admit(kT0), absl::ZeroDuration());
}

}  // namespace
}  // namespace frameworm::coordinator
