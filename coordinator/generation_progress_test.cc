#include "coordinator/generation_progress.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

constexpr int kLead = 2;

TEST(GenerationProgressTest, NoHangBeforeTheFirstReport) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(2, clock.Now());
  clock.Advance(absl::Hours(1));  // e.g. a long dataset download
  EXPECT_FALSE(p.Hung(clock.Now(), absl::Seconds(5)));
}

TEST(GenerationProgressTest, SilentRankIsHungAfterTheTimeout) {
  SimulatedClock clock;
  const absl::Duration timeout = absl::Seconds(5);
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.Step(0, 1, 0, clock.Now());
  // Rank 1 never reported: counted from the generation's first report.
  clock.Advance(timeout);
  p.Step(0, 2, 0, clock.Now());
  EXPECT_FALSE(p.Hung(clock.Now(), timeout));
  clock.Advance(absl::Milliseconds(1));
  std::optional<std::string> hung = p.Hung(clock.Now(), timeout);
  ASSERT_TRUE(hung);
  EXPECT_NE(hung->find("rank 1 hung"), std::string::npos) << *hung;
  p.Step(1, 1, 0, clock.Now());
  EXPECT_FALSE(p.Hung(clock.Now(), timeout));
  // A progress report keeps a rank that reported steps alive.
  clock.Advance(absl::Seconds(4));
  p.Progress(1, clock.Now());
  clock.Advance(absl::Seconds(2));
  hung = p.Hung(clock.Now(), timeout);
  ASSERT_TRUE(hung);
  EXPECT_NE(hung->find("rank 0 hung"), std::string::npos) << *hung;
  EXPECT_NE(hung->find("(last step 2)"), std::string::npos) << *hung;
  // A rank that exited 0 is never hung.
  EXPECT_TRUE(p.MarkDone(0));
  EXPECT_FALSE(p.MarkDone(0));
  EXPECT_FALSE(p.Hung(clock.Now(), timeout));
  clock.Advance(absl::Seconds(4));
  hung = p.Hung(clock.Now(), timeout);
  ASSERT_TRUE(hung);
  EXPECT_NE(hung->find("rank 1 hung"), std::string::npos) << *hung;
  EXPECT_FALSE(p.AllDone());
  p.MarkDone(1);
  EXPECT_TRUE(p.AllDone());
  EXPECT_FALSE(p.Hung(clock.Now(), timeout));
}

TEST(GenerationProgressTest, CheckpointRequestsAreAheadOfProgress) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.Step(0, 5, 0, clock.Now());
  p.Step(1, 4, 0, clock.Now());
  EXPECT_EQ(p.RequestCheckpoint(kLead), 7);
  EXPECT_EQ(p.RequestCheckpoint(kLead), 7);  // pending: the same step
  EXPECT_EQ(p.Step(1, 5, 0, clock.Now()), 7);
  p.CheckpointRecorded(6, clock.Now());  // too early: still pending
  EXPECT_EQ(p.checkpoint_at(), 7);
  p.CheckpointRecorded(7, clock.Now());
  EXPECT_EQ(p.checkpoint_at(), 0);
}

TEST(GenerationProgressTest, MissedCheckpointIsDropped) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.Step(0, 1, 0, clock.Now());
  EXPECT_EQ(p.RequestCheckpoint(kLead), 3);
  EXPECT_EQ(p.Step(0, 14, 0, clock.Now()), 3);  // rank 1 not past it yet
  EXPECT_EQ(p.Step(1, 13, 0, clock.Now()), 3);  // 13 <= 3 + 10
  EXPECT_EQ(p.Step(1, 14, 0, clock.Now()), 0);  // everyone long past it
}

// A requested checkpoint rank 0 took and is still uploading (its reports'
// checkpoint_in_flight) is not dropped however far the ranks go; once the
// upload is over and the record has not come, it is.
TEST(GenerationProgressTest, ACheckpointStillUploadingIsNotMissed) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.Step(0, 1, 0, clock.Now());
  EXPECT_EQ(p.RequestCheckpoint(kLead), 3);
  EXPECT_EQ(p.Step(1, 40, 0, clock.Now()), 3);
  EXPECT_EQ(p.Step(0, 40, 0, clock.Now(), /*in_flight=*/3), 3);
  EXPECT_EQ(p.Step(1, 41, 0, clock.Now()), 3) << "dropped while rank 0 uploads it";
  EXPECT_EQ(p.Progress(0, clock.Now(), /*in_flight=*/2), 3) << "an older one is no answer";
  EXPECT_EQ(p.Step(1, 42, 0, clock.Now()), 0);
  // A later checkpoint in flight answers the request too; rank 1's own
  // (a program's) value counts for nothing.
  EXPECT_EQ(p.RequestCheckpoint(kLead), 44);
  EXPECT_EQ(p.Step(0, 60, 0, clock.Now(), /*in_flight=*/50), 44);
  EXPECT_EQ(p.Step(1, 60, 0, clock.Now()), 44);
  EXPECT_EQ(p.Step(1, 61, 0, clock.Now(), /*in_flight=*/61), 44);
  EXPECT_EQ(p.Step(0, 61, 0, clock.Now(), /*in_flight=*/0), 0);  // uploaded, never recorded
  // Rank 0's exit ends its uploads: a request it had in flight is dropped
  // once the others are past it.
  EXPECT_EQ(p.RequestCheckpoint(kLead), 63);
  p.Step(0, 80, 0, clock.Now(), /*in_flight=*/63);
  EXPECT_EQ(p.Step(1, 80, 0, clock.Now()), 63);
  p.MarkDone(0);
  EXPECT_EQ(p.Step(1, 81, 0, clock.Now()), 0);
}

