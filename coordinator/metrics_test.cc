#include "coordinator/metrics.h"

#include <cmath>

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

v1::StepMetrics Report(int rank, int64_t step, int64_t samples, double secs,
                       double loss) {
  v1::StepMetrics m;
  m.set_rank(rank);
  m.set_step(step);
  m.set_samples(samples);
  m.set_step_seconds(secs);
  (*m.mutable_values())["loss"] = loss;
  return m;
}

TEST(MetricAggregatorTest, SampleWeightedMeanAndPerRankTimes) {
  MetricAggregator agg({1.5, 3});
  ASSERT_NE(agg.Add(1, 2, Report(0, 1, 30, 0.1, 1.0), 5), nullptr);
  const v1::AggregatedStep* s = agg.Add(1, 2, Report(1, 1, 10, 0.2, 3.0), 6);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->ranks_reported(), 2);
  EXPECT_EQ(s->samples(), 40);
  EXPECT_DOUBLE_EQ(s->mean().at("loss"), (30 * 1.0 + 10 * 3.0) / 40);
  ASSERT_EQ(s->rank_step_seconds_size(), 2);
  EXPECT_DOUBLE_EQ(s->rank_step_seconds(1), 0.2);
  EXPECT_EQ(s->generation(), 1);
  // A retried report of the same rank and step counts once.
  EXPECT_EQ(agg.Add(1, 2, Report(1, 1, 10, 0.2, 3.0), 7), nullptr);
  EXPECT_EQ(agg.Last()->samples(), 40);
}

// The largest values and sample counts a report may carry (job_scheduler's
// step report check) keep the weighted mean finite.
TEST(MetricAggregatorTest, TheLargestAcceptedValuesKeepTheMeanFinite) {
  MetricAggregator agg({1.5, 3});
  const int64_t most = int64_t{1} << 48;
  ASSERT_NE(agg.Add(1, 3, Report(0, 1, most, 0.1, 1e200), 5), nullptr);
  ASSERT_NE(agg.Add(1, 3, Report(1, 1, most, 0.1, 1e200), 5), nullptr);
  const v1::AggregatedStep* s = agg.Add(1, 3, Report(2, 1, most, 0.1, -1e200), 6);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(std::isfinite(s->mean().at("loss")));
  EXPECT_NEAR(s->mean().at("loss"), 1e200 / 3, 1e186);
}

TEST(MetricAggregatorTest, NewerGenerationReplacesStep) {
  MetricAggregator agg({1.5, 3});
  agg.Add(1, 1, Report(0, 5, 10, 0.1, 9.0), 1);
  const v1::AggregatedStep* s = agg.Add(2, 1, Report(0, 5, 10, 0.1, 2.0), 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->generation(), 2);
  EXPECT_EQ(s->ranks_reported(), 1);
  EXPECT_DOUBLE_EQ(s->mean().at("loss"), 2.0);
}

TEST(MetricAggregatorTest, FlagsSlowRankOnlyAfterAFullWindow) {
  MetricAggregator agg({1.5, 3});
  const v1::AggregatedStep* s = nullptr;
  for (int step = 1; step <= 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      s = agg.Add(1, 3, Report(r, step, 8, r == 2 ? 0.4 : 0.1, 1), step);
    }
    if (step < 3) EXPECT_EQ(s->stragglers_size(), 0) << "step " << step;
  }
  ASSERT_EQ(s->stragglers_size(), 1);
  EXPECT_EQ(s->stragglers(0), 2);
  // Within the margin (1.4x < 1.5x): not flagged.
  MetricAggregator ok({1.5, 2});
  for (int step = 1; step <= 4; ++step)
    for (int r = 0; r < 2; ++r)
      s = ok.Add(1, 2, Report(r, step, 8, r == 1 ? 0.14 : 0.1, 1), step);
  EXPECT_EQ(s->stragglers_size(), 0);
}

// A rank slow only in its first steps (one-time JIT work) is not flagged;
// slow after the warm-up, it is, once its window is full.
TEST(MetricAggregatorTest, WarmUpStepsAreNotJudged) {
  MetricAggregator::Options o{1.5, 2};
  o.warmup = 3;
  MetricAggregator agg(o);
  const v1::AggregatedStep* s = nullptr;
  for (int step = 1; step <= 5; ++step) {
    for (int r = 0; r < 2; ++r) {
      s = agg.Add(1, 2, Report(r, step, 8, r == 1 && step <= 3 ? 0.9 : 0.1, 1), step);
    }
    EXPECT_EQ(s->stragglers_size(), 0) << "step " << step;
  }
  agg.ResetWindows();  // a new generation warms up again
  for (int step = 6; step <= 10; ++step) {
    for (int r = 0; r < 2; ++r) s = agg.Add(2, 2, Report(r, step, 8, r == 1 ? 0.4 : 0.1, 1), step);
    if (step < 10) EXPECT_EQ(s->stragglers_size(), 0) << "step " << step;
  }
  ASSERT_EQ(s->stragglers_size(), 1);
  EXPECT_EQ(s->stragglers(0), 1);
}

