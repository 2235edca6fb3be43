// JobScheduler with its real collaborators (WorkerRegistry, PortAllocator,
// CheckpointCatalog) on a MemoryStore and the simulated clock.
#include "coordinator/job_scheduler.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/memory_store.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

class JobSchedulerTest : public ::testing::Test {
 protected:
  JobSchedulerTest() { Restart(); }

  // A fresh set of parts on the same store (a coordinator restart); the
  // new scheduler reloads.
  void Restart(int port_max = 29509) {
    jobs_.reset();
    WorkerRegistry::Options wo;
    wo.session_prefix = std::to_string(++boots_);
    workers_ = std::make_unique<WorkerRegistry>(wo, clock_);
    ports_ = std::make_unique<PortAllocator>(
        PortAllocator::Options{29500, port_max});
    checkpoints_ = std::make_unique<CheckpointCatalog>(store_);
    JobScheduler::Options o;
    o.state_dir = "/state";
    o.advertise = "coord:1";
    o.reconnect_grace = absl::Seconds(2);
    events_ = std::make_unique<EventLog>(clock_);
    jobs_ = std::make_unique<JobScheduler>(o, clock_, store_, *workers_,
                                           *ports_, *checkpoints_, *events_);
    ASSERT_TRUE(jobs_->Reload().ok());
  }
  void AddWorker(const std::string& name, int slots) {
    v1::RegisterWorkerRequest r;
    r.set_name(name);
    r.set_address(name + ":9000");
    r.set_slots(slots);
    absl::StatusOr<std::string> s = workers_->Register(r);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(workers_->Attach(*s).ok());
    sessions_[name] = *s;
  }
  static v1::JobSpec Spec(int nodes_min, int nodes_max, int nproc = 1) {
    v1::JobSpec s;
    s.set_name("t");
    s.set_nodes_min(nodes_min);
    s.set_nodes_max(nodes_max);
    s.set_nproc_per_node(nproc);
    return s;
  }
  std::string Submit(const v1::JobSpec& spec) {
    absl::StatusOr<std::string> id = jobs_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    jobs_->Schedule();
    return id.ok() ? *id : "";
  }
  const Job& Get(const std::string& id) { return *jobs_->Find(id); }
  void Exit(const std::string& worker, const std::string& id, int rank,
            int code) {
    v1::TaskStatus t;
    t.mutable_ref()->set_job_id(id);
    t.mutable_ref()->set_generation(Get(id).generation);
    t.set_rank(rank);
    t.set_state(v1::TASK_EXITED);
    t.set_exit_code(code);
    jobs_->HandleTaskStatus(worker, t);
  }
  // An elastic job {min 2, max 3} running on w0 and w1 whose two ranks
  // reported step 5: it may grow once a worker is free.
  std::string GrowableJob(int max_restarts = 0) {
    AddWorker("w0", 1);
    AddWorker("w1", 1);
    v1::JobSpec spec = Spec(2, 3);
    spec.set_max_restarts(max_restarts);
    const std::string id = Submit(spec);
    Report(id, 0, 5);
    Report(id, 1, 5);
    return id;
  }
  // A step report from `rank` of the current generation; returns the
  // checkpoint step the rank is told.
  int64_t Report(const std::string& id, int rank, int64_t step, double step_seconds = 0,
                 double wait_seconds = 0, int64_t checkpoint_in_flight = 0) {
    v1::StepMetrics m;
    m.mutable_ref()->set_job_id(id);
    m.mutable_ref()->set_generation(Get(id).generation);
    m.mutable_ref()->set_token(Get(id).ranks[rank].task.token());
    m.set_rank(rank);
    m.set_step(step);
    m.set_samples(8);
    m.set_step_seconds(step_seconds);
    m.set_wait_seconds(wait_seconds);
    m.set_checkpoint_in_flight(checkpoint_in_flight);
    absl::StatusOr<JobScheduler::StepOutcome> out = jobs_->ReportStep(m, true);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->checkpoint_at : -1;
  }

  SimulatedClock clock_;
  MemoryStore store_;
  int boots_ = 0;
  std::unique_ptr<WorkerRegistry> workers_;
  std::unique_ptr<PortAllocator> ports_;
  std::unique_ptr<CheckpointCatalog> checkpoints_;
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<JobScheduler> jobs_;
  std::map<std::string, std::string> sessions_;
};

