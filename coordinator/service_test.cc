// The gRPC glue against an in-process server on 127.0.0.1 with the real
// generated stubs.
#include "coordinator/service.h"

#include <cmath>
#include <sqlite3.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "coordinator/sqlite_store.h"
#include "coordinator/test_dir.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/checked_serialization.h"
#include "rpc/rpc.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;
using Stream =
    grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("svc");
    CoordinatorOptions o;
    o.state_dir = dir_;
    o.advertise = "127.0.0.1:1";
    o.max_log_bytes = 1 << 20;
    auto c = Coordinator::Create(o, RealClock::Real());
    ASSERT_TRUE(c.ok()) << c.status();
    core_ = std::move(c).value();
    service_ = std::make_unique<CoordinatorService>(core_.get(), stream_idle_);
    auto server = StartServer(ServerOptions{}, service_->services());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server->server);
    port_ = server->port;
    auto channel = MakeChannel("127.0.0.1:" + std::to_string(server->port));
    jobs_ = v1::JobService::NewStub(channel);
    workers_ = v1::WorkerService::NewStub(channel);
    trainers_ = v1::TrainerService::NewStub(channel);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(200));
    server_->Wait();
    service_.reset();
    core_.reset();
    fs::remove_all(dir_);
  }

  // Rank `rank`'s FRAMEWORM_TOKEN of generation `gen`, as the worker would
  // hand it to the trainer (read from the coordinator's store).
  std::string TokenOf(const std::string& id, int64_t gen, int rank) {
    auto store = SqliteStore::Open(dir_);
    if (!store.ok()) return "";
    auto rows = (*store)->LoadAssignments(id, gen);
    if (!rows.ok()) return "";
    for (const auto& a : *rows) {
      v1::TaskSpec t;
      if (a.rank == rank && t.ParseFromString(a.task)) return t.token();
    }
    return "";
  }

  // Every rank's log of job `id`, followed.
  static v1::GetLogsRequest FollowEveryRank(const std::string& id) {
    v1::GetLogsRequest r;
    r.set_job_id(id);
    r.set_rank(-1);
    r.set_follow(true);
    return r;
  }
  // Cancels a WatchJob stream and reads it to its end.
  static void EndWatch(grpc::ClientContext& ctx, grpc::ClientReader<v1::JobStatus>& w) {
    ctx.TryCancel();
    v1::JobStatus st;
    while (w.Read(&st)) {
    }
    (void)w.Finish();
  }
  static void Deadline(grpc::ClientContext* ctx, int seconds = 10) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(seconds));
  }
  static v1::JobSpec Spec(int nodes) {
    v1::JobSpec s;
    s.set_name("svc");
    s.set_nodes_min(nodes);
    s.set_nodes_max(nodes);
    s.set_nproc_per_node(1);
    return s;
  }
  std::string Submit(const v1::JobSpec& spec) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }
  v1::JobStatus Get(const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::JobStatus st;
    EXPECT_TRUE(jobs_->GetJob(&ctx, req, &st).ok());
    return st;
  }
  // Registers a worker and opens its session (first message: heartbeat).
  std::string Connect(const std::string& name, grpc::ClientContext* ctx,
                      std::unique_ptr<Stream>* stream) {
    grpc::ClientContext rctx;
    Deadline(&rctx);
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_address("127.0.0.1");
    req.set_slots(1);
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(workers_->RegisterWorker(&rctx, req, &resp).ok());
    EXPECT_GT(resp.heartbeat_interval_s(), 0);
    Deadline(ctx);
    *stream = workers_->Session(ctx);
    v1::WorkerMessage hb;
    hb.set_session_id(resp.session_id());
    hb.mutable_heartbeat()->set_unix_ms(1);
    EXPECT_TRUE((*stream)->Write(hb));
    return resp.session_id();
  }
  // Polls until `pred` holds for the job (the server handles stream
  // messages asynchronously).
  template <typename Pred>
  v1::JobStatus WaitFor(const std::string& id, Pred pred) {
    v1::JobStatus st;
    for (int i = 0; i < 500; ++i) {
      st = Get(id);
      if (pred(st)) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return st;
  }
  // A step report of `rank` with its real token.
  v1::StepMetrics Report(const std::string& id, int64_t gen, int rank, int64_t step, double loss,
                         int64_t samples) {
    v1::StepMetrics m;
    m.mutable_ref()->set_job_id(id);
    m.mutable_ref()->set_generation(gen);
    m.mutable_ref()->set_token(TokenOf(id, gen, rank));
    m.set_rank(rank);
    m.set_step(step);
    m.set_samples(samples);
    m.set_step_seconds(0.5);
    (*m.mutable_values())["loss"] = loss;
    return m;
  }
  grpc::Status Step(const std::string& id, int64_t gen, int rank,
                    int64_t step, double loss, int64_t samples,
                    v1::ReportStepResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    return trainers_->ReportStep(&ctx, Report(id, gen, rank, step, loss, samples), resp);
  }

  // A 1-rank job started on worker w0 (whose session stays open in *ctx,
  // *stream); its id.
  std::string StartOnW0(grpc::ClientContext* ctx, std::unique_ptr<Stream>* stream) {
    Connect("w0", ctx, stream);
    const std::string id = Submit(Spec(1));
    v1::CoordinatorMessage start;
    EXPECT_TRUE((*stream)->Read(&start));
    return id;
  }
  // An upload of job `id`'s step 10 (8 bytes) as its rank 0, opened with
  // its first 4 bytes; FinishUpload sends the rest and the checksum.
  struct Held {
    grpc::ClientContext ctx;
    v1::UploadCheckpointResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::CheckpointChunk>> w;
  };
  // `token`: rank 0's when empty.
  bool OpenUpload(const std::string& id, Held& h, const std::string& token = "") {
    Deadline(&h.ctx);
    h.w = trainers_->UploadCheckpoint(&h.ctx, &h.resp);
    v1::CheckpointChunk ch;
    ch.mutable_ref()->set_job_id(id);
    ch.mutable_ref()->set_generation(1);
    ch.mutable_ref()->set_token(token.empty() ? TokenOf(id, 1, 0) : token);
    ch.set_step(10);
    ch.set_total_bytes(8);
    ch.set_data("1234");
    return h.w->Write(ch);
  }
  // The final status a worker sends on `session` when rank `rank` of job
  // `id`'s generation 1 exits with `code`.
  static v1::WorkerMessage RankExited(const std::string& session, const std::string& id,
                                      int rank, int code) {
    v1::WorkerMessage m;
    m.set_session_id(session);
    auto* ts = m.mutable_task_status();
    ts->mutable_ref()->set_job_id(id);
    ts->mutable_ref()->set_generation(1);
    ts->set_rank(rank);
    ts->set_state(v1::TASK_EXITED);
    ts->set_exit_code(code);
    return m;
  }
  // A log chunk of job `id`'s rank `rank` (generation 1) on `session`.
  static v1::WorkerMessage LogLine(const std::string& id, const std::string& session, int rank,
                                   const std::string& text) {
    v1::WorkerMessage m;
    m.set_session_id(session);
    m.mutable_log()->mutable_ref()->set_job_id(id);
    m.mutable_log()->set_rank(rank);
    m.mutable_log()->set_data(text);
    return m;
  }
  // Every rank's log of job `id` as it is now.
  std::string AllLogs(const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetLogsRequest req;
    req.set_job_id(id);
    req.set_rank(-1);
    auto r = jobs_->GetLogs(&ctx, req);
    std::string all;
    v1::LogChunk c;
    while (r->Read(&c)) all += c.data();
    r->Finish().IgnoreError();
    return all;
  }
  // Polls every rank's log of job `id` (every 20 ms, for up to 20 s from
  // `start`) until `last` is there: when `first` and `last` appeared
  // (InfiniteFuture: never).
  std::pair<absl::Time, absl::Time> WhenLogged(const std::string& id, absl::Time start,
                                               const std::string& first,
                                               const std::string& last) {
    absl::Time first_at = absl::InfiniteFuture(), last_at = absl::InfiniteFuture();
    while (absl::Now() - start < absl::Seconds(20) && last_at == absl::InfiniteFuture()) {
      const std::string all = AllLogs(id);
      const absl::Time now = absl::Now();
      if (first_at == absl::InfiniteFuture() && all.find(first) != std::string::npos)
        first_at = now;
      if (all.find(last) != std::string::npos) last_at = now;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return {first_at, last_at};
  }
  // Two workers' sessions, "flooder" (a) and "calm" (b), running a 2-rank
  // job `id`; rank_b is the calm one's rank.
  struct TwoSessions {
    grpc::ClientContext actx, bctx;
    std::unique_ptr<Stream> a, b;
    std::string sa, sb, id;
    int rank_b = -1;
  };
  void StartTwo(TwoSessions& t) {
    t.sa = Connect("flooder", &t.actx, &t.a);
    t.sb = Connect("calm", &t.bctx, &t.b);
    t.id = Submit(Spec(2));
    v1::CoordinatorMessage msg;
    ASSERT_TRUE(t.a->Read(&msg));
    ASSERT_TRUE(t.b->Read(&msg));
    ASSERT_TRUE(msg.has_start());
    t.rank_b = msg.start().task().rank();
  }
  // Rank 0 of job `id`'s generation 1 reports its checkpoint of step 10
  // (with `checksum`, or none: the uploaded copy's size stands for it).
  grpc::Status ReportStep10(const std::string& id, const std::string& checksum = "") {
    return ReportCheckpointOf(id, 10, checksum);
  }
  // The same for `step`, its size `bytes` given (0: none).
  grpc::Status ReportCheckpointOf(const std::string& id, int64_t step, const std::string& checksum,
                                  int64_t bytes = 0) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::CheckpointRecord rec;
    rec.mutable_ref()->set_job_id(id);
    rec.mutable_ref()->set_generation(1);
    rec.mutable_ref()->set_token(TokenOf(id, 1, 0));
    rec.set_step(step);
    rec.set_path(absl::StrCat(dir_, "/checkpoints/", id, "/ckpt-", step, ".pt"));
    rec.set_bytes(bytes);
    rec.set_checksum(checksum);
    v1::ReportCheckpointResponse r;
    return trainers_->ReportCheckpoint(&ctx, rec, &r);
  }
  static grpc::StatusCode FinishUpload(Held& h) {
    v1::CheckpointChunk last;
    last.set_data("5678");
    last.set_checksum(absl::StrFormat(
        "crc32:%08x", static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                                   reinterpret_cast<const Bytef*>("12345678"), 8))));
    h.w->Write(last);
    h.w->WritesDone();
    return h.w->Finish().error_code();
  }

  absl::Duration stream_idle_ = absl::Seconds(60);
  std::string dir_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  int port_ = 0;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::TrainerService::Stub> trainers_;
};

