// The Coordinator facade end to end on a MemoryStore (restarts: a second
// Coordinator on the same MemoryStore) and the simulated clock; one test
// restarts on the SQLite store that Create() opens.
#include "coordinator/coordinator.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/rank_env.h"
#include "coordinator/coordinator_fixture.h"
#include "coordinator/generation_plan.h"
#include "coordinator/memory_store.h"
#include "coordinator/test_dir.h"
#include "gtest/gtest.h"
#include "proto/rank_env_proto.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

TEST_F(CoordinatorTest, LifecyclePendingRunningSucceeded) {
  const std::string id = Submit(Spec(2, 1));
  EXPECT_EQ(Job(id).state(), v1::PENDING);
  AddWorker("w0", 1);
  EXPECT_EQ(Job(id).state(), v1::PENDING);  // gang: needs both nodes
  AddWorker("w1", 1);
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 1);
  ASSERT_EQ(st.workers_size(), 2);
  EXPECT_EQ(Starts("w0").size(), 1u);
  EXPECT_EQ(Starts("w1").size(), 1u);
  TaskState("w0", id, 1, 0, v1::TASK_RUNNING);
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 0);
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  TaskState("w1", id, 1, 1, v1::TASK_EXITED, 0);
  st = Job(id);
  EXPECT_EQ(st.state(), v1::SUCCEEDED);
  EXPECT_GT(st.finished_unix_ms(), 0);
  // Slots are free again.
  for (const auto& w : coord_->ListWorkers()) EXPECT_EQ(w.free_slots(), 1);
}

TEST_F(CoordinatorTest, InvalidSpecRefusedAndNothingStored) {
  v1::JobSpec s = Spec(1, 1);
  s.set_nproc_per_node(-2);
  auto id = coord_->SubmitJob(s);
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("nproc_per_node"), std::string::npos)
      << id.status();
  s = Spec(1, 1);
  s.set_backend("tcp");
  EXPECT_NE(coord_->SubmitJob(s).status().message().find("backend"),
            std::string::npos);
  s = Spec(2, 1);
  s.set_nodes_max(1);
  EXPECT_NE(coord_->SubmitJob(s).status().message().find("nodes.max"),
            std::string::npos);
  EXPECT_TRUE(coord_->ListJobs().empty());
  coord_.reset();
  Open();
  EXPECT_TRUE(coord_->ListJobs().empty());
}