TEST_F(JobSchedulerTest, ElasticGangTakesUpToNodesMaxOfCapableWorkers) {
  AddWorker("w0", 2);
  AddWorker("w1", 1);  // too small for nproc 2: not capable
  AddWorker("w2", 2);
  AddWorker("w3", 4);
  const std::string id = Submit(Spec(2, 2, 2));
  const Job& job = Get(id);
  ASSERT_EQ(job.state, v1::RUNNING);
  EXPECT_EQ(job.workers, (std::vector<std::string>{"w0", "w2"}));
  EXPECT_EQ(job.ranks.size(), 4u);
  EXPECT_EQ(job.master_addr, "w0");
  EXPECT_EQ(jobs_->SlotsInUse(),
            (std::map<std::string, int>{{"w0", 2}, {"w2", 2}}));
  EXPECT_EQ(jobs_->TasksOn("w2"),
            (std::vector<std::string>{id + "/2", id + "/3"}));
  // An elastic job takes what is free between min and max.
  const std::string elastic = Submit(Spec(1, 3, 2));
  EXPECT_EQ(Get(elastic).workers, (std::vector<std::string>{"w3"}));
  // Both of w3's gangs fit: two more ranks on it.
  const std::string more = Submit(Spec(1, 1, 2));
  EXPECT_EQ(Get(more).workers, (std::vector<std::string>{"w3"}));
  EXPECT_EQ(jobs_->SlotsInUse().at("w3"), 4);
}

TEST_F(JobSchedulerTest, PortsAreHeldByRunningGenerationsOnly) {
  Restart(/*port_max=*/29500);  // one MASTER_PORT
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string a = Submit(Spec(1, 1));
  const std::string b = Submit(Spec(1, 1));
  EXPECT_EQ(Get(a).state, v1::RUNNING);
  EXPECT_EQ(Get(a).master_port, 29500);
  EXPECT_EQ(Get(b).state, v1::PENDING);
  EXPECT_EQ(Get(b).reason, "waiting for a free MASTER_PORT");
  Exit("w0", a, 0, 0);
  EXPECT_EQ(Get(a).state, v1::SUCCEEDED);
  jobs_->Schedule();
  EXPECT_EQ(Get(b).state, v1::RUNNING);
  EXPECT_EQ(Get(b).master_port, 29500);
  ASSERT_TRUE(jobs_->Cancel(b).ok());
  EXPECT_EQ(ports_->in_use(), 0);
  // Cancelling a job that waits never frees a port it does not hold.
  const std::string c = Submit(Spec(1, 1));
  const std::string d = Submit(Spec(5, 5));
  ASSERT_TRUE(jobs_->Cancel(d).ok());
  EXPECT_EQ(ports_->in_use(), 1);
  EXPECT_EQ(Get(c).state, v1::RUNNING);
}

TEST_F(JobSchedulerTest, FailedGenerationStartKeepsTheJobQueued) {
  AddWorker("w0", 1);
  absl::StatusOr<std::string> id = jobs_->Submit(Spec(1, 1));
  ASSERT_TRUE(id.ok());
  store_.FailWrites(absl::UnavailableError("disk"));
  jobs_->Schedule();
  EXPECT_EQ(Get(*id).state, v1::PENDING);
  EXPECT_NE(Get(*id).reason.find("disk"), std::string::npos);
  EXPECT_EQ(ports_->in_use(), 0);  // the port was given back
  EXPECT_TRUE(workers_->Take(sessions_["w0"])->empty());  // nothing sent
  store_.FailWrites(absl::OkStatus());
  jobs_->Schedule();
  EXPECT_EQ(Get(*id).state, v1::RUNNING);
  EXPECT_EQ(Get(*id).generation, 1);
  EXPECT_EQ(workers_->Take(sessions_["w0"])->size(), 1u);
}

TEST_F(JobSchedulerTest, FailedRanksLastStderrLineIsInTheReasonBounded) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  v1::TaskStatus t;
  t.mutable_ref()->set_job_id(id);
  t.mutable_ref()->set_generation(Get(id).generation);
  t.set_rank(0);
  t.set_state(v1::TASK_EXITED);
  t.set_exit_code(1);
  t.set_stderr_tail("frameworm-train: cannot reach the coordinator at 10.0.0.1:7070\x1b[2J" +
                    std::string(1000, 'x'));
  jobs_->HandleTaskStatus("w0", t);
  const std::string& reason = Get(id).reason;
  EXPECT_NE(reason.find("rank 0 exited with code 1 on worker w0: frameworm-train: cannot "
                        "reach the coordinator at 10.0.0.1:7070?[2J"),
            std::string::npos)
      << reason;
  EXPECT_EQ(reason.find(std::string(300, 'x')), std::string::npos) << "not bounded";
}