// Synchronous DDP: every rank's step takes the slowest rank's time; the
// fast ranks spend the difference waiting in the gradient allreduce. Only
// the busy time (step - wait + data) names the slow one.
TEST(MetricAggregatorTest, TheRankTheOthersWaitForIsTheStraggler) {
  MetricAggregator agg({1.5, 3});
  const v1::AggregatedStep* s = nullptr;
  for (int step = 1; step <= 4; ++step) {
    for (int r = 0; r < 3; ++r) {
      v1::StepMetrics m = Report(r, step, 8, 0.077, 1);  // the same for all
      m.set_wait_seconds(r == 1 ? 0.002 : 0.042);        // rank 1 is waited for
      m.set_data_seconds(0.001);
      s = agg.Add(1, 3, m, step);
    }
  }
  ASSERT_EQ(s->stragglers_size(), 1);
  EXPECT_EQ(s->stragglers(0), 1);
  ASSERT_EQ(s->rank_wait_seconds_size(), 3);
  EXPECT_DOUBLE_EQ(s->rank_wait_seconds(0), 0.042);
  EXPECT_DOUBLE_EQ(s->rank_data_seconds(2), 0.001);
  // A slow data loader counts as the rank's own time too.
  MetricAggregator data({1.5, 2});
  for (int step = 1; step <= 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      v1::StepMetrics m = Report(r, step, 8, 0.05, 1);
      m.set_wait_seconds(r == 0 ? 0.04 : 0.0);
      m.set_data_seconds(r == 0 ? 0.0 : 0.04);
      s = data.Add(1, 2, m, step);
    }
  }
  ASSERT_EQ(s->stragglers_size(), 1);
  EXPECT_EQ(s->stragglers(0), 1);
  // Equal work, equal waits: nobody.
  MetricAggregator even({1.5, 2});
  for (int step = 1; step <= 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      v1::StepMetrics m = Report(r, step, 8, 0.05, 1);
      m.set_wait_seconds(0.004 + 0.001 * r);
      s = even.Add(1, 2, m, step);
    }
  }
  EXPECT_EQ(s->stragglers_size(), 0);
}

TEST(MetricAggregatorTest, StragglersComputedOncePerCompletedStep) {
  MetricAggregator agg({1.5, 2});
  const v1::AggregatedStep* s = nullptr;
  for (int step = 1; step <= 4; ++step) {
    for (int r = 0; r < 4; ++r) {
      s = agg.Add(1, 4, Report(r, step, 8, r == 3 ? 0.5 : 0.1, 1), step);
      // Not recomputed while the step is incomplete.
      EXPECT_EQ(agg.straggler_computations(), r == 3 ? step : step - 1);
    }
  }
  ASSERT_EQ(s->stragglers_size(), 1);
  EXPECT_EQ(s->stragglers(0), 3);
  // A duplicate report does not recompute either.
  EXPECT_EQ(agg.Add(1, 4, Report(0, 4, 8, 0.1, 1), 9), nullptr);
  EXPECT_EQ(agg.straggler_computations(), 4);
  // An incomplete next step carries the last completed step's flags.
  s = agg.Add(1, 4, Report(0, 5, 8, 0.1, 1), 10);
  ASSERT_EQ(s->stragglers_size(), 1);
  EXPECT_EQ(s->stragglers(0), 3);
  EXPECT_EQ(agg.straggler_computations(), 4);
}

