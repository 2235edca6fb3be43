// Lifecycle events (event_log.h) as the Coordinator emits, stores and
// reloads them, on a MemoryStore with a simulated clock.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_fixture.h"
#include "coordinator/generation_plan.h"
#include "gmock/gmock.h"

namespace frameworm::coordinator {
namespace {

using ::testing::HasSubstr;

class CoordinatorEventsTest : public CoordinatorTest {
 protected:
  std::vector<v1::Event> Events(const std::optional<std::string>& job, int64_t after = 0) {
    auto events = coord_->ListEvents(job, after, 1000);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<v1::Event>{};
  }
  static std::vector<std::string> Kinds(const std::vector<v1::Event>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) out.push_back(e.kind());
    return out;
  }
  static const v1::Event* Find(const std::vector<v1::Event>& events, const std::string& kind) {
    for (const auto& e : events)
      if (e.kind() == kind) return &e;
    return nullptr;
  }
};

TEST_F(CoordinatorEventsTest, AFailedRankAndALostWorkerTellTheirCauseAndTheResumeStep) {
  AddWorker("w1", 1);
  AddWorker("w2", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  const std::string job = Submit(spec);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(Step(job, 1, r, 4).ok());
  ASSERT_TRUE(Checkpoint(job, 1, 4, CkptPath(job, 4)).ok());
  TaskState("w2", job, 1, 1, v1::TASK_KILLED, 0, 9);
  coord_->Tick();  // generation 2 starts, resuming from step 4
  // Then w2 goes silent: its heartbeat timeout fails generation 2 for good.
  clock_.Advance(absl::Seconds(11));
  Heartbeat("w1");
  coord_->Tick();

  const std::vector<v1::Event> events = Events(job);
  EXPECT_EQ(Kinds(events),
            (std::vector<std::string>{"job_submitted", "job_scheduled", "generation_started",
                                      "checkpoint_saved", "rank_failed", "restart",
                                      "generation_started", "worker_lost", "job_finished"}));
  const v1::Event* failed = Find(events, "rank_failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->generation(), 1);
  EXPECT_EQ(failed->rank(), 1);
  EXPECT_EQ(failed->signal(), 9);
  EXPECT_FALSE(failed->has_exit_code());
  EXPECT_EQ(failed->worker(), "w2");
  EXPECT_THAT(failed->message(), HasSubstr("rank 1 killed by signal 9 on worker w2"));
  const v1::Event* restart = Find(events, "restart");
  ASSERT_NE(restart, nullptr);
  EXPECT_EQ(restart->step(), 4);
  EXPECT_THAT(restart->message(), HasSubstr("restart 1 of 1: generation 2"));
  EXPECT_THAT(restart->message(), HasSubstr("resumes from step 4 (disk checkpoint)"));
  const v1::Event& started = events[6];
  EXPECT_EQ(started.generation(), 2);
  EXPECT_EQ(std::vector<std::string>(started.workers().begin(), started.workers().end()),
            (std::vector<std::string>{"w1", "w2"}));
  const v1::Event* lost = Find(events, "worker_lost");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->worker(), "w2");
  EXPECT_EQ(lost->generation(), 2);
  const v1::Event& finished = events.back();
  EXPECT_EQ(finished.state(), "FAILED");
  EXPECT_THAT(finished.message(), HasSubstr("missed heartbeats"));
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GT(events[i].seq(), events[i - 1].seq());
    EXPECT_GE(events[i].unix_ms(), events[i - 1].unix_ms());
  }
  // The cluster saw both workers join, then w2 leave.
  std::vector<std::string> cluster;
  for (const auto& e : Events(std::nullopt))
    if (e.job_id().empty()) cluster.push_back(e.kind() + ":" + e.worker());
  EXPECT_EQ(cluster,
            (std::vector<std::string>{"worker_joined:w1", "worker_joined:w2", "worker_left:w2"}));
  EXPECT_THAT(Job(job).last_cause(), HasSubstr("worker w2 missed heartbeats"));
}

TEST_F(CoordinatorEventsTest, ARestartedCoordinatorKeepsTheLastCauseAndNeverReusesASeq) {
  AddWorker("w1", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.set_max_restarts(3);
  const std::string job = Submit(spec);
  TaskState("w1", job, 1, 0, v1::TASK_EXITED, 3);
  coord_->Tick();
  ASSERT_EQ(Job(job).state(), v1::RUNNING);
  ASSERT_EQ(Job(job).generation(), 2);
  EXPECT_THAT(Job(job).last_cause(), HasSubstr("rank 0 exited with code 3 on worker w1"));
  const int64_t last = Events(std::nullopt).back().seq();
  Open();  // a restart
  EXPECT_THAT(Job(job).last_cause(), HasSubstr("rank 0 exited with code 3 on worker w1"));
  EXPECT_GT(Job(job).last_cause_unix_ms(), 0);
  AddWorker("w2", 1);
  const std::vector<v1::Event> after = Events(std::nullopt, last);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after[0].kind(), "worker_joined");
  EXPECT_EQ(after[0].seq(), last + 1);
}

TEST_F(CoordinatorEventsTest, AHangNamesTheSilentRankAndItsWorker) {
  AddWorker("w1", 1);
  AddWorker("w2", 1);
  const std::string job = Submit(Spec(2, 1));
  ASSERT_TRUE(Step(job, 1, 0, 1).ok());
  ASSERT_TRUE(Step(job, 1, 1, 1).ok());
  // Rank 0 keeps reporting, rank 1 is silent, until the hang is caught.
  for (int i = 0; i < 15 && Job(job).state() == v1::RUNNING; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    Heartbeat("w2");
    ASSERT_TRUE(Step(job, 1, 0, 2 + i).ok());
    coord_->Tick();
  }
  const v1::Event* hang = nullptr;
  const std::vector<v1::Event> events = Events(job);
  hang = Find(events, "hang_detected");
  ASSERT_NE(hang, nullptr);
  EXPECT_EQ(hang->rank(), 1);
  EXPECT_EQ(hang->worker(), "w2");
  EXPECT_THAT(hang->message(), HasSubstr("rank 1 hung"));
  EXPECT_EQ(events.back().kind(), "job_finished");
  EXPECT_EQ(events.back().state(), "FAILED");
}

TEST_F(CoordinatorEventsTest, InMemoryCheckpointsComeAndGoWithoutEvents) {
  AddWorker("w1", 1);
  const std::string job = Submit(Spec(1, 1));
  const std::string dir =
      MemoryCheckpointDir("/dev/shm/frameworm", job, Job(job).submitted_unix_ms());
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE(Step(job, 1, 0, step).ok());
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(job);
    r.mutable_ref()->set_generation(1);
    r.mutable_ref()->set_token(TokenOf(job, 1, 0));
    r.set_step(step);
    r.set_path(absl::StrCat(dir, "/ckpt-", step, ".pt"));
    r.set_bytes(4);
    r.set_checksum("crc32:0000abcd");
    r.set_memory(true);
    auto expired = coord_->ReportCheckpoint(r);
    ASSERT_TRUE(expired.ok()) << expired.status();
  }
  ASSERT_TRUE(Checkpoint(job, 1, 5, CkptPath(job, 5)).ok());
  std::vector<std::string> checkpoint_events;
  for (const auto& e : Events(job))
    if (e.kind().rfind("checkpoint", 0) == 0) checkpoint_events.push_back(e.kind());
  EXPECT_EQ(checkpoint_events, std::vector<std::string>{"checkpoint_saved"});
}

