// Bounded growth on the Coordinator: ended jobs expire after
// retain_finished (rows, rank logs, checkpoint copies), metric histories are
// thinned, and a failed delete is retried after a restart.
#include <filesystem>
#include <fstream>

#include "coordinator/coordinator_fixture.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

class RetentionTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    CoordinatorOptions o = Options();
    o.retain_finished = absl::Hours(1);
    o.metric_history = 10;
    o.default_heartbeat_timeout = absl::Hours(1);  // the clock jumps
    o.startup_timeout = absl::ZeroDuration();
    SetOptions(o);
    coord_.reset();
    Open();
  }
  // Ticks past the 10 s spacing of the bounded-growth pass.
  void TickLater(absl::Duration d) {
    clock_.Advance(d);
    coord_->Tick();
  }
};

TEST_F(RetentionTest, RunningHistoriesAreThinnedAndEndedOnesToTheLimit) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  for (int64_t step = 1; step <= 20; ++step) ASSERT_TRUE(Step(id, 1, 0, step).ok());
  TickLater(absl::Seconds(11));
  EXPECT_EQ(coord_->GetMetrics(id, 0)->size(), 20u);  // at 2 x 10: not yet
  for (int64_t step = 21; step <= 50; ++step) ASSERT_TRUE(Step(id, 1, 0, step).ok());
  Heartbeat("w0");
  TickLater(absl::Seconds(1));  // within 10 s of the last pass: nothing
  EXPECT_EQ(coord_->GetMetrics(id, 0)->size(), 50u);
  TickLater(absl::Seconds(10));
  std::vector<v1::AggregatedStep> kept = *coord_->GetMetrics(id, 0);
  ASSERT_EQ(kept.size(), 10u);
  EXPECT_EQ(kept.front().step(), 1);
  EXPECT_EQ(kept.back().step(), 50);
  EXPECT_EQ(store_.LoadMetrics(id)->size(), 10u);  // deleted from the store too
  // Reports go on after thinning; the newest steps are whole.
  ASSERT_TRUE(Step(id, 1, 0, 51).ok());
  EXPECT_EQ(coord_->GetMetrics(id, 45)->size(), 6u);
  // A restart loads only what is left.
  coord_.reset();
  Open();
  EXPECT_EQ(coord_->GetMetrics(id, 0)->size(), 11u);
}

TEST_F(RetentionTest, OlderStepsComeFromTheStoreWhenMemoryHoldsOnlyTheTail) {
  CoordinatorOptions o = Options();
  o.metric_memory_steps = 4;
  o.metric_history = 0;
  SetOptions(o);
  coord_.reset();
  Open();
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  for (int64_t step = 1; step <= 30; ++step) ASSERT_TRUE(Step(id, 1, 0, step).ok());
  std::vector<v1::AggregatedStep> all = *coord_->GetMetrics(id, 0);
  ASSERT_EQ(all.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(all[i].step(), i + 1);
    EXPECT_DOUBLE_EQ(all[i].mean().at("loss"), 1.0 / (i + 1));
  }
  EXPECT_EQ(coord_->GetMetrics(id, 20)->size(), 10u);  // partly from the store
  EXPECT_EQ(coord_->GetMetrics(id, 28)->size(), 2u);   // memory only
  EXPECT_EQ(Job(id).step(), 30);
}