TEST(MetricAggregatorTest, MedianExcludesTheRankItself) {
  // Means 0.1, 0.1, 0.2, 0.31: for rank 3 the others' median is 0.1
  // (0.31 > 1.5 * 0.1: flagged); for rank 2 it is 0.1 (0.2 > 0.15:
  // flagged); for rank 0 it is 0.2 (not flagged).
  MetricAggregator agg({1.5, 1});
  const double four[] = {0.1, 0.1, 0.2, 0.31};
  const v1::AggregatedStep* s = nullptr;
  for (int r = 0; r < 4; ++r) s = agg.Add(1, 4, Report(r, 1, 8, four[r], 1), 1);
  ASSERT_EQ(s->stragglers_size(), 2);
  EXPECT_EQ(s->stragglers(0), 2);
  EXPECT_EQ(s->stragglers(1), 3);
  // Five ranks 0.1, 0.3, 0.1, 0.3, 0.1 (an even count of others: the
  // median is a midpoint): rank 1's others 0.1, 0.1, 0.1, 0.3 have median
  // 0.1 (flagged, as rank 3); a 0.1 rank's others 0.1, 0.1, 0.3, 0.3 have
  // median 0.2 (not flagged).
  MetricAggregator five({1.5, 1});
  const double t5[] = {0.1, 0.3, 0.1, 0.3, 0.1};
  for (int r = 0; r < 5; ++r) s = five.Add(1, 5, Report(r, 1, 8, t5[r], 1), 1);
  ASSERT_EQ(s->stragglers_size(), 2);
  EXPECT_EQ(s->stragglers(0), 1);
  EXPECT_EQ(s->stragglers(1), 3);
  // 0.1, 0.29, 0.2, 0.2: rank 1's others 0.1, 0.2, 0.2 have median 0.2
  // (0.29 < 1.5 * 0.2: not flagged).
  MetricAggregator even({1.5, 1});
  const double t4[] = {0.1, 0.29, 0.2, 0.2};
  for (int r = 0; r < 4; ++r) s = even.Add(1, 4, Report(r, 1, 8, t4[r], 1), 1);
  EXPECT_EQ(s->stragglers_size(), 0);
}

TEST(MetricAggregatorTest, SinceAndRestore) {
  MetricAggregator agg({1.5, 3});
  for (int step = 1; step <= 4; ++step) agg.Add(1, 1, Report(0, step, 4, 0.1, step), step);
  auto since = agg.Since(2);
  ASSERT_EQ(since.size(), 2u);
  EXPECT_EQ(since[0].step(), 3);
  MetricAggregator restored({1.5, 3});
  for (const auto& s : agg.Since(0)) restored.Restore(s);
  // A late rank's report for a restored step keeps the weighting.
  const v1::AggregatedStep* s = restored.Add(1, 2, Report(1, 4, 4, 0.1, 0.0), 9);
  ASSERT_NE(s, nullptr);
  EXPECT_DOUBLE_EQ(s->mean().at("loss"), 2.0);
}

TEST(MetricAggregatorTest, ThinKeepsTheNewestWholeAndResamplesTheRest) {
  MetricAggregator agg({1.5, 3});
  for (int64_t step = 1; step <= 100; ++step)
    agg.Add(1, 1, Report(0, step, 1, 0.1, 1.0 / step), step);
  // At or under the trigger nothing happens.
  EXPECT_TRUE(agg.Thin(40, 100).empty());
  EXPECT_EQ(agg.size(), 100u);
  std::vector<int64_t> removed = agg.Thin(40, 80);
  EXPECT_EQ(removed.size(), 60u);
  EXPECT_EQ(agg.size(), 40u);
  std::vector<v1::AggregatedStep> kept = agg.Since(0);
  ASSERT_EQ(kept.size(), 40u);
  EXPECT_EQ(kept.front().step(), 1);  // the oldest stays
  // The newest 20 steps stay whole.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(kept[20 + i].step(), 81 + i);
  // The older 20 are spread over steps 1..80, strictly increasing.
  for (int i = 1; i < 20; ++i) {
    EXPECT_GT(kept[i].step(), kept[i - 1].step());
    EXPECT_LE(kept[i].step(), 80);
  }
  EXPECT_GE(kept[19].step(), 70);
  // Removed and kept partition the steps; values are untouched.
  for (int64_t r : removed) {
    for (const auto& k : kept) EXPECT_NE(k.step(), r);
  }
  EXPECT_DOUBLE_EQ(kept[25].mean().at("loss"), 1.0 / kept[25].step());
  // New steps still aggregate after thinning; a limit of 0 never thins.
  ASSERT_NE(agg.Add(1, 1, Report(0, 101, 1, 0.1, 0.5), 101), nullptr);
  EXPECT_TRUE(agg.Thin(0, 0).empty());
}