TEST_F(JobSchedulerTest, ChangedJobsAreReportedOnce) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  EXPECT_EQ(jobs_->TakeChangedJobs(), std::set<std::string>{id});
  EXPECT_TRUE(jobs_->TakeChangedJobs().empty());
  jobs_->Schedule();  // nothing to do: nothing changed
  EXPECT_TRUE(jobs_->TakeChangedJobs().empty());
  Exit("w0", id, 0, 0);
  EXPECT_EQ(jobs_->TakeChangedJobs(), std::set<std::string>{id});
}

TEST_F(JobSchedulerTest, ReloadRestoresRunningGenerationPortAndDoneRanks) {
  AddWorker("w0", 2);
  const std::string id = Submit(Spec(1, 1, 2));
  const int port = Get(id).master_port;
  Exit("w0", id, 1, 0);  // rank 1 finished before the restart
  clock_.Advance(absl::Seconds(1));
  Restart();
  const Job& job = Get(id);
  EXPECT_EQ(job.state, v1::RUNNING);
  EXPECT_EQ(job.master_port, port);
  EXPECT_EQ(job.workers, std::vector<std::string>{"w0"});
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_TRUE(job.progress.done(1));
  EXPECT_FALSE(job.progress.done(0));
  EXPECT_EQ(ports_->in_use(), 1);
  // The worker gets timeout + grace to come back; it is not schedulable.
  EXPECT_EQ(workers_->LastSeen("w0"), clock_.Now() + absl::Seconds(2));
  EXPECT_FALSE(workers_->Schedulable(*workers_->Find("w0")));
  // New jobs get a different port; the reloaded rank 0 finishing succeeds.
  AddWorker("w1", 1);
  const std::string other = Submit(Spec(1, 1));
  EXPECT_NE(Get(other).master_port, port);
  EXPECT_EQ(jobs_->Submit(Spec(1, 1)).value(), "job-000003");  // seq goes on
  AddWorker("w0", 2);
  v1::TaskStatus t;
  t.mutable_ref()->set_job_id(id);
  t.mutable_ref()->set_generation(1);
  t.set_rank(0);
  t.set_state(v1::TASK_RUNNING);
  google::protobuf::RepeatedPtrField<v1::TaskStatus> running;
  *running.Add() = t;
  jobs_->Reconcile("w0", running, {});
  EXPECT_EQ(Get(id).state, v1::RUNNING);
  Exit("w0", id, 0, 0);
  EXPECT_EQ(Get(id).state, v1::SUCCEEDED);
}

// A rank stuck across a coordinator restart (its generation had reported)
// is caught heartbeat_timeout after the reload; a generation that never
// reported (a program that does not call the coordinator) is not.
TEST_F(JobSchedulerTest, HangDetectionSurvivesARestart) {
  AddWorker("w0", 2);
  v1::JobSpec spec = Spec(1, 1, 2);
  spec.set_heartbeat_timeout_s(4);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  AddWorker("w1", 1);
  v1::JobSpec quiet_spec = Spec(1, 1);
  quiet_spec.set_heartbeat_timeout_s(4);
  const std::string quiet = Submit(quiet_spec);  // never reports
  ASSERT_EQ(Get(quiet).workers, std::vector<std::string>{"w1"});
  v1::StepMetrics m;
  m.mutable_ref()->set_job_id(id);
  m.mutable_ref()->set_generation(1);
  m.mutable_ref()->set_token(Get(id).ranks[0].task.token());
  m.set_rank(0);
  m.set_step(3);
  m.set_samples(8);
  absl::StatusOr<JobScheduler::StepOutcome> out = jobs_->ReportStep(m, true);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->row.has_value());
  ASSERT_TRUE(store_.PutMetrics({*out->row}).ok());
  clock_.Advance(absl::Seconds(1));
  Restart();
  AddWorker("w0", 2);  // back at once: only the ranks' silence counts
  AddWorker("w1", 1);
  clock_.Advance(absl::Seconds(3));
  jobs_->Supervise();
  EXPECT_EQ(Get(id).generation, 1);
  clock_.Advance(absl::Seconds(2));
  workers_->Hear(sessions_["w0"]).IgnoreError();
  workers_->Hear(sessions_["w1"]).IgnoreError();
  jobs_->Supervise();
  // 5 s after the reload: within the timeout (4 s) plus the reconnect grace
  // (2 s) that trainers get to find the restarted coordinator.
  EXPECT_EQ(Get(id).state, v1::RUNNING) << Get(id).reason;
  clock_.Advance(absl::Seconds(2));
  workers_->Hear(sessions_["w0"]).IgnoreError();
  workers_->Hear(sessions_["w1"]).IgnoreError();
  jobs_->Supervise();
  EXPECT_EQ(Get(id).state, v1::RESTARTING) << Get(id).reason;
  EXPECT_NE(Get(id).reason.find("rank 0 hung"), std::string::npos) << Get(id).reason;
  EXPECT_EQ(Get(quiet).state, v1::RUNNING);
  EXPECT_EQ(Get(quiet).generation, 1);
}