TEST(GenerationProgressTest, TimedCheckpointOnlyOnceRanksReport) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(1, clock.Now());
  clock.Advance(absl::Minutes(2));
  p.MaybeTimedCheckpoint(clock.Now(), absl::Minutes(1), kLead);
  EXPECT_EQ(p.checkpoint_at(), 0);  // nobody reported
  p.Step(0, 10, 0, clock.Now());
  p.MaybeTimedCheckpoint(clock.Now(), absl::ZeroDuration(), kLead);
  EXPECT_EQ(p.checkpoint_at(), 0);  // not configured
  p.MaybeTimedCheckpoint(clock.Now(), absl::Minutes(1), kLead);
  EXPECT_EQ(p.checkpoint_at(), 12);
  p.CheckpointRecorded(12, clock.Now());
  clock.Advance(absl::Seconds(59));
  p.MaybeTimedCheckpoint(clock.Now(), absl::Minutes(1), kLead);
  EXPECT_EQ(p.checkpoint_at(), 0);
  clock.Advance(absl::Seconds(1));
  p.MaybeTimedCheckpoint(clock.Now(), absl::Minutes(1), kLead);
  EXPECT_EQ(p.checkpoint_at(), 12);
}

// checkpoint.every_n_steps for a program that is not the built-in trainer:
// the next multiple at least `lead` ahead, one at a time, the next once
// it is recorded or passed.
TEST(GenerationProgressTest, SteppedCheckpointsAreAskedAtMultiplesAhead) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.MaybeSteppedCheckpoint(100, kLead);
  EXPECT_EQ(p.checkpoint_at(), 0);  // nobody reported
  p.Step(0, 10, 0, clock.Now());
  p.MaybeSteppedCheckpoint(0, kLead);
  EXPECT_EQ(p.checkpoint_at(), 0);  // not configured
  p.MaybeSteppedCheckpoint(100, kLead);
  EXPECT_EQ(p.checkpoint_at(), 100);
  p.Step(0, 99, 0, clock.Now());
  p.MaybeSteppedCheckpoint(100, kLead);
  EXPECT_EQ(p.checkpoint_at(), 100) << "one pending at a time";
  p.CheckpointRecorded(100, clock.Now());
  p.Step(0, 100, 0, clock.Now());
  p.MaybeSteppedCheckpoint(100, kLead);
  EXPECT_EQ(p.checkpoint_at(), 200);
  p.CheckpointRecorded(200, clock.Now());
  p.Step(0, 199, 0, clock.Now());  // too close to 200 to ask for it in time
  p.MaybeSteppedCheckpoint(100, kLead);
  EXPECT_EQ(p.checkpoint_at(), 300);
}

TEST(GenerationProgressTest, NewGenerationResetsRanksButKeepsMaxStep) {
  SimulatedClock clock;
  GenerationProgress p;
  p.RestoreMaxStep(40);
  p.Start(1, clock.Now());
  p.Step(0, 12, 100, clock.Now());
  EXPECT_EQ(p.max_step(), 40);
  EXPECT_EQ(p.reported_total_steps(), 100);
  p.RequestCheckpoint(kLead);
  p.MarkDone(0);
  p.Start(3, clock.Now());
  EXPECT_EQ(p.world(), 3);
  EXPECT_EQ(p.checkpoint_at(), 0);
  EXPECT_FALSE(p.done(0));
  EXPECT_EQ(p.max_step(), 40);
  EXPECT_EQ(p.reported_total_steps(), 100);
  clock.Advance(absl::Hours(1));
  EXPECT_FALSE(p.Hung(clock.Now(), absl::Seconds(1)));  // no report yet
}

}  // namespace
TEST(GenerationProgressTest, ReloadedGenerationTimesEveryRankFromTheReload) {
  SimulatedClock clock;
  const absl::Duration timeout = absl::Seconds(5);
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.ExpectReportsSince(clock.Now());
  clock.Advance(timeout);
  p.Step(0, 7, 0, clock.Now());
  EXPECT_FALSE(p.Hung(clock.Now(), timeout));
  clock.Advance(absl::Milliseconds(1));
  std::optional<std::string> hung = p.Hung(clock.Now(), timeout);
  ASSERT_TRUE(hung.has_value());
  EXPECT_NE(hung->find("rank 1 hung"), std::string::npos) << *hung;
}