TEST_F(ServiceTest, SubmitGetListCancel) {
  const std::string id = Submit(Spec(1));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Get(id).state(), v1::PENDING);
  EXPECT_EQ(Get(id).spec().name(), "svc");
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &resp).ok());
    ASSERT_EQ(resp.jobs_size(), 1);
    EXPECT_EQ(resp.jobs(0).job_id(), id);
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    ASSERT_TRUE(jobs_->CancelJob(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.job().state(), v1::CANCELLED);
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    EXPECT_EQ(jobs_->CancelJob(&ctx, req, &resp).error_code(),
              grpc::FAILED_PRECONDITION);
  }
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_job_id("job-missing");
  v1::JobStatus st;
  EXPECT_EQ(jobs_->GetJob(&ctx, req, &st).error_code(), grpc::NOT_FOUND);
}

TEST_F(ServiceTest, InvalidSpecNamesFieldAndStoresNothing) {
  v1::JobSpec spec = Spec(1);
  spec.set_nproc_per_node(-1);
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("nproc_per_node"), std::string::npos)
      << s.error_message();
  grpc::ClientContext lctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&lctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(ServiceTest, ASpecAsYamlIsParsedByTheCoordinatorAndBadYamlIsRefused) {
  auto submit = [&](const v1::SubmitJobRequest& req, std::string* id) {
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    *id = resp.job_id();
    return s;
  };
  std::string id;
  v1::SubmitJobRequest req;
  req.set_spec_yaml("name: from-yaml\nnodes: {min: 1, max: 2}\ntrain:\n  model: mlp\n");
  ASSERT_TRUE(submit(req, &id).ok());
  grpc::ClientContext gctx;
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::JobStatus st;
  ASSERT_TRUE(jobs_->GetJob(&gctx, get, &st).ok());
  EXPECT_EQ(st.spec().name(), "from-yaml");
  EXPECT_EQ(st.spec().nodes_max(), 2);
  req.set_spec_yaml("name: x\nnodez: 2\n");
  grpc::Status s = submit(req, &id);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("nodez"), std::string::npos) << s.error_message();
  req.set_spec_yaml("name: x\n" + std::string(70000, '#'));
  s = submit(req, &id);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("at most 65536"), std::string::npos) << s.error_message();
  req.set_spec_yaml("name: x\n");
  *req.mutable_spec() = Spec(1);
  s = submit(req, &id);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("not both"), std::string::npos);
}

TEST_F(ServiceTest, SessionGetsStartTaskThenKillTaskAfterCancel) {
  grpc::ClientContext sctx;
  std::unique_ptr<Stream> stream;
  Connect("w0", &sctx, &stream);
  const std::string id = Submit(Spec(1));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));
  ASSERT_TRUE(msg.has_start());
  const v1::TaskSpec& t = msg.start().task();
  EXPECT_EQ(t.ref().job_id(), id);
  EXPECT_EQ(t.ref().generation(), 1);
  EXPECT_EQ(t.master_addr(), "127.0.0.1");
  EXPECT_EQ(t.coordinator(), "127.0.0.1:1");
  EXPECT_EQ(t.argv(0), "frameworm-train");
  EXPECT_EQ(Get(id).state(), v1::RUNNING);

  grpc::ClientContext cctx;
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::CancelJobResponse resp;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, req, &resp).ok());
  ASSERT_TRUE(stream->Read(&msg));
  ASSERT_TRUE(msg.has_kill());
  EXPECT_EQ(msg.kill().ref().job_id(), id);
  EXPECT_EQ(msg.kill().rank(), -1);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// A message of more elements than proto/checked_serialization.h allows is
