// The worker's Session glue against a small real WorkerService (callback
// API) on 127.0.0.1, with real trainer processes (/bin/sh).
#include "worker/worker_agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log_cap.h"
#include "absl/synchronization/mutex.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/rank_env_proto.h"
#include "rpc/rpc.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;

// A coordinator stand-in: records registrations and session messages and
// can push commands down the newest session.
class TestCoordinator final : public v1::WorkerService::CallbackService {
 public:
  class Session final
      : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
   public:
    explicit Session(TestCoordinator* owner) : owner_(owner) { StartRead(&in_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        absl::MutexLock l(&owner_->mu_);
        done_reading_ = true;
        if (!writing_) Finish(grpc::Status::OK);
        return;
      }
      {
        absl::MutexLock l(&owner_->mu_);
        owner_->messages_.push_back(in_);
      }
      StartRead(&in_);
    }
    // Called with owner_->mu_ held.
    void Send(const v1::CoordinatorMessage& m) {
      out_.push_back(m);
      if (!writing_) {
        writing_ = true;
        StartWrite(&out_.front());
      }
    }
    void OnWriteDone(bool ok) override {
      absl::MutexLock l(&owner_->mu_);
      out_.pop_front();
      if (ok && !out_.empty()) {
        StartWrite(&out_.front());
        return;
      }
      writing_ = false;
      if (done_reading_) Finish(grpc::Status::OK);
    }
    void OnDone() override {
      {
        absl::MutexLock l(&owner_->mu_);
        if (owner_->session_ == this) owner_->session_ = nullptr;
      }
      delete this;
    }