TEST(MetricAggregatorTest, MemoryHoldsTheRecentlyUpdatedStepsTheIndexHoldsAll) {
  MetricAggregator agg({.straggler_factor = 1.5, .window = 3, .memory_steps = 10});
  for (int64_t step = 1; step <= 100; ++step) agg.Add(1, 2, Report(0, step, 1, 0.1, 1.0), step);
  EXPECT_EQ(agg.in_memory(), 10u);
  EXPECT_EQ(agg.size(), 100u);
  EXPECT_EQ(agg.evicted_below(), 91);
  EXPECT_EQ(agg.Since(0).front().step(), 91);
  EXPECT_TRUE(agg.Has(5));
  EXPECT_FALSE(agg.Has(101));
  // A restarted generation re-runs steps 41..: they are aggregated whole
  // (both ranks) even though they were evicted; the stale tail goes first.
  for (int64_t step = 41; step <= 60; ++step) {
    agg.Add(2, 2, Report(0, step, 1, 0.1, 2.0), step);
    const v1::AggregatedStep* s = agg.Add(2, 2, Report(1, step, 1, 0.1, 4.0), step);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->ranks_reported(), 2) << step;
    EXPECT_DOUBLE_EQ(s->mean().at("loss"), 3.0);
  }
  EXPECT_EQ(agg.size(), 100u);  // no step added twice
  EXPECT_EQ(agg.Last()->step(), 60);
  // Thinning works on the whole history.
  EXPECT_EQ(agg.Thin(20, 40).size(), 80u);
  EXPECT_EQ(agg.size(), 20u);
  EXPECT_LE(agg.in_memory(), 10u);
}

// A report sent again after its answer was lost, or delayed, arriving when
// its step's aggregate has left memory: the stored aggregate (both ranks)
// is not replaced by one of that rank alone. After a coordinator restart
// (aggregates restored) the same holds. A newer generation still re-runs
// the step.
TEST(MetricAggregatorTest, ALateReportOfAnEvictedStepLeavesItsAggregate) {
  MetricAggregator agg({.straggler_factor = 1.5, .window = 3, .memory_steps = 4});
  std::vector<v1::AggregatedStep> stored;
  for (int64_t step = 1; step <= 10; ++step) {
    agg.Add(1, 2, Report(0, step, 1, 0.1, 1.0), step);
    const v1::AggregatedStep* s = agg.Add(1, 2, Report(1, step, 1, 0.1, 3.0), step);
    ASSERT_NE(s, nullptr);
    stored.push_back(*s);  // what the writer commits
  }
  ASSERT_FALSE(agg.Since(0).front().step() <= 2);  // step 2 left memory
  EXPECT_EQ(agg.Add(1, 2, Report(1, 2, 1, 0.1, 3.0), 20), nullptr);
  EXPECT_EQ(agg.Add(1, 2, Report(0, 2, 1, 0.1, 1.0), 21), nullptr);
  EXPECT_EQ(agg.late_reports(), 2);
  EXPECT_EQ(agg.in_memory(), 4u);
  // New steps of the generation still aggregate.
  ASSERT_NE(agg.Add(1, 2, Report(0, 11, 1, 0.1, 1.0), 22), nullptr);

  MetricAggregator restored({.straggler_factor = 1.5, .window = 3, .memory_steps = 4});
  for (const auto& s : stored) restored.Restore(s);
  EXPECT_EQ(restored.Add(1, 2, Report(1, 3, 1, 0.1, 3.0), 30), nullptr);
  EXPECT_EQ(restored.late_reports(), 1);
  // In memory after the restore: a duplicate, as before.
  EXPECT_EQ(restored.Add(1, 2, Report(1, 10, 1, 0.1, 3.0), 31), nullptr);
  EXPECT_EQ(restored.late_reports(), 1);
  // Generation 2 resumes from step 1's checkpoint: step 2 is re-run.
  const v1::AggregatedStep* rerun = restored.Add(2, 2, Report(0, 2, 1, 0.1, 5.0), 32);
  ASSERT_NE(rerun, nullptr);
  EXPECT_EQ(rerun->generation(), 2);
  EXPECT_EQ(rerun->ranks_reported(), 1);
  ASSERT_NE(restored.Add(2, 2, Report(1, 2, 1, 0.1, 7.0), 33), nullptr);
  EXPECT_DOUBLE_EQ(restored.Add(2, 2, Report(0, 3, 1, 0.1, 5.0), 34)->mean().at("loss"), 5.0);
}

TEST(MetricAggregatorTest, KeepInMemoryWidensTheWindowUntilAReset) {
  MetricAggregator agg({.memory_steps = 4});
  auto report = [&](int64_t step) {
    v1::StepMetrics m;
    m.set_rank(0);
    m.set_step(step);
    m.set_samples(1);
    m.set_step_seconds(0.1);
    return agg.Add(1, 2, m, 0);
  };
  for (int64_t s = 1; s <= 10; ++s) report(s);
  EXPECT_EQ(agg.in_memory(), 4u);
  agg.KeepInMemory(20);
  for (int64_t s = 11; s <= 40; ++s) report(s);
  EXPECT_EQ(agg.in_memory(), 20u);
  EXPECT_EQ(agg.Since(20).front().step(), 21);
  agg.ResetWindows();
  report(41);
  EXPECT_EQ(agg.in_memory(), 4u);
}

}  // namespace
}  // namespace frameworm::coordinator