// refused before it is parsed: the call ends UNIMPLEMENTED (gRPC's answer to
// an unparsable request), where the handler, had it seen the message, would
// have answered INVALID_ARGUMENT or NOT_FOUND. Unknown fields count; a few
// (a newer client) pass. The coordinator goes on serving.
TEST_F(ServiceTest, FloodedMessagesAreRefusedBeforeTheyAreParsed) {
  const int kFlood = static_cast<int>(kMaxWireElements) + 10;
  auto add_unknown = [](google::protobuf::Message* m, int n) {
    for (int i = 0; i < n; ++i) m->GetReflection()->MutableUnknownFields(m)->AddVarint(999, 1);
  };
  // A registration of `name`; the call's status.
  auto register_worker = [&](const std::string& name, auto&& fill) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_address("127.0.0.1");
    req.set_slots(1);
    fill(&req);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::RegisterWorkerResponse resp;
    return workers_->RegisterWorker(&ctx, req, &resp);
  };
  EXPECT_EQ(register_worker("flood", [&](v1::RegisterWorkerRequest* r) {
              for (int i = 0; i < kFlood; ++i) r->add_running();
            }).error_code(),
            grpc::UNIMPLEMENTED);
  EXPECT_EQ(register_worker("flood", [&](v1::RegisterWorkerRequest* r) {
              add_unknown(r, kFlood);
            }).error_code(),
            grpc::UNIMPLEMENTED);
  {
    v1::StepReports batch;
    for (int i = 0; i < kFlood; ++i) batch.add_reports();
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ReportStepResponse resp;
    EXPECT_EQ(trainers_->ReportSteps(&ctx, batch, &resp).error_code(), grpc::UNIMPLEMENTED);
  }
  {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(1);
    for (int i = 0; i < kFlood; ++i) req.mutable_spec()->add_entrypoint("");
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitJobResponse resp;
    EXPECT_EQ(jobs_->SubmitJob(&ctx, req, &resp).error_code(), grpc::UNIMPLEMENTED);
  }
  {
    // The largest legitimate batch is parsed: the handler answers it (no
    // such job).
    v1::StepReports batch;
    for (int r = 0; r < 256; ++r) {
      v1::StepMetrics* m = batch.add_reports();
      m->mutable_ref()->set_job_id("no-such-job");
      for (int k = 0; k < 64; ++k) (*m->mutable_values())[absl::StrCat("m", k)] = k;
      for (int c = 0; c < 16; ++c) m->mutable_collectives()->add_recent()->set_seq(c + 1);
    }
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ReportStepResponse resp;
    grpc::Status st = trainers_->ReportSteps(&ctx, batch, &resp);
    EXPECT_NE(st.error_code(), grpc::UNIMPLEMENTED) << st.error_message();
    EXPECT_FALSE(st.ok());
  }
  // A session whose message floods ends; the worker can connect again, and
  // a registration with a few unknown fields (a newer worker) is served.
  grpc::ClientContext c1;
  std::unique_ptr<Stream> s1;
  const std::string session = Connect("w1", &c1, &s1);
  v1::WorkerMessage hb;
  hb.set_session_id(session);
  hb.mutable_heartbeat()->set_unix_ms(2);
  add_unknown(&hb, kFlood);
  s1->Write(hb);
  v1::CoordinatorMessage msg;
  while (s1->Read(&msg)) {
  }
  // The coordinator ended the stream (not the 10 s deadline).
  EXPECT_NE(s1->Finish().error_code(), grpc::DEADLINE_EXCEEDED);
  grpc::Status newer =
      register_worker("newer", [&](v1::RegisterWorkerRequest* r) { add_unknown(r, 100); });
  EXPECT_TRUE(newer.ok()) << newer.error_message();
  grpc::ClientContext c2;
  std::unique_ptr<Stream> s2;
  EXPECT_FALSE(Connect("w2", &c2, &s2).empty());
  s2->WritesDone();
  c2.TryCancel();
}

TEST_F(ServiceTest, UnknownSessionIsRefused) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  auto stream = workers_->Session(&ctx);
  v1::WorkerMessage hb;
  hb.set_session_id("not-a-session");
  hb.mutable_heartbeat();
  stream->Write(hb);
  v1::CoordinatorMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::NOT_FOUND);
  EXPECT_NE(s.error_message().find("register"), std::string::npos);
}

// Rank 0 uploads a checkpoint in chunks, reports it, and a rank of the same
// generation downloads the same bytes; hostile uploads and downloads are
// refused with the reason and leave nothing behind.
TEST_F(ServiceTest, CheckpointCopyUploadsAndDownloadsAndRefusesBadCalls) {
  grpc::ClientContext c0;
  std::unique_ptr<Stream> s0;
  Connect("w0", &c0, &s0);
  const std::string id = Submit(Spec(1));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(s0->Read(&msg));
  ASSERT_TRUE(msg.has_start());
  std::string payload(2500000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 + 3);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(payload.data()), payload.size()));
  // Sends `chunks` (the first names ref/step/total); the call's status.
  auto upload = [&](int64_t gen, int64_t total, const std::vector<std::string>& chunks,
                    const std::string& checksum) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::UploadCheckpointResponse resp;
    auto w = trainers_->UploadCheckpoint(&ctx, &resp);
    for (size_t i = 0; i < chunks.size(); ++i) {
      v1::CheckpointChunk ch;
      if (i == 0) {
        ch.mutable_ref()->set_job_id(id);
        ch.mutable_ref()->set_generation(gen);
        ch.mutable_ref()->set_token(TokenOf(id, 1, 0));
        ch.set_step(10);
        ch.set_total_bytes(total);
      }
      ch.set_data(chunks[i]);
      if (i + 1 == chunks.size()) ch.set_checksum(checksum);
      if (!w->Write(ch)) break;
    }
    w->WritesDone();
    return w->Finish();
  };
  auto download = [&](int64_t gen, const std::string& path, std::string* out) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::DownloadCheckpointRequest req;
    req.mutable_ref()->set_job_id(id);
    req.mutable_ref()->set_generation(gen);
    req.mutable_ref()->set_token(TokenOf(id, 1, 0));
    req.set_path(path);
    auto r = trainers_->DownloadCheckpoint(&ctx, req);
    v1::CheckpointChunk ch;
    out->clear();
    while (r->Read(&ch)) out->append(ch.data());
    return r->Finish();
  };
  const std::string ok_sum = absl::StrFormat("crc32:%08x", crc);
  const std::string a = payload.substr(0, 1 << 20), b = payload.substr(1 << 20, 1 << 20),
                    c = payload.substr(2 << 20);
  // Hostile or broken uploads.
  EXPECT_EQ(upload(2, payload.size(), {a, b, c}, ok_sum).error_code(), grpc::ABORTED);
  EXPECT_EQ(upload(1, payload.size(), {a, b}, ok_sum).error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(upload(1, payload.size(), {a, b, c}, "crc32:00000000").error_code(),
            grpc::INVALID_ARGUMENT);
  EXPECT_EQ(upload(1, 10, {a}, ok_sum).error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(upload(1, int64_t{1} << 40, {a}, ok_sum).error_code(), grpc::INVALID_ARGUMENT);
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(dir_ + "/checkpoint-copies/" + id, ec)) << "a refused upload left a file";
  // The real one.
  ASSERT_TRUE(upload(1, payload.size(), {a, b, c}, ok_sum).ok());
  std::string got;
  const std::string path = dir_ + "/checkpoints/" + id + "/ckpt-10.pt";
  // Not reported yet: no download.
  EXPECT_EQ(download(1, path, &got).error_code(), grpc::NOT_FOUND);
  ASSERT_TRUE(ReportStep10(id, ok_sum).ok());
  {
    // Its size was not given: the record has the uploaded copy's.
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListCheckpointsRequest req;
    req.set_job_id(id);
    v1::ListCheckpointsResponse list;
    ASSERT_TRUE(jobs_->ListCheckpoints(&ctx, req, &list).ok());
    ASSERT_EQ(list.checkpoints_size(), 1);
    EXPECT_EQ(list.checkpoints(0).bytes(), static_cast<int64_t>(payload.size()));
  }
  grpc::Status d = download(1, path, &got);
  ASSERT_TRUE(d.ok()) << d.error_message();
  EXPECT_TRUE(got == payload) << got.size() << " bytes";
  {  // The first chunk carries the record's checksum for the trainer to check.
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::DownloadCheckpointRequest req;
    req.mutable_ref()->set_job_id(id);
    req.mutable_ref()->set_generation(1);
    req.mutable_ref()->set_token(TokenOf(id, 1, 0));
    req.set_path(path);
    auto r = trainers_->DownloadCheckpoint(&ctx, req);
    v1::CheckpointChunk first;
    ASSERT_TRUE(r->Read(&first));
    EXPECT_EQ(first.checksum(), ok_sum);
    ctx.TryCancel();
    (void)r->Finish();
  }
  // Other bytes for the recorded step do not replace its copy (every
  // download is checked against the record's checksum); the same bytes
  // again (a retried upload) are taken.
  {
    std::string other = payload;
    other[5] ^= 1;
    const std::string other_sum = absl::StrFormat(
        "crc32:%08x", static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                                  reinterpret_cast<const Bytef*>(other.data()),
                                                  other.size())));
    const grpc::Status replaced = upload(
        1, other.size(), {other.substr(0, 1 << 20), other.substr(1 << 20, 1 << 20),
                          other.substr(2 << 20)},
        other_sum);
    EXPECT_EQ(replaced.error_code(), grpc::FAILED_PRECONDITION) << replaced.error_message();
    EXPECT_NE(replaced.error_message().find("does not replace its copy"), std::string::npos);
    ASSERT_TRUE(download(1, path, &got).ok());
    EXPECT_TRUE(got == payload) << "the recorded copy was replaced";
    EXPECT_TRUE(upload(1, payload.size(), {a, b, c}, ok_sum).ok());
  }
  EXPECT_EQ(download(1, "/etc/passwd", &got).error_code(), grpc::NOT_FOUND);
  EXPECT_EQ(download(7, path, &got).error_code(), grpc::ABORTED);
  // A user gets the same bytes through the job API (GetCheckpoint): the
  // newest, or a step; the first chunk names the step and the checksum.
  auto user_download = [&](const std::string& job, int64_t step, std::string* out,
                           v1::CheckpointData* head) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetCheckpointRequest req;
    req.set_job_id(job);
    req.set_step(step);
    auto r = jobs_->GetCheckpoint(&ctx, req);
    v1::CheckpointData ch;
    out->clear();
    bool first = true;
    while (r->Read(&ch)) {
      if (first) *head = ch;
      first = false;
      out->append(ch.data());
    }
    return r->Finish();
  };
  v1::CheckpointData head;
  for (int64_t step : {0, 10}) {
    grpc::Status u = user_download(id, step, &got, &head);
    ASSERT_TRUE(u.ok()) << u.error_message();
    EXPECT_TRUE(got == payload) << got.size() << " bytes";
    EXPECT_EQ(head.step(), 10);
    EXPECT_EQ(head.total_bytes(), static_cast<int64_t>(payload.size()));
    EXPECT_EQ(head.checksum(), ok_sum);
  }
  grpc::Status u = user_download(id, 11, &got, &head);
  EXPECT_EQ(u.error_code(), grpc::NOT_FOUND);
  EXPECT_NE(u.error_message().find("has no checkpoint of step 11; it has: 10"), std::string::npos)
      << u.error_message();
  EXPECT_EQ(user_download(id, -1, &got, &head).error_code(), grpc::INVALID_ARGUMENT);
  // A newer record with no copy here (reported with its size and checksum,
  // never uploaded): the newest is still the newest the coordinator holds.
  ASSERT_TRUE(ReportCheckpointOf(id, 20, "crc32:0badc0de", 4096).ok());
  u = user_download(id, 0, &got, &head);
  ASSERT_TRUE(u.ok()) << u.error_message();
  EXPECT_EQ(head.step(), 10);
  EXPECT_TRUE(got == payload);
  u = user_download(id, 20, &got, &head);
  EXPECT_EQ(u.error_code(), grpc::NOT_FOUND);
  EXPECT_NE(u.error_message().find("holds no copy"), std::string::npos) << u.error_message();
  EXPECT_EQ(user_download("job-none", 0, &got, &head).error_code(), grpc::NOT_FOUND);
  EXPECT_EQ(user_download("../../etc", 0, &got, &head).error_code(), grpc::NOT_FOUND);
}