   private:
    TestCoordinator* owner_;
    v1::WorkerMessage in_;
    std::deque<v1::CoordinatorMessage> out_;
    bool writing_ = false;
    bool done_reading_ = false;
  };

  grpc::ServerUnaryReactor* RegisterWorker(
      grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* req,
      v1::RegisterWorkerResponse* resp) override {
    absl::MutexLock l(&mu_);
    registrations_.push_back(*req);
    resp->set_session_id(absl::StrCat("s", registrations_.size()));
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext*) override {
    absl::MutexLock l(&mu_);
    session_ = new class Session(this);
    return session_;
  }

  bool SendWhenConnected(const v1::CoordinatorMessage& m) {
    absl::MutexLock l(&mu_);
    auto has = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return session_ != nullptr;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(10))) {
      return false;
    }
    session_->Send(m);
    return true;
  }

  // Waits (bounded) until `pred` holds over the recorded messages.
  bool Await(std::function<bool(const std::vector<v1::WorkerMessage>&,
                                const std::vector<v1::RegisterWorkerRequest>&)>
                 pred,
             absl::Duration limit = absl::Seconds(15)) {
    absl::MutexLock l(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pred(messages_, registrations_);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), limit);
  }
  std::vector<v1::WorkerMessage> messages() {
    absl::MutexLock l(&mu_);
    return messages_;
  }
  std::vector<v1::RegisterWorkerRequest> registrations() {
    absl::MutexLock l(&mu_);
    return registrations_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::RegisterWorkerRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerMessage> messages_ ABSL_GUARDED_BY(mu_);
  class Session* session_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// A task as the coordinator sends it: the rank environment as typed
// TaskSpec fields (SetRankEnv), the job's own env apart.
RankEnv TaskEnv(int rank, const std::string& job = "job-1") {
  RankEnv e;
  e.job_id = job;
  e.generation = 1;
  e.rank = rank;
  e.world_size = 4;
  e.local_rank = rank;
  e.local_world_size = 4;
  e.master_addr = "127.0.0.1";
  e.master_port = 29500;
  return e;
}

v1::CoordinatorMessage StartCmd(const std::string& script, const RankEnv& env) {
  v1::CoordinatorMessage m;
  v1::TaskSpec* t = m.mutable_start()->mutable_task();
  SetRankEnv(env, t);
  t->add_argv("/bin/sh");
  t->add_argv("-c");
  t->add_argv(script);
  return m;
}

v1::CoordinatorMessage StartCmd(const std::string& script, int rank,
                                const std::string& job = "job-1") {
  return StartCmd(script, TaskEnv(rank, job));
}

int FindIndex(const std::vector<v1::WorkerMessage>& ms, int rank,
              v1::TaskState state) {
  for (size_t i = 0; i < ms.size(); ++i) {
    const auto& m = ms[i];
    if (m.has_task_status() && m.task_status().rank() == rank &&
        m.task_status().state() == state) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

const v1::TaskStatus* FindStatus(const std::vector<v1::WorkerMessage>& ms,
                                 int rank, v1::TaskState state) {
  int i = FindIndex(ms, rank, state);
  return i < 0 ? nullptr : &ms[i].task_status();
}

std::string LogText(const std::vector<v1::WorkerMessage>& ms, int rank,
                    const std::string& stream) {
  std::string out;
  for (const auto& m : ms) {
    if (m.has_log() && m.log().rank() == rank && m.log().stream() == stream) {
      out += m.log().data();
    }
  }
  return out;
}

bool Alive(int64_t pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0; }

class WorkerAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/agent_test_" + std::to_string(::getpid()) +
           "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    StartCoordinator(0);
  }
  void TearDown() override {
    if (agent_) {
      agent_->Shutdown();
      run_.join();
    }
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }
  void StartCoordinator(int port) {
    coord_ = std::make_unique<TestCoordinator>();
    ServerOptions o;
    o.listen = absl::StrCat("127.0.0.1:", port);
    auto s = StartServer(o, {coord_.get()});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s->server);
    port_ = s->port;
  }
  void StopCoordinator() {
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_.reset();
  }
  void StartAgent() {
    WorkerAgent::Options o;
    o.coordinator = absl::StrCat("127.0.0.1:", port_);
    o.name = "w1";
    o.slots = 2;
    o.work_dir = dir_ + "/work";
    o.base_env = {{"PATH", "/usr/bin:/bin"}};
    o.heartbeat_interval = absl::Milliseconds(50);
    o.initial_backoff = absl::Milliseconds(50);
    o.max_backoff = absl::Milliseconds(200);
    o.shutdown_grace = absl::Milliseconds(300);
    o.log_poll_interval = absl::Milliseconds(20);
    o.max_log_bytes = max_log_bytes_;
    o.on_event = [this](const std::string& line) {
      absl::MutexLock l(&events_mu_);
      events_.push_back(line);
    };
    launcher_ = NewPosixProcessLauncher({dir_});
    agent_ = WorkerAgent::Create(o, *launcher_);
    run_ = std::thread([this] { agent_->Run(); });
  }
  std::vector<std::string> events() {
    absl::MutexLock l(&events_mu_);
    return events_;
  }

  std::string dir_;
  int64_t max_log_bytes_ = int64_t{64} << 20;
  std::unique_ptr<TestCoordinator> coord_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<ProcessLauncher> launcher_;
  std::unique_ptr<WorkerAgent> agent_;
  std::thread run_;
  absl::Mutex events_mu_;
  std::vector<std::string> events_;
};

