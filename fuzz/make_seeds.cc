// Writes the coordinator fuzzer's seed programs (program.h) into the
// directory given as argv[1]: a worker registers, a job starts on it, its
// rank reports steps, a checkpoint and logs, the clock runs past the
// heartbeat timeout, the job is cancelled; and variations with out-of-range
// values. The seeds in fuzz/corpus/coordinator were written by this.
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "frameworm/v1/job_service.pb.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"
#include "fuzz/program.h"

namespace f = frameworm::fuzz;
namespace v1 = frameworm::v1;

namespace {

std::string S(const google::protobuf::Message& m) { return m.SerializeAsString(); }

v1::JobSpec Spec(int nodes, int nproc) {
  v1::JobSpec s;
  s.set_name("seed");
  s.set_nodes_min(nodes);
  s.set_nodes_max(nodes + 1);
  s.set_nproc_per_node(nproc);
  s.set_max_restarts(2);
  s.mutable_checkpoint()->set_keep_last(1);
  (*s.mutable_env())["A"] = "b";
  (*s.mutable_secret_env())["TOKEN"] = "x";
  return s;
}

v1::RegisterWorkerRequest Worker(const std::string& name, int slots) {
  v1::RegisterWorkerRequest r;
  r.set_name(name);
  r.set_address("10.0.0.2");
  r.set_slots(slots);
  r.set_instance(name + "-1");
  return r;
}

v1::StepMetrics Step(int rank, int64_t step) {
  v1::StepMetrics m;
  m.mutable_ref()->set_job_id("job-000001");
  m.mutable_ref()->set_generation(1);
  m.set_rank(rank);
  m.set_step(step);
  m.set_epoch(0);
  m.set_samples(64);
  m.set_step_seconds(0.05);
  m.set_total_steps(100);
  (*m.mutable_values())["loss"] = 0.5;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::vector<f::Call>> programs;

  // 1. The happy path, then a timeout and a cancel.
  {
    std::vector<f::Call> p;
    p.push_back({f::kRegister, S(Worker("w0", 2))});
    p.push_back({f::kSubmit, S(Spec(1, 2))});
    p.push_back({f::kTakeCommands, ""});
    for (int step = 1; step <= 3; ++step) {
      p.push_back({f::kReportStep, S(Step(0, step))});
      p.push_back({f::kReportStep, S(Step(1, step))});
    }
    v1::CheckpointRecord ck;
    ck.mutable_ref()->set_job_id("job-000001");
    ck.mutable_ref()->set_generation(1);
    ck.set_step(3);
    ck.set_path("/tmp/frameworm-fuzz-state/checkpoints/job-000001/ckpt-3.pt");
    ck.set_bytes(100);
    p.push_back({f::kReportCheckpoint, S(ck)});
    v1::WorkerMessage hb;
    hb.mutable_heartbeat();
    p.push_back({f::kWorkerMessage, S(hb)});
    v1::WorkerMessage log;
    auto* l = log.mutable_log();
    l->mutable_ref()->set_job_id("job-000001");
    l->mutable_ref()->set_generation(1);
    l->set_rank(0);
    l->set_data("hello\n");
    p.push_back({f::kWorkerMessage, S(log)});
    v1::GetLogsRequest logs;
    logs.set_job_id("job-000001");
    logs.set_rank(-1);
    p.push_back({f::kLogs, S(logs)});
    v1::GetMetricsRequest met;
    met.set_job_id("job-000001");
    p.push_back({f::kMetrics, S(met)});
    v1::RequestCheckpointRequest rc;
    rc.set_job_id("job-000001");
    p.push_back({f::kRequestCheckpoint, S(rc)});
    p.push_back({f::kTick, std::string(12, 'x')});
    v1::CancelJobRequest cancel;
    cancel.set_job_id("job-000001");
    p.push_back({f::kCancelJob, S(cancel)});
    v1::ListCheckpointsRequest lc;
    lc.set_job_id("job-000001");
    p.push_back({f::kLists, S(lc)});
    programs.push_back(p);
  }
  // 2. A task status: the rank exits, another fails.
  {
    std::vector<f::Call> p;
    p.push_back({f::kRegister, S(Worker("w0", 1))});
    p.push_back({f::kRegister, S(Worker("w1", 1))});
    p.push_back({f::kSubmit, S(Spec(2, 1))});
    v1::WorkerMessage st;
    auto* t = st.mutable_task_status();
    t->mutable_ref()->set_job_id("job-000001");
    t->mutable_ref()->set_generation(1);
    t->set_rank(1);
    t->set_state(v1::TASK_EXITED);
    t->set_exit_code(3);
    t->set_stderr_tail("Traceback: boom");
    p.push_back({f::kWorkerMessage, S(st)});
    p.push_back({f::kDetach, ""});
    p.push_back({f::kRegister, S(Worker("w1", 1))});
    p.push_back({f::kTick, std::string(30, 'x')});
    programs.push_back(p);
  }
  // 3. Out-of-range values everywhere.
  {
    std::vector<f::Call> p;
    p.push_back({f::kRegister, S(Worker("w0", 1 << 30))});
    p.push_back({f::kSubmit, S(Spec(-1, 100000))});
    v1::StepMetrics bad = Step(99999, -5);
    (*bad.mutable_values())["nan"] = std::numeric_limits<double>::quiet_NaN();
    p.push_back({f::kReportStep, S(bad)});
    v1::GetLogsRequest logs;
    logs.set_job_id("../../etc");
    logs.set_rank(-7);
    logs.set_offset(-1);
    p.push_back({f::kLogs, S(logs)});
    programs.push_back(p);
  }
  // 4. Liveness pings with flight recorders (one rank waiting in #41, one
  // behind it, then a malformed one), and time for the hang check.
  {
    std::vector<f::Call> p;
    p.push_back({f::kRegister, S(Worker("w0", 2))});
    p.push_back({f::kSubmit, S(Spec(1, 2))});
    p.push_back({f::kTakeCommands, ""});
    p.push_back({f::kReportStep, S(Step(0, 1))});
    p.push_back({f::kReportStep, S(Step(1, 1))});
    for (int rank = 0; rank < 3; ++rank) {
      v1::StepMetrics ping = Step(rank % 2, 1);
      ping.clear_values();
      ping.set_progress_only(true);
      ping.set_ping(true);
      ping.set_measures_wait(rank == 0);
      ping.set_waiting_seconds(rank == 0 ? 2.5 : 0);
      v1::CollectiveProgress* c = ping.mutable_collectives();
      c->set_enqueued(rank == 0 ? 41 : 40);
      c->set_completed(40);
      v1::CollectiveOp* op = c->add_recent();
      op->set_seq(rank == 0 ? 41 : 40);
      op->set_op("allreduce");
      op->set_what("gradients");
      op->set_bucket(0);
      op->set_bytes(4096);
      op->set_state(rank == 0 ? "started" : "completed");
      op->set_age_seconds(1.5);
      if (rank == 2) op->set_seq(99);  // beyond enqueued: refused
      p.push_back({f::kReportStep, S(ping)});
    }
    p.push_back({f::kTick, std::string(40, 'x')});
    programs.push_back(p);
  }
  for (size_t i = 0; i < programs.size(); ++i) {
    std::ofstream(dir + "/seed-" + std::to_string(i + 1) + ".bin", std::ios::binary)
        << f::Encode(programs[i]);
  }
  return 0;
}