// Uploads held open (a first chunk, then nothing) are bounded per job: a
// third for the same job is refused at once, and once one ends another is
// taken again.
TEST_F(ServiceTest, CheckpointUploadsInFlightAreBoundedPerJob) {
  grpc::ClientContext c0;
  std::unique_ptr<Stream> s0;
  const std::string id = StartOnW0(&c0, &s0);
  auto open = [&](Held& h) { return OpenUpload(id, h); };
  Held first, second, third;
  ASSERT_TRUE(open(first));
  ASSERT_TRUE(open(second));
  // A slot is taken when the server reads a stream's first chunk, on any
  // of its threads: give it time to read these two before the third's
  // (without this pause the third was sometimes read first, taken, and one
  // of these refused instead: 1 run in 5 on a 2-core machine).
  absl::SleepFor(absl::Milliseconds(300));
  open(third);  // the server may end it before or after this write
  third.w->WritesDone();
  const grpc::Status refused = third.w->Finish();
  EXPECT_EQ(refused.error_code(), grpc::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("uploads in flight"), std::string::npos);
  // A caller without the job's token is refused for that, before any slot
  // is looked at (it can neither take one nor learn that they are full).
  Held forged;
  OpenUpload(id, forged, std::string(64, 'f'));
  forged.w->WritesDone();
  const grpc::Status denied = forged.w->Finish();
  EXPECT_EQ(denied.error_code(), grpc::PERMISSION_DENIED) << denied.error_message();
  first.ctx.TryCancel();
  (void)first.w->Finish();
  // The cancelled one's slot is free once the server saw it end.
  grpc::StatusCode code = grpc::RESOURCE_EXHAUSTED;
  for (int i = 0; i < 50 && code == grpc::RESOURCE_EXHAUSTED; ++i) {
    Held again;
    open(again);
    code = FinishUpload(again);
    if (code == grpc::RESOURCE_EXHAUSTED) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(code, grpc::OK);
  second.ctx.TryCancel();
  (void)second.w->Finish();
}

// An upload holds its slot only while its generation runs: one trickled on
// after the generation ended is cut at its next chunk, and nothing of it is
// kept.
TEST_F(ServiceTest, AnUploadEndsWithItsGeneration) {
  grpc::ClientContext c0;
  std::unique_ptr<Stream> s0;
  const std::string session = Connect("w0", &c0, &s0);
  const std::string id = Submit(Spec(1));
  v1::CoordinatorMessage start;
  ASSERT_TRUE(s0->Read(&start));
  Held h;
  ASSERT_TRUE(OpenUpload(id, h));
  absl::SleepFor(absl::Milliseconds(300));  // the server took its first chunk (and a slot)
  ASSERT_TRUE(s0->Write(RankExited(session, id, 0, 1)));
  ASSERT_EQ(WaitFor(id, [](const v1::JobStatus& s) { return s.state() == v1::FAILED; }).state(),
            v1::FAILED);
  // Refused as a new upload for that generation would be now.
  const grpc::StatusCode code = FinishUpload(h);
  EXPECT_TRUE(code == grpc::ABORTED || code == grpc::PERMISSION_DENIED) << code;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/checkpoint-copies/" + id + "/ckpt-10.pt"));
}

// An upload that sends a first chunk and then nothing holds its slot only
// until it has been silent for the service's stream_idle (1 s here): then
// its call is cancelled and another upload of the job goes in.
class ShortUploadIdleTest : public ServiceTest {
 protected:
  ShortUploadIdleTest() { stream_idle_ = absl::Seconds(1); }
};

TEST_F(ShortUploadIdleTest, ASilentCheckpointUploadIsCancelledAndFreesItsSlot) {
  grpc::ClientContext c0;
  std::unique_ptr<Stream> s0;
  const std::string id = StartOnW0(&c0, &s0);
  auto open = [&](Held& h) { return OpenUpload(id, h); };
  Held first, second;
  ASSERT_TRUE(open(first));
  ASSERT_TRUE(open(second));
  const absl::Time opened = absl::Now();
  // As in CheckpointUploadsInFlightAreBoundedPerJob: let the server read
  // these two first chunks (and take the slots) before the next upload's.
  absl::SleepFor(absl::Milliseconds(300));
  // Both slots of the job are taken (the third is refused) until the two
  // silent streams are cancelled.
  grpc::StatusCode code = grpc::RESOURCE_EXHAUSTED;
  bool refused_once = false;
  for (int i = 0; i < 100 && code != grpc::OK; ++i) {
    Held again;
    open(again);
    code = FinishUpload(again);
    refused_once |= code == grpc::RESOURCE_EXHAUSTED;
    if (code != grpc::OK) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(refused_once) << "the silent streams held the job's two slots";
  EXPECT_EQ(code, grpc::OK);
  EXPECT_GE(absl::Now() - opened, absl::Seconds(1));
  for (Held* h : {&first, &second}) {
    const grpc::Status st = h->w->Finish();
    EXPECT_EQ(st.error_code(), grpc::CANCELLED) << st.error_message();
  }
}

// A user who takes the first chunk of a checkpoint and then stops reading
// holds the coordinator's chunk and its copy open only until the stream
// has moved no chunk for the service's stream_idle (1 s here): then the
// call is cancelled and the copy closed. The copy is larger than what
// HTTP/2 flow control lets the coordinator send ahead.
TEST_F(ShortUploadIdleTest, ADownloadThatStopsReadingIsCutOffAndTheCopyClosed) {
  grpc::ClientContext c0;
  std::unique_ptr<Stream> s0;
  const std::string id = StartOnW0(&c0, &s0);
  const size_t size = size_t{96} << 20;
  std::string payload(size, '\0');
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>(i * 7 + 3);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::UploadCheckpointResponse resp;
    auto w = trainers_->UploadCheckpoint(&ctx, &resp);
    for (size_t at = 0; at < size; at += 1 << 20) {
      v1::CheckpointChunk ch;
      if (at == 0) {
        ch.mutable_ref()->set_job_id(id);
        ch.mutable_ref()->set_generation(1);
        ch.mutable_ref()->set_token(TokenOf(id, 1, 0));
        ch.set_step(10);
        ch.set_total_bytes(static_cast<int64_t>(size));
      }
      ch.set_data(payload.substr(at, 1 << 20));
      if (at + (1 << 20) >= size) {
        ch.set_checksum(absl::StrFormat(
            "crc32:%08x", static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                                       reinterpret_cast<const Bytef*>(payload.data()),
                                                       payload.size()))));
      }
      ASSERT_TRUE(w->Write(ch));
    }
    w->WritesDone();
    const grpc::Status up = w->Finish();
    ASSERT_TRUE(up.ok()) << up.error_message();
  }
  ASSERT_TRUE(ReportStep10(id).ok());
  // Descriptors of this process open on a file of the job's copies.
  const std::string copies = dir_ + "/checkpoint-copies/" + id + "/";
  auto open_copies = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
      std::error_code lec;
      n += absl::StartsWith(fs::read_symlink(e.path(), lec).string(), copies) ? 1 : 0;
    }
    return n;
  };
  grpc::ClientContext ctx;  // no deadline: only the server ends this call
  v1::GetCheckpointRequest req;
  req.set_job_id(id);
  req.set_step(10);
  auto r = jobs_->GetCheckpoint(&ctx, req);
  v1::CheckpointData ch;
  ASSERT_TRUE(r->Read(&ch));
  size_t got = ch.data().size();
  const absl::Time stopped = absl::Now();
  EXPECT_EQ(open_copies(), 1) << "the coordinator sends from its copy";
  int open = 1;
  for (int i = 0; i < 100 && open > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    open = open_copies();
  }
  EXPECT_EQ(open, 0) << "the stalled download still holds the copy";
  EXPECT_GE(absl::Now() - stopped, absl::Milliseconds(900));
  while (r->Read(&ch)) got += ch.data().size();
  const grpc::Status st = r->Finish();
  EXPECT_EQ(st.error_code(), grpc::CANCELLED) << st.error_message();
  EXPECT_LT(got, size);
}