TEST_F(WorkerAgentTest, RegistersRunsTasksReportsAndShutsDown) {
  StartAgent();
  ASSERT_TRUE(coord_->Await([](auto& ms, auto& regs) {
    int hb = 0;
    for (auto& m : ms) hb += m.has_heartbeat();
    return regs.size() == 1 && hb >= 2;
  }));
  auto regs = coord_->registrations();
  EXPECT_EQ(regs[0].name(), "w1");
  EXPECT_EQ(regs[0].address(), "127.0.0.1");
  EXPECT_EQ(regs[0].slots(), 2);
  EXPECT_EQ(regs[0].running_size(), 0);
  auto ms = coord_->messages();
  EXPECT_TRUE(ms[0].has_heartbeat()) << "first message binds the session";
  EXPECT_EQ(ms[0].session_id(), "s1");
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr(
                            absl::StrCat("frameworm-worker w1 registered with "
                                         "127.0.0.1:", port_))));

  ASSERT_TRUE(coord_->SendWhenConnected(
      StartCmd("echo hello rank $RANK of $WORLD_SIZE; echo oops >&2; exit 3", 0)));
  ASSERT_TRUE(coord_->SendWhenConnected(
      StartCmd("trap '' TERM; echo ready; while true; do sleep 0.05; done", 1)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_EXITED) &&
           LogText(ms, 0, "stdout") == "hello rank 0 of 4\n" &&
           LogText(ms, 0, "stderr") == "oops\n" &&
           FindStatus(ms, 1, v1::TASK_RUNNING) &&
           LogText(ms, 1, "stdout") == "ready\n";  // SIGTERM now ignored
  })) << "statuses/logs missing";
  ms = coord_->messages();
  const v1::TaskStatus* running0 = FindStatus(ms, 0, v1::TASK_RUNNING);
  const v1::TaskStatus* exited0 = FindStatus(ms, 0, v1::TASK_EXITED);
  ASSERT_NE(running0, nullptr);
  EXPECT_LT(FindIndex(ms, 0, v1::TASK_RUNNING), FindIndex(ms, 0, v1::TASK_EXITED))
      << "RUNNING comes before EXITED";
  EXPECT_EQ(exited0->exit_code(), 3);
  EXPECT_EQ(exited0->ref().job_id(), "job-1");
  EXPECT_EQ(exited0->ref().generation(), 1);
  int64_t stubborn = FindStatus(ms, 1, v1::TASK_RUNNING)->pid();
  EXPECT_TRUE(Alive(stubborn));

  // A start that cannot work is reported, not fatal.
  v1::CoordinatorMessage bad = StartCmd("", 2);
  bad.mutable_start()->mutable_task()->clear_argv();
  bad.mutable_start()->mutable_task()->add_argv("no-such-binary-xyz");
  ASSERT_TRUE(coord_->SendWhenConnected(bad));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    auto* s = FindStatus(ms, 2, v1::TASK_START_FAILED);
    return s && s->message().find("not found") != std::string::npos;
  }));

  // Shutdown: SIGTERM is ignored, SIGKILL after the grace; Run returns.
  agent_->Shutdown();
  run_.join();
  agent_.reset();
  EXPECT_FALSE(Alive(stubborn));
  ms = coord_->messages();
  const v1::TaskStatus* killed = FindStatus(ms, 1, v1::TASK_KILLED);
  ASSERT_NE(killed, nullptr) << "final status sent before exiting";
  EXPECT_EQ(killed->signal(), SIGKILL);
}

TEST_F(WorkerAgentTest, LogFilesOnTheNodeStayUnderTheCapOnceUploaded) {
  max_log_bytes_ = 1 << 20;
  StartAgent();
  // 40 lines of 100 kB, paced so that each is uploaded: 4 MB through 1 MiB.
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd(
      "i=0; while [ $i -lt 40 ]; do head -c 99999 /dev/zero | tr '\\0' x; echo; "
      "i=$((i+1)); sleep 0.03; done; echo END; sleep 30",
      0)));
  ASSERT_TRUE(coord_->Await(
      [](auto& ms, auto&) { return absl::EndsWith(LogText(ms, 0, "stdout"), "END\n"); },
      absl::Seconds(30)));
  // Every byte reached the coordinator ...
  EXPECT_EQ(LogText(coord_->messages(), 0, "stdout").size(), 40u * 100000 + 4);
  // ... while the node's file keeps its length but not its space.
  std::string file;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/work"))
    if (e.path().string().find("stdout") != std::string::npos) file = e.path().string();
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(std::filesystem::file_size(file), 40u * 100000 + 4);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_LE(st.st_blocks * 512, (1 << 20) + 2 * kLogCapBlock);
}