TEST_F(CoordinatorTest, PriorityFirstThenFifo) {
  const std::string a = Submit(Spec(1, 1, 0));
  const std::string b = Submit(Spec(1, 1, 0));
  const std::string c = Submit(Spec(1, 1, 5));
  AddWorker("w0", 1);
  EXPECT_EQ(Job(c).state(), v1::RUNNING);
  EXPECT_EQ(Job(a).state(), v1::PENDING);
  EXPECT_EQ(Job(b).state(), v1::PENDING);
  TaskState("w0", c, 1, 0, v1::TASK_EXITED, 0);
  EXPECT_EQ(Job(a).state(), v1::RUNNING);  // FIFO within priority 0
  EXPECT_EQ(Job(b).state(), v1::PENDING);
  TaskState("w0", a, 1, 0, v1::TASK_EXITED, 0);
  EXPECT_EQ(Job(b).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, JobTooBigForClusterDoesNotBlockQueue) {
  const std::string big = Submit(Spec(3, 1, 9));
  const std::string small = Submit(Spec(1, 1));
  AddWorker("w0", 1);
  EXPECT_EQ(Job(big).state(), v1::PENDING);
  EXPECT_EQ(Job(small).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, TwoJobsOnDisjointSlotsGetDistinctPorts) {
  AddWorker("w0", 2);
  AddWorker("w1", 2);
  const std::string a = Submit(Spec(2, 1));
  const std::string b = Submit(Spec(2, 1));
  const std::string c = Submit(Spec(2, 1));
  EXPECT_EQ(Job(a).state(), v1::RUNNING);
  EXPECT_EQ(Job(b).state(), v1::RUNNING);
  EXPECT_EQ(Job(c).state(), v1::PENDING);  // all 4 slots taken
  auto starts = Starts("w0");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_NE(starts[0].master_port(), starts[1].master_port());
  EXPECT_NE(starts[0].ref().job_id(), starts[1].ref().job_id());
  ASSERT_TRUE(coord_->CancelJob(a).ok());
  EXPECT_EQ(Job(c).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, RankAssignmentArgvAndEnv) {
  AddWorker("w0", 2);
  AddWorker("w1", 2);
  v1::JobSpec spec = Spec(2, 2);
  (*spec.mutable_train_options())["model"] = "cnn";
  (*spec.mutable_train_options())["epochs"] = "2";
  (*spec.mutable_env())["FOO"] = "bar";
  spec.set_backend("gloo");
  spec.mutable_checkpoint()->set_every_n_steps(50);
  const std::string id = Submit(spec);
  std::vector<v1::TaskSpec> all = Starts("w0");
  for (auto& t : Starts("w1")) all.push_back(t);
  ASSERT_EQ(all.size(), 4u);
  std::set<int> ranks;
  for (const auto& t : all) {
    EXPECT_EQ(t.rank(), t.node_rank() * 2 + t.local_rank());
    ranks.insert(t.rank());
    EXPECT_EQ(t.world_size(), 4);
    EXPECT_EQ(t.local_world_size(), 2);
    EXPECT_EQ(t.master_addr(), "w0.host");  // node rank 0's host
    // The process environment the worker builds from the typed fields.
    const std::map<std::string, std::string> env = ToEnvironment(RankEnvOf(t));
    EXPECT_EQ(env.at("RANK"), std::to_string(t.rank()));
    EXPECT_EQ(env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(t.local_rank()));
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("NODE_RANK"), std::to_string(t.node_rank()));
    EXPECT_EQ(env.at("MASTER_ADDR"), "w0.host");
    EXPECT_EQ(env.at("MASTER_PORT"), std::to_string(t.master_port()));
    EXPECT_EQ(env.at("FRAMEWORM_COORDINATOR"), "127.0.0.1:7070");
    EXPECT_EQ(env.at("FRAMEWORM_JOB_ID"), id);
    EXPECT_EQ(env.at("FRAMEWORM_GENERATION"), "1");
    EXPECT_EQ(env.count("FRAMEWORM_RESUME_FROM"), 0u);
    // TaskSpec.env carries the job's own env only.
    EXPECT_EQ(t.env().at("FOO"), "bar");
    EXPECT_EQ(t.env_size(), 1);
    const std::vector<std::string> argv(t.argv().begin(), t.argv().end());
    const std::vector<std::string> want = {
        "frameworm-train", "--epochs=2", "--model=cnn",
        "--checkpoint-dir=" + dir_ + "/checkpoints/" + id,
        "--checkpoint-every=50",
        absl::StrCat("--memory-checkpoint-dir=/dev/shm/frameworm/", id, "-",
                     Job(id).submitted_unix_ms()),
        "--memory-checkpoint-every=auto", "--backend=gloo"};
    EXPECT_EQ(argv, want);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  // A custom entrypoint runs as given.
  v1::JobSpec custom = Spec(1, 1);
  custom.add_entrypoint("/usr/bin/python3");
  custom.add_entrypoint("train.py");
  custom.mutable_checkpoint()->set_dir("/ckpt");
  EXPECT_EQ(TaskArgv(custom, "/ckpt/x"),
            (std::vector<std::string>{"/usr/bin/python3", "train.py"}));
}

TEST_F(CoordinatorTest, FailedRankRestartsAndStaleGenerationIsAborted) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  const std::string id = Submit(spec);
  const int port1 = Starts("w0")[0].master_port();
  Take("w1");
  ASSERT_TRUE(Step(id, 1, 0, 1).ok());
  TaskState("w1", id, 1, 1, v1::TASK_EXITED, 3);
  // Every worker of the job is told to kill its trainers of generation 1
  // (w1 also gets the receipt of its final status)...
  for (const char* w : {"w0", "w1"}) {
    auto cmds = Take(w);
    int receipts = 0;
    for (auto it = cmds.begin(); it != cmds.end();) {
      if (!it->has_receipt()) {
        ++it;
        continue;
      }
      ++receipts;
      EXPECT_TRUE(it->receipt().final_status());
      EXPECT_EQ(it->receipt().ref().generation(), 1);
      EXPECT_EQ(it->receipt().rank(), 1);
      it = cmds.erase(it);
    }
    EXPECT_EQ(receipts, std::string(w) == "w1" ? 1 : 0) << w;
    ASSERT_GE(cmds.size(), 2u) << w;
    ASSERT_TRUE(cmds[0].has_kill());
    EXPECT_EQ(cmds[0].kill().ref().generation(), 1);
    EXPECT_EQ(cmds[0].kill().rank(), -1);
    // ...and then receives generation 2 with a fresh port.
    ASSERT_TRUE(cmds[1].has_start());
    EXPECT_EQ(cmds[1].start().task().ref().generation(), 2);
    EXPECT_NE(cmds[1].start().task().master_port(), port1);
  }
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_EQ(st.restarts(), 1);
  EXPECT_NE(st.reason().find("rank 1 exited with code 3"), std::string::npos)
      << st.reason();
  // Generation 1 is dead: its reports are refused.
  EXPECT_EQ(Step(id, 1, 0, 2).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Checkpoint(id, 1, 2, dir_ + "/x").status().code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(Step(id, 2, 0, 2).ok());
  // A job that does not exist gets what a wrong token gets (nothing of
  // the job is told to a caller without a rank's token).
  EXPECT_EQ(Step("job-nope", 1, 0, 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Step(id, 2, 5, 1).status().code(),  // no rank 5: no token of it
            absl::StatusCode::kPermissionDenied);
  // A late status of generation 1 changes nothing; a stale task that still
  // runs is killed.
  TaskState("w0", id, 1, 0, v1::TASK_RUNNING);
  auto cmds = Take("w0");
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_TRUE(cmds[0].has_kill());
  EXPECT_EQ(Job(id).generation(), 2);
}

TEST_F(CoordinatorTest, CheckpointRetentionDeletesOnlyTheCoordinatorsCopies) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.mutable_checkpoint()->set_keep_last(2);
  const std::string id = Submit(spec);
  std::vector<std::string> paths;
  for (int step : {10, 20, 30}) {
    const std::string p = CkptPath(id, step);
    std::filesystem::create_directories(dir_ + "/checkpoints/" + id);
    std::ofstream(p) << "data";
    paths.push_back(p);
    v1::JobRef ref;
    ref.set_job_id(id);
    ref.set_generation(1);
    auto refused = coord_->BeginCheckpointUpload(ref, step, 4);  // no token
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
    ref.set_token(TokenOf(id, 1, 0));
    auto up = coord_->BeginCheckpointUpload(ref, step, 4);
    ASSERT_TRUE(up.ok()) << up.status();
    ASSERT_TRUE((*up)->Append("data").ok());
    ASSERT_TRUE((*up)->Commit(Crc32Text(0xadf3f363u)).ok());  // crc32("data")
    ASSERT_TRUE(coord_->CheckpointCopyOf(ref, p).status().code() == absl::StatusCode::kNotFound);
    auto expired = Checkpoint(id, 1, step, p);
    ASSERT_TRUE(coord_->CheckpointCopyOf(ref, p).ok());
    ASSERT_TRUE(expired.ok()) << expired.status();
    if (step == 30) {
      ASSERT_EQ(expired->size(), 1u);
      EXPECT_EQ((*expired)[0], paths[0]);
    } else {
      EXPECT_TRUE(expired->empty());
    }
  }
  // Reported paths are the trainer's to delete; the expired copy is gone.
  for (const auto& p : paths) EXPECT_TRUE(fs::exists(p)) << p;
  v1::JobRef ref;
  ref.set_job_id(id);
  ref.set_generation(1);
  ref.set_token(TokenOf(id, 1, 0));
  EXPECT_EQ(coord_->CheckpointCopyOf(ref, paths[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_ + "/checkpoint-copies/" + id + "/ckpt-10.pt"));
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoint-copies/" + id + "/ckpt-30.pt"));
  auto list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].step(), 30);
  EXPECT_EQ(Checkpoint(id, 1, 40, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  // The checksum is the text every copy is checked against: any other
  // form would make every worker refuse to hold the file.
  for (const std::string bad : {std::string("abc"), std::string("crc32:xyz00000"),
                                std::string("crc32:0000abcd0"), std::string("crc32:0000ABCD")}) {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(id);
    r.mutable_ref()->set_generation(1);
    r.mutable_ref()->set_token(TokenOf(id, 1, 0));
    r.set_step(40);
    r.set_path(CkptPath(id, 40));
    r.set_bytes(4);
    r.set_checksum(bad);
    auto refused = coord_->ReportCheckpoint(r);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("is not crc32:xxxxxxxx"), std::string::npos) << bad;
  }
  // Without an uploaded copy to take them from, the size and checksum are
  // what every holder checks its copy against: both are needed.
  for (const auto& [bytes, sum] : std::vector<std::pair<int64_t, std::string>>{
           {0, "crc32:0000abcd"}, {4, ""}, {0, ""}}) {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(id);
    r.mutable_ref()->set_generation(1);
    r.mutable_ref()->set_token(TokenOf(id, 1, 0));
    r.set_step(50);
    r.set_path(CkptPath(id, 50));
    r.set_bytes(bytes);
    r.set_checksum(sum);
    auto refused = coord_->ReportCheckpoint(r);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bytes << sum;
    EXPECT_NE(refused.status().message().find("needs its size (bytes > 0) and checksum"),
              std::string::npos)
        << refused.status();
  }
  EXPECT_EQ(coord_->ListCheckpoints(id)->size(), 2u);
}

// Rank 0 saves the job's checkpoints; every rank loads them. Another
// rank's token may fetch a copy or report a bad one, never upload a copy or
// record a checkpoint (it would replace what rank 0 saved).
TEST_F(CoordinatorTest, OnlyRankZeroUploadsOrRecordsCheckpoints) {
  AddWorker("w0", 2);
  const std::string id = Submit(Spec(1, 2));
  std::filesystem::create_directories(dir_ + "/checkpoints/" + id);
  const std::string p = CkptPath(id, 10);
  std::ofstream(p) << "data";
  v1::JobRef ref;
  ref.set_job_id(id);
  ref.set_generation(1);
  ref.set_token(TokenOf(id, 1, 1));
  auto refused = coord_->BeginCheckpointUpload(ref, 10, 4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("rank 1 of job " + id), std::string::npos);
  EXPECT_NE(refused.status().message().find("only rank 0"), std::string::npos);
  v1::CheckpointRecord r;
  *r.mutable_ref() = ref;
  r.set_step(10);
  r.set_path(p);
  r.set_bytes(4);
  r.set_checksum(Crc32Text(0xadf3f363u));  // crc32("data")
  EXPECT_EQ(coord_->ReportCheckpoint(r).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(coord_->ListCheckpoints(id)->empty());
  // Rank 0's upload and record go through; rank 1 reads the copy.
  v1::JobRef zero = ref;
  zero.set_token(TokenOf(id, 1, 0));
  auto up = coord_->BeginCheckpointUpload(zero, 10, 4);
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->Append("data").ok());
  ASSERT_TRUE((*up)->Commit(Crc32Text(0xadf3f363u)).ok());
  ASSERT_TRUE(Checkpoint(id, 1, 10, p).ok());
  EXPECT_TRUE(coord_->CheckpointCopyOf(ref, p).ok());
  EXPECT_EQ(coord_->ListCheckpoints(id)->size(), 1u);
}

// Copies uploaded and never reported do not pile up: each new upload
// removes the job's copies of steps it has no record of; recorded steps'
// copies stay.
TEST_F(CoordinatorTest, UnreportedCheckpointUploadsDoNotAccumulate) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  v1::JobRef ref;
  ref.set_job_id(id);
  ref.set_generation(1);
  ref.set_token(TokenOf(id, 1, 0));
  auto upload = [&](int64_t step) {
    auto up = coord_->BeginCheckpointUpload(ref, step, 4);
    ASSERT_TRUE(up.ok()) << up.status();
    ASSERT_TRUE((*up)->Append("data").ok());
    ASSERT_TRUE((*up)->Commit(Crc32Text(0xadf3f363u)).ok());  // crc32("data")
  };
  // A record whose size is not its uploaded copy's is refused, by name.
  upload(9);
  {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(id);
    r.mutable_ref()->set_generation(1);
    r.mutable_ref()->set_token(TokenOf(id, 1, 0));
    r.set_step(9);
    r.set_path(CkptPath(id, 9));
    r.set_bytes(5);
    r.set_checksum(Crc32Text(0xadf3f363u));
    auto refused = coord_->ReportCheckpoint(r);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("says 5 bytes; the copy uploaded for that step has 4"),
              std::string::npos)
        << refused.status();
    EXPECT_TRUE(coord_->ListCheckpoints(id)->empty());
    r.set_bytes(4);
    EXPECT_TRUE(coord_->ReportCheckpoint(r).ok());
  }
  const std::string copies = dir_ + "/checkpoint-copies/" + id;
  auto count = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(copies)) n += e.is_regular_file() ? 1 : 0;
    return n;
  };
  upload(10);
  const std::string p = CkptPath(id, 10);
  fs::create_directories(dir_ + "/checkpoints/" + id);
  std::ofstream(p) << "data";
  ASSERT_TRUE(Checkpoint(id, 1, 10, p).ok());
  for (int64_t step = 11; step <= 60; ++step) upload(step);  // never reported
  EXPECT_EQ(count(), 3) << "steps 9 and 10 (recorded) and the newest upload";
  EXPECT_TRUE(fs::exists(copies + "/ckpt-10.pt"));
  EXPECT_TRUE(fs::exists(copies + "/ckpt-60.pt"));
  EXPECT_TRUE(coord_->CheckpointCopyOf(ref, p).ok());
}