TEST_F(ServiceTest, StaleGenerationIsAbortedAndMetricsAggregate) {
  grpc::ClientContext c0, c1;
  std::unique_ptr<Stream> s0, s1;
  const std::string sess0 = Connect("w0", &c0, &s0);
  Connect("w1", &c1, &s1);
  v1::JobSpec spec = Spec(2);
  spec.set_max_restarts(1);
  const std::string id = Submit(spec);
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(s0->Read(&msg));
  ASSERT_TRUE(msg.has_start());
  ASSERT_TRUE(s1->Read(&msg));

  v1::ReportStepResponse resp;
  // The token the worker was sent is the one the trainer must present.
  EXPECT_EQ(msg.start().task().token(), TokenOf(id, 1, msg.start().task().rank()));
  EXPECT_EQ(msg.start().task().token().size(), 64u);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::StepMetrics m;
    m.mutable_ref()->set_job_id(id);
    m.mutable_ref()->set_generation(1);
    m.mutable_ref()->set_token(TokenOf(id, 1, 1));  // rank 1's, for rank 0
    m.set_rank(0);
    m.set_step(1);
    EXPECT_EQ(trainers_->ReportStep(&ctx, m, &resp).error_code(), grpc::PERMISSION_DENIED);
  }
  ASSERT_TRUE(Step(id, 1, 0, 1, 1.0, 30, &resp).ok());
  ASSERT_TRUE(Step(id, 1, 1, 1, 2.0, 10, &resp).ok());
  {
    grpc::ClientContext ctx;
    v1::GetMetricsRequest req;
    req.set_job_id(id);
    v1::GetMetricsResponse m;
    ASSERT_TRUE(jobs_->GetMetrics(&ctx, req, &m).ok());
    ASSERT_EQ(m.steps_size(), 1);
    EXPECT_EQ(m.steps(0).ranks_reported(), 2);
    EXPECT_DOUBLE_EQ(m.steps(0).mean().at("loss"), (30 * 1.0 + 10 * 2.0) / 40);
    EXPECT_EQ(m.steps(0).rank_step_seconds_size(), 2);
  }
  {
    grpc::ClientContext ctx;
    v1::RequestCheckpointRequest req;
    req.set_job_id(id);
    v1::RequestCheckpointResponse r;
    ASSERT_TRUE(jobs_->RequestCheckpoint(&ctx, req, &r).ok());
    EXPECT_EQ(r.at_step(), 3);
    ASSERT_TRUE(Step(id, 1, 0, 2, 1.0, 30, &resp).ok());
    EXPECT_EQ(resp.checkpoint_at_step(), 3);
  }
  // Rank 0 crashes: the worker reports it on its session.
  ASSERT_TRUE(s0->Write(RankExited(sess0, id, 0, 1)));
  v1::JobStatus st =
      WaitFor(id, [](const v1::JobStatus& s) { return s.generation() == 2; });
  ASSERT_EQ(st.generation(), 2);
  EXPECT_EQ(st.restarts(), 1);
  grpc::Status s = Step(id, 1, 1, 2, 1.0, 10, &resp);
  EXPECT_EQ(s.error_code(), grpc::ABORTED) << s.error_message();
  {
    grpc::ClientContext ctx;
    v1::CheckpointRecord rec;
    rec.mutable_ref()->set_job_id(id);
    rec.mutable_ref()->set_generation(1);
    rec.mutable_ref()->set_token(TokenOf(id, 1, 0));  // generation 1's rank 0, now over
    rec.set_path(dir_ + "/c");
    v1::ReportCheckpointResponse r;
    EXPECT_EQ(trainers_->ReportCheckpoint(&ctx, rec, &r).error_code(),
              grpc::ABORTED);
  }
  // Both workers get the kill of generation 1, then generation 2.
  ASSERT_TRUE(s1->Read(&msg));
  ASSERT_TRUE(msg.has_kill());
  EXPECT_EQ(msg.kill().ref().generation(), 1);
  ASSERT_TRUE(s1->Read(&msg));
  ASSERT_TRUE(msg.has_start());
  EXPECT_EQ(msg.start().task().ref().generation(), 2);
  EXPECT_TRUE(Step(id, 2, 1, 1, 1.0, 10, &resp).ok());
  {
    grpc::ClientContext ctx;
    v1::GetMetricsRequest req;
    req.set_job_id("job-unknown");
    v1::GetMetricsResponse m;
    EXPECT_EQ(jobs_->GetMetrics(&ctx, req, &m).error_code(), grpc::NOT_FOUND);
  }
  for (Stream* s : {s0.get(), s1.get()}) {
    s->WritesDone();
    while (s->Read(&msg)) {
    }
    EXPECT_TRUE(s->Finish().ok());
  }
}

