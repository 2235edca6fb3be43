// Formatting without a network; commands against a small real JobService
// (callback API) on 127.0.0.1 for exit codes and error lines.
#include "client/cli.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/received_file.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::JobStatus Job(const std::string& id, v1::JobState state, int64_t step) {
  v1::JobStatus j;
  j.set_job_id(id);
  j.mutable_spec()->set_name("mnist");
  j.set_total_steps(300);
  j.mutable_spec()->set_nodes_max(2);
  j.mutable_spec()->set_nproc_per_node(1);
  j.set_state(state);
  j.set_generation(1);
  j.set_step(step);
  (*j.mutable_last()->mutable_mean())["loss"] = 0.5;
  j.mutable_last()->set_samples(128);  // per step, all ranks
  j.set_samples_per_second(256);       // => 2 steps/s
  j.add_workers("w1");
  j.add_workers("w2");
  return j;
}

TEST(CliFormat, ProgressLine) {
  EXPECT_EQ(FormatProgress(Job("j1", v1::RUNNING, 100)),
            "j1 RUNNING gen 1 step 100/300 (33%) loss 0.5000 256.0 samples/s "
            "ETA 1m40s");
  v1::JobStatus f = Job("j1", v1::FAILED, 120);
  f.set_reason("rank 1 exited with code 3");
  f.set_restarts(1);
  EXPECT_EQ(FormatProgress(f),
            "j1 FAILED gen 1 step 120/300 (40%) loss 0.5000 256.0 samples/s "
            "restarts 1: rank 1 exited with code 3");
  v1::JobStatus p;
  p.set_job_id("j2");
  p.set_state(v1::PENDING);
  EXPECT_EQ(FormatProgress(p), "j2 PENDING step 0");
  v1::JobStatus r = Job("j3", v1::RUNNING, 5);
  r.set_samples_per_second(0);
  EXPECT_THAT(FormatProgress(r), HasSubstr("ETA --"));
}

TEST(CliFormat, EventsAndTheLastCause) {
  v1::ListEventsResponse r;
  v1::Event* e = r.add_events();
  e->set_seq(7);
  e->set_unix_ms(0);  // unset time prints "-"
  e->set_kind("rank_failed");
  e->set_message("job job-1 generation 2: rank 1 killed by signal 9 on worker w2");
  EXPECT_EQ(FormatEvents(r),
            "-  rank_failed         job job-1 generation 2: rank 1 killed by signal 9 on worker "
            "w2\n");
  v1::JobStatus j = Job("job-1", v1::RUNNING, 10);
  EXPECT_THAT(FormatJobStatus(j), Not(HasSubstr("last cause")));
  j.set_last_cause("job job-1 generation 2: rank 1 killed by signal 9");
  EXPECT_THAT(FormatJobStatus(j),
              HasSubstr("last cause: job job-1 generation 2: rank 1 killed by signal 9 (-)\n"));
  // The flag README promises in status: the ranks flagged slow at the last
  // step; an elastic job's nodes now, of its range.
  EXPECT_THAT(FormatJobStatus(j), Not(HasSubstr("stragglers")));
  j.mutable_last()->add_stragglers(1);
  j.mutable_last()->add_stragglers(3);
  EXPECT_THAT(FormatJobStatus(j), HasSubstr("stragglers: rank(s) 1, 3 at step "));
  j.mutable_spec()->set_nodes_min(2);
  j.mutable_spec()->set_nodes_max(4);
  j.clear_workers();
  j.add_workers("w1");
  j.add_workers("w2");
  j.add_workers("w3");
  EXPECT_THAT(FormatJobStatus(j), HasSubstr("ranks: 3 (of 2..4) node(s) x "));
}