TEST_F(RetentionTest, EndedJobsExpireWithTheirRowsAndFilesRunningOnesNever) {
  AddWorker("w0", 1);
  const std::string done = Submit(Spec(1, 1));
  ASSERT_TRUE(Step(done, 1, 0, 1).ok());
  ASSERT_TRUE(coord_->logs().Append(done, 0, "hello\n").ok());
  TaskState("w0", done, 1, 0, v1::TASK_EXITED, 0);
  ASSERT_EQ(Job(done).state(), v1::SUCCEEDED);
  const std::string waiting = Submit(Spec(2, 1));  // never fits: PENDING
  const std::string running = Submit(Spec(1, 1));
  ASSERT_EQ(Job(running).state(), v1::RUNNING);
  ASSERT_TRUE(fs::exists(coord_->logs().Dir(done)));

  for (int i = 0; i < 11; ++i) {  // 55 minutes, heartbeating: kept
    Heartbeat("w0");
    TickLater(absl::Minutes(5));
  }
  EXPECT_TRUE(coord_->GetJob(done).ok());
  Heartbeat("w0");
  TickLater(absl::Minutes(6));
  EXPECT_EQ(coord_->GetJob(done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(coord_->logs().Dir(done)));
  const std::vector<JobRow> rows = *store_.LoadJobs();
  ASSERT_EQ(rows.size(), 2u);
  for (const JobRow& row : rows) EXPECT_NE(row.job_id, done);
  EXPECT_TRUE(store_.LoadMetrics(done)->empty());
  // Jobs that have not ended stay, however old.
  EXPECT_EQ(Job(waiting).state(), v1::PENDING);
  EXPECT_EQ(Job(running).state(), v1::RUNNING);
  coord_.reset();
  Open();
  EXPECT_EQ(coord_->GetJob(done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coord_->ListJobs().size(), 2u);
}

// Past max_ended_jobs the oldest to have ended go before retain_finished,
// with their rows and files: a flood of submitted-and-cancelled jobs
// cannot pile up. Jobs that have not ended are never counted or removed.
TEST_F(RetentionTest, PastTheLimitTheOldestEndedJobsGoFirst) {
  CoordinatorOptions o = Options();
  o.max_ended_jobs = 3;
  SetOptions(o);
  coord_.reset();
  Open();
  AddWorker("w0", 1);
  const std::string running = Submit(Spec(1, 1));
  ASSERT_EQ(Job(running).state(), v1::RUNNING);
  std::vector<std::string> ended;
  for (int i = 0; i < 5; ++i) {
    ended.push_back(Submit(Spec(2, 1)));  // never fits: cancelled while PENDING
    ASSERT_TRUE(coord_->logs().Append(ended.back(), 0, "x\n").ok());
    clock_.Advance(absl::Seconds(1));
    ASSERT_EQ(coord_->CancelJob(ended.back())->state(), v1::CANCELLED);
  }
  Heartbeat("w0");
  TickLater(absl::Seconds(11));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(coord_->GetJob(ended[i]).status().code(), absl::StatusCode::kNotFound) << i;
    EXPECT_FALSE(fs::exists(coord_->logs().Dir(ended[i]))) << i;
  }
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(coord_->GetJob(ended[i]).ok()) << i;
  EXPECT_EQ(Job(running).state(), v1::RUNNING);
  EXPECT_EQ(store_.LoadJobs()->size(), 4u);  // three ended, one running
  coord_.reset();
  Open();
  EXPECT_EQ(coord_->ListJobs().size(), 4u);
  // Per owner: another user's older ended job stays while this owner's
  // flood goes on (only this owner's oldest go).
  AddWorker("w0", 1);  // a new session after the restart
  absl::StatusOr<std::string> bobs = coord_->SubmitJob(Spec(2, 1), "bob");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  ASSERT_EQ(coord_->CancelJob(*bobs)->state(), v1::CANCELLED);
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    const std::string again = Submit(Spec(2, 1));
    ASSERT_EQ(coord_->CancelJob(again)->state(), v1::CANCELLED);
  }
  Heartbeat("w0");
  TickLater(absl::Seconds(11));
  EXPECT_TRUE(coord_->GetJob(*bobs).ok()) << "another owner's job went";
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ(coord_->GetJob(ended[i]).status().code(), absl::StatusCode::kNotFound) << i;
  }
}