// An in-memory checkpoint answers no requested checkpoint: one past the
// requested step leaves the request standing (a growth waits for the disk
// one, which may still be uploading), and in-memory checkpoints every few
// seconds do not put off a timed (every_n_minutes) disk checkpoint.
TEST_F(CoordinatorTest, InMemoryCheckpointsAnswerNoRequestedCheckpoint) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_every_n_minutes(1);
  const std::string id = Submit(spec);
  ASSERT_TRUE(Step(id, 1, 0, 5).ok());
  ASSERT_TRUE(Step(id, 1, 1, 5).ok());
  auto at = coord_->RequestCheckpoint(id);
  ASSERT_TRUE(at.ok());
  ASSERT_EQ(*at, 7);
  ASSERT_TRUE(MemoryCheckpoint(id, 1, 8).ok());
  auto resp = Step(id, 1, 0, 8);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->checkpoint_at_step(), 7) << "an in-memory record answered the request";
  ASSERT_TRUE(Checkpoint(id, 1, 8, CkptPath(id, 8)).ok());
  resp = Step(id, 1, 0, 9);
  EXPECT_EQ(resp->checkpoint_at_step(), 0);
  // In-memory checkpoints every 5 s; the timed disk one comes a minute
  // after the disk checkpoint all the same.
  int64_t step = 9;
  int64_t asked_at = 0;
  absl::Duration elapsed;
  while (asked_at == 0 && elapsed < absl::Seconds(90)) {
    elapsed += absl::Seconds(5);
    ++step;
    ASSERT_TRUE(MemoryCheckpoint(id, 1, step).ok());
    asked_at = TickTwoRanks(id, step, absl::Seconds(5));
    ASSERT_GE(asked_at, 0);
  }
  EXPECT_EQ(elapsed, absl::Seconds(60));
  EXPECT_EQ(Job(id).generation(), 1);
}

// A timed checkpoint that the ranks pass without its record arriving (its
// file still uploading, or never taken) is dropped after 10 steps, and
// asked for again a whole interval after the ask, not at the next tick.
TEST_F(CoordinatorTest, AMissedTimedCheckpointIsAskedAgainAnIntervalLater) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_every_n_minutes(1);
  const std::string id = Submit(spec);
  int64_t step = 1;
  std::vector<absl::Duration> asks;  // when a new checkpoint step was asked
  int64_t asked = 0;
  absl::Duration elapsed;
  while (elapsed < absl::Seconds(150)) {
    elapsed += absl::Seconds(1);
    step += 2;  // 2 steps a second: a request is missed 5 s after its step
    const int64_t at = TickTwoRanks(id, step, absl::Seconds(1));
    ASSERT_GE(at, 0);
    if (at > asked) {
      asked = at;
      asks.push_back(elapsed);
    }
  }
  ASSERT_EQ(asks.size(), 2u) << "asked again at once after the miss";
  EXPECT_EQ(asks[1] - asks[0], absl::Seconds(60));
}

TEST_F(CoordinatorTest, OnDemandAndTimedCheckpointsAreAheadOfProgress) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_every_n_minutes(1);
  const std::string id = Submit(spec);
  EXPECT_EQ(coord_->RequestCheckpoint("job-x").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(Step(id, 1, 0, 5).ok());
  ASSERT_TRUE(Step(id, 1, 1, 4).ok());
  auto at = coord_->RequestCheckpoint(id);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(*at, 7);
  auto resp = Step(id, 1, 1, 5);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->checkpoint_at_step(), 7);
  ASSERT_TRUE(Checkpoint(id, 1, 7, CkptPath(id, 7)).ok());
  resp = Step(id, 1, 0, 8);
  EXPECT_EQ(resp->checkpoint_at_step(), 0);
  // every_n_minutes: a minute after the last checkpoint, Tick asks for one
  // (ahead of every rank's progress).
  int64_t step = 8;
  int64_t asked_at = 0;
  absl::Duration elapsed;
  while (asked_at == 0 && elapsed < absl::Seconds(90)) {
    elapsed += absl::Seconds(5);
    ++step;
    asked_at = TickTwoRanks(id, step, absl::Seconds(5));
    ASSERT_GE(asked_at, 0);
  }
  EXPECT_EQ(elapsed, absl::Seconds(60));
  EXPECT_EQ(asked_at, step + 2);  // max reported step (rank 1) + 2
  // A job that is not running refuses.
  const std::string pending = Submit(Spec(5, 1));
  EXPECT_EQ(coord_->RequestCheckpoint(pending).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A rank its worker fenced (cut off from the coordinator for the heartbeat
// timeout) reported for the current generation: the coordinator never
// noticed the worker's absence, so it was away itself (stopped, restarting).
// The job restarts without using up max_restarts; a fenced report of a
// generation already ended changes nothing; past kMaxUncountedRestarts such
// restarts count again.
TEST_F(CoordinatorTest, ARankFencedWhileCurrentRestartsWithoutCountingIt) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_max_restarts(0);
  const std::string id = Submit(spec);
  auto fenced = [&](int64_t gen) { TaskState("w0", id, gen, 0, v1::TASK_KILLED, 0, 9, true); };
  for (int64_t gen = 1; gen <= JobScheduler::kMaxUncountedRestarts; ++gen) {
    ASSERT_EQ(Starts("w0").size(), 1u) << gen;
    fenced(gen);
    coord_->Tick();
    v1::JobStatus st = Job(id);
    ASSERT_EQ(st.state(), v1::RUNNING) << gen << " " << st.reason();
    EXPECT_EQ(st.generation(), gen + 1);
    EXPECT_EQ(st.restarts(), 0);
    fenced(gen);  // the same report again: its generation has ended
    EXPECT_EQ(Job(id).generation(), gen + 1);
  }
  EXPECT_NE(Job(id).last_cause().find("while the coordinator was stopped or restarting"),
            std::string::npos)
      << Job(id).last_cause();
  ASSERT_EQ(Starts("w0").size(), 1u);
  fenced(JobScheduler::kMaxUncountedRestarts + 1);  // bounded: this one counts
  EXPECT_EQ(Job(id).state(), v1::FAILED);
  // A rank killed otherwise (not fenced) counts as before.
  const std::string other = Submit(spec);
  ASSERT_EQ(Starts("w0").size(), 1u);
  TaskState("w0", other, 1, 0, v1::TASK_KILLED, 0, 9);
  EXPECT_EQ(Job(other).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, HeartbeatTimeoutRestartsFromNewestCheckpointThenFails) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_max_restarts(1);
  spec.set_heartbeat_timeout_s(5);
  const std::string id = Submit(spec);
  ASSERT_EQ(Starts("w0").size(), 1u);  // w0 comes first by name
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  ASSERT_TRUE(Checkpoint(id, 1, 20, CkptPath(id, 20)).ok());
  // w0 goes silent; w1 keeps heartbeating.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    coord_->Tick();
    EXPECT_EQ(Job(id).generation(), 1) << i;
  }
  clock_.Advance(absl::Seconds(1));
  Heartbeat("w1");
  coord_->Tick();
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_EQ(st.restarts(), 1);
  EXPECT_NE(st.reason().find("worker w0 missed heartbeats"), std::string::npos)
      << st.reason();
  auto starts = Starts("w1");  // placed on the healthy worker
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].resume_from(), CkptPath(id, 20));
  EXPECT_EQ(ToEnvironment(RankEnvOf(starts[0])).at("FRAMEWORM_RESUME_FROM"),
            CkptPath(id, 20));
  auto kills = Take("w0");
  ASSERT_FALSE(kills.empty());
  EXPECT_TRUE(kills.back().has_kill());
  // Now w1 goes silent too: no restarts left -> FAILED.
  clock_.Advance(absl::Seconds(6));
  coord_->Tick();
  st = Job(id);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find("worker w1 missed heartbeats"), std::string::npos);
  EXPECT_NE(st.reason().find("no restarts left"), std::string::npos);
}

// A program that does not resume counts its steps from 0 again in each
// generation: its new checkpoints are newer than the old generation's
// higher steps. Ordered by step alone they expired as they were reported
// and the next restart resumed from the old generation's.
TEST_F(CoordinatorTest, ALaterGenerationsCheckpointsAreNewerWhateverTheirSteps) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  AddWorker("w2", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_max_restarts(2);
  spec.set_heartbeat_timeout_s(5);
  spec.mutable_checkpoint()->set_keep_last(2);
  const std::string id = Submit(spec);
  ASSERT_EQ(Starts("w0").size(), 1u);
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  ASSERT_TRUE(Checkpoint(id, 1, 20, CkptPath(id, 20)).ok());
  // Silences every worker but `alive` until the job's generation moves on.
  auto lose_all_but = [&](std::vector<std::string> alive, int64_t generation) {
    for (int i = 0; i < 8 && Job(id).generation() < generation; ++i) {
      clock_.Advance(absl::Seconds(1));
      for (const std::string& w : alive) Heartbeat(w);
      coord_->Tick();
    }
    ASSERT_EQ(Job(id).generation(), generation);
  };
  lose_all_but({"w1", "w2"}, 2);
  auto expired = Checkpoint(id, 2, 5, CkptPath(id, 5));
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, std::vector<std::string>{CkptPath(id, 10)});
  expired = Checkpoint(id, 2, 8, CkptPath(id, 8));
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, std::vector<std::string>{CkptPath(id, 20)});
  // The next restart resumes from generation 2's newest, not step 20.
  std::string worker;
  for (const std::string& w : {"w1", "w2"}) {
    if (!Starts(w).empty()) worker = w;
  }
  ASSERT_FALSE(worker.empty());
  lose_all_but({worker == "w1" ? "w2" : "w1"}, 3);
  const std::string next = worker == "w1" ? "w2" : "w1";
  auto starts = Starts(next);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].resume_from(), CkptPath(id, 8));
}