// A host cut off just after its rank's last report: the hang fires (rank 0
// waits for rank 1) while the host's last heartbeat is still within the
// three intervals that keep a worker schedulable. The restart goes to the
// spare, not back to the silent host; without a spare it waits until that
// host is heard from again.
TEST_F(JobSchedulerTest, ARestartAvoidsTheImplicatedWorkerUntilItIsHeardAgain) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 2);
  spec.set_heartbeat_timeout_s(3);
  spec.set_max_restarts(2);
  const std::string id = Submit(spec);
  ASSERT_EQ(Get(id).workers, (std::vector<std::string>{"w0", "w1"}));
  AddWorker("w2", 1);
  // Both ranks report; rank 1's host is heard once more 0.1 s later, then
  // falls silent; rank 0 pings that it waits; `heard` stay heard. 3.1 s
  // later rank 1 is hung while its host's last heartbeat is 3.0 s old.
  auto hang = [&](const std::string& silent, const std::vector<std::string>& heard) {
    Report(id, 0, 5);
    Report(id, 1, 5);
    clock_.Advance(absl::Milliseconds(100));
    workers_->Hear(sessions_[silent]).IgnoreError();
    for (int i = 1; i <= 6; ++i) {
      clock_.Advance(absl::Milliseconds(500));
      for (const std::string& w : heard) workers_->Hear(sessions_[w]).IgnoreError();
      v1::StepMetrics p;
      p.mutable_ref()->set_job_id(id);
      p.mutable_ref()->set_generation(Get(id).generation);
      p.mutable_ref()->set_token(Get(id).ranks[0].task.token());
      p.set_rank(0);
      p.set_ping(true);
      p.set_waiting_seconds(0.5 * i);
      ASSERT_TRUE(jobs_->ReportStep(p, true).ok());
    }
    ASSERT_TRUE(workers_->Schedulable(*workers_->Find(silent)));
    jobs_->Supervise();
  };
  hang("w1", {"w0", "w2"});
  ASSERT_EQ(Get(id).state, v1::RESTARTING) << Get(id).reason;
  ASSERT_NE(Get(id).reason.find("rank 1 hung"), std::string::npos) << Get(id).reason;
  jobs_->Schedule();
  ASSERT_EQ(Get(id).state, v1::RUNNING) << Get(id).reason;
  EXPECT_EQ(Get(id).workers, (std::vector<std::string>{"w0", "w2"}));
  // Now rank 1's host w2 is cut the same way and w1 stays silent: no spare,
  // so generation 3 waits until w2 is heard from again.
  hang("w2", {"w0"});
  ASSERT_EQ(Get(id).state, v1::RESTARTING) << Get(id).reason;
  jobs_->Schedule();
  EXPECT_EQ(Get(id).state, v1::RESTARTING) << "placed on the implicated w2 unheard";
  clock_.Advance(absl::Milliseconds(200));
  workers_->Hear(sessions_["w2"]).IgnoreError();
  jobs_->Schedule();
  ASSERT_EQ(Get(id).state, v1::RUNNING) << Get(id).reason;
  EXPECT_EQ(Get(id).workers, (std::vector<std::string>{"w0", "w2"}));
}