// The newest job expires, then the coordinator restarts: the next job gets
// a new id, not the expired one's (whose checkpoint directory, named by the
// id, may still hold its files).
TEST_F(RetentionTest, AnExpiredJobsIdIsNeverGivenAgain) {
  AddWorker("w0", 1);
  const std::string done = Submit(Spec(1, 1));
  TaskState("w0", done, 1, 0, v1::TASK_EXITED, 0);
  ASSERT_EQ(Job(done).state(), v1::SUCCEEDED);
  Heartbeat("w0");
  TickLater(absl::Minutes(61));
  ASSERT_EQ(coord_->GetJob(done).status().code(), absl::StatusCode::kNotFound);
  coord_.reset();
  Open();
  EXPECT_NE(Submit(Spec(1, 1)), done);
}

TEST_F(RetentionTest, AFailedDeleteKeepsTheFilesAndIsRetriedAfterARestart) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  ASSERT_TRUE(coord_->logs().Append(id, 0, "x\n").ok());
  ASSERT_EQ(coord_->CancelJob(id)->state(), v1::CANCELLED);
  store_.FailWrites(absl::UnavailableError("disk gone"));
  TickLater(absl::Hours(2));
  // Gone from memory, but its rows could not be deleted: its files stay.
  EXPECT_EQ(coord_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(fs::exists(coord_->logs().Dir(id)));
  store_.FailWrites(absl::OkStatus());
  coord_.reset();
  Open();  // the rows come back ...
  EXPECT_TRUE(coord_->GetJob(id).ok());
  TickLater(absl::Seconds(1));  // ... and expire at the first pass
  EXPECT_EQ(coord_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(coord_->logs().Dir(id)));
  EXPECT_TRUE(store_.LoadJobs()->empty());
}

// Files of a job the store no longer has (a log chunk written just after
// its expiry removed its directory, or an expiry that stopped between the
// rows and the files) go at the next start; those of known jobs stay, and
// nothing but directories of the three kinds is touched (a symlinked
// directory is not followed).
TEST_F(RetentionTest, FilesOfAJobTheStoreNoLongerHasGoAtTheNextStart) {
  AddWorker("w0", 1);
  const std::string done = Submit(Spec(1, 1));
  ASSERT_EQ(coord_->CancelJob(done)->state(), v1::CANCELLED);
  const std::string kept = Submit(Spec(1, 1));
  ASSERT_TRUE(coord_->logs().Append(kept, 0, "kept\n").ok());
  for (int i = 0; i < 2; ++i) {  // 70 minutes, heartbeating: `kept` runs on
    Heartbeat("w0");
    TickLater(absl::Minutes(35));
  }
  ASSERT_EQ(coord_->GetJob(done).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(Job(kept).state(), v1::RUNNING);
  ASSERT_TRUE(coord_->logs().Append(done, 0, "late\n").ok());  // the racing chunk
  const fs::path state = Options().state_dir;
  for (const char* sub : {"checkpoint-copies", "tensorboard"}) {
    fs::create_directories(state / sub / "ghost");
    std::ofstream(state / sub / "ghost" / "f") << "x";
  }
  const fs::path outside = state / "outside";
  fs::create_directories(outside);
  std::ofstream(outside / "keep") << "x";
  fs::create_symlink(outside, state / "logs" / "linked");
  std::ofstream(state / "logs" / "plain-file") << "x";
  coord_.reset();
  Open();
  EXPECT_FALSE(fs::exists(coord_->logs().Dir(done)));
  EXPECT_FALSE(fs::exists(state / "checkpoint-copies" / "ghost"));
  EXPECT_FALSE(fs::exists(state / "tensorboard" / "ghost"));
  EXPECT_TRUE(fs::exists(coord_->logs().Path(kept, 0)));
  EXPECT_TRUE(fs::exists(outside / "keep"));
  EXPECT_TRUE(fs::is_symlink(state / "logs" / "linked"));
  EXPECT_TRUE(fs::exists(state / "logs" / "plain-file"));
}

}  // namespace
}  // namespace frameworm::coordinator