TEST_F(CoordinatorTest, HungRankAbortsGeneration) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_heartbeat_timeout_s(4);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  ASSERT_TRUE(Step(id, 1, 0, 1).ok());
  ASSERT_TRUE(Step(id, 1, 1, 1).ok());
  // Rank 1 stops (SIGSTOP); rank 0 keeps reporting, workers keep beating.
  for (int i = 2; i <= 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w0");
    Heartbeat("w1");
    ASSERT_TRUE(Step(id, 1, 0, i).ok());
    coord_->Tick();
    EXPECT_EQ(Job(id).generation(), 1);
  }
  clock_.Advance(absl::Seconds(1.5));
  Heartbeat("w0");
  Heartbeat("w1");
  coord_->Tick();
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_NE(st.reason().find("rank 1 hung"), std::string::npos) << st.reason();
  // In generation 2, no rank progresses at all after the first report.
  ASSERT_TRUE(Step(id, 2, 0, 1).ok());
  clock_.Advance(absl::Seconds(3));
  Heartbeat("w0");
  Heartbeat("w1");
  coord_->Tick();
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  clock_.Advance(absl::Seconds(2));
  Heartbeat("w0");
  Heartbeat("w1");
  coord_->Tick();
  EXPECT_EQ(Job(id).state(), v1::FAILED);
  EXPECT_NE(Job(id).reason().find("hung"), std::string::npos);
}

// A rank that evaluates (no steps) but sends progress reports is not hung;
// progress reports add no metrics.
TEST_F(CoordinatorTest, ProgressReportsKeepAnEvaluatingRankAlive) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_heartbeat_timeout_s(4);
  const std::string id = Submit(spec);
  ASSERT_TRUE(Step(id, 1, 0, 1).ok());
  ASSERT_TRUE(Step(id, 1, 1, 1).ok());
  for (int i = 0; i < 10; ++i) {  // 10 s of evaluation, progress every 1 s
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w0");
    Heartbeat("w1");
    for (int r = 0; r < 2; ++r) {
      v1::StepMetrics m;
      m.mutable_ref()->set_job_id(id);
      m.mutable_ref()->set_generation(1);
      m.set_rank(r);
      m.mutable_ref()->set_token(TokenOf(id, 1, r));
      m.set_step(1);
      m.set_progress_only(true);
      ASSERT_TRUE(coord_->ReportStep(m).ok());
    }
    coord_->Tick();
    ASSERT_EQ(Job(id).generation(), 1) << Job(id).reason();
  }
  auto steps = coord_->GetMetrics(id, 0);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].ranks_reported(), 2);
  EXPECT_DOUBLE_EQ((*steps)[0].mean().at("loss"), 1.0);
  // Without them, the same silence is a hang.
  clock_.Advance(absl::Seconds(5));
  Heartbeat("w0");
  Heartbeat("w1");
  coord_->Tick();
  EXPECT_NE(Job(id).reason().find("hung"), std::string::npos) << Job(id).reason();
}

TEST_F(CoordinatorTest, CancelKillsEverything) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 1));
  Take("w0");
  Take("w1");
  auto st = coord_->CancelJob(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), v1::CANCELLED);
  for (const char* w : {"w0", "w1"}) {
    auto cmds = Take(w);
    ASSERT_EQ(cmds.size(), 1u);
    ASSERT_TRUE(cmds[0].has_kill());
    EXPECT_EQ(cmds[0].kill().ref().job_id(), id);
    EXPECT_EQ(cmds[0].kill().rank(), -1);
  }
  EXPECT_EQ(coord_->CancelJob(id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(coord_->CancelJob("job-none").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Step(id, 1, 0, 1).status().code(), absl::StatusCode::kAborted);
  // A pending job cancels without any kill.
  const std::string p = Submit(Spec(9, 1));
  EXPECT_EQ(coord_->CancelJob(p)->state(), v1::CANCELLED);
}

TEST_F(CoordinatorTest, WorkerReRegisteringWithoutItsTaskFailsGeneration) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  const std::string old_session = sessions_["w0"];
  AddWorker("w0", 1);  // the worker restarted and lost its trainer
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_NE(st.reason().find("lost"), std::string::npos) << st.reason();
  EXPECT_EQ(coord_->AttachSession(old_session).code(),
            absl::StatusCode::kNotFound);
  v1::RegisterWorkerRequest bad;
  bad.set_name("w9");
  bad.set_address("h");
  bad.set_slots(0);
  EXPECT_EQ(coord_->RegisterWorker(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, HeartbeatOfStaleWorkerSchedulesPendingJob) {
  AddWorker("w0", 1);
  // Quiet for longer than three heartbeat intervals: not schedulable.
  clock_.Advance(absl::Seconds(4));
  const std::string id = Submit(Spec(1, 1));
  EXPECT_EQ(Job(id).state(), v1::PENDING);
  EXPECT_TRUE(Take("w0").empty());
  // Its next heartbeat makes it fresh: the pending job starts on it.
  Heartbeat("w0");
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  ASSERT_EQ(Starts("w0").size(), 1u);
  // Further heartbeats of a fresh worker change nothing.
  Heartbeat("w0");
  EXPECT_TRUE(Take("w0").empty());
}

TEST_F(CoordinatorTest, StateSurvivesRestartAndWorkersReconcile) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_heartbeat_timeout_s(5);
  const std::string id = Submit(spec);
  const std::string other = Submit(Spec(1, 1));  // pending: no free slot
  ASSERT_TRUE(Step(id, 1, 0, 1).ok());
  ASSERT_TRUE(Step(id, 1, 1, 1).ok());
  ASSERT_TRUE(Step(id, 1, 0, 2).ok());
  ASSERT_TRUE(Checkpoint(id, 1, 2, CkptPath(id, 2)).ok());
  TaskState("w1", id, 1, 1, v1::TASK_RUNNING);

  coord_.reset();  // the coordinator dies
  clock_.Advance(absl::Seconds(1));
  Open();
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.step(), 2);
  EXPECT_EQ(Job(other).state(), v1::PENDING);
  auto metrics = coord_->GetMetrics(id, 0);
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 2u);
  EXPECT_EQ((*metrics)[0].ranks_reported(), 2);
  EXPECT_EQ((*metrics)[1].ranks_reported(), 1);
  ASSERT_EQ(coord_->ListCheckpoints(id)->size(), 1u);

  // Both workers come back with the tasks they still run.
  auto running = [&](int rank, int64_t gen) {
    v1::TaskStatus t;
    t.mutable_ref()->set_job_id(id);
    t.mutable_ref()->set_generation(gen);
    t.set_rank(rank);
    t.set_state(v1::TASK_RUNNING);
    return t;
  };
  AddWorker("w0", 1, {running(0, 1)});
  // w1 also reports a stale task of an older generation: killed.
  AddWorker("w1", 1, {running(1, 1), running(0, 0)});
  auto cmds = Take("w1");
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_TRUE(cmds[0].has_kill());
  EXPECT_EQ(cmds[0].kill().ref().generation(), 0);
  EXPECT_TRUE(Take("w0").empty());  // nothing restarted
  ASSERT_TRUE(Step(id, 1, 1, 2).ok());  // the late rank's report merges
  EXPECT_EQ(coord_->GetMetrics(id, 1)->at(0).ranks_reported(), 2);
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w0");
    Heartbeat("w1");
    ASSERT_TRUE(Step(id, 1, 0, 3 + i).ok());
    ASSERT_TRUE(Step(id, 1, 1, 3 + i).ok());
    coord_->Tick();
  }
  st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 1);
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 0);
  TaskState("w1", id, 1, 1, v1::TASK_EXITED, 0);
  EXPECT_EQ(Job(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(Job(other).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, WorkersNotReturningAfterRestartFailTheGeneration) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_heartbeat_timeout_s(3);
  const std::string id = Submit(spec);
  coord_.reset();
  Open();
  // Timeout (3 s) plus reconnect grace (2 s).
  clock_.Advance(absl::Seconds(4.5));
  coord_->Tick();
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  clock_.Advance(absl::Seconds(1));
  coord_->Tick();
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find("worker w0 missed heartbeats"), std::string::npos);
}

TEST_F(CoordinatorTest, LogChunksAppendToRankFiles) {
  const std::string session = AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  for (const char* part : {"hello ", "world\n"}) {
    v1::WorkerMessage m;
    m.set_session_id(session);
    m.mutable_log()->mutable_ref()->set_job_id(id);
    m.mutable_log()->set_rank(0);
    m.mutable_log()->set_data(part);
    ASSERT_TRUE(coord_->HandleWorkerMessage(m).ok());
  }
  std::ifstream in(coord_->logs().Path(id, 0));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "hello world\n");
  v1::WorkerMessage bad;
  bad.set_session_id(session);
  bad.mutable_log()->mutable_ref()->set_job_id("../etc");
  EXPECT_EQ(coord_->HandleWorkerMessage(bad).code(),
            absl::StatusCode::kInvalidArgument);
  bad.set_session_id("nope");
  EXPECT_EQ(coord_->HandleWorkerMessage(bad).code(),
            absl::StatusCode::kNotFound);
}