// on_straggler: restart_without: rank 1 computes 4x longer than rank 0
// (rank 0 waits for it); once flagged for the grace period its generation
// ends and the next one runs on the spare, not on rank 1's worker, nor does
// the job grow back onto it. A warn-only job keeps its generation.
TEST_F(JobSchedulerTest, ARankFlaggedForTheGracePeriodIsRestartedWithout) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec spec = Spec(2, 2);
  spec.set_on_straggler("restart_without");
  spec.set_straggler_grace_s(5);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  ASSERT_EQ(Get(id).workers, (std::vector<std::string>{"w0", "w1"}));
  AddWorker("w2", 1);
  int64_t step = 0;
  // One step every 0.5 s: rank 1 busy 0.4 s, rank 0 busy 0.1 s + 0.3 s waiting.
  auto steps = [&](const std::string& job, int n) {
    for (int i = 0; i < n && Get(job).state == v1::RUNNING; ++i) {
      ++step;
      for (int r = 0; r < 2; ++r) Report(job, r, step, 0.4, r == 0 ? 0.3 : 0);
      clock_.Advance(absl::Milliseconds(500));
      for (const char* w : {"w0", "w1", "w2"}) workers_->Hear(sessions_[w]).IgnoreError();
      jobs_->Supervise();
    }
  };
  steps(id, 8);  // flagged from step 5 on, for 2 s: not yet
  ASSERT_EQ(Get(id).generation, 1) << Get(id).reason;
  ASSERT_EQ(Get(id).state, v1::RUNNING);
  steps(id, 8);
  ASSERT_EQ(Get(id).state, v1::RESTARTING) << Get(id).reason;
  EXPECT_NE(Get(id).reason.find("rank 1 on worker w1 was a straggler for 5s"), std::string::npos)
      << Get(id).reason;
  EXPECT_EQ(Get(id).restarts, 1);
  jobs_->Schedule();
  ASSERT_EQ(Get(id).state, v1::RUNNING);
  EXPECT_EQ(Get(id).workers, (std::vector<std::string>{"w0", "w2"}));

  // Without a spare the avoided worker is used: a 2-node job needs two.
  const std::string other = Submit(spec);  // w1 is the only free one: waits
  EXPECT_EQ(Get(other).state, v1::PENDING);

  // warn (the default): flagged as long as it lasts, nothing restarts.
  jobs_->Cancel(id).IgnoreError();
  jobs_->Cancel(other).IgnoreError();
  v1::JobSpec warn = Spec(2, 2);
  warn.set_straggler_grace_s(1);
  const std::string w = Submit(warn);
  ASSERT_EQ(Get(w).state, v1::RUNNING);
  step = 0;
  steps(w, 20);
  EXPECT_EQ(Get(w).state, v1::RUNNING) << Get(w).reason;
  EXPECT_EQ(Get(w).generation, 1);
  EXPECT_FALSE(Get(w).metrics.Last()->stragglers().empty()) << "rank 1 is flagged all along";
}

// A built-in trainer that never reports is hung after the start-up
// timeout; a user's program (which may never call the coordinator) is not.
TEST_F(JobSchedulerTest, BuiltInTrainersThatNeverReportAreHungAfterStartup) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  v1::JobSpec builtin = Spec(1, 1);
  builtin.set_max_restarts(1);
  const std::string stuck = Submit(builtin);
  v1::JobSpec own = Spec(1, 1);
  own.add_entrypoint("/usr/bin/python3");
  const std::string quiet = Submit(own);
  for (int i = 0; i < 31; ++i) {  // 5 min 10 s, the workers heard throughout
    clock_.Advance(absl::Seconds(10));
    workers_->Hear(sessions_["w0"]).IgnoreError();
    workers_->Hear(sessions_["w1"]).IgnoreError();
    jobs_->Supervise();
  }
  EXPECT_EQ(Get(stuck).state, v1::RESTARTING);
  EXPECT_NE(Get(stuck).reason.find("no report within 5m"), std::string::npos)
      << Get(stuck).reason;
  EXPECT_EQ(Get(quiet).state, v1::RUNNING) << Get(quiet).reason;
}