TEST(GenerationProgressTest, StartupDeadlineCatchesRanksThatNeverReport) {
  SimulatedClock clock;
  const absl::Duration timeout = absl::Seconds(5);
  const absl::Duration startup = absl::Seconds(60);
  GenerationProgress p;
  p.Start(2, clock.Now());
  clock.Advance(startup);
  EXPECT_FALSE(p.Hung(clock.Now(), timeout, startup));
  p.Step(0, 1, 0, clock.Now());
  clock.Advance(absl::Milliseconds(1));
  std::optional<std::string> hung = p.Hung(clock.Now(), absl::Hours(1), startup);
  ASSERT_TRUE(hung.has_value());
  EXPECT_NE(hung->find("rank 1 hung: no report within 1m"), std::string::npos) << *hung;
  // Without a start-up deadline (a program that may never report): never.
  GenerationProgress quiet;
  quiet.Start(1, clock.Now());
  clock.Advance(absl::Hours(2));
  EXPECT_FALSE(quiet.Hung(clock.Now(), timeout));
}

// Synchronous collectives: when rank 1 stops, rank 0 blocks in the
// gradient allreduce and stops reporting too. Its liveness pings say it
// waits, so rank 1 is named, with who waits for it.
TEST(GenerationProgressTest, AHangNamesTheRankTheOthersWaitFor) {
  SimulatedClock clock;
  const absl::Duration timeout = absl::Seconds(10);
  GenerationProgress p;
  p.Start(3, clock.Now());
  for (int r = 0; r < 3; ++r) p.Step(r, 7, 0, clock.Now());
  for (int s = 1; s <= 11; ++s) {  // ranks 0 and 2 wait and ping; rank 1 is silent
    clock.Advance(absl::Seconds(1));
    p.Ping(0, clock.Now(), s);
    p.Ping(2, clock.Now(), s - 0.5);
  }
  int rank = -1;
  std::optional<std::string> hung = p.Hung(clock.Now(), timeout, std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(hung->rfind("rank 1 hung: no step report for 11s (last step 7)", 0), 0u) << *hung;
  EXPECT_NE(hung->find("ranks 0 (11.0 s), 2 (10.5 s) wait for it in the gradient collectives"),
            std::string::npos)
      << *hung;
  EXPECT_NE(hung->find("sends no sign of life (stopped or gone)"), std::string::npos) << *hung;
  // The culprit's process still pings, not waiting: busy elsewhere.
  p.Ping(1, clock.Now(), 0);
  hung = p.Hung(clock.Now(), timeout, std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 1);
  EXPECT_NE(hung->find("still pings (busy outside the collectives)"), std::string::npos) << *hung;
  // Stopped inside a collective: its last ping said it waited, but that
  // ping is stale (no sign of life for 3.5 s when the 3 s timeout fires);
  // the fresh waiter is not named.
  GenerationProgress w;
  w.Start(2, clock.Now());
  w.Step(0, 3, 0, clock.Now());
  w.Step(1, 3, 0, clock.Now());
  w.Ping(1, clock.Now(), 0.2);
  for (int s = 1; s <= 7; ++s) {
    clock.Advance(absl::Milliseconds(500));
    w.Ping(0, clock.Now(), 0.5 * s);
  }
  hung = w.Hung(clock.Now(), absl::Seconds(3), std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 1) << *hung;
  EXPECT_NE(hung->find("sends no sign of life"), std::string::npos) << *hung;
  // The culprit's last report trails the waiter's (it finished the step a
  // little later, then stopped): when the waiter's silence reaches the
  // timeout, the culprit's has not, and it is still the one named.
  GenerationProgress t;
  t.Start(2, clock.Now());
  t.Step(0, 32, 0, clock.Now());
  clock.Advance(absl::Milliseconds(400));
  t.Step(1, 32, 0, clock.Now());
  t.Ping(1, clock.Now(), 0);
  for (int s = 1; s <= 11; ++s) {
    clock.Advance(absl::Milliseconds(500));
    t.Ping(0, clock.Now(), 0.5 * s);
  }
  clock.Advance(absl::Milliseconds(200));  // rank 0 silent 6.1 s, rank 1 5.7 s
  hung = t.Hung(clock.Now(), absl::Seconds(6), std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 1) << *hung;
  EXPECT_EQ(hung->rfind("rank 1 hung: no step report for 5.7s (last step 32)", 0), 0u) << *hung;
  EXPECT_NE(hung->find("rank 0 (5.5 s) waits for it"), std::string::npos) << *hung;
  EXPECT_NE(hung->find("sends no sign of life"), std::string::npos) << *hung;
  // Pings are not progress: they never keep a rank from being hung.
  GenerationProgress q;
  q.Start(1, clock.Now());
  q.Step(0, 1, 0, clock.Now());
  for (int s = 0; s < 12; ++s) {
    clock.Advance(absl::Seconds(1));
    q.Ping(0, clock.Now(), 0);
  }
  EXPECT_TRUE(q.Hung(clock.Now(), timeout).has_value());
}

}  // namespace frameworm::coordinator