// Errors name an unknown job by a bounded, printable excerpt of its id.
TEST_F(CoordinatorTest, UnknownJobErrorsQuoteTheIdCutShort) {
  const std::string huge = std::string(1 << 20, 'j') + "\x1b";
  for (const absl::Status& s : {coord_->GetJob(huge).status(), coord_->CancelJob(huge).status(),
                                coord_->ListCheckpoints(huge).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_LT(s.message().size(), 200u) << s.message().substr(0, 100);
  }
}

// A worker adds only to the logs of ranks it ran, in that generation; a
// finished generation's logs stay open to its own workers (their last
// chunks arrive after the end), not to others, and future generations are
// refused.
TEST_F(CoordinatorTest, LogChunksComeOnlyFromTheWorkerThatRanTheRankThen) {
  std::map<std::string, std::string> session;
  for (const char* w : {"w0", "w1", "w2"}) session[w] = AddWorker(w, 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  auto send = [&](const std::string& w, int64_t gen, int rank) {
    v1::WorkerMessage m;
    m.set_session_id(session[w]);
    m.mutable_log()->mutable_ref()->set_job_id(id);
    m.mutable_log()->mutable_ref()->set_generation(gen);
    m.mutable_log()->set_rank(rank);
    m.mutable_log()->set_stream("stdout");
    m.mutable_log()->set_offset(0);
    m.mutable_log()->set_data(w + "\n");
    return coord_->HandleWorkerMessage(m);
  };
  const v1::JobStatus st = Job(id);
  ASSERT_EQ(st.generation(), 1);
  std::map<int, std::string> ran;  // rank -> worker, generation 1
  for (const char* w : {"w0", "w1", "w2"}) {
    for (const auto& t : Starts(w)) ran[t.rank()] = w;
  }
  ASSERT_EQ(ran.size(), 2u);
  std::string spare = "w2";
  for (const char* w : {"w0", "w1", "w2"}) {
    if (ran[0] != w && ran[1] != w) spare = w;
  }
  EXPECT_TRUE(send(ran[0], 1, 0).ok());
  EXPECT_EQ(send(ran[1], 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(send(spare, 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(send(ran[0], 2, 0).code(), absl::StatusCode::kInvalidArgument);  // not yet
  EXPECT_EQ(send(ran[0], -1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(send(ran[0], 1, 2).code(), absl::StatusCode::kInvalidArgument);  // no rank 2
  // Generation 1 fails; generation 2 starts.
  TaskState(ran[1], id, 1, 1, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 2);
  EXPECT_TRUE(send(ran[0], 1, 0).ok()) << "the ended generation's tail";
  EXPECT_TRUE(send(ran[1], 1, 1).ok());
  EXPECT_EQ(send(spare, 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(send(ran[1], 1, 0).code(), absl::StatusCode::kInvalidArgument);
  // Generation 0 in a chunk is the job's current generation, where it is
  // checked and where it is written: generation 1's bytes at the same
  // offsets do not make it look written already.
  std::string now_rank0;
  for (const char* w : {"w0", "w1", "w2"}) {
    for (const auto& t : Starts(w))
      if (t.ref().generation() == 2 && t.rank() == 0) now_rank0 = w;
  }
  ASSERT_FALSE(now_rank0.empty());
  {
    v1::WorkerMessage m;
    m.set_session_id(session[now_rank0]);
    m.mutable_log()->mutable_ref()->set_job_id(id);
    m.mutable_log()->set_rank(0);
    m.mutable_log()->set_stream("stdout");
    m.mutable_log()->set_offset(0);
    m.mutable_log()->set_data("generation two\n");
    ASSERT_TRUE(coord_->HandleWorkerMessage(m).ok());
  }
  std::ifstream in(coord_->logs().Path(id, 0));
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find(spare + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("generation two\n"), std::string::npos) << text;
}

// Every stored chunk is receipted with the end of what the coordinator has
// from its source; a chunk sent again (a worker that lost its session) is
// written once; a chunk refused for good is receipted so the worker drops it.
TEST_F(CoordinatorTest, LogChunksAreReceiptedAndResentChunksWrittenOnce) {
  const std::string session = AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  Take("w0");
  auto send = [&](const std::string& job, int64_t offset, const std::string& data) {
    v1::WorkerMessage m;
    m.set_session_id(session);
    m.mutable_log()->mutable_ref()->set_job_id(job);
    m.mutable_log()->mutable_ref()->set_generation(1);
    m.mutable_log()->set_rank(0);
    m.mutable_log()->set_stream("stdout");
    m.mutable_log()->set_offset(offset);
    m.mutable_log()->set_data(data);
    return coord_->HandleWorkerMessage(m);
  };
  auto receipts = [&] {
    std::vector<int64_t> ends;
    for (const auto& c : Take("w0")) {
      if (!c.has_receipt()) continue;
      EXPECT_EQ(c.receipt().stream(), "stdout");
      EXPECT_EQ(c.receipt().rank(), 0);
      ends.push_back(c.receipt().log_offset());
    }
    return ends;
  };
  ASSERT_TRUE(send(id, 0, "step 1\n").ok());
  ASSERT_TRUE(send(id, 7, "step 2\n").ok());
  EXPECT_EQ(receipts(), (std::vector<int64_t>{14}));  // not yet taken: coalesced
  ASSERT_TRUE(send(id, 0, "step 1\nstep 2\ndone\n").ok());  // resent after a lost session
  EXPECT_EQ(receipts(), (std::vector<int64_t>{19}));
  std::ifstream in(coord_->logs().Path(id, 0));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "step 1\nstep 2\ndone\n");
  EXPECT_EQ(send("job-999999", 5, "lost").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receipts(), (std::vector<int64_t>{9}));  // refused for good: not to be kept
  EXPECT_EQ(send(id, INT64_MAX - 1, "xyz").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receipts(), (std::vector<int64_t>{INT64_MAX}));
}

// Create() keeps its state in SQLite under state_dir: a job, its running
// generation and its checkpoints survive a restart.
TEST_F(CoordinatorTest, CreateReloadsFromSqliteUnderStateDir) {
  coord_.reset();
  auto c = Coordinator::Create(Options(), clock_);
  ASSERT_TRUE(c.ok()) << c.status();
  coord_ = std::move(c).value();
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  ASSERT_TRUE(Checkpoint(id, 1, 4, CkptPath(id, 4)).ok());
  const int port = Starts("w0")[0].master_port();
  coord_.reset();
  EXPECT_TRUE(fs::exists(dir_ + "/coordinator.db"));
  EXPECT_EQ(store_.writes(), 0);  // the MemoryStore was not used
  c = Coordinator::Create(Options(), clock_);
  ASSERT_TRUE(c.ok()) << c.status();
  coord_ = std::move(c).value();
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 1);
  ASSERT_EQ(coord_->ListCheckpoints(id)->size(), 1u);
  // The reloaded generation still holds its MASTER_PORT.
  AddWorker("w1", 1);
  Submit(Spec(1, 1));
  auto starts = Starts("w1");
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_NE(starts[0].master_port(), port);
}

// A store that refuses writes: nothing is acknowledged, nothing changes.
TEST_F(CoordinatorTest, StoreFailuresAreNotAcknowledged) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  store_.FailWrites(absl::UnavailableError("disk gone"));
  auto refused = coord_->SubmitJob(Spec(1, 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(coord_->ListJobs().size(), 1u);
  EXPECT_EQ(coord_->CancelJob(id).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_EQ(Checkpoint(id, 1, 3, CkptPath(id, 3)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(coord_->ListCheckpoints(id)->empty());
  auto step = Step(id, 1, 0, 1);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(step.status().message().find("not committed"), std::string::npos);
  store_.FailWrites(absl::OkStatus());
  EXPECT_TRUE(Step(id, 1, 0, 1).ok());  // the retry is acknowledged
  EXPECT_EQ(coord_->CancelJob(id)->state(), v1::CANCELLED);
}

// While the store fails, the metric rows waiting for it are bounded: once
// the backlog is full, reports are answered UNAVAILABLE without being
// aggregated, still count as progress (no hang), and are recorded when sent
// again after the store recovers.
TEST_F(CoordinatorTest, MetricBacklogIsBoundedWhileTheStoreFails) {
  CoordinatorOptions o = Options();
  o.max_metric_backlog_bytes = 1;  // one staged row fills it
  SetOptions(o);
  Open();
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_heartbeat_timeout_s(4);
  const std::string id = Submit(spec);
  ASSERT_TRUE(Step(id, 1, 0, 1).ok());
  store_.FailWrites(absl::UnavailableError("disk gone"), "PutMetrics");
  auto first = Step(id, 1, 0, 2);  // aggregated, staged, not committed
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(first.status().message().find("not committed"), std::string::npos);
  for (int i = 3; i <= 12; ++i) {  // 10 s, past the 4 s hang timeout
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w0");
    auto r = Step(id, 1, 0, i);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << i;
    EXPECT_NE(r.status().message().find("not recorded, send it again"), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("disk gone"), std::string::npos) << r.status();
    coord_->Tick();
    EXPECT_EQ(Job(id).generation(), 1) << Job(id).reason();
  }
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  // A batch is deferred whole.
  v1::StepReports batch;
  for (int i = 11; i <= 12; ++i) {
    v1::StepMetrics* m = batch.add_reports();
    m->mutable_ref()->set_job_id(id);
    m->mutable_ref()->set_generation(1);
    m->mutable_ref()->set_token(TokenOf(id, 1, 0));
    m->set_rank(0);
    m->set_step(i);
    m->set_samples(8);
    (*m->mutable_values())["loss"] = 1.0 / i;
  }
  const absl::Status batch_status = ReportBatch(batch);
  EXPECT_EQ(batch_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(batch_status.message().find("not recorded"), std::string::npos) << batch_status;
  // Nothing past step 2 was aggregated meanwhile.
  auto held = coord_->GetMetrics(id, 0);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 2u);
  // The store recovers: the rank sends its reports again, all recorded.
  store_.FailWrites(absl::OkStatus());
  for (int tries = 0; tries < 3 && !Step(id, 1, 0, 3).ok(); ++tries) {
  }
  for (int i = 3; i <= 12; ++i) EXPECT_TRUE(Step(id, 1, 0, i).ok()) << i;
  auto steps = coord_->GetMetrics(id, 0);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 12u);
  EXPECT_EQ(steps->back().step(), 12);
  EXPECT_NEAR(steps->back().mean().at("loss"), 1.0 / 12, 1e-12);
}

// After a deferral, each rank sends its queued reports again from its own
// moment: one rank's resends can run far ahead of another's (here 40 steps
// against 8 aggregates in memory), and the other's still merge.
TEST_F(CoordinatorTest, DeferredReportsMergeHoweverFarApartTheRanksSendThemAgain) {
  CoordinatorOptions o = Options();
  o.max_metric_backlog_bytes = 1;
  o.metric_memory_steps = 8;
  SetOptions(o);
  Open();
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 1));
  store_.FailWrites(absl::UnavailableError("disk gone"), "PutMetrics");
  ASSERT_FALSE(Step(id, 1, 0, 1).ok());  // staged: the backlog is full
  for (int i = 2; i <= 40; ++i) {
    for (int rank : {0, 1}) {
      auto r = Step(id, 1, rank, i);
      EXPECT_NE(r.status().message().find("not recorded"), std::string::npos) << r.status();
    }
  }
  store_.FailWrites(absl::OkStatus());
  for (int tries = 0; tries < 3 && !Step(id, 1, 0, 2).ok(); ++tries) {
  }
  for (int i = 2; i <= 40; ++i) EXPECT_TRUE(Step(id, 1, 0, i).ok()) << i;
  for (int i = 1; i <= 40; ++i) EXPECT_TRUE(Step(id, 1, 1, i).ok()) << i;
  auto steps = coord_->GetMetrics(id, 0);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 40u);
  for (const v1::AggregatedStep& s : *steps) EXPECT_EQ(s.ranks_reported(), 2) << s.step();
}

// A deferred batch comes back whole: a refused report in it does not drop
// the deferred reports before it; a refusal of its first report is final.
TEST_F(CoordinatorTest, ADeferredBatchWithARefusedReportComesBack) {
  CoordinatorOptions o = Options();
  o.max_metric_backlog_bytes = 1;
  SetOptions(o);
  Open();
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  store_.FailWrites(absl::UnavailableError("disk gone"), "PutMetrics");
  ASSERT_FALSE(Step(id, 1, 0, 1).ok());
  auto send = [&](std::vector<int> ranks) {
    v1::StepReports batch;
    int step = 2;
    for (int rank : ranks) {
      v1::StepMetrics* m = batch.add_reports();
      m->mutable_ref()->set_job_id(id);
      m->mutable_ref()->set_generation(1);
      m->mutable_ref()->set_token(TokenOf(id, 1, 0));
      m->set_rank(rank);
      m->set_step(step++);
      m->set_samples(8);
    }
    return ReportBatch(batch);
  };
  absl::Status later_refused = send({0, 7});
  EXPECT_EQ(later_refused.code(), absl::StatusCode::kUnavailable) << later_refused;
  EXPECT_NE(later_refused.message().find("not recorded"), std::string::npos);
  absl::Status first_refused = send({7, 0});
  EXPECT_EQ(first_refused.code(), absl::StatusCode::kInvalidArgument) << first_refused;
  store_.FailWrites(absl::OkStatus());
}

TEST_F(CoordinatorTest, ZeroMetricBacklogIsRefused) {
  CoordinatorOptions o = Options();
  o.max_metric_backlog_bytes = 0;
  auto c = Coordinator::CreateWithStore(o, clock_, &store_);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("max_metric_backlog_bytes"), std::string::npos);
}

TEST_F(CoordinatorTest, WorkersGoneForAnHourAreForgottenOnTick) {
  const std::string s = AddWorker("w0", 1);
  AddWorker("w1", 1);
  coord_->DetachSession(s);
  clock_.Advance(absl::Minutes(59));
  Heartbeat("w1");
  coord_->Tick();
  EXPECT_EQ(coord_->ListWorkers().size(), 2u);  // not yet
  clock_.Advance(absl::Minutes(2));
  coord_->Tick();
  std::vector<v1::WorkerInfo> left = coord_->ListWorkers();
  ASSERT_EQ(left.size(), 1u);  // w1 is attached: kept
  EXPECT_EQ(left[0].name(), "w1");
}

// A coordinator that was stalled (SIGSTOP, starved) for longer than the
// heartbeat timeout fails nobody for its own silence; a worker that stays
// silent after the stall is still caught.
TEST_F(CoordinatorTest, AStalledCoordinatorBlamesNoWorkerOrRank) {
  const std::string id = TwoRanksReportedWithStallCheck();
  ASSERT_FALSE(id.empty());
  clock_.Advance(absl::Seconds(30));  // no tick, no heartbeat, no report: a stall
  coord_->Tick();
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_EQ(Job(id).generation(), 1) << Job(id).reason();
  // After the stall the timers run again: w1 heartbeats, w0 stays silent.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    coord_->Tick();
  }
  EXPECT_NE(Job(id).state(), v1::RUNNING);  // generation 1 failed: w0 missed its heartbeats
  EXPECT_NE(Job(id).reason().find("w0"), std::string::npos) << Job(id).reason();
}

// The wall clock steps back 10 minutes (NTP): a worker that then stays
// silent is still caught after the heartbeat timeout, not after the step
// on top of it.
TEST_F(CoordinatorTest, AClockThatStepsBackStillCatchesASilentWorker) {
  const std::string id = TwoRanksReportedWithStallCheck();
  ASSERT_FALSE(id.empty());
  clock_.Advance(-absl::Minutes(10));
  coord_->Tick();
  for (int i = 0; i < 12; ++i) {  // w1 heartbeats and reports, w0 stays silent
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    (void)Step(id, 1, 1, 2 + i);  // ABORTED once the generation failed
    coord_->Tick();
  }
  EXPECT_NE(Job(id).generation() == 1 && Job(id).state() == v1::RUNNING, true)
      << "w0, silent for 12 s of a 10 s timeout, was not caught";
  EXPECT_NE(Job(id).reason().find("w0"), std::string::npos) << Job(id).reason();
}

// A StartTask the old session took but the worker never received (the
// stream broke in flight): the same worker process re-registering without
// the task gets it again instead of costing a restart. A different process
// (the worker restarted: its tasks died with it) fails the generation.
TEST_F(CoordinatorTest, AStartTaskLostInFlightIsSentAgainToTheSameWorkerProcess) {
  auto reg = [&](const std::string& name, const std::string& instance) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_address(name + ".host:9000");
    req.set_slots(1);
    req.set_instance(instance);
    auto r = coord_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(coord_->AttachSession(r->session_id).ok());
    sessions_[name] = r->session_id;
  };
  reg("w0", "process-a");
  reg("w1", "process-b");
  const std::string id = Submit(Spec(2, 1));
  ASSERT_EQ(Job(id).state(), v1::RUNNING);
  ASSERT_EQ(coord_->TakeCommands(sessions_["w0"])->size(), 1u);  // taken, then lost
  ASSERT_EQ(coord_->TakeCommands(sessions_["w1"])->size(), 1u);
  reg("w0", "process-a");  // the same process, running nothing
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_EQ(Job(id).generation(), 1);
  std::vector<v1::CoordinatorMessage> again = *coord_->TakeCommands(sessions_["w0"]);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].start().task().rank(), 0);
  EXPECT_EQ(again[0].start().task().ref().generation(), 1);
  // w1 restarted (another process) without its task: the generation fails.
  coord_->DetachSession(sessions_["w1"]);  // its stream ended with it
  reg("w1", "process-c");
  EXPECT_FALSE(Job(id).generation() == 1 && Job(id).state() == v1::RUNNING);
  EXPECT_NE(Job(id).reason().find("rank 1 lost"), std::string::npos) << Job(id).reason();
}

// A state write that fails after memory moved on is retried until the
// store takes it: a job that ended while its end could not be written is
// not run again after a restart.
TEST_F(CoordinatorTest, AnEndThatCouldNotBeWrittenIsRetriedAndSurvivesARestart) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 1));
  store_.FailWrites(absl::UnavailableError("disk gone"), "SetAssignmentState");
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 0);
  store_.FailWrites(absl::UnavailableError("disk gone"));
  TaskState("w1", id, 1, 1, v1::TASK_EXITED, 0);
  ASSERT_EQ(Job(id).state(), v1::SUCCEEDED);  // in memory
  auto stored_state = [&] {
    const std::vector<JobRow> rows = *store_.LoadJobs();
    for (const JobRow& row : rows)
      if (row.job_id == id) return row.state;
    return -1;
  };
  EXPECT_EQ(stored_state(), v1::RUNNING);  // not written yet
  coord_->Tick();
  EXPECT_EQ(stored_state(), v1::RUNNING);  // still failing: kept for later
  store_.FailWrites(absl::OkStatus());
  coord_->Tick();
  EXPECT_EQ(stored_state(), v1::SUCCEEDED);
  coord_.reset();
  Open();
  EXPECT_EQ(Job(id).state(), v1::SUCCEEDED);
}