TEST_F(JobSchedulerTest, StepReportsFeedMetricsAndProgress) {
  AddWorker("w0", 2);
  const std::string id = Submit(Spec(1, 1, 2));
  v1::StepMetrics m;
  m.mutable_ref()->set_job_id(id);
  m.mutable_ref()->set_generation(1);
  m.set_rank(0);
  m.set_step(4);
  m.set_samples(8);
  (*m.mutable_values())["loss"] = 0.5;
  // Without the rank's token (or with another rank's) nothing is accepted.
  EXPECT_EQ(jobs_->ReportStep(m, true).status().code(), absl::StatusCode::kPermissionDenied);
  m.mutable_ref()->set_token(Get(id).ranks[1].task.token());
  EXPECT_EQ(jobs_->ReportStep(m, true).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Get(id).ranks[0].task.token().size(), 64u);
  EXPECT_NE(Get(id).ranks[0].task.token(), Get(id).ranks[1].task.token());
  m.mutable_ref()->set_token(Get(id).ranks[0].task.token());
  absl::StatusOr<JobScheduler::StepOutcome> out = jobs_->ReportStep(m, true);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->row.has_value());
  EXPECT_EQ(out->row->job_id, id);
  EXPECT_EQ(out->row->step, 4);
  EXPECT_FALSE(jobs_->ReportStep(m, true)->row.has_value());  // a duplicate
  m.set_progress_only(true);
  EXPECT_FALSE(jobs_->ReportStep(m, true)->row.has_value());
  EXPECT_EQ(Get(id).progress.max_step(), 4);
  EXPECT_EQ(*jobs_->RequestCheckpoint(id), 6);
  m.set_rank(2);
  EXPECT_EQ(jobs_->ReportStep(m, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  m.set_rank(0);
  m.mutable_ref()->set_generation(2);
  EXPECT_EQ(jobs_->ReportStep(m, true).status().code(), absl::StatusCode::kAborted);
  v1::JobRef ref = m.ref();
  EXPECT_EQ(jobs_->CheckpointTarget(ref, /*writes=*/false).status().code(),
            absl::StatusCode::kAborted);
  ref.set_generation(1);
  ASSERT_TRUE(jobs_->CheckpointTarget(ref, /*writes=*/false).ok());
  jobs_->CheckpointRecorded(id, 6);
  EXPECT_EQ(Get(id).progress.checkpoint_at(), 0);
  ref.set_job_id("job-none");
  EXPECT_EQ(jobs_->CheckpointTarget(ref, /*writes=*/false).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// A caller without a rank's token learns nothing of the job: a job that
// does not exist, one that does with any generation, and an empty token
// get the same code and a message naming only what was sent. A token of
// an ended generation is told its generation is over (ABORTED).
TEST_F(JobSchedulerTest, ACallerWithoutARanksTokenLearnsNothingOfTheJob) {
  AddWorker("w0", 1);
  const std::string id = Submit(Spec(1, 1));
  ASSERT_EQ(Get(id).state, v1::RUNNING);
  const std::string token = Get(id).ranks[0].task.token();
  auto answer = [&](const std::string& job, int64_t generation, const std::string& t) {
    v1::JobRef ref;
    ref.set_job_id(job);
    ref.set_generation(generation);
    ref.set_token(t);
    return jobs_->CheckpointTarget(ref, /*writes=*/false).status();
  };
  const std::string stranger(64, 'a');
  for (const auto& [job, generation, t] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {id, 1, stranger}, {id, 7, stranger}, {"job-999999", 1, stranger}, {id, 1, ""},
           {"job-999999", 1, token}}) {
    const absl::Status s = answer(job, generation, t);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << job << " " << generation;
    EXPECT_EQ(s.message(), absl::StrCat("no rank of job '", job, "' generation ", generation,
                                        " holds this FRAMEWORM_TOKEN (a trainer call needs "
                                        "its rank's token of the running generation)"));
  }
  EXPECT_TRUE(answer(id, 1, token).ok());
  EXPECT_EQ(answer(id, 2, token).code(), absl::StatusCode::kAborted);  // not its generation
  // The generation ends (its rank fails): its token is now a past one.
  Exit("w0", id, 0, 1);
  ASSERT_NE(Get(id).state, v1::RUNNING);
  const absl::Status over = answer(id, 1, token);
  EXPECT_EQ(over.code(), absl::StatusCode::kAborted) << over;
  EXPECT_NE(over.message().find("is over"), std::string::npos) << over;
}

// A deferred report (the metric writer full) moves the rank's progress and
// hang timer but aggregates nothing, so the same report sent again later is
// merged, not ignored as a duplicate.
TEST_F(JobSchedulerTest, DeferredReportCountsAsProgressAndIsMergedWhenSentAgain) {
  AddWorker("w0", 2);
  const std::string id = Submit(Spec(1, 1, 2));
  v1::StepMetrics m;
  m.mutable_ref()->set_job_id(id);
  m.mutable_ref()->set_generation(1);
  m.mutable_ref()->set_token(Get(id).ranks[0].task.token());
  m.set_rank(0);
  m.set_step(9);
  m.set_samples(8);
  (*m.mutable_values())["loss"] = 0.25;
  absl::StatusOr<JobScheduler::StepOutcome> out = jobs_->ReportStep(m, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->deferred);
  EXPECT_FALSE(out->row.has_value());
  EXPECT_EQ(Get(id).progress.max_step(), 9);
  EXPECT_FALSE(Get(id).metrics.Has(9));
  out = jobs_->ReportStep(m, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->deferred);
  ASSERT_TRUE(out->row.has_value());
  EXPECT_EQ(out->row->step, 9);
  // A bad report is refused whether or not metrics are recorded.
  m.set_rank(5);
  EXPECT_EQ(jobs_->ReportStep(m, false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobSchedulerTest, ElasticJobGrowsOntoAJoiningWorkerAtItsCheckpoint) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 3));
  ASSERT_EQ(Get(id).workers.size(), 2u);
  // No free worker, or no reports yet: nothing is planned.
  jobs_->Schedule();
  EXPECT_EQ(Get(id).grow_at, 0);
  AddWorker("w2", 1);
  jobs_->Schedule();
  EXPECT_EQ(Get(id).grow_at, 0);  // its trainers never reported a step
  EXPECT_EQ(Report(id, 0, 5), 0);
  EXPECT_EQ(Report(id, 1, 5), 0);
  jobs_->Schedule();
  EXPECT_EQ(Get(id).grow_at, 7);  // max step + lead
  EXPECT_EQ(Report(id, 0, 6), 7);  // every rank is asked for it
  // An older checkpoint does not trigger the growth.
  jobs_->CheckpointRecorded(id, 4);
  EXPECT_EQ(Get(id).generation, 1);
  jobs_->CheckpointRecorded(id, 7);
  const Job& job = Get(id);
  EXPECT_EQ(job.state, v1::RUNNING);
  EXPECT_EQ(job.generation, 2);
  EXPECT_EQ(job.workers, (std::vector<std::string>{"w0", "w1", "w2"}));
  EXPECT_EQ(job.ranks.size(), 3u);
  EXPECT_EQ(job.ranks[2].task.world_size(), 3);
  EXPECT_EQ(job.restarts, 0);  // growth is not a failure
  EXPECT_EQ(job.reason, "growing from 2 to 3 nodes after the checkpoint of step 7");
  EXPECT_EQ(job.grow_at, 0);
  EXPECT_EQ(job.progress.max_step(), 6);
  // At nodes.max: never again.
  AddWorker("w3", 1);
  jobs_->Schedule();
  EXPECT_EQ(Get(id).grow_at, 0);
  EXPECT_EQ(jobs_->SlotsInUse(),
            (std::map<std::string, int>{{"w0", 1}, {"w1", 1}, {"w2", 1}}));
}

TEST_F(JobSchedulerTest, QueuedJobsGetFreeWorkersBeforeAGrowingJob) {
  const std::string id = GrowableJob();
  const std::string queued = Submit(Spec(2, 2));
  EXPECT_EQ(Get(queued).state, v1::PENDING);
  AddWorker("w2", 1);  // one free worker: not enough for the queued job
  jobs_->Schedule();
  EXPECT_EQ(Get(queued).state, v1::PENDING);
  EXPECT_EQ(Get(id).grow_at, 0);  // it waits; growth would starve it
}

TEST_F(JobSchedulerTest, GrowthWhoseWorkerWasTakenMeanwhileKeepsTheGeneration) {
  const std::string id = GrowableJob();
  AddWorker("w2", 1);
  jobs_->Schedule();
  ASSERT_EQ(Get(id).grow_at, 7);
  const std::string other = Submit(Spec(1, 1));  // takes w2 first
  EXPECT_EQ(Get(other).workers, (std::vector<std::string>{"w2"}));
  jobs_->CheckpointRecorded(id, 7);
  EXPECT_EQ(Get(id).generation, 1);
  EXPECT_EQ(Get(id).state, v1::RUNNING);
  EXPECT_EQ(Get(id).grow_at, 0);  // planned again when a worker is free
}

// A growth checkpoint whose upload outlasts 10 steps (a large model) is not
// taken for missed: rank 0 says it is in flight, and its record grows the
// job when it comes.
TEST_F(JobSchedulerTest, AGrowthCheckpointStillUploadingGrowsTheJobWhenRecorded) {
  const std::string id = GrowableJob();
  AddWorker("w2", 1);
  jobs_->Schedule();
  ASSERT_EQ(Get(id).grow_at, 7);
  Report(id, 1, 30);
  EXPECT_EQ(Report(id, 0, 30, 0, 0, /*checkpoint_in_flight=*/7), 7);
  jobs_->Supervise();
  jobs_->Schedule();
  EXPECT_EQ(Get(id).grow_at, 7) << "given up while its checkpoint uploads";
  jobs_->CheckpointRecorded(id, 7);
  EXPECT_EQ(Get(id).generation, 2);
  EXPECT_EQ(Get(id).workers.size(), 3u);
}

TEST_F(JobSchedulerTest, AMissedGrowthCheckpointIsNotAskedForAgain) {
  const std::string id = GrowableJob(/*max_restarts=*/1);
  AddWorker("w2", 1);
  jobs_->Schedule();
  ASSERT_EQ(Get(id).grow_at, 7);
  // Trainers that ignore checkpoint requests pass it by more than 10 steps.
  Report(id, 0, 30);
  EXPECT_EQ(Report(id, 1, 30), 0);
  jobs_->Supervise();
  jobs_->Schedule();
  EXPECT_EQ(Get(id).grow_at, -1);
  EXPECT_EQ(Get(id).progress.checkpoint_at(), 0);
  EXPECT_EQ(Get(id).generation, 1);
  // The next generation may plan again.
  Exit("w1", id, 1, 3);
  jobs_->Schedule();
  ASSERT_EQ(Get(id).state, v1::RUNNING);
  EXPECT_EQ(Get(id).generation, 2);
  EXPECT_EQ(Get(id).workers.size(), 3u);  // a restart takes what is free
}

TEST_F(JobSchedulerTest, CorruptRowsFailTheirJobAndTheRestStillLoad) {
  AddWorker("w0", 1);
  const std::string good = Submit(Spec(1, 1));
  ASSERT_EQ(Get(good).state, v1::RUNNING);
  JobRow bad_spec;
  bad_spec.job_id = "job-000900";
  bad_spec.seq = 900;
  bad_spec.spec = "\xff\xff not a spec";
  bad_spec.state = v1::PENDING;
  ASSERT_TRUE(store_.PutJob(bad_spec).ok());
  JobRow lost_generation = RowOf(Get(good));
  lost_generation.job_id = "job-000901";
  lost_generation.seq = 901;
  lost_generation.state = v1::RUNNING;
  lost_generation.generation = 7;  // no generation 7 in the store
  ASSERT_TRUE(store_.PutJob(lost_generation).ok());
  JobRow bad_state = RowOf(Get(good));
  bad_state.job_id = "job-000902";
  bad_state.seq = 902;
  bad_state.state = 77;
  ASSERT_TRUE(store_.PutJob(bad_state).ok());

  Restart();  // the coordinator still starts
  EXPECT_EQ(Get(good).state, v1::RUNNING);
  for (const char* id : {"job-000900", "job-000901", "job-000902"}) {
    const Job& j = Get(id);
    EXPECT_EQ(j.state, v1::FAILED) << id;
    EXPECT_NE(j.reason.find(absl::StrCat("corrupt")), std::string::npos) << j.reason;
    EXPECT_NE(j.reason.find(id), std::string::npos) << j.reason;
  }
  EXPECT_NE(Get("job-000901").reason.find("generation 7"), std::string::npos);
  // Recorded: the next start agrees.
  Restart();
  EXPECT_EQ(Get("job-000900").state, v1::FAILED);
  // New jobs get new ids after the highest seen.
  EXPECT_EQ(Submit(Spec(1, 1)), "job-000903");
}

TEST_F(JobSchedulerTest, StartsNotYetTakenSurviveAReRegistration) {
  AddWorker("w0", 1);
  AddWorker("w1", 1);
  const std::string id = Submit(Spec(2, 2));
  ASSERT_EQ(Get(id).state, v1::RUNNING);
  // w1's session broke before it took its StartTask; it registers again
  // running nothing.
  AddWorker("w1", 1);
  jobs_->Reconcile("w1", {}, {});
  EXPECT_EQ(Get(id).state, v1::RUNNING);
  EXPECT_EQ(Get(id).generation, 1);  // no restart
  auto cmds = workers_->Take(sessions_["w1"]);
  ASSERT_TRUE(cmds.ok());
  ASSERT_EQ(cmds->size(), 1u);
  EXPECT_EQ((*cmds)[0].start().task().ref().job_id(), id);
  EXPECT_EQ((*cmds)[0].start().task().rank(), 1);
  // A start that is no longer current is dropped at the next registration.
  ASSERT_TRUE(jobs_->Cancel(id).ok());
  v1::CoordinatorMessage stale;
  *stale.mutable_start()->mutable_task() = Get(id).ranks.empty()
                                               ? (*cmds)[0].start().task()
                                               : Get(id).ranks[0].task;
  workers_->Send("w1", stale);
  AddWorker("w1", 1);
  jobs_->Reconcile("w1", {}, {});
  auto after = workers_->Take(sessions_["w1"]);
  ASSERT_TRUE(after.ok());
  for (const auto& m : *after) EXPECT_FALSE(m.has_start()) << m.ShortDebugString();
}

}  // namespace
}  // namespace frameworm::coordinator
