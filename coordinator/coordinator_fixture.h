// The CoordinatorTest fixture: a Coordinator on a MemoryStore (a restart is
// a second Coordinator on the same store, Open()) and a SimulatedClock, with
// helpers that play the workers and trainers (register, task states, step
// and checkpoint reports with the tokens the StartTasks carried).
#ifndef FRAMEWORM_COORDINATOR_COORDINATOR_FIXTURE_H_
#define FRAMEWORM_COORDINATOR_COORDINATOR_FIXTURE_H_

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/memory_store.h"
#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("coord");
    Open();
  }
  void TearDown() override {
    coord_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Options for the next Open(); tests may change them first.
  CoordinatorOptions Options() const {
    if (options_) return *options_;
    CoordinatorOptions o;
    o.state_dir = dir_;
    o.advertise = "127.0.0.1:7070";
    o.port_min = 29500;
    o.port_max = 29509;
    o.default_heartbeat_timeout = absl::Seconds(10);
    o.reconnect_grace = absl::Seconds(2);
    o.stall_after = absl::ZeroDuration();  // the tests jump the clock
    return o;
  }
  void SetOptions(const CoordinatorOptions& o) { options_ = o; }
  // A coordinator (re)started on store_: reopening is a restart.
  void Open() {
    auto c = Coordinator::CreateWithStore(Options(), clock_, &store_);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(c).value();
  }

  // A coordinator restarted with stall_after 2 s, a 2-rank job on w0 and
  // w1 whose ranks both reported step 1, and one Tick; returns the job's id
  // ("" when a report failed).
  std::string TwoRanksReportedWithStallCheck() {
    CoordinatorOptions o = Options();
    o.stall_after = absl::Seconds(2);
    SetOptions(o);
    coord_.reset();
    Open();
    AddWorker("w0", 1);
    AddWorker("w1", 1);
    const std::string id = Submit(Spec(2, 1));
    if (!Step(id, 1, 0, 1).ok() || !Step(id, 1, 1, 1).ok()) return "";
    coord_->Tick();
    return id;
  }
  // Registers and attaches a worker; returns its session id.
  // With `peer`, it serves checkpoint copies at "<name>.host:7071".
  // `instance`: the worker process's id (empty: none given).
  std::string AddWorker(const std::string& name, int slots,
                        std::vector<v1::TaskStatus> running = {}, bool peer = false,
                        const std::string& instance = "") {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_instance(instance);
    req.set_address(name + ".host:9000");
    if (peer) req.set_peer_endpoint(name + ".host:7071");
    req.set_slots(slots);
    for (auto& t : running) *req.add_running() = t;
    Harvest();               // tokens of what the old session was sent
    pending_.erase(name);    // a new session supersedes undelivered commands
    auto reg = coord_->RegisterWorker(req);
    EXPECT_TRUE(reg.ok()) << reg.status();
    EXPECT_TRUE(coord_->AttachSession(reg->session_id).ok());
    sessions_[name] = reg->session_id;
    return reg->session_id;
  }
  void Heartbeat(const std::string& name) {
    v1::WorkerMessage m;
    m.set_session_id(sessions_[name]);
    m.mutable_heartbeat()->set_unix_ms(1);
    ASSERT_TRUE(coord_->HandleWorkerMessage(m).ok());
  }
  // The worker's answer to a HoldCheckpoint.
  void Held(const std::string& worker, const std::string& job, int64_t step, bool ok = true,
            const std::string& secret = "") {
    v1::WorkerMessage m;
    m.set_session_id(sessions_[worker]);
    m.mutable_held()->set_job_id(job);
    m.mutable_held()->set_step(step);
    m.mutable_held()->set_ok(ok);
    m.mutable_held()->set_secret(secret);
    if (!ok) m.mutable_held()->set_error("disk full");
    ASSERT_TRUE(coord_->HandleWorkerMessage(m).ok());
  }
  void TaskState(const std::string& worker, const std::string& job,
                 int64_t gen, int rank, v1::TaskState state, int code = 0, int signal = 0,
                 bool fenced = false) {
    v1::WorkerMessage m;
    m.set_session_id(sessions_[worker]);
    auto* t = m.mutable_task_status();
    t->mutable_ref()->set_job_id(job);
    t->mutable_ref()->set_generation(gen);
    t->set_rank(rank);
    t->set_state(state);
    t->set_exit_code(code);
    t->set_signal(signal);
    t->set_fenced(fenced);
    ASSERT_TRUE(coord_->HandleWorkerMessage(m).ok());
  }
  // Moves every session's queued commands to pending_, noting each started
  // rank's FRAMEWORM_TOKEN (what the worker would hand the trainer).
  void Harvest() {
    for (const auto& [worker, session] : sessions_) {
      auto cmds = coord_->TakeCommands(session);
      if (!cmds.ok()) continue;
      for (auto& c : *cmds) {
        if (c.has_start()) {
          const v1::TaskSpec& t = c.start().task();
          tokens_[{t.ref().job_id(), t.ref().generation(), t.rank()}] = t.token();
        }
        pending_[worker].push_back(std::move(c));
      }
    }
  }
  std::string TokenOf(const std::string& job, int64_t gen, int rank) {
    Harvest();
    auto it = tokens_.find({job, gen, rank});
    return it == tokens_.end() ? "" : it->second;
  }
  std::vector<v1::CoordinatorMessage> Take(const std::string& worker) {
    Harvest();
    EXPECT_TRUE(coord_->TakeCommands(sessions_[worker]).ok());  // a live session
    std::vector<v1::CoordinatorMessage> out = std::move(pending_[worker]);
    pending_.erase(worker);
    return out;
  }
  std::vector<v1::TaskSpec> Starts(const std::string& worker) {
    std::vector<v1::TaskSpec> out;
    for (auto& c : Take(worker))
      if (c.has_start()) out.push_back(c.start().task());
    return out;
  }
  absl::StatusOr<v1::ReportStepResponse> Step(const std::string& job,
                                               int64_t gen, int rank,
                                               int64_t step) {
    v1::StepMetrics m;
    m.mutable_ref()->set_job_id(job);
    m.mutable_ref()->set_generation(gen);
    m.set_rank(rank);
    m.mutable_ref()->set_token(TokenOf(job, gen, rank));
    m.set_step(step);
    m.set_samples(8);
    m.set_step_seconds(0.1);
    (*m.mutable_values())["loss"] = 1.0 / step;
    return coord_->ReportStep(m);
  }
  // A ReportSteps batch, answered once the core is done with it.
  absl::Status ReportBatch(const v1::StepReports& batch) {
    absl::Notification answered;
    absl::Status status;
    coord_->ReportStepsAsync(batch, [&](absl::StatusOr<v1::ReportStepResponse> r) {
      status = r.status();
      answered.Notify();
    });
    answered.WaitForNotification();
    return status;
  }
  // Where frameworm-train writes job `job`'s checkpoint of `step` by default.
  std::string CkptPath(const std::string& job, int64_t step) const {
    return absl::StrCat(dir_, "/checkpoints/", job, "/ckpt-", step, ".pt");
  }
  // Job `job`'s in-memory checkpoint of `step` under the default memory
  // root, reported by rank 0 of generation `gen`.
  std::string MemoryPath(const std::string& job, int64_t step) {
    return absl::StrCat("/dev/shm/frameworm/", job, "-", Job(job).submitted_unix_ms(), "/ckpt-",
                        step, ".pt");
  }
  absl::Status MemoryCheckpoint(const std::string& job, int64_t gen, int64_t step) {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(job);
    r.mutable_ref()->set_generation(gen);
    r.mutable_ref()->set_token(TokenOf(job, gen, 0));
    r.set_step(step);
    r.set_path(MemoryPath(job, step));
    r.set_bytes(3);
    r.set_checksum("crc32:0000abcd");
    r.set_memory(true);
    return coord_->ReportCheckpoint(r).status();
  }
  // One tick of a running generation-1 job of 2 ranks on w0 and w1: the
  // clock moves `by`, both workers heartbeat, rank 1 reports `step`, Tick
  // runs, then rank 0 reports `step`. Returns the checkpoint step rank 0's
  // answer asks for (0: none), or -1 when a report failed.
  int64_t TickTwoRanks(const std::string& job, int64_t step, absl::Duration by) {
    clock_.Advance(by);
    Heartbeat("w0");
    Heartbeat("w1");
    if (!Step(job, 1, 1, step).ok()) return -1;
    coord_->Tick();
    auto r = Step(job, 1, 0, step);
    return r.ok() ? r->checkpoint_at_step() : -1;
  }
  absl::StatusOr<std::vector<std::string>> Checkpoint(const std::string& job,
                                                      int64_t gen,
                                                      int64_t step,
                                                      const std::string& path,
                                                      const std::string& checksum = "crc32:0000abcd") {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(job);
    r.mutable_ref()->set_generation(gen);
    r.mutable_ref()->set_token(TokenOf(job, gen, 0));
    r.set_step(step);
    r.set_path(path);
    r.set_bytes(4);  // the size of the copies tests upload ("data")
    r.set_checksum(checksum);
    return coord_->ReportCheckpoint(r);
  }
  static v1::JobSpec Spec(int nodes, int nproc, int priority = 0) {
    v1::JobSpec s;
    s.set_name("test");
    s.set_nodes_min(nodes);
    s.set_nodes_max(nodes);
    s.set_nproc_per_node(nproc);
    s.set_priority(priority);
    return s;
  }
  std::string Submit(const v1::JobSpec& spec) {
    auto id = coord_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }
  v1::JobStatus Job(const std::string& id) {
    auto s = coord_->GetJob(id);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::JobStatus{};
  }

  std::optional<CoordinatorOptions> options_;
  SimulatedClock clock_;
  std::string dir_;
  MemoryStore store_;  // declared before coord_: outlives it
  std::unique_ptr<Coordinator> coord_;
  std::map<std::string, std::string> sessions_;
  std::map<std::string, std::vector<v1::CoordinatorMessage>> pending_;  // by worker
  std::map<std::tuple<std::string, int64_t, int>, std::string> tokens_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_COORDINATOR_FIXTURE_H_