// Every rank exited 0, but the generation's end could not be stored and
// the coordinator restarted before it was: the reloaded job is found
// finished at the next tick, not left RUNNING (holding its slots) until a
// silent worker fails a job that succeeded.
TEST_F(CoordinatorTest, AJobWhoseRanksAllFinishedBeforeARestartSucceedsAfterIt) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 1));
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 0);
  store_.FailWrites(absl::UnavailableError("disk gone"), "EndGeneration");
  TaskState("w1", id, 1, 1, v1::TASK_EXITED, 0);
  ASSERT_EQ(Job(id).state(), v1::SUCCEEDED);  // in memory only
  coord_.reset();                              // before the retry
  store_.FailWrites(absl::OkStatus());
  Open();
  ASSERT_EQ(Job(id).state(), v1::RUNNING);
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  coord_->Tick();
  EXPECT_EQ(Job(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(Job(id).restarts(), 0);
  const std::vector<JobRow> rows = *store_.LoadJobs();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state, v1::SUCCEEDED);
}

// The coordinator stopped after storing a generation and before its
// StartTasks reached the worker (they were queued in its memory): the
// worker's registration with the restarted coordinator, without the rank,
// restarts the job without counting it, so even max_restarts: 0 survives
// the coordinator's own restart. A rank that had reported is a counted loss.
TEST_F(CoordinatorTest, StartTasksLostWithTheCoordinatorAreNotTheJobsFailure) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_max_restarts(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).state(), v1::RUNNING);
  coord_.reset();  // its StartTask never taken
  Open();
  AddWorker("w0", 1);
  EXPECT_EQ(Job(id).restarts(), 0);
  EXPECT_NE(Job(id).state(), v1::FAILED);
  EXPECT_EQ(Job(id).generation(), 2);
  // Generation 2 reports, the coordinator restarts, the worker comes back
  // without the rank: that loss counts (and max_restarts 0 fails the job).
  TaskState("w0", id, 2, 0, v1::TASK_RUNNING);
  ASSERT_TRUE(Step(id, 2, 0, 1).ok());
  coord_.reset();
  Open();
  AddWorker("w0", 1);
  EXPECT_EQ(Job(id).state(), v1::FAILED);
}