TEST(CliFormat, Durations) {
  EXPECT_EQ(HumanDuration(absl::Seconds(42)), "42s");
  EXPECT_EQ(HumanDuration(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(HumanDuration(absl::Seconds(3720)), "1h02m");
}

TEST(CliFormat, TablesAndCsv) {
  v1::ListJobsResponse jobs;
  *jobs.add_jobs() = Job("job-1", v1::RUNNING, 10);
  EXPECT_EQ(FormatJobTable(jobs),
            "ID     NAME   STATE    GEN  RESTARTS  STEP    WORKERS\n"
            "job-1  mnist  RUNNING  1    0         10/300  w1,w2\n");

  v1::GetMetricsResponse m;
  for (int i = 1; i <= 2; ++i) {
    v1::AggregatedStep* s = m.add_steps();
    s->set_step(i);
    s->set_ranks_reported(2);
    s->set_samples(128);
    (*s->mutable_mean())["loss"] = 1.0 / i;
    (*s->mutable_mean())["accuracy"] = 0.25 * i;
  }
  m.mutable_steps(1)->add_stragglers(1);
  EXPECT_EQ(FormatMetricsCsv(m),
            "step,epoch,ranks_reported,samples,accuracy,loss,stragglers\n"
            "1,0,2,128,0.25,1,\n"
            "2,0,2,128,0.5,0.5,1\n");
  EXPECT_EQ(FormatMetricsTable(m),
            "STEP  EPOCH  RANKS  SAMPLES  accuracy  loss  STRAGGLERS\n"
            "1     0      2      128      0.25      1     -\n"
            "2     0      2      128      0.5       0.5   1\n");

  v1::ListWorkersResponse w;
  v1::WorkerInfo* wi = w.add_workers();
  wi->set_name("w1");
  wi->set_address("127.0.0.1");
  wi->set_slots(2);
  wi->set_free_slots(1);
  wi->set_alive(true);
  wi->add_running_tasks("job-1/g1/r0");
  EXPECT_EQ(FormatWorkers(w),
            "NAME  ADDRESS    SLOTS  FREE  ALIVE  LAST_HEARTBEAT  TASKS\n"
            "w1    127.0.0.1  2      1     yes    -               job-1/g1/r0\n");

  v1::DebugJobResponse d;
  EXPECT_EQ(FormatRecorders(d), "");
  v1::RankRecorder* rr = d.add_recorders();
  rr->set_rank(1);
  rr->set_ping_age_seconds(0.42);
  rr->mutable_collectives()->set_enqueued(41);
  rr->mutable_collectives()->set_completed(40);
  v1::CollectiveOp* done = rr->mutable_collectives()->add_recent();
  done->set_seq(40);
  done->set_op("broadcast");
  done->set_what("step action");
  done->set_bucket(-1);
  done->set_bytes(16);
  done->set_state("completed");
  done->set_seconds(0.0021);
  v1::CollectiveOp* pending = rr->mutable_collectives()->add_recent();
  pending->set_seq(41);
  pending->set_op("allreduce");
  pending->set_what("gradients");
  pending->set_bucket(0);
  pending->set_bytes(3 << 20);
  pending->set_state("started");
  pending->set_age_seconds(1.25);
  d.set_collectives("flight recorder: rank 0 never reached collective #41");
  EXPECT_EQ(FormatRecorders(d),
            "=== frameworm: flight recorders (as of each rank's last ping) ===\n"
            "rank 1 (its ping 0.4 s ago): issued #41, completed #40\n"
            "  #40 broadcast step action (16 B) completed, took 0.002 s\n"
            "  #41 allreduce gradients bucket 0 (3.0 MiB) started, enqueued 1.250 s before\n"
            "flight recorder: rank 0 never reached collective #41\n");

  v1::ListCheckpointsResponse c;
  v1::CheckpointRecord* cr = c.add_checkpoints();
  cr->set_step(100);
  cr->set_path("/c/step-100.pt");
  cr->set_bytes(4096);
  cr->set_checksum("ab12");
  cr->add_holders("w1");
  cr->add_holders("w2");
  v1::CheckpointRecord* older = c.add_checkpoints();
  older->set_step(50);
  older->set_path("/c/step-50.pt");
  older->set_memory(true);
  EXPECT_EQ(FormatCheckpoints(c),
            "STEP  KIND    PATH            BYTES  CHECKSUM  CREATED  HELD_BY\n"
            "100   disk    /c/step-100.pt  4096   ab12      -        w1,w2\n"
            "50    memory  /c/step-50.pt   0                -        -\n");
  // What a peer sent reaches the terminal as printable text only.
  older->set_path("/c/\x1b]0;pwn\x07\xc2\x9b" "2J/step-50.pt");
  older->add_holders("w\x1b[2J");
  EXPECT_THAT(FormatCheckpoints(c), Not(HasSubstr("\x1b")));
  EXPECT_THAT(FormatCheckpoints(c), Not(HasSubstr("\xc2\x9b")));
  EXPECT_THAT(FormatCheckpoints(c), HasSubstr("/c/?]0;pwn??2J/step-50.pt"));
  std::string status = FormatJobStatus(Job("job-1", v1::RUNNING, 10));
  EXPECT_THAT(status, HasSubstr("state: RUNNING\n"));
  EXPECT_THAT(status, HasSubstr("step: 10/300\n"));
  EXPECT_THAT(status, HasSubstr("loss: 0.5\n"));
  EXPECT_THAT(status, Not(HasSubstr("warning")));
  v1::JobStatus warned = Job("job-1", v1::RUNNING, 10);
  warned.set_warning("rank 0 at step 9: checkpoint of step 8 skipped");
  EXPECT_THAT(FormatJobStatus(warned),
              HasSubstr("warning: rank 0 at step 9: checkpoint of step 8 skipped\n"));
  EXPECT_THAT(ToJson(jobs), HasSubstr("\"job_id\":\"job-1\""));
}

// A server stream that writes `items` in order, then ends with `end`.
template <typename Msg>
class ListWriter final : public grpc::ServerWriteReactor<Msg> {
 public:
  explicit ListWriter(std::vector<Msg> items, grpc::Status end = grpc::Status::OK)
      : items_(std::move(items)), end_(std::move(end)) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return this->Finish(grpc::Status::CANCELLED);
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (i_ == items_.size()) return this->Finish(end_);
    this->StartWrite(&items_[i_++]);
  }
  std::vector<Msg> items_;
  size_t i_ = 0;
  const grpc::Status end_;
};

grpc::Status NoJob(const std::string& id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + id + "'");
}
const grpc::Status kConnectionReset(grpc::StatusCode::UNAVAILABLE, "connection reset");