// The durability contract of ReportStep: once it returns OK, the step's
// aggregate (including this report) is committed; read back through a
// second connection to the same database while the server runs.
TEST_F(ServiceTest, AcknowledgedReportIsCommitted) {
  grpc::ClientContext c0, c1;
  std::unique_ptr<Stream> s0, s1;
  Connect("w0", &c0, &s0);
  Connect("w1", &c1, &s1);
  const std::string id = Submit(Spec(2));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(s0->Read(&msg));
  ASSERT_TRUE(s1->Read(&msg));
  auto reader = SqliteStore::Open(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto stored = [&](int64_t step) {
    v1::AggregatedStep agg;
    auto rows = (*reader)->LoadMetrics(id);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (rows.ok())
      for (const MetricRow& r : *rows)
        if (r.step == step) EXPECT_TRUE(agg.ParseFromString(r.aggregate));
    return agg;
  };
  v1::ReportStepResponse resp;
  for (int64_t step = 1; step <= 5; ++step) {
    ASSERT_TRUE(Step(id, 1, 0, step, 1.0, 10, &resp).ok());
    EXPECT_EQ(stored(step).ranks_reported(), 1) << "step " << step;
    ASSERT_TRUE(Step(id, 1, 1, step, 3.0, 10, &resp).ok());
    v1::AggregatedStep agg = stored(step);
    EXPECT_EQ(agg.ranks_reported(), 2) << "step " << step;
    EXPECT_DOUBLE_EQ(agg.mean().at("loss"), 2.0);
  }
  // A retried (duplicate) report is acknowledged too, the row unchanged.
  ASSERT_TRUE(Step(id, 1, 1, 5, 3.0, 10, &resp).ok());
  EXPECT_EQ(stored(5).ranks_reported(), 2);
  for (Stream* s : {s0.get(), s1.get()}) {
    s->WritesDone();
    while (s->Read(&msg)) {
    }
    EXPECT_TRUE(s->Finish().ok());
  }
}

// ReportSteps: a batch is acknowledged once every report's row is
// committed (read back from the database), with the newest report's
// directive; a refused report ends the batch with its error, naming its
// place, and those before it stay accepted; empty and oversized batches
// and a wrong token are refused.
TEST_F(ServiceTest, ABatchOfStepReportsIsCommittedTogether) {
  grpc::ClientContext c0, c1;
  std::unique_ptr<Stream> s0, s1;
  Connect("w0", &c0, &s0);
  Connect("w1", &c1, &s1);
  const std::string id = Submit(Spec(2));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(s0->Read(&msg));
  ASSERT_TRUE(s1->Read(&msg));
  auto report = [&](int rank, int64_t step, double loss) { return Report(id, 1, rank, step, loss, 10); };
  auto send = [&](const v1::StepReports& batch, v1::ReportStepResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    return trainers_->ReportSteps(&ctx, batch, resp);
  };
  v1::StepReports batch;
  for (int64_t step = 1; step <= 40; ++step) {
    *batch.add_reports() = report(0, step, 1.0);
    *batch.add_reports() = report(1, step, 3.0);
  }
  v1::ReportStepResponse resp;
  ASSERT_TRUE(send(batch, &resp).ok());
  auto reader = SqliteStore::Open(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto rows = (*reader)->LoadMetrics(id);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 40u);
  for (const MetricRow& r : *rows) {
    v1::AggregatedStep agg;
    ASSERT_TRUE(agg.ParseFromString(r.aggregate));
    EXPECT_EQ(agg.ranks_reported(), 2) << "step " << r.step;
    EXPECT_DOUBLE_EQ(agg.mean().at("loss"), 2.0);
  }
  // A checkpoint asked meanwhile comes back on the next batch.
  {
    grpc::ClientContext ctx;
    v1::RequestCheckpointRequest req;
    req.set_job_id(id);
    v1::RequestCheckpointResponse r;
    ASSERT_TRUE(jobs_->RequestCheckpoint(&ctx, req, &r).ok());
    v1::StepReports next;
    *next.add_reports() = report(0, 41, 1.0);
    ASSERT_TRUE(send(next, &resp).ok());
    EXPECT_EQ(resp.checkpoint_at_step(), r.at_step());
  }
  // The third report is bad (a NaN loss): the first two stay accepted.
  v1::StepReports bad;
  *bad.add_reports() = report(1, 41, 3.0);
  *bad.add_reports() = report(0, 42, 1.0);
  *bad.add_reports() = report(1, 42, std::nan(""));
  *bad.add_reports() = report(0, 43, 1.0);
  grpc::Status st = send(bad, &resp);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("report 3 of 4: metric 'loss' is nan"), std::string::npos)
      << st.error_message();
  {
    grpc::ClientContext ctx;
    v1::GetMetricsRequest req;
    req.set_job_id(id);
    v1::GetMetricsResponse m;
    ASSERT_TRUE(jobs_->GetMetrics(&ctx, req, &m).ok());
    ASSERT_GE(m.steps_size(), 42);
    EXPECT_EQ(m.steps(m.steps_size() - 1).step(), 42);  // 43 never got there
    EXPECT_EQ(m.steps(40).ranks_reported(), 2);       // step 41
  }
  v1::StepReports wrong;
  *wrong.add_reports() = report(0, 44, 1.0);
  wrong.mutable_reports(0)->mutable_ref()->set_token(TokenOf(id, 1, 1));
  EXPECT_EQ(send(wrong, &resp).error_code(), grpc::PERMISSION_DENIED);
  EXPECT_EQ(send(v1::StepReports(), &resp).error_code(), grpc::INVALID_ARGUMENT);
  v1::StepReports huge;
  for (int i = 0; i < 257; ++i) *huge.add_reports() = report(0, 50 + i, 1.0);
  st = send(huge, &resp);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("1 to 256 step reports, got 257"), std::string::npos);
  for (Stream* s : {s0.get(), s1.get()}) {
    s->WritesDone();
    while (s->Read(&msg)) {
    }
    EXPECT_TRUE(s->Finish().ok());
  }
}

// When the commit fails (another process holds the database's write lock
// past the busy timeout), ReportStep returns UNAVAILABLE, not OK; a retry
// after the lock is gone is acknowledged and the row is stored.
TEST_F(ServiceTest, FailedCommitIsNotAcknowledged) {
  grpc::ClientContext c0;
  std::unique_ptr<Stream> s0;
  Connect("w0", &c0, &s0);
  const std::string id = Submit(Spec(1));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(s0->Read(&msg));
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/coordinator.db").c_str(), &other),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr),
            SQLITE_OK);
  v1::ReportStepResponse resp;
  grpc::Status s = Step(id, 1, 0, 1, 1.0, 10, &resp);
  EXPECT_EQ(s.error_code(), grpc::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("not committed"), std::string::npos)
      << s.error_message();
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  ASSERT_TRUE(Step(id, 1, 0, 1, 1.0, 10, &resp).ok());
  auto reader = SqliteStore::Open(dir_);
  ASSERT_TRUE(reader.ok());
  auto rows = (*reader)->LoadMetrics(id);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].step, 1);
  s0->WritesDone();
  while (s0->Read(&msg)) {
  }
  EXPECT_TRUE(s0->Finish().ok());
}

