// The coordinator's services under mutual TLS on 127.0.0.1, with real
// certificates from the cluster CA: who may call what (access.h), each
// refusal next to its allowed twin.
#include <filesystem>
#include <map>
#include <string>

#include "coordinator/service.h"
#include "coordinator/test_dir.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "rpc/cluster_ca.h"
#include "rpc/rpc.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

class ServiceTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("svc-tls");
    const std::string ca = dir_ + "/ca";
    ASSERT_TRUE(InitClusterCa(ca).ok());
    for (const auto& [role, name] : std::vector<std::pair<std::string, std::string>>{
             {"coordinator", "main"}, {"admin", "root"}, {"user", "alice"},
             {"user", "bob"}, {"worker", "node-1"}}) {
      ASSERT_TRUE(IssueCertificate(ca, role, name, dir_ + "/" + name).ok()) << name;
    }
    ASSERT_TRUE(InitClusterCa(dir_ + "/other-ca").ok());
    ASSERT_TRUE(IssueCertificate(dir_ + "/other-ca", "admin", "root", dir_ + "/stranger").ok());
    // What a worker hands its trainers: the cluster CA alone.
    fs::create_directories(dir_ + "/anon");
    fs::copy_file(ca + "/ca.crt", dir_ + "/anon/ca.crt");

    CoordinatorOptions o;
    o.state_dir = dir_ + "/state";
    o.advertise = "127.0.0.1:1";
    auto c = Coordinator::Create(o, RealClock::Real());
    ASSERT_TRUE(c.ok()) << c.status();
    core_ = std::move(c).value();
    service_ = std::make_unique<CoordinatorService>(core_.get());
    ServerOptions so;
    so.tls = Tls("main");
    so.client_certificate_optional = true;  // as frameworm-coordinator serves
    auto server = StartServer(so, service_->services());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server->server);
    address_ = "127.0.0.1:" + std::to_string(server->port);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
    service_.reset();
    core_.reset();
    fs::remove_all(dir_);
  }

  TlsFiles Tls(const std::string& name) {
    absl::StatusOr<TlsFiles> t = LoadTrainerTlsDir(dir_ + "/" + name);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : TlsFiles{};
  }
  // A channel presenting `name`'s certificate ("" : plaintext).
  std::shared_ptr<grpc::Channel> As(const std::string& name) {
    if (name.empty()) return MakeChannel(address_);
    tls_[name] = Tls(name);
    return MakeChannel(address_, &tls_[name]);
  }
  static void Deadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }
  grpc::StatusCode Submit(const std::string& who, std::string* id,
                          const std::string& claimed_owner = "") {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("tls");
    req.mutable_spec()->set_nodes_min(1);
    req.mutable_spec()->set_nodes_max(1);
    req.mutable_spec()->set_nproc_per_node(1);
    req.mutable_spec()->set_owner(claimed_owner);
    v1::SubmitJobResponse resp;
    grpc::Status s = v1::JobService::NewStub(As(who))->SubmitJob(&ctx, req, &resp);
    if (id != nullptr) *id = resp.job_id();
    return s.error_code();
  }
  grpc::StatusCode Get(const std::string& who, const std::string& id, v1::JobStatus* st = nullptr) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::JobStatus out;
    grpc::Status s = v1::JobService::NewStub(As(who))->GetJob(&ctx, req, &out);
    if (st != nullptr) *st = out;
    return s.error_code();
  }
  std::vector<std::string> List(const std::string& who, grpc::StatusCode* code = nullptr) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListJobsResponse resp;
    grpc::Status s = v1::JobService::NewStub(As(who))->ListJobs(&ctx, {}, &resp);
    if (code != nullptr) *code = s.error_code();
    std::vector<std::string> ids;
    for (const auto& j : resp.jobs()) ids.push_back(j.job_id());
    return ids;
  }
  grpc::StatusCode Cancel(const std::string& who, const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    return v1::JobService::NewStub(As(who))->CancelJob(&ctx, req, &resp).error_code();
  }
  grpc::StatusCode Watch(const std::string& who, const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto stub = v1::JobService::NewStub(As(who));
    auto reader = stub->WatchJob(&ctx, req);
    v1::JobStatus st;
    if (!reader->Read(&st)) return reader->Finish().error_code();
    ctx.TryCancel();
    while (reader->Read(&st)) {
    }
    reader->Finish();
    return grpc::StatusCode::OK;
  }
  grpc::StatusCode Download(const std::string& who, const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetCheckpointRequest req;
    req.set_job_id(id);
    auto reader = v1::JobService::NewStub(As(who))->GetCheckpoint(&ctx, req);
    v1::CheckpointData chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish().error_code();
  }
  grpc::StatusCode Logs(const std::string& who, const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetLogsRequest req;
    req.set_job_id(id);
    req.set_rank(-1);
    auto stub = v1::JobService::NewStub(As(who));
    auto reader = stub->GetLogs(&ctx, req);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish().error_code();
  }
  // ListEvents as `who`: the events' "kind:job" (job empty for the
  // cluster's), or the error code.
  std::vector<std::string> Events(const std::string& who, const std::string& job,
                                  grpc::StatusCode* code, int limit = 0, int64_t after = 0) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListEventsRequest req;
    req.set_job_id(job);
    req.set_limit(limit);
    req.set_after_seq(after);
    v1::ListEventsResponse resp;
    *code = v1::JobService::NewStub(As(who))->ListEvents(&ctx, req, &resp).error_code();
    std::vector<std::string> out;
    for (const auto& e : resp.events()) out.push_back(e.kind() + ":" + e.job_id());
    return out;
  }
  grpc::StatusCode Register(const std::string& who, const std::string& name) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_address("127.0.0.1");
    req.set_slots(1);
    v1::RegisterWorkerResponse resp;
    return v1::WorkerService::NewStub(As(who))->RegisterWorker(&ctx, req, &resp).error_code();
  }
  // A step report without a token for a job that does not exist: refused by
  // the caller's role, or (past the role check) because no rank holds its
  // token, which says PAST_ROLE.
  static constexpr grpc::StatusCode kPastRole = grpc::StatusCode::UNIMPLEMENTED;
  grpc::StatusCode ReportStep(const std::string& who) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::StepMetrics m;
    m.mutable_ref()->set_job_id("job-none");
    m.mutable_ref()->set_generation(1);
    v1::ReportStepResponse resp;
    const grpc::Status s = v1::TrainerService::NewStub(As(who))->ReportStep(&ctx, m, &resp);
    if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED &&
        s.error_message().find("holds this FRAMEWORM_TOKEN") != std::string::npos) {
      return kPastRole;
    }
    return s.error_code();
  }

  std::string dir_, address_;
  std::map<std::string, TlsFiles> tls_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ServiceTlsTest, UsersSeeAndControlTheirOwnJobsAdminsEveryJob) {
  std::string alices, roots;
  // A spec claiming another owner is recorded under the caller.
  ASSERT_EQ(Submit("alice", &alices, "admin:root"), grpc::StatusCode::OK);
  ASSERT_EQ(Submit("root", &roots), grpc::StatusCode::OK);
  v1::JobStatus st;
  ASSERT_EQ(Get("alice", alices, &st), grpc::StatusCode::OK);
  EXPECT_EQ(st.spec().owner(), "user:alice");
  ASSERT_EQ(Get("root", roots, &st), grpc::StatusCode::OK);
  EXPECT_EQ(st.spec().owner(), "admin:root");

  EXPECT_EQ(Get("bob", alices), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Get("alice", roots), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Get("root", alices), grpc::StatusCode::OK);
  EXPECT_EQ(List("alice"), std::vector<std::string>{alices});
  EXPECT_EQ(List("bob"), std::vector<std::string>{});
  EXPECT_EQ(List("root"), (std::vector<std::string>{alices, roots}));
  EXPECT_EQ(Watch("bob", alices), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Watch("alice", alices), grpc::StatusCode::OK);
  EXPECT_EQ(Logs("bob", alices), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Download("bob", alices), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Download("alice", alices), grpc::StatusCode::NOT_FOUND);  // allowed; none yet
  EXPECT_EQ(Cancel("bob", alices), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_EQ(Get("alice", alices, &st), grpc::StatusCode::OK);
  EXPECT_EQ(st.state(), v1::PENDING);  // bob's cancel changed nothing
  EXPECT_EQ(Cancel("alice", alices), grpc::StatusCode::OK);
  EXPECT_EQ(Cancel("root", roots), grpc::StatusCode::OK);
  EXPECT_EQ(Get("bob", "job-none"), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTlsTest, EventsShowUsersTheirOwnJobsAndTheClusterAdminsEverything) {
  std::string alices, bobs;
  ASSERT_EQ(Submit("alice", &alices), grpc::StatusCode::OK);
  ASSERT_EQ(Submit("bob", &bobs), grpc::StatusCode::OK);
  ASSERT_EQ(Register("node-1", "node-1"), grpc::StatusCode::OK);
  grpc::StatusCode code;
  const std::vector<std::string> alice_sees = Events("alice", "", &code);
  ASSERT_EQ(code, grpc::StatusCode::OK);
  EXPECT_EQ(alice_sees, (std::vector<std::string>{"job_submitted:" + alices, "worker_joined:"}));
  EXPECT_EQ(Events("alice", alices, &code), std::vector<std::string>{"job_submitted:" + alices});
  EXPECT_EQ(Events("alice", bobs, &code), std::vector<std::string>{});
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Events("root", "", &code).size(), 3u);
  EXPECT_EQ(Events("root", "", &code, 1).size(), 1u);  // the limit
  EXPECT_EQ(Events("root", "", &code, 0, 2).size(), 1u);  // after seq 2
  Events("node-1", "", &code);
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  for (auto [limit, after] : {std::pair<int, int64_t>{10001, 0}, {-1, 0}, {0, -5}}) {
    Events("root", "", &code, limit, after);
    EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT) << limit << " " << after;
  }
  Events("root", "job-none", &code);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTlsTest, AWorkerCertificateCannotUseTheJobApi) {
  std::string id;
  EXPECT_EQ(Submit("node-1", &id), grpc::StatusCode::PERMISSION_DENIED);
  grpc::StatusCode code;
  List("node-1", &code);
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_EQ(Submit("root", &id), grpc::StatusCode::OK);
  EXPECT_EQ(Get("node-1", id), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Cancel("node-1", id), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ServiceTlsTest, AWorkerRegistersOnlyUnderItsCertificatesName) {
  EXPECT_EQ(Register("node-1", "node-2"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("root", "node-1"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("alice", "node-1"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("node-1", "node-1"), grpc::StatusCode::OK);
}

TEST_F(ServiceTlsTest, TrainerCallsAreRefusedToUsersAndAdmins) {
  EXPECT_EQ(ReportStep("alice"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ReportStep("root"), grpc::StatusCode::PERMISSION_DENIED);
  // Past the role check: no rank holds the (empty) token.
  EXPECT_EQ(ReportStep("node-1"), kPastRole);
}

// A caller without a certificate (a trainer) gets trainer calls through,
// each authorized by its rank's token, and nothing else.
TEST_F(ServiceTlsTest, ACallerWithoutACertificateMayOnlyMakeTrainerCalls) {
  EXPECT_EQ(ReportStep("anon"), kPastRole);
  std::string id;
  EXPECT_EQ(Submit("anon", &id), grpc::StatusCode::PERMISSION_DENIED);
  grpc::StatusCode code;
  List("anon", &code);
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("anon", "node-1"), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_EQ(Submit("root", &id), grpc::StatusCode::OK);
  EXPECT_EQ(Get("anon", id), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Cancel("anon", id), grpc::StatusCode::PERMISSION_DENIED);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    auto session = v1::WorkerService::NewStub(As("anon"))->Session(&ctx);
    v1::WorkerMessage hello;
    hello.set_session_id("s-guess");
    session->Write(hello);
    session->WritesDone();
    v1::CoordinatorMessage m;
    while (session->Read(&m)) {
    }
    const grpc::Status s = session->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  }
  // A job's token is what a trainer call needs: without it, refused.
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::StepMetrics m;
  m.mutable_ref()->set_job_id(id);
  m.mutable_ref()->set_generation(1);
  v1::ReportStepResponse resp;
  const grpc::Status s = v1::TrainerService::NewStub(As("anon"))->ReportStep(&ctx, m, &resp);
  EXPECT_NE(s.error_code(), grpc::StatusCode::OK) << "a report without a token";
}

TEST_F(ServiceTlsTest, PlaintextAndForeignCertificatesGetNoCallThrough) {
  std::string id;
  EXPECT_EQ(Submit("", &id), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Submit("stranger", &id), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Register("stranger", "node-1"), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Submit("root", &id), grpc::StatusCode::OK);
}

TEST_F(ServiceTlsTest, ListsArePagedAndAUsersPagesHoldOnlyTheirJobs) {
  std::vector<std::string> alices;
  for (int i = 0; i < 5; ++i) {
    std::string id;
    ASSERT_EQ(Submit(i % 2 == 0 ? "alice" : "root", &id), grpc::StatusCode::OK);
    if (i % 2 == 0) alices.push_back(id);
  }
  auto page = [&](const std::string& who, int size, const std::string& token,
                  v1::ListJobsResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListJobsRequest req;
    req.set_page_size(size);
    req.set_page_token(token);
    return v1::JobService::NewStub(As(who))->ListJobs(&ctx, req, resp).error_code();
  };
  v1::ListJobsResponse r;
  ASSERT_EQ(page("root", 2, "", &r), grpc::StatusCode::OK);
  EXPECT_EQ(r.jobs_size(), 2);
  EXPECT_FALSE(r.next_page_token().empty());
  std::vector<std::string> seen;
  std::string token;
  do {
    v1::ListJobsResponse p;
    ASSERT_EQ(page("alice", 2, token, &p), grpc::StatusCode::OK);
    for (const auto& j : p.jobs()) seen.push_back(j.job_id());
    token = p.next_page_token();
  } while (!token.empty());
  EXPECT_EQ(seen, alices);
  EXPECT_EQ(page("root", 1001, "", &r), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace frameworm::coordinator