// A JobService stand-in: job "good" succeeds, "bad" fails, others NOT_FOUND.
class TestJobService final : public v1::JobService::CallbackService {
 public:
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override {
    {
      absl::MutexLock l(&mu_);
      submitted_.push_back(req->spec());
    }
    resp->set_job_id("job-42");
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  // Five jobs, two per page: "job-1".."job-5"; the token is the last id.
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override {
    const int after = req->page_token().empty() ? 0 : req->page_token().back() - '0';
    for (int i = after + 1; i <= 5 && i <= after + 2; ++i) {
      *resp->add_jobs() = Job(absl::StrCat("job-", i), v1::RUNNING, 1);
    }
    if (after + 2 < 5) resp->set_next_page_token(absl::StrCat("job-", after + 2));
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* req,
                                   v1::JobStatus* resp) override {
    auto* r = ctx->DefaultReactor();
    if (req->job_id() == "good") {
      *resp = Job("good", v1::RUNNING, 3);
      r->Finish(grpc::Status::OK);
    } else {
      r->Finish(NoJob(req->job_id()));
    }
    return r;
  }
  // "restarting": its first stream ends UNAVAILABLE after one update (a
  // coordinator restart), the next ends the job; "gone": every stream
  // UNAVAILABLE at once.
  grpc::ServerWriteReactor<v1::JobStatus>* WatchJob(
      grpc::CallbackServerContext*, const v1::WatchJobRequest* req) override {
    const std::string& id = req->job_id();
    using Writer = ListWriter<v1::JobStatus>;
    if (id == "gone") return new Writer({}, kConnectionReset);
    if (id == "restarting") {
      if (restarting_calls_++ == 0) return new Writer({Job(id, v1::RUNNING, 100)}, kConnectionReset);
      return new Writer({Job(id, v1::SUCCEEDED, 300)});
    }
    if (id != "good" && id != "bad") return new Writer({}, NoJob(id));
    std::vector<v1::JobStatus> updates = {Job(id, v1::RUNNING, 100), Job(id, v1::RUNNING, 200),
                                          Job(id, id == "good" ? v1::SUCCEEDED : v1::FAILED, 300)};
    if (id == "bad") updates.back().set_reason("rank 0 exited with code 3");
    return new Writer(std::move(updates));
  }
  std::atomic<int> restarting_calls_{0};
  // "flaky": rank 0's log is "a0\na1\n", rank 1's "b0\nb1\n"; the first
  // call sends each log from where the request says up to byte 3 and ends
  // UNAVAILABLE (a coordinator restart), later calls send the rest from
  // where the request says and end the job's logs. "gone": UNAVAILABLE at
  // once. Others NOT_FOUND.
  grpc::ServerWriteReactor<v1::LogChunk>* GetLogs(grpc::CallbackServerContext*,
                                                  const v1::GetLogsRequest* req) override {
    using Writer = ListWriter<v1::LogChunk>;
    if (req->job_id() == "gone") return new Writer({}, kConnectionReset);
    if (req->job_id() != "flaky") return new Writer({}, NoJob(req->job_id()));
    const int call = flaky_calls_++;
    const std::string logs[] = {"a0\na1\n", "b0\nb1\n"};
    std::vector<v1::LogChunk> chunks;
    for (int rank : {0, 1}) {
      if (req->rank() >= 0 && req->rank() != rank) continue;
      int64_t from = req->offset();
      if (auto it = req->rank_offsets().find(rank); it != req->rank_offsets().end())
        from = it->second;
      const int64_t to = call == 0 ? 3 : static_cast<int64_t>(logs[rank].size());
      if (from >= to) continue;
      v1::LogChunk& c = chunks.emplace_back();
      c.set_rank(rank);
      c.set_data(logs[rank].substr(from, to - from));
      c.set_end_offset(to);
    }
    return new Writer(std::move(chunks), call == 0 ? kConnectionReset : grpc::Status::OK);
  }
  std::atomic<int> flaky_calls_{0};
  // "flaky": event 1 after seq 0; the next call UNAVAILABLE (a coordinator
  // restart); then job_finished (seq 2) after seq 1, and nothing after
  // any other seq. Others NOT_FOUND.
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* ctx,
                                       const v1::ListEventsRequest* req,
                                       v1::ListEventsResponse* resp) override {
    auto* r = ctx->DefaultReactor();
    if (req->job_id() != "flaky") {
      r->Finish(NoJob(req->job_id()));
      return r;
    }
    const int call = event_calls_++;
    if (call == 1) {
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"));
      return r;
    }
    resp->set_next_after_seq(req->after_seq());
    if (req->after_seq() < 2) {
      v1::Event* e = resp->add_events();
      e->set_seq(req->after_seq() + 1);
      e->set_job_id("flaky");
      e->set_kind(req->after_seq() == 0 ? "job_scheduled" : "job_finished");
      e->set_message(absl::StrCat("event ", e->seq()));
      resp->set_next_after_seq(e->seq());
    }
    r->Finish(grpc::Status::OK);
    return r;
  }
  std::atomic<int> event_calls_{0};
  // "good": step 7, 3 MiB in 1 MiB chunks with the right checksum; "torn":
  // the same bytes announced with another checksum; others NOT_FOUND.
  grpc::ServerWriteReactor<v1::CheckpointData>* GetCheckpoint(
      grpc::CallbackServerContext*, const v1::GetCheckpointRequest* req) override {
    using Writer = ListWriter<v1::CheckpointData>;
    if (req->job_id() != "good" && req->job_id() != "torn") {
      return new Writer({}, NoJob(req->job_id()));
    }
    const std::string data = CheckpointBytes();
    std::vector<v1::CheckpointData> chunks;
    for (size_t at = 0; at < data.size(); at += 1 << 20) {
      chunks.emplace_back().set_data(data.substr(at, 1 << 20));
    }
    chunks[0].set_step(7);
    chunks[0].set_total_bytes(static_cast<int64_t>(data.size()));
    chunks[0].set_checksum(req->job_id() == "good" ? Crc32Text(UpdateCrc32(0, data))
                                                   : "crc32:00000000");
    return new Writer(std::move(chunks));
  }
  static std::string CheckpointBytes() {
    std::string data(3 << 20, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
    return data;
  }
  std::vector<v1::JobSpec> submitted() {
    absl::MutexLock l(&mu_);
    return submitted_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::JobSpec> submitted_ ABSL_GUARDED_BY(mu_);
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StartServer({}, {&svc_});
    ASSERT_TRUE(s.ok());
    server_ = std::move(s->server);
    opts_.default_coordinator = absl::StrCat("127.0.0.1:", s->port);
    opts_.call_timeout = absl::Seconds(5);
  }
  void TearDown() override { server_->Shutdown(); }
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return RunCli(args, opts_, out_, err_);
  }
  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string p = ::testing::TempDir() + "/cli_test_" +
                    std::to_string(::getpid()) + "_" + name;
    std::ofstream(p) << text;
    return p;
  }
  TestJobService svc_;
  std::unique_ptr<grpc::Server> server_;
  CliOptions opts_;
  std::ostringstream out_, err_;
};