TEST_F(ServiceTest, WatchStreamsUntilFinalAndLogsAreServed) {
  grpc::ClientContext sctx;
  std::unique_ptr<Stream> stream;
  const std::string session = Connect("w0", &sctx, &stream);
  const std::string id = Submit(Spec(1));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));

  v1::WorkerMessage log;
  log.set_session_id(session);
  log.mutable_log()->mutable_ref()->set_job_id(id);
  log.mutable_log()->set_rank(0);
  log.mutable_log()->set_data("epoch 1 loss 0.5\n");
  ASSERT_TRUE(stream->Write(log));

  grpc::ClientContext wctx;
  Deadline(&wctx);
  v1::WatchJobRequest wreq;
  wreq.set_job_id(id);
  auto watch = jobs_->WatchJob(&wctx, wreq);
  v1::JobStatus st;
  ASSERT_TRUE(watch->Read(&st));
  EXPECT_EQ(st.state(), v1::RUNNING);

  // Follow the logs while the job runs.
  grpc::ClientContext lctx;
  Deadline(&lctx);
  v1::GetLogsRequest lreq = FollowEveryRank(id);
  auto logs = jobs_->GetLogs(&lctx, lreq);
  v1::LogChunk chunk;
  ASSERT_TRUE(logs->Read(&chunk));
  EXPECT_EQ(chunk.rank(), 0);
  EXPECT_EQ(chunk.data(), "epoch 1 loss 0.5\n");
  log.mutable_log()->set_data("done\n");
  ASSERT_TRUE(stream->Write(log));
  ASSERT_TRUE(logs->Read(&chunk));
  EXPECT_EQ(chunk.data(), "done\n");
  EXPECT_EQ(chunk.end_offset(), 22);  // past "epoch 1 loss 0.5\ndone\n"
  {  // From that offset: only what was appended since (nothing yet).
    grpc::ClientContext octx;
    Deadline(&octx);
    v1::GetLogsRequest from = lreq;
    from.set_rank(0);
    from.set_follow(false);
    from.set_offset(17);
    auto tail = jobs_->GetLogs(&octx, from);
    v1::LogChunk t;
    ASSERT_TRUE(tail->Read(&t));
    EXPECT_EQ(t.data(), "done\n");
    EXPECT_EQ(t.end_offset(), 22);
    EXPECT_FALSE(tail->Read(&t));
    EXPECT_TRUE(tail->Finish().ok());
  }
  {  // Every rank, each from where a reconnecting follower left it.
    grpc::ClientContext octx;
    Deadline(&octx);
    v1::GetLogsRequest from = lreq;
    from.set_follow(false);
    (*from.mutable_rank_offsets())[0] = 17;
    auto tail = jobs_->GetLogs(&octx, from);
    v1::LogChunk t;
    ASSERT_TRUE(tail->Read(&t));
    EXPECT_EQ(t.data(), "done\n");
    EXPECT_FALSE(tail->Read(&t));
    EXPECT_TRUE(tail->Finish().ok());
  }
  // Offsets of ranks the job does not have, negative ones, and with one rank
  // asked for, are refused.
  for (const auto& [rank, key, value] : std::vector<std::tuple<int, int, int64_t>>{
           {-1, 1, 0}, {-1, -1, 0}, {-1, 0, -5}, {0, 0, 3}}) {
    grpc::ClientContext bctx;
    Deadline(&bctx);
    v1::GetLogsRequest bad = lreq;
    bad.set_rank(rank);
    (*bad.mutable_rank_offsets())[key] = value;
    auto r = jobs_->GetLogs(&bctx, bad);
    v1::LogChunk t;
    EXPECT_FALSE(r->Read(&t));
    const grpc::Status st = r->Finish();
    EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << rank << " " << key << " " << value;
    EXPECT_NE(st.error_message().find("rank_offsets"), std::string::npos) << st.error_message();
  }

  ASSERT_TRUE(stream->Write(RankExited(session, id, 0, 0)));
  v1::JobState last = v1::RUNNING;
  while (watch->Read(&st)) last = st.state();
  EXPECT_EQ(last, v1::SUCCEEDED);
  EXPECT_TRUE(watch->Finish().ok());
  // The follow stream ends with the job.
  while (logs->Read(&chunk)) {
  }
  EXPECT_TRUE(logs->Finish().ok());

  // Past the size cap, a read from the start says what was dropped.
  ASSERT_TRUE(core_->logs().Append(id, 0, std::string(3 << 20, 'z')).ok());
  grpc::ClientContext cctx;
  Deadline(&cctx);
  lreq.set_rank(0);
  lreq.set_follow(false);
  auto capped = jobs_->GetLogs(&cctx, lreq);
  ASSERT_TRUE(capped->Read(&chunk));
  EXPECT_TRUE(absl::StartsWith(chunk.data(), "[frameworm: bytes 0-")) << chunk.data().substr(0, 80);
  EXPECT_NE(chunk.data().find("dropped (--max-log-bytes)]\nzzz"), std::string::npos);
  int64_t got = static_cast<int64_t>(chunk.data().size());
  while (capped->Read(&chunk)) got += static_cast<int64_t>(chunk.data().size());
  EXPECT_TRUE(capped->Finish().ok());
  EXPECT_LT(got, 1 << 20);  // about half the cap, plus the marker
  EXPECT_GT(got, 400 << 10);
  lreq.set_rank(-1);
  lreq.set_follow(true);

  grpc::ClientContext nctx;
  Deadline(&nctx);
  lreq.set_job_id("job-none");
  auto none = jobs_->GetLogs(&nctx, lreq);
  EXPECT_FALSE(none->Read(&chunk));
  EXPECT_EQ(none->Finish().error_code(), grpc::NOT_FOUND);
  for (int rank : {-7, 1, 99999}) {  // the job has rank 0 only
    grpc::ClientContext bctx;
    Deadline(&bctx);
    lreq.set_job_id(id);
    lreq.set_rank(rank);
    auto bad = jobs_->GetLogs(&bctx, lreq);
    EXPECT_FALSE(bad->Read(&chunk));
    EXPECT_EQ(bad->Finish().error_code(), grpc::INVALID_ARGUMENT) << rank;
  }
  stream->WritesDone();
  stream->Finish().IgnoreError();
}