// Events reach the store in seq order however many threads make them at
// once: a follower reading every event after the last it saw (events -f)
// never finds a seq stored ahead of a lower one, which it would pass over
// for good. Four threads submit 150 jobs each while a reader follows.
TEST_F(CoordinatorEventsTest, EventsAreStoredInSeqOrderUnderConcurrentWriters) {
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      for (int i = 0; i < 150; ++i) (void)coord_->SubmitJob(Spec(1, 1), "local");
    });
  }
  int64_t after = 0, read = 0;
  std::string gap;
  auto follow = [&] {
    for (const v1::Event& e : Events(std::nullopt, after)) {
      if (e.seq() != after + 1 && gap.empty()) {
        gap = absl::StrCat("after seq ", after, " the store had ", e.seq());
      }
      after = e.seq();
      ++read;
    }
  };
  std::thread reader([&] {
    while (!done.load()) follow();
  });
  for (std::thread& w : writers) w.join();
  done = true;
  reader.join();
  follow();
  EXPECT_TRUE(gap.empty()) << gap;
  EXPECT_EQ(read, after);
  EXPECT_GE(read, 600);
}

TEST_F(CoordinatorEventsTest, EveryJobKeepsOnlyItsNewestEvents) {
  CoordinatorOptions o = Options();
  o.max_events_per_job = 3;
  SetOptions(o);
  Open();
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.mutable_checkpoint()->set_keep_last(0);  // no expiry events among the newest
  const std::string job = Submit(spec);
  for (int step = 2; step <= 12; step += 2) {
    ASSERT_TRUE(Step(job, 1, 0, step).ok());
    ASSERT_TRUE(Checkpoint(job, 1, step, CkptPath(job, step)).ok());
  }
  ASSERT_GT(Events(job).size(), 3u);
  clock_.Advance(absl::Seconds(11));
  Heartbeat("w1");
  coord_->Tick();  // bounded growth runs every 10 s
  const std::vector<v1::Event> kept = Events(job);
  ASSERT_EQ(kept.size(), 3u);
  bool newest_saved = false;
  for (const auto& e : kept) newest_saved |= e.kind() == "checkpoint_saved" && e.step() == 12;
  EXPECT_TRUE(newest_saved);
}

}  // namespace
}  // namespace frameworm::coordinator