TEST_F(CliTest, SubmitPrintsJobId) {
  std::string p = WriteFile("ok.yaml", "name: t\nnproc_per_node: 2\n");
  EXPECT_EQ(Run({"submit", p}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "job-42\n");
  ASSERT_EQ(svc_.submitted().size(), 1u);
  EXPECT_EQ(svc_.submitted()[0].nproc_per_node(), 2);
}

TEST_F(CliTest, ListFollowsEveryPage) {
  ASSERT_EQ(Run({"list"}), 0) << err_.str();
  for (int i = 1; i <= 5; ++i) {
    EXPECT_NE(out_.str().find(absl::StrCat("job-", i)), std::string::npos) << out_.str();
  }
  ASSERT_EQ(Run({"list", "--json"}), 0) << err_.str();
  EXPECT_EQ(out_.str().find("nextPageToken"), std::string::npos) << out_.str();
}

TEST_F(CliTest, BadSpecIsRefusedBeforeSending) {
  std::string p = WriteFile("bad.yaml", "name: t\nnprocs_per_node: 2\n");
  EXPECT_EQ(Run({"submit", p}), 1);
  EXPECT_EQ(err_.str(), "frameworm-cli: submit: INVALID_ARGUMENT: " + p +
                            ":2: unknown field 'nprocs_per_node' (did you mean "
                            "'nproc_per_node'?)\n");
  EXPECT_TRUE(svc_.submitted().empty());
  EXPECT_EQ(Run({"submit", "/nonexistent/job.yaml"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("cannot read /nonexistent/job.yaml"));
  // Too large to be a spec: refused after 4 MiB, even from an endless file.
  std::string big = WriteFile("big.yaml", "name: t\n# " + std::string(4 << 20, 'x') + "\n");
  EXPECT_EQ(Run({"submit", big}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("job spec " + big + " is larger than 4 MiB"));
  EXPECT_EQ(Run({"submit", "/dev/zero"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("job spec /dev/zero is larger than 4 MiB"));
  EXPECT_TRUE(svc_.submitted().empty());
}

TEST_F(CliTest, ServerErrorIsOneLine) {
  EXPECT_EQ(Run({"status", "nope"}), 1);
  EXPECT_EQ(err_.str(), "frameworm-cli: status: NOT_FOUND: no job 'nope'\n");
  EXPECT_EQ(Run({"status", "good", "--json"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("\"job_id\":\"good\""));
  EXPECT_EQ(Run({"status", "good"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("state: RUNNING"));
}

TEST_F(CliTest, UnimplementedCommandIsAServerError) {
  EXPECT_EQ(Run({"workers"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: workers: UNIMPLEMENTED"));
  EXPECT_THAT(err_.str(), HasSubstr("does not have this call (an older version?)"));
}

TEST_F(CliTest, WatchExitsWithJobOutcome) {
  EXPECT_EQ(Run({"watch", "good"}), 0) << err_.str();
  // The step-200 update comes within the refresh interval of the first and
  // is not printed; changes of state always are.
  EXPECT_EQ(out_.str(),
            "good RUNNING gen 1 step 100/300 (33%) loss 0.5000 256.0 samples/s "
            "ETA 1m40s\n"
            "good SUCCEEDED gen 1 step 300/300 (100%) loss 0.5000 256.0 "
            "samples/s\n");
  EXPECT_EQ(Run({"watch", "bad"}), 1);
  EXPECT_EQ(err_.str(),
            "frameworm-cli: watch: job bad FAILED: rank 0 exited with code 3\n");
  EXPECT_EQ(Run({"watch", "nope"}), 1);
  EXPECT_EQ(err_.str(), "frameworm-cli: watch: NOT_FOUND: no job 'nope'\n");
}

// A coordinator restart ends the watch's stream (UNAVAILABLE); the job goes
// on, so the watch reconnects and still exits with the job's outcome; a
// coordinator away for longer than reconnect_for ends it with the
// error.
TEST_F(CliTest, WatchOutlivesACoordinatorRestart) {
  EXPECT_EQ(Run({"watch", "restarting"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("restarting SUCCEEDED"));
  EXPECT_THAT(err_.str(), HasSubstr("the coordinator is unavailable (connection reset); "
                                    "reconnecting"));
  opts_.reconnect_for = absl::Seconds(2);
  const absl::Time began = absl::Now();
  EXPECT_EQ(Run({"watch", "gone"}), 1);
  EXPECT_GE(absl::Now() - began, absl::Seconds(2));
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: watch: UNAVAILABLE: connection reset"));
}

// logs -f reconnects after a coordinator restart (UNAVAILABLE) from where
// each rank's log was left: every byte once, for every rank and for one;
// without -f the error ends it, and a coordinator away for longer than
// reconnect_for ends -f with the error.
TEST_F(CliTest, LogsFollowOutlivesACoordinatorRestart) {
  EXPECT_EQ(Run({"logs", "flaky", "-f"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "[rank 0] a0\n[rank 1] b0\n[rank 0] a1\n[rank 1] b1\n");
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: logs: the coordinator is unavailable "
                                    "(connection reset); reconnecting"));
  svc_.flaky_calls_ = 0;
  EXPECT_EQ(Run({"logs", "flaky", "--rank", "1", "-f"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "b0\nb1\n");
  svc_.flaky_calls_ = 0;
  EXPECT_EQ(Run({"logs", "flaky"}), 1);
  EXPECT_EQ(out_.str(), "[rank 0] a0\n[rank 1] b0\n");
  EXPECT_EQ(err_.str(), "frameworm-cli: logs: UNAVAILABLE: connection reset\n");
  opts_.reconnect_for = absl::Seconds(2);
  const absl::Time began = absl::Now();
  EXPECT_EQ(Run({"logs", "gone", "-f"}), 1);
  EXPECT_GE(absl::Now() - began, absl::Seconds(2));
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: logs: UNAVAILABLE: connection reset"));
}

// events -f polls on across a coordinator restart from the last event it
// printed: each event once, until the job's job_finished; without -f the
// error ends it.
TEST_F(CliTest, EventsFollowOutlivesACoordinatorRestart) {
  EXPECT_EQ(Run({"events", "flaky", "-f"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("event 1\n"));
  EXPECT_THAT(out_.str(), HasSubstr("event 2\n"));
  EXPECT_EQ(out_.str().find("event 1"), out_.str().rfind("event 1"));
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: events: the coordinator is unavailable "
                                    "(connection reset); reconnecting"));
  svc_.event_calls_ = 0;
  EXPECT_EQ(Run({"events", "flaky"}), 1);
  EXPECT_THAT(out_.str(), HasSubstr("event 1\n"));
  EXPECT_EQ(err_.str(), "frameworm-cli: events: UNAVAILABLE: connection reset\n");
}

// --dry-run checks a job file with the coordinator's rules and prints
// what would run; nothing reaches the coordinator.
TEST_F(CliTest, DryRunChecksAndPrintsWithoutSubmitting) {
  std::string p = WriteFile("dry.yaml",
                            "name: demo\nnodes: {min: 2, max: 3}\ntrain:\n  model: cnn\n"
                            "  max_steps: 300\n");
  ASSERT_EQ(Run({"submit", "--dry-run", p}), 0) << err_.str();
  EXPECT_EQ(out_.str(), p + " is a valid job spec (not submitted):\n"
                            "name: demo\n"
                            "nodes: 2 to 3 x 1 process per node\n"
                            "backend: nccl where a node has GPUs, else gloo\n"
                            "command: frameworm-train\n"
                            "train: --max-steps=300 --model=cnn\n"
                            "max_restarts: 0\n"
                            "total_steps: 300\n");
  ASSERT_EQ(Run({"submit", p, "--dry-run", "--json"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\"nodes_max\":3"));
  EXPECT_THAT(out_.str(), HasSubstr("\"nproc_per_node\":1"));  // the coordinator's default
  // A bad one fails as submit would, naming the line.
  std::string bad = WriteFile("dry_bad.yaml", "name: demo\ntrain:\n  epochs: two\n");
  EXPECT_EQ(Run({"submit", "--dry-run", bad}), 1);
  EXPECT_EQ(err_.str(), "frameworm-cli: submit: INVALID_ARGUMENT: " + bad +
                            ":3: train option 'epochs' must be an integer, got 'two'\n");
  EXPECT_TRUE(svc_.submitted().empty());
  EXPECT_EQ(Run({"list", "--dry-run"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--dry-run applies to submit only"));
}

TEST_F(CliTest, UsageErrorsExit2) {
  EXPECT_EQ(Run({}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("no command given"));
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown command 'frobnicate'"));
  EXPECT_EQ(Run({"status"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("status takes one job id, got 0"));
  EXPECT_EQ(Run({"list", "--bogus"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown flag --bogus"));
  EXPECT_EQ(Run({"logs", "x", "--rank", "-3"}), 2);
  EXPECT_EQ(Run({"status", "x", "--csv"}), 2);
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("usage: frameworm-cli"));
}

// Without FILE the checkpoint goes to ID-ckpt-STEP.pt in the working
// directory (a bare name: create_directories("") fails, and the download
// with it, before this was handled).
TEST_F(CliTest, DownloadWithoutAFileWritesIntoTheWorkingDirectory) {
  const std::string dir = ::testing::TempDir() + "/cli_download_cwd_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path was = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const int rc = Run({"download", "good"});
  std::filesystem::current_path(was);
  EXPECT_EQ(rc, 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("written to good-ckpt-7.pt"));
  std::ifstream in(dir + "/good-ckpt-7.pt", std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_TRUE(got.str() == TestJobService::CheckpointBytes());
  std::filesystem::remove_all(dir);
}

TEST_F(CliTest, DownloadWritesAWholeCheckedFileOrNothing) {
  const std::string dir = ::testing::TempDir() + "/cli_download_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_EQ(Run({"download", "good", dir + "/c.pt"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("checkpoint of step 7 of good written to " + dir + "/c.pt"));
  std::ifstream in(dir + "/c.pt", std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_TRUE(got.str() == TestJobService::CheckpointBytes());
  EXPECT_EQ(Run({"download", "torn", dir + "/t.pt"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("download: "));
  EXPECT_THAT(err_.str(), HasSubstr("crc32:00000000"));
  EXPECT_EQ(Run({"download", "nope", dir + "/n.pt"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND: no job 'nope'"));
  // Nothing but the good file is left (no partial files).
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"c.pt"});
  EXPECT_EQ(Run({"download", "good", "--step", "-2"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--step needs a step number"));
  EXPECT_EQ(Run({"status", "good", "--step", "3"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--step applies to download only"));
  EXPECT_EQ(Run({"download", "good", "a", "b"}), 2);
  std::filesystem::remove_all(dir);
}

TEST_F(CliTest, UnreachableCoordinatorIsUnavailable) {
  EXPECT_EQ(Run({"--coordinator", "127.0.0.1:1", "list"}), 1);
  const std::string err = err_.str();
  EXPECT_THAT(err, HasSubstr("frameworm-cli: list: UNAVAILABLE: "));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST_F(CliTest, BadFlagIsOneLineAndExit2) {
  EXPECT_EQ(Run({"list", "--bogus"}), 2);
  EXPECT_EQ(err_.str(), "frameworm-cli: unknown flag --bogus (see --help)\n");
  EXPECT_EQ(Run({"list", "--jsno"}), 2);
  EXPECT_EQ(err_.str(),
            "frameworm-cli: unknown flag --jsno (did you mean --json?) (see "
            "--help)\n");
  EXPECT_EQ(Run({"logs", "x", "--rank", "two"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--rank: bad value 'two'"));
  EXPECT_EQ(Run({"logs", "x", "--rank"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("flag --rank needs a value"));
  EXPECT_EQ(Run({"stauts", "x"}), 2);
  EXPECT_EQ(err_.str(),
            "frameworm-cli: unknown command 'stauts' (did you mean 'status'?) "
            "(see --help)\n");
  EXPECT_EQ(Run({"metrics", "x", "--since=-1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--since needs a step number >= 0"));
  EXPECT_EQ(Run({"list", "--coordinator="}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--coordinator needs HOST:PORT"));
  EXPECT_EQ(Run({"list", "--coordinator=127.0.0.1:99999"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--coordinator needs HOST:PORT with a port 1..65535, got "
                                    "'127.0.0.1:99999'"));
  EXPECT_EQ(Run({"status", "x", "-f"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("-f applies to logs and events only"));
  EXPECT_EQ(Run({"events", "x", "--rank=1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--rank applies to logs and debug only"));
  EXPECT_EQ(Run({"events", "x", "y"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("events takes at most one job id, got 2"));
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(CliTest, HelpListsCommandsAndFlagsVersionPrintsOneLine) {
  for (const char* help : {"--help", "-h", "help"}) {
    EXPECT_EQ(Run({help}), 0) << help;
    EXPECT_THAT(out_.str(), HasSubstr("  watch ID                     live "
                                      "progress until the job ends\n"
                                      "                               (exit 0 "
                                      "only if it SUCCEEDED)\n"));
    EXPECT_THAT(out_.str(),
                HasSubstr("  --coordinator\n      the coordinator's address, "
                          "HOST:PORT (default: 127.0.0.1:7070, or "
                          "$FRAMEWORM_COORDINATOR)\n"));
    EXPECT_THAT(out_.str(), HasSubstr("-f is --follow"));
    EXPECT_TRUE(err_.str().empty());
  }
  EXPECT_EQ(Run({"--version"}), 0);
  EXPECT_EQ(out_.str(), absl::StrCat("frameworm-cli ", Version(), "\n"));
}

TEST_F(CliTest, CoordinatorFallsBackToTheEnvironment) {
  const std::string server = opts_.default_coordinator;
  opts_.default_coordinator = "127.0.0.1:1";  // nothing listens there
  opts_.env = [server](const std::string& name) -> std::optional<std::string> {
    if (name == "FRAMEWORM_COORDINATOR") return server;
    return std::nullopt;
  };
  EXPECT_EQ(Run({"status", "good"}), 0) << err_.str();
  // The command line wins over the environment.
  EXPECT_EQ(Run({"status", "good", "--coordinator", "127.0.0.1:1"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: status: UNAVAILABLE: "));
}

// A bad value from the environment is named by its variable, not by a flag
// the user never typed.
TEST_F(CliTest, ABadValueFromTheEnvironmentNamesItsVariable) {
  std::string tls_dir;
  opts_.env = [&tls_dir](const std::string& name) -> std::optional<std::string> {
    if (name == "FRAMEWORM_COORDINATOR") return std::string("host");
    if (name == "FRAMEWORM_TLS_DIR" && !tls_dir.empty()) return tls_dir;
    return std::nullopt;
  };
  EXPECT_EQ(Run({"list"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("$FRAMEWORM_COORDINATOR needs HOST:PORT with a port "
                                    "1..65535, got 'host'"));
  EXPECT_EQ(Run({"list", "--coordinator", "host"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--coordinator needs HOST:PORT"));
  tls_dir = "/no/such/tls-dir";
  EXPECT_EQ(Run({"list", "--coordinator", "127.0.0.1:1"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("frameworm-cli: $FRAMEWORM_TLS_DIR: "));
}

TEST_F(CliTest, EveryRunStartsFromTheDefaults) {
  EXPECT_EQ(Run({"--coordinator=127.0.0.1:1", "--json", "status", "good"}), 1);
  EXPECT_EQ(Run({"status", "good"}), 0) << err_.str();
  EXPECT_EQ(out_.str().rfind("id: good\n", 0), 0u) << out_.str();
  // Flags stand anywhere, before or after the command and its argument.
  EXPECT_EQ(Run({"status", "--json", "good"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\"job_id\":\"good\""));
}

}  // namespace
}  // namespace frameworm