// A session that floods heartbeats is read at 10 per heartbeat interval
// (the rest wait in its stream), while another worker's session is served
// at once: the flooder's log line, sent after 40 heartbeats, lands after
// the other worker's line sent later, and no sooner than the pacing allows.
TEST_F(ServiceTest, AHeartbeatFloodIsPacedPerSession) {
  TwoSessions t;
  ASSERT_NO_FATAL_FAILURE(StartTwo(t));
  auto& [actx, bctx, a, b, sa, sb, id, rank_b] = t;
  v1::CoordinatorMessage msg;
  const absl::Time start = absl::Now();
  v1::WorkerMessage hb, empty;  // a message without a kind counts as a heartbeat too
  hb.set_session_id(sa);
  empty.set_session_id(sa);
  for (int i = 0; i < 40; ++i) {
    hb.mutable_heartbeat()->set_unix_ms(2 + i);
    ASSERT_TRUE(a->Write(i % 2 == 0 ? hb : empty));
  }
  ASSERT_TRUE(a->Write(LogLine(id, sa, 1 - rank_b, "from the flooder\n")));
  ASSERT_TRUE(b->Write(LogLine(id, sb, rank_b, "from the calm one\n")));
  const auto [calm_at, flooder_at] = WhenLogged(id, start, "from the calm one", "from the flooder");
  ASSERT_NE(flooder_at, absl::InfiniteFuture()) << "the flooder's stream was never read on";
  EXPECT_LT(calm_at, flooder_at) << "the other session waited behind the flood";
  // 10 read at once, then one per 100 ms: the 31 behind them take 3 s.
  EXPECT_GE(flooder_at - start, absl::Milliseconds(2500));
  // A server shutting down while the flooder's reads are paused ends both
  // streams (the pause holds the finish back for at most 100 ms).
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(a->Write(hb));
  absl::SleepFor(absl::Milliseconds(50));
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  // Only the receipts of the log lines may still be read; then both end.
  int receipts = 0;
  while (a->Read(&msg)) receipts += msg.has_receipt() ? 1 : 100;
  while (b->Read(&msg)) receipts += msg.has_receipt() ? 1 : 100;
  EXPECT_LE(receipts, 2);
  a->Finish().IgnoreError();
  b->Finish().IgnoreError();
}

// Messages of the other kinds are paced too, with a budget far above what
// a worker sends (kWorkerMessagesPerSecond, 1,000 a second and at once):
// 2,500 claims of holds nobody asked for are read 1,000 at once, then 1,000
// a second, so the flooder's log line after them comes 1.5 s late, while
// another session's is read at once.
TEST_F(ServiceTest, AFloodOfOtherWorkerMessagesIsPacedPerSession) {
  TwoSessions t;
  ASSERT_NO_FATAL_FAILURE(StartTwo(t));
  // Plain references (a lambda below captures them; structured bindings
  // cannot be captured before C++20).
  auto& a = t.a;
  auto& b = t.b;
  const std::string& sa = t.sa;
  const std::string& sb = t.sb;
  const std::string& id = t.id;
  const int rank_b = t.rank_b;
  const absl::Time start = absl::Now();
  std::thread flood([&] {
    v1::WorkerMessage held;
    held.set_session_id(sa);
    held.mutable_held()->set_job_id(id);
    held.mutable_held()->set_ok(true);
    held.mutable_held()->set_secret("not asked for");
    for (int i = 0; i < 2500; ++i) {
      held.mutable_held()->set_step(1000 + i);
      if (!a->Write(held)) return;
    }
    a->Write(LogLine(id, sa, 1 - rank_b, "from the flooder\n"));
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(b->Write(LogLine(id, sb, rank_b, "from the calm one\n")));
  const auto [calm_at, flooder_at] = WhenLogged(id, start, "from the calm one", "from the flooder");
  flood.join();
  ASSERT_NE(flooder_at, absl::InfiniteFuture()) << "the flooder's stream was never read on";
  EXPECT_LT(calm_at, flooder_at) << "the other session waited behind the flood";
  EXPECT_GE(flooder_at - start, absl::Milliseconds(1300));
  a->WritesDone();
  b->WritesDone();
  t.actx.TryCancel();
  t.bctx.TryCancel();
  a->Finish().IgnoreError();
  b->Finish().IgnoreError();
}

// Streams that follow one job are bounded (every change of the job wakes
// each): one more is RESOURCE_EXHAUSTED, naming the job; a closed one frees
// its place.
TEST_F(ServiceTest, StreamsFollowingAJobAreBounded) {
  const std::string id = Submit(Spec(1));  // pending: no worker
  constexpr int kMax = 64;                 // Impl::kMaxWatchersPerJob
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobStatus>>> watches;
  v1::WatchJobRequest wreq;
  wreq.set_job_id(id);
  v1::JobStatus st;
  for (int i = 0; i < kMax; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    Deadline(ctxs.back().get());
    watches.push_back(jobs_->WatchJob(ctxs.back().get(), wreq));
    ASSERT_TRUE(watches.back()->Read(&st)) << "stream " << i;
    EXPECT_EQ(st.state(), v1::PENDING);
  }
  {
    grpc::ClientContext lctx;
    Deadline(&lctx);
    auto logs = jobs_->GetLogs(&lctx, FollowEveryRank(id));
    v1::LogChunk chunk;
    EXPECT_FALSE(logs->Read(&chunk));
    grpc::Status g = logs->Finish();
    EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << g.error_message();
    EXPECT_NE(g.error_message().find(id), std::string::npos) << g.error_message();
  }
  EndWatch(*ctxs.back(), *watches.back());
  watches.pop_back();
  ctxs.pop_back();
  // Its place is given back in OnDone, a moment after the client saw the end.
  bool again = false;
  for (int attempt = 0; attempt < 50 && !again; ++attempt) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    auto w = jobs_->WatchJob(&ctx, wreq);
    again = w->Read(&st);
    EndWatch(ctx, *w);
    if (!again) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(again) << "a closed stream's place is free again";
  for (size_t i = 0; i < watches.size(); ++i) EndWatch(*ctxs[i], *watches[i]);
}

// One caller holds at most 256 streams that follow jobs, however many jobs
// it spreads them over (each of 64 per job): one user cannot take every
// place. Each job's streams go over a connection of their own (at most 256
// streams run on one).
TEST_F(ServiceTest, StreamsFollowingJobsAreBoundedPerCaller) {
  constexpr int kPerJob = 64, kPerCaller = 256;  // Impl's limits
  std::vector<std::unique_ptr<v1::JobService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobStatus>>> watches;
  v1::JobStatus st;
  auto stub = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    stubs.push_back(v1::JobService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args)));
    return stubs.back().get();
  };
  for (int j = 0; j < kPerCaller / kPerJob; ++j) {
    v1::WatchJobRequest wreq;
    wreq.set_job_id(Submit(Spec(1)));  // pending: no worker
    v1::JobService::Stub* s = stub();
    for (int i = 0; i < kPerJob; ++i) {
      ctxs.push_back(std::make_unique<grpc::ClientContext>());
      Deadline(ctxs.back().get(), 30);
      watches.push_back(s->WatchJob(ctxs.back().get(), wreq));
      ASSERT_TRUE(watches.back()->Read(&st)) << "job " << j << " stream " << i;
    }
  }
  {
    v1::WatchJobRequest wreq;
    wreq.set_job_id(Submit(Spec(1)));  // a job with no stream yet
    grpc::ClientContext ctx;
    Deadline(&ctx);
    auto w = stub()->WatchJob(&ctx, wreq);
    EXPECT_FALSE(w->Read(&st));
    grpc::Status g = w->Finish();
    EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << g.error_message();
    EXPECT_NE(g.error_message().find("this caller has 256"), std::string::npos) << g.error_message();
  }
  for (size_t i = 0; i < watches.size(); ++i) EndWatch(*ctxs[i], *watches[i]);
}

TEST_F(ServiceTest, ShutdownEndsOpenStreams) {
  grpc::ClientContext sctx;
  std::unique_ptr<Stream> stream;
  Connect("w0", &sctx, &stream);
  const std::string id = Submit(Spec(1));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));  // the session is attached and serving
  grpc::ClientContext wctx;
  Deadline(&wctx);
  v1::WatchJobRequest wreq;
  wreq.set_job_id(id);
  auto watch = jobs_->WatchJob(&wctx, wreq);
  v1::JobStatus st;
  ASSERT_TRUE(watch->Read(&st));
  // Streams that never end by themselves are cancelled by the shutdown.
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(100));
  EXPECT_FALSE(stream->Read(&msg));
  EXPECT_FALSE(stream->Finish().ok());
  while (watch->Read(&st)) {
  }
  EXPECT_FALSE(watch->Finish().ok());
}

}  // namespace
}  // namespace frameworm::coordinator