// A worker whose ranks all exited 0 may go quiet (its host powered off)
// while rank 0 on another worker still finishes: the generation goes on.
TEST_F(CoordinatorTest, AWorkerWhoseRanksFinishedMayGoQuiet) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 1));
  TaskState("w0", id, 1, 0, v1::TASK_RUNNING);
  TaskState("w1", id, 1, 1, v1::TASK_EXITED, 0);
  ASSERT_TRUE(Step(id, 1, 0, 5).ok());
  for (int i = 0; i < 12; ++i) {  // 12 s: past the 10 s heartbeat timeout
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w0");
    ASSERT_TRUE(Step(id, 1, 0, 6 + i).ok());
    coord_->Tick();
  }
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_EQ(Job(id).restarts(), 0);
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 0);
  EXPECT_EQ(Job(id).state(), v1::SUCCEEDED);
}

// A checkpoint record whose row could not be deleted is not expired: no
// one deletes its files, and the next record retries the delete.
TEST_F(CoordinatorTest, ACheckpointWhoseRowCouldNotBeDeletedIsKept) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  spec.mutable_checkpoint()->set_keep_last(1);
  const std::string id = Submit(spec);
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  store_.FailWrites(absl::UnavailableError("disk gone"), "DeleteCheckpoint");
  auto expired = Checkpoint(id, 1, 20, CkptPath(id, 20));
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_TRUE(expired->empty());  // step 10 is not given up
  EXPECT_EQ(coord_->ListCheckpoints(id)->size(), 2u);
  store_.FailWrites(absl::OkStatus());
  expired = Checkpoint(id, 1, 30, CkptPath(id, 30));
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(*expired, (std::vector<std::string>{CkptPath(id, 10), CkptPath(id, 20)}));
  EXPECT_EQ(coord_->ListCheckpoints(id)->size(), 1u);
  EXPECT_EQ(store_.LoadCheckpoints(id)->size(), 1u);
}

}  // namespace
TEST_F(CoordinatorTest, CheckpointReportsAreConfinedToTheJobAndItsDirectory) {
  // A job that has not started owns no checkpoint: no rank holds a token.
  const std::string pending = Submit(Spec(1, 1));
  auto early = Checkpoint(pending, 0, 10, CkptPath(pending, 10));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kPermissionDenied) << early.status();

  AddWorker("w0", 1);
  ASSERT_EQ(Job(pending).state(), v1::RUNNING);
  const std::string outside = dir_ + "/precious.txt";
  std::ofstream(outside) << "keep me";
  for (const std::string& bad :
       {outside, CkptPath(pending, 10) + "/../../../precious.txt",
        dir_ + "/checkpoints/" + pending + "/../other/ckpt-10.pt", CkptPath(pending, 11),
        std::string("relative/ckpt-10.pt")}) {
    auto r = Checkpoint(pending, 1, 10, bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("expected " + CkptPath(pending, 10)), std::string::npos)
        << r.status();
  }
  EXPECT_EQ(Checkpoint(pending, 1, -5, CkptPath(pending, -5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(coord_->ListCheckpoints(pending)->empty());
  // Retention over real reports never touches the outside file.
  for (int step : {10, 20, 30}) ASSERT_TRUE(Checkpoint(pending, 1, step, CkptPath(pending, step)).ok());
  std::ifstream in(outside);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
}

TEST_F(CoordinatorTest, CheckpointDirMustBeUnderTheAllowedRoots) {
  v1::JobSpec spec = Spec(1, 1);
  spec.mutable_checkpoint()->set_dir("/etc/cron.d");
  auto id = coord_->SubmitJob(spec);
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("--checkpoint-root"), std::string::npos) << id.status();
  spec.mutable_checkpoint()->set_dir(dir_ + "/checkpoints/../../etc");
  EXPECT_EQ(coord_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.mutable_checkpoint()->set_dir(dir_ + "/checkpoints/team-a");
  EXPECT_TRUE(coord_->SubmitJob(spec).ok());
  EXPECT_TRUE(coord_->ListJobs().size() == 1u) << "a refused job was stored";
}

// A worker's "failed to start" message (which can quote job-controlled
// text: the program name, PATH) enters the job's reason bounded and
// printable.
TEST_F(CoordinatorTest, AStartFailureMessageIsBoundedAndPrintable) {
  const std::string session = AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  v1::WorkerMessage m;
  m.set_session_id(session);
  v1::TaskStatus* t = m.mutable_task_status();
  t->mutable_ref()->set_job_id(id);
  t->mutable_ref()->set_generation(1);
  t->set_rank(0);
  t->set_state(v1::TASK_START_FAILED);
  t->set_message("program 'x\x1b]0;owned\x07' not found on PATH (" + std::string(600000, 'p') + ")");
  ASSERT_TRUE(coord_->HandleWorkerMessage(m).ok());
  const v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find("failed to start on worker w0: program 'x?]0;owned?'"),
            std::string::npos) << st.reason().substr(0, 200);
  EXPECT_LT(st.reason().size(), 700u);
  for (char c : st.reason()) EXPECT_GE(static_cast<unsigned char>(c), 0x20);
}

TEST_F(CoordinatorTest, StepReportsWithNonFiniteOrNegativeNumbersAreRefused) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  auto report = [&](auto mutate) {
    v1::StepMetrics m;
    m.mutable_ref()->set_job_id(id);
    m.mutable_ref()->set_generation(1);
    m.mutable_ref()->set_token(TokenOf(id, 1, 0));
    m.set_step(1);
    m.set_samples(8);
    m.set_step_seconds(0.1);
    (*m.mutable_values())["loss"] = 0.5;
    mutate(m);
    return coord_->ReportStep(m).status();
  };
  EXPECT_TRUE(report([](v1::StepMetrics&) {}).ok());
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.mutable_ref()->clear_token(); }).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.mutable_ref()->set_token(std::string(64, '0')); })
                .code(),
            absl::StatusCode::kPermissionDenied);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(report([&](v1::StepMetrics& m) { (*m.mutable_values())["loss"] = nan; }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([&](v1::StepMetrics& m) { (*m.mutable_values())["acc"] = -inf; }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([&](v1::StepMetrics& m) { m.set_step_seconds(nan); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_step(-1); }).code(),
            absl::StatusCode::kInvalidArgument);
  // The time split: finite, >= 0, the wait within the step.
  EXPECT_EQ(report([&](v1::StepMetrics& m) { m.set_wait_seconds(nan); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([&](v1::StepMetrics& m) { m.set_data_seconds(-0.5); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([&](v1::StepMetrics& m) { m.set_data_seconds(inf); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([&](v1::StepMetrics& m) {
              m.set_step_seconds(0.1);
              m.set_wait_seconds(0.2);
            }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_samples(-8); }).code(),
            absl::StatusCode::kInvalidArgument);
  // A checkpoint in flight is of a step done: within [0, step].
  EXPECT_TRUE(report([](v1::StepMetrics& m) { m.set_checkpoint_in_flight(1); }).ok());
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_checkpoint_in_flight(2); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_checkpoint_in_flight(-1); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_rank(99999); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) {
              for (int i = 0; i < 65; ++i) (*m.mutable_values())["m" + std::to_string(i)] = 1;
            }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_warning(std::string(513, 'w')); }).code(),
            absl::StatusCode::kInvalidArgument);
  // Metric names reach terminals and dashboards: no control characters.
  for (const std::string name : {std::string("lo\x1b[2Jss"), std::string("a\rb"), std::string("x\x7f")}) {
    EXPECT_EQ(report([&](v1::StepMetrics& m) { (*m.mutable_values())[name] = 1; }).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Values whose weighted mean (value x samples) would overflow.
  EXPECT_EQ(report([](v1::StepMetrics& m) { (*m.mutable_values())["loss"] = 1e308; }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { (*m.mutable_values())["loss"] = -1e201; }).code(),
            absl::StatusCode::kInvalidArgument);
  // Counters far past any run (whose sums and step + lead would overflow).
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_step(INT64_MAX); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_samples(INT64_MAX - 1); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report([](v1::StepMetrics& m) { m.set_total_steps((int64_t{1} << 48) + 1); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Job(id).warning().empty());
  // A warning (made printable) shows in the job's status, naming rank and step.
  EXPECT_TRUE(report([](v1::StepMetrics& m) {
                m.set_step(2);
                m.set_warning("checkpoint of step 1 skipped\n\x1b[31m");
              }).ok());
  EXPECT_EQ(Job(id).warning().rfind("rank 0 at step 2: checkpoint of step 1 skipped", 0), 0u)
      << Job(id).warning();
  EXPECT_EQ(Job(id).warning().find('\x1b'), std::string::npos);
  auto metrics = coord_->GetMetrics(id, 0);
  ASSERT_TRUE(metrics.ok());
  for (const auto& s : *metrics) {
    for (const auto& [k, v] : s.mean()) EXPECT_TRUE(std::isfinite(v)) << k;
  }
}

TEST_F(CoordinatorTest, LogUploadsAndLogRequestsAreBoundedToTheJobsRanks) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(1, 1));
  const std::string runner = Job(id).workers(0);
  const std::string other = runner == "w0" ? "w1" : "w0";
  auto upload = [&](const std::string& worker, int rank) {
    v1::WorkerMessage m;
    m.set_session_id(sessions_[worker]);
    m.mutable_log()->mutable_ref()->set_job_id(id);
    m.mutable_log()->mutable_ref()->set_generation(1);
    m.mutable_log()->set_rank(rank);
    m.mutable_log()->set_data("line\n");
    return coord_->HandleWorkerMessage(m);
  };
  EXPECT_TRUE(upload(runner, 0).ok());
  EXPECT_EQ(upload(other, 0).code(), absl::StatusCode::kInvalidArgument);
  for (int rank : {1, -7, 99999}) {
    EXPECT_EQ(upload(runner, rank).code(), absl::StatusCode::kInvalidArgument) << rank;
  }
  EXPECT_TRUE(coord_->CheckLogRequest(id, 0, 0).ok());
  EXPECT_TRUE(coord_->CheckLogRequest(id, -1, 0).ok());
  for (int rank : {1, -7, -2, 99999}) {
    EXPECT_EQ(coord_->CheckLogRequest(id, rank, 0).code(), absl::StatusCode::kInvalidArgument)
        << rank;
  }
  EXPECT_EQ(coord_->CheckLogRequest(id, 0, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord_->CheckLogRequest("nope", 0, 0).code(), absl::StatusCode::kNotFound);
  // Where a reconnecting follower left each rank: ranks of the job, offsets
  // >= 0, with every rank asked for only.
  EXPECT_TRUE(coord_->CheckLogRequest(id, -1, 0, {{0, 123}}).ok());
  for (const std::map<int, int64_t>& bad :
       std::vector<std::map<int, int64_t>>{{{1, 0}}, {{-1, 0}}, {{0, -1}}, {{0, 0}, {7, 0}}}) {
    const absl::Status s = coord_->CheckLogRequest(id, -1, 0, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.begin()->first;
    EXPECT_NE(s.message().find("rank_offsets"), std::string::npos) << s;
  }
  EXPECT_EQ(coord_->CheckLogRequest(id, 0, 0, {{0, 5}}).code(),
            absl::StatusCode::kInvalidArgument);
}

// A rank that finished while its worker could not reach the coordinator
// (e.g. during a coordinator restart) is reported in the registration's
// `ended`: it counts as done, not as lost.
TEST_F(CoordinatorTest, RankThatEndedWhileItsWorkerWasAwayIsNotLost) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).state(), v1::RUNNING);
  auto ended = [&](const std::string& worker, int code) {
    int rank = Job(id).workers(0) == worker ? 0 : 1;
    v1::RegisterWorkerRequest req;
    req.set_name(worker);
    req.set_address(worker + ".host");
    req.set_slots(1);
    v1::TaskStatus* t = req.add_ended();
    t->mutable_ref()->set_job_id(id);
    t->mutable_ref()->set_generation(1);
    t->set_rank(rank);
    t->set_state(v1::TASK_EXITED);
    t->set_exit_code(code);
    auto reg = coord_->RegisterWorker(req);
    ASSERT_TRUE(reg.ok()) << reg.status();
    ASSERT_TRUE(coord_->AttachSession(reg->session_id).ok());
    sessions_[worker] = reg->session_id;
  };
  ended("w0", 0);
  v1::JobStatus st = Job(id);
  EXPECT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.restarts(), 0);
  // The other rank ends the same way, with a failure: that one counts.
  ended("w1", 3);
  st = Job(id);
  EXPECT_EQ(st.generation(), 2) << st.ShortDebugString();
  EXPECT_NE(st.reason().find("exited with code 3"), std::string::npos) << st.reason();
}

TEST_F(CoordinatorTest, OneCoordinatorPerStateDir) {
  coord_.reset();
  auto first = Coordinator::Create(Options(), clock_);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Coordinator::Create(Options(), clock_);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(dir_), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find(std::to_string(getpid())), std::string::npos)
      << second.status();
  first->reset();  // released with its holder
  EXPECT_TRUE(Coordinator::Create(Options(), clock_).ok());
}