TEST_F(WorkerAgentTest, TaskSpecFieldsBecomeTheTrainersEnvironment) {
  StartAgent();
  const std::string script =
      "echo $RANK/$WORLD_SIZE $LOCAL_RANK/$LOCAL_WORLD_SIZE $NODE_RANK "
      "$MASTER_ADDR:$MASTER_PORT $FRAMEWORM_JOB_ID/$FRAMEWORM_GENERATION "
      "$FRAMEWORM_COORDINATOR [$FRAMEWORM_RESUME_FROM] $OWN";
  v1::CoordinatorMessage plain = StartCmd(script, 0);
  (*plain.mutable_start()->mutable_task()->mutable_env())["OWN"] = "mine";
  RankEnv resumed = TaskEnv(1);
  resumed.node_rank = 1;
  resumed.coordinator = "10.9.9.9:7070";
  resumed.resume_from = "/ckpt/ckpt-10.pt";
  ASSERT_TRUE(coord_->SendWhenConnected(plain));
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd(script, resumed)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_EXITED) && FindStatus(ms, 1, v1::TASK_EXITED) &&
           !LogText(ms, 0, "stdout").empty() && !LogText(ms, 1, "stdout").empty();
  }));
  auto ms = coord_->messages();
  // No coordinator in the spec: the worker's own address.
  EXPECT_EQ(LogText(ms, 0, "stdout"),
            absl::StrCat("0/4 0/4 0 127.0.0.1:29500 job-1/1 127.0.0.1:", port_,
                         " [] mine\n"));
  EXPECT_EQ(LogText(ms, 1, "stdout"),
            "1/4 1/4 1 127.0.0.1:29500 job-1/1 10.9.9.9:7070 "
            "[/ckpt/ckpt-10.pt]\n");
}

TEST_F(WorkerAgentTest, KillTaskFromCoordinator) {
  StartAgent();
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", 0)));
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", 1)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_RUNNING) && FindStatus(ms, 1, v1::TASK_RUNNING);
  }));
  v1::CoordinatorMessage kill;
  kill.mutable_kill()->mutable_ref()->set_job_id("job-1");
  kill.mutable_kill()->mutable_ref()->set_generation(1);
  kill.mutable_kill()->set_rank(-1);
  kill.mutable_kill()->set_grace_s(5);
  ASSERT_TRUE(coord_->SendWhenConnected(kill));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_KILLED) && FindStatus(ms, 1, v1::TASK_KILLED);
  }));
  auto ms = coord_->messages();
  EXPECT_EQ(FindStatus(ms, 0, v1::TASK_KILLED)->signal(), SIGTERM);
  EXPECT_FALSE(Alive(FindStatus(ms, 0, v1::TASK_RUNNING)->pid()));
  EXPECT_FALSE(Alive(FindStatus(ms, 1, v1::TASK_RUNNING)->pid()));
}

TEST_F(WorkerAgentTest, SurvivesCoordinatorRestart) {
  StartAgent();
  const std::string flag = dir_ + "/go";
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", 0)));
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd(
      "echo before; while [ ! -e " + flag + " ]; do sleep 0.02; done; echo after; exit 4",
      1)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_RUNNING) &&
           FindStatus(ms, 1, v1::TASK_RUNNING) &&
           LogText(ms, 1, "stdout") == "before\n";
  }));
  int64_t sleeper = FindStatus(coord_->messages(), 0, v1::TASK_RUNNING)->pid();

  // The coordinator goes away; rank 1 exits while it is gone.
  int port = port_;
  StopCoordinator();
  { std::ofstream(flag) << "x"; }
  absl::SleepFor(absl::Milliseconds(300));  // let the exit happen while away
  EXPECT_TRUE(Alive(sleeper)) << "trainers keep running without a coordinator";

  StartCoordinator(port);
  ASSERT_TRUE(coord_->Await([](auto& ms, auto& regs) {
    return regs.size() == 1 && LogText(ms, 1, "stdout").find("after\n") != std::string::npos;
  })) << "re-registration / log after the restart missing";
  auto regs = coord_->registrations();
  ASSERT_EQ(regs[0].running_size(), 1);
  EXPECT_EQ(regs[0].running(0).rank(), 0);
  EXPECT_EQ(regs[0].running(0).pid(), sleeper);
  EXPECT_EQ(regs[0].running(0).state(), v1::TASK_RUNNING);
  // The rank that ended while the coordinator was away comes with the
  // registration itself, so it is never taken for lost.
  ASSERT_EQ(regs[0].ended_size(), 1) << regs[0].ShortDebugString();
  EXPECT_EQ(regs[0].ended(0).rank(), 1);
  EXPECT_EQ(regs[0].ended(0).state(), v1::TASK_EXITED);
  EXPECT_EQ(regs[0].ended(0).exit_code(), 4);
  auto ms = coord_->messages();
  EXPECT_TRUE(ms[0].has_heartbeat());
  EXPECT_TRUE(Alive(sleeper));
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr("re-registered")));
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr("lost")));
}

}  // namespace
}  // namespace frameworm