TEST_F(CoordinatorTest, SecretEnvReachesRanksButNoReadRpc) {
  AddWorker("w0", 1);
  v1::JobSpec spec = Spec(1, 1);
  (*spec.mutable_env())["PLAIN"] = "visible";
  (*spec.mutable_secret_env())["HF_TOKEN"] = "hf_s3cr3t";
  const std::string id = Submit(spec);
  auto starts = Starts("w0");
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].env().at("HF_TOKEN"), "hf_s3cr3t");  // the rank gets it
  EXPECT_EQ(starts[0].env().at("PLAIN"), "visible");
  std::vector<v1::JobStatus> seen = coord_->ListJobs();
  seen.push_back(Job(id));
  for (const v1::JobStatus& st : seen) {
    EXPECT_EQ(st.SerializeAsString().find("hf_s3cr3t"), std::string::npos);
    EXPECT_EQ(st.spec().secret_env().at("HF_TOKEN"), "<redacted>");
    EXPECT_EQ(st.spec().env().at("PLAIN"), "visible");
  }
}

}  // namespace frameworm::coordinator

namespace frameworm::coordinator {
namespace {

size_t DumpsIn(const std::vector<v1::CoordinatorMessage>& cmds) {
  size_t n = 0;
  for (const auto& c : cmds) n += c.has_dump();
  return n;
}

// Stacks are asked for at most once per kDebugInterval per job, and a
// worker that never reads its stream gets at most kMaxQueuedDumps queued:
// a loop of DebugJob calls cannot keep a worker dumping stacks instead of
// heartbeating and supervising its ranks, nor grow its outbox.
TEST_F(CoordinatorTest, StacksAreAskedForAtAnIntervalAndTheirQueueIsBounded) {
  const std::string id = Submit(Spec(2, 1));
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  ASSERT_EQ(Starts("w0").size(), 1u);
  ASSERT_EQ(Starts("w1").size(), 1u);
  auto asked = coord_->DebugJob(id, -1);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->ranks.size(), 2u);
  EXPECT_EQ(DumpsIn(Take("w0")), 1u);
  clock_.Advance(absl::Milliseconds(500));
  auto again = coord_->DebugJob(id, 1);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(again.status().message().find("were asked for 500ms ago; ask again in 1.5s"),
            std::string::npos)
      << again.status();
  EXPECT_EQ(DumpsIn(Take("w1")), 1u) << "the refused request queued nothing";
  for (int i = 0; i < 100; ++i) {
    clock_.Advance(JobScheduler::kDebugInterval);
    Heartbeat("w0");
    Heartbeat("w1");
    ASSERT_TRUE(coord_->DebugJob(id, 0).ok()) << i;
  }
  EXPECT_EQ(DumpsIn(Take("w0")), WorkerRegistry::kMaxQueuedDumps);
  EXPECT_EQ(DumpsIn(Take("w1")), 0u) << "rank 1 was not asked";
}

}  // namespace
}  // namespace frameworm::coordinator

namespace frameworm::coordinator {
namespace {

// Submissions are refused while max_queued_jobs wait to start, and taken
// again once one leaves the queue; nothing is stored for a refused one.
TEST_F(CoordinatorTest, SubmissionsAreRefusedWhileTheQueueIsFull) {
  CoordinatorOptions o = Options();
  o.max_queued_jobs = 3;
  SetOptions(o);
  Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit(Spec(1, 1)));  // no worker: all wait
  auto refused = coord_->SubmitJob(Spec(1, 1), "alice");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("3 jobs wait to start (--max-queued-jobs 3)"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(coord_->ListJobs().size(), 3u);
  ASSERT_TRUE(coord_->CancelJob(ids[0]).ok());
  EXPECT_TRUE(coord_->SubmitJob(Spec(1, 1), "alice").ok());
  EXPECT_FALSE(coord_->SubmitJob(Spec(1, 1), "alice").ok());
  AddWorker("w0", 1);  // one starts: room for one more
  EXPECT_TRUE(coord_->SubmitJob(Spec(1, 1), "alice").ok());
}

}  // namespace
}  // namespace frameworm::coordinator
