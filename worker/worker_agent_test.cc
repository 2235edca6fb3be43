// The worker's Session glue against a small real WorkerService (callback
// API) on 127.0.0.1, with real trainer processes (/bin/sh).
#include "worker/worker_agent.h"
#include "worker/memory_dirs_file.h"

#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <zlib.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log_cap.h"
#include "common/received_file.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "frameworm/v1/peer_service.grpc.pb.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/rank_env_proto.h"
#include "rpc/rpc.h"
#include "worker/checkpoint_fetcher.h"
#include "worker/fetch_journal.h"
#include "worker/holdings_file.h"

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
    resp->set_receipts(receipts);
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
  // Says it sends Receipts (the test sends them, or not); set before use.
  bool receipts = false;

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
    coord_->receipts = receipts_;
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
  // StartAgent with `fetch_timeout`, beside a source that never answers
  // (ListenSilently): its fd, to close at the end (-1: it could not listen).
  int StartAgentBesideASilentSource(absl::Duration fetch_timeout, std::string* source);
  // StartAgentBesideASilentSource, then a hold of job-1's step 5 at `*copy`
  // from that source and rank 0 started resuming from it (so it waits for
  // the fetch). The silent source's fd (-1: it could not listen).
  int StartARankWaitingForAFetch(absl::Duration fetch_timeout, std::string* source,
                                 std::string* copy);
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
    o.peer_listen = peer_listen_;
    o.fetch_timeout = fetch_timeout_;
    o.gpus = gpus_;
    o.memory_sweep_quiet = memory_sweep_quiet_;
    auto agent = WorkerAgent::Create(o, *launcher_);
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    run_ = std::thread([this] { agent_->Run(); });
  }
  // Ranks 0 and 1 of job-1, sleeping a minute, reported running.
  void StartTwoSleepers() {
    ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", 0)));
    ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", 1)));
    ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
      return FindStatus(ms, 0, v1::TASK_RUNNING) && FindStatus(ms, 1, v1::TASK_RUNNING);
    }));
  }
  std::vector<std::string> events() {
    absl::MutexLock l(&events_mu_);
    return events_;
  }

  std::string dir_;
  bool receipts_ = false;
  int64_t max_log_bytes_ = int64_t{64} << 20;
  std::string peer_listen_ = "127.0.0.1:0";
  absl::Duration fetch_timeout_ = absl::Minutes(1);
  std::vector<std::string> gpus_;
  absl::Duration memory_sweep_quiet_ = absl::Minutes(1);
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

  // A last stderr line that is not UTF-8 (or whose 256-byte cut would split
  // a character) still reaches the coordinator: as valid UTF-8 (a proto3
  // string that is not would make the coordinator drop the message, and
  // with it the worker's session, again at each reconnect).
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd(
      "printf 'bad \\377\\376 bytes\\n' >&2; printf '%0255d\\342\\202\\254\\n' 0 >&2; exit 4",
      3)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 3, v1::TASK_EXITED); }))
      << "the status with a non-UTF-8 stderr tail never arrived";
  {
    const auto all = coord_->messages();
    const v1::TaskStatus* s = FindStatus(all, 3, v1::TASK_EXITED);
    EXPECT_EQ(s->exit_code(), 4);
    EXPECT_EQ(s->stderr_tail(), std::string(255, '0')) << "cut before the euro sign";
  }

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
  StartTwoSleepers();
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

// With a coordinator that receipts (RegisterWorkerResponse.receipts), a
// final status and log bytes written into a session count only once
// receipted: a coordinator that read nothing (stopped, then gone) gets them
// again from the next session, however long the first one seemed up; once
// receipted they are not sent again.
TEST_F(WorkerAgentTest, WhatIsNotReceiptedIsSentAgainOnTheNextSession) {
  receipts_ = true;
  StopCoordinator();
  StartCoordinator(0);
  StartAgent();
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("echo one; exit 3", 0)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_EXITED) && LogText(ms, 0, "stdout") == "one\n";
  }));
  // Ten heartbeat intervals with the session up: without receipts the
  // worker would take both as delivered and forget the task.
  absl::SleepFor(absl::Milliseconds(500));
  const int port = port_;
  StopCoordinator();
  StartCoordinator(port);
  ASSERT_TRUE(coord_->Await([](auto& ms, auto& regs) {
    return regs.size() == 1 && LogText(ms, 0, "stdout") == "one\n";
  })) << "the log was not sent again";
  auto regs = coord_->registrations();
  ASSERT_EQ(regs[0].ended_size(), 1) << regs[0].ShortDebugString();
  EXPECT_EQ(regs[0].ended(0).exit_code(), 3);
  // Receipted now (a receipt past what was sent counts what was sent).
  v1::CoordinatorMessage r;
  r.mutable_receipt()->mutable_ref()->set_job_id("job-1");
  r.mutable_receipt()->mutable_ref()->set_generation(1);
  r.mutable_receipt()->set_rank(0);
  r.mutable_receipt()->set_stream("stdout");
  r.mutable_receipt()->set_log_offset(1000);
  ASSERT_TRUE(coord_->SendWhenConnected(r));
  absl::SleepFor(absl::Milliseconds(300));
  StopCoordinator();
  StartCoordinator(port);
  ASSERT_TRUE(coord_->Await([](auto& ms, auto& regs) {
    int beats = 0;
    for (const auto& m : ms) beats += m.has_heartbeat();
    return regs.size() == 1 && beats >= 6;
  }));
  EXPECT_EQ(LogText(coord_->messages(), 0, "stdout"), "") << "a receipted log was sent again";
  EXPECT_EQ(coord_->registrations()[0].ended_size(), 0);
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// A loopback TCP socket that listens and never speaks (a source that
// never answers): its fd (-1 on failure) and "127.0.0.1:<port>".
int ListenSilently(std::string* endpoint) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd, 4) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *endpoint = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  return fd;
}

int WorkerAgentTest::StartAgentBesideASilentSource(absl::Duration fetch_timeout,
                                                   std::string* source) {
  fetch_timeout_ = fetch_timeout;
  StartAgent();
  return ListenSilently(source);
}

v1::CoordinatorMessage HoldCmd(const std::string& path, int64_t step, const std::string& data,
                               std::vector<std::string> sources = {}) {
  v1::CoordinatorMessage m;
  v1::HoldCheckpoint* h = m.mutable_hold();
  h->set_job_id("job-1");
  h->set_step(step);
  h->set_path(path);
  h->set_bytes(static_cast<int64_t>(data.size()));
  h->set_checksum(Crc32Text(UpdateCrc32(crc32(0L, Z_NULL, 0), data)));
  h->set_secret("s3cret");
  for (auto& s : sources) h->add_sources(s);
  return m;
}

int WorkerAgentTest::StartARankWaitingForAFetch(absl::Duration fetch_timeout, std::string* source,
                                                std::string* copy) {
  const int silent = StartAgentBesideASilentSource(fetch_timeout, source);
  if (silent < 0) return silent;
  *copy = dir_ + "/ck/ckpt-5.pt";
  RankEnv env = TaskEnv(0);
  env.resume_from = *copy;
  if (!coord_->SendWhenConnected(HoldCmd(*copy, 5, "abc", {*source})) ||
      !coord_->SendWhenConnected(StartCmd("exit 0", env))) {
    ::close(silent);
    return -1;
  }
  return silent;
}

const v1::CheckpointHeld* FindHeld(const std::vector<v1::WorkerMessage>& ms, int64_t step) {
  for (const auto& m : ms)
    if (m.has_held() && m.held().step() == step) return &m.held();
  return nullptr;
}

std::string Pattern(size_t n) {
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i * 131 + 7);
  return data;
}

// Holds: a file already on the node is held (and then served to peers); a
// missing one is answered with an error; a fetched one is in place before
// the rank that resumes from it starts; a drop deletes the held file.
TEST_F(WorkerAgentTest, HoldsServeFetchAndDropCheckpointCopies) {
  StartAgent();
  const std::string data = Pattern((8 << 20) + 3);
  const std::string mine = dir_ + "/ck-a/ckpt-10.pt";
  std::filesystem::create_directories(dir_ + "/ck-a");
  std::ofstream(mine, std::ios::binary) << data;
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(mine, 10, data)));
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(dir_ + "/ck-a/ckpt-11.pt", 11, data)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 10) && FindHeld(ms, 11); }));
  auto ms = coord_->messages();
  EXPECT_TRUE(FindHeld(ms, 10)->ok()) << FindHeld(ms, 10)->error();
  EXPECT_FALSE(FindHeld(ms, 11)->ok());
  EXPECT_THAT(FindHeld(ms, 11)->error(), HasSubstr("no file of"));
  ASSERT_FALSE(agent_->peer_endpoint().empty());

  // A coordinator that restarts learns what this worker holds.
  const int port = port_;
  StopCoordinator();
  StartCoordinator(port);
  ASSERT_TRUE(coord_->Await([](auto&, auto& regs) { return regs.size() == 1; }));
  auto regs = coord_->registrations();
  EXPECT_EQ(regs[0].peer_endpoint(), agent_->peer_endpoint());
  ASSERT_EQ(regs[0].held_size(), 1);
  EXPECT_EQ(regs[0].held(0).step(), 10);
  EXPECT_EQ(regs[0].held(0).secret(), "s3cret");
  EXPECT_TRUE(regs[0].held(0).ok());

  // The agent fetches step 10 from itself (its peer server) to another
  // path before the rank that resumes from there starts: the rank sees it.
  const std::string copy = dir_ + "/ck-b/ckpt-10.pt";
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(copy, 10, data, {agent_->peer_endpoint()})));
  RankEnv env = TaskEnv(0);
  env.resume_from = copy;
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd(
      "test \"$(wc -c < \"$FRAMEWORM_RESUME_FROM\")\" -eq " + std::to_string(data.size()), env)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 0, v1::TASK_EXITED); }));
  ms = coord_->messages();
  EXPECT_EQ(FindStatus(ms, 0, v1::TASK_EXITED)->exit_code(), 0)
      << "the rank started before its checkpoint was fetched";
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr("holds job-1's checkpoint of step 10")));
  // Held, so no longer noted as a fetch to clean up (worker/fetch_journal.h).
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/work/fetching"));
  std::ifstream in(copy, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), data);
  {
    // The peer server takes requests of at most 64 KiB (a real one is a
    // few hundred bytes): a bigger one is refused before it is read whole.
    auto peer = v1::PeerService::NewStub(MakeChannel(agent_->peer_endpoint()));
    for (const size_t secret : {size_t{1000}, size_t{100} << 10}) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::FetchCheckpointRequest req;
      req.set_job_id("job-1");
      req.set_step(10);
      req.set_secret(std::string(secret, 's'));
      auto reader = peer->FetchCheckpoint(&ctx, req);
      v1::CheckpointChunk chunk;
      while (reader->Read(&chunk)) {
      }
      const grpc::Status st = reader->Finish();
      EXPECT_EQ(st.error_code(), secret > (64 << 10) ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                                     : grpc::StatusCode::NOT_FOUND)
          << secret << ": " << st.error_message();
    }
    // The same copy held again with another secret (a coordinator that
    // restarted): peers are served with the secret the answer showed.
    v1::CoordinatorMessage again = HoldCmd(copy, 10, data, {agent_->peer_endpoint()});
    again.mutable_hold()->set_secret("n3w-secret");
    ASSERT_TRUE(coord_->SendWhenConnected(again));
    grpc::StatusCode got = grpc::StatusCode::UNKNOWN;
    for (int i = 0; i < 100 && got != grpc::StatusCode::OK; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::FetchCheckpointRequest req;
      req.set_job_id("job-1");
      req.set_step(10);
      req.set_secret("n3w-secret");
      auto reader = peer->FetchCheckpoint(&ctx, req);
      v1::CheckpointChunk chunk;
      while (reader->Read(&chunk)) {
      }
      got = reader->Finish().error_code();
      if (got != grpc::StatusCode::OK) absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(got, grpc::StatusCode::OK) << "the new secret is not served";
  }

  v1::CoordinatorMessage drop;
  drop.mutable_drop()->set_job_id("job-1");
  drop.mutable_drop()->set_step(10);
  ASSERT_TRUE(coord_->SendWhenConnected(drop));
  for (int i = 0; i < 100 && std::filesystem::exists(copy); ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(std::filesystem::exists(copy));
  EXPECT_TRUE(std::filesystem::exists(mine)) << "only the held file (the copy) is deleted";

  // A job-wide drop (the job expired) deletes the copies this worker
  // fetched, never a file a rank wrote here.
  const std::string copy20 = dir_ + "/ck-b/ckpt-20.pt", mine20 = dir_ + "/ck-a/ckpt-20.pt";
  std::ofstream(mine20, std::ios::binary) << data;
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(mine20, 20, data)));
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(copy20, 20, data, {agent_->peer_endpoint()})));
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(mine, 10, data)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    int n = 0;
    for (const auto& m : ms) n += m.has_held() && m.held().step() == 20 && m.held().ok();
    return n == 2;
  }));
  ASSERT_TRUE(std::filesystem::exists(copy20));
  drop.mutable_drop()->set_step(-1);
  ASSERT_TRUE(coord_->SendWhenConnected(drop));
  for (int i = 0; i < 100 && std::filesystem::exists(copy20); ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(std::filesystem::exists(copy20));
  EXPECT_TRUE(std::filesystem::exists(mine20));
  EXPECT_TRUE(std::filesystem::exists(mine));
}

// What a job leaves in its in-memory checkpoint directory on this node
// and no hold names (a snapshot never reported, a killed writer's partial
// file) goes once no task of the job has run here for a while; a held
// copy stays, and the directory goes once its drop empties it.
TEST_F(WorkerAgentTest, AMemoryDirectoryIsSweptOfWhatNoHoldNamesOnceItsJobLeaves) {
  memory_sweep_quiet_ = absl::Milliseconds(300);
  StartAgent();
  const std::string mem = dir_ + "/shm/job-1-100";
  std::filesystem::create_directories(mem);
  std::filesystem::permissions(mem, std::filesystem::perms::owner_all);
  const std::string data = Pattern(1000);
  for (const char* name : {"ckpt-5.pt", "ckpt-10.pt", "ckpt-15.pt.tmp.99999"}) {
    std::ofstream(mem + "/" + name, std::ios::binary) << data;
  }
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(mem + "/ckpt-10.pt", 10, data)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 10); }));
  ASSERT_TRUE(FindHeld(coord_->messages(), 10)->ok()) << FindHeld(coord_->messages(), 10)->error();
  RankEnv env = TaskEnv(0);
  env.memory_checkpoint_dir = mem;
  env.memory_checkpoint_every = 5;
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", env)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 0, v1::TASK_RUNNING); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // three times the quiet time
  EXPECT_TRUE(std::filesystem::exists(mem + "/ckpt-5.pt")) << "swept while its job runs here";
  v1::CoordinatorMessage kill;
  kill.mutable_kill()->mutable_ref()->set_job_id("job-1");
  kill.mutable_kill()->mutable_ref()->set_generation(1);
  kill.mutable_kill()->set_rank(0);
  ASSERT_TRUE(coord_->SendWhenConnected(kill));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 0, v1::TASK_KILLED); }));
  for (int i = 0; i < 500 && std::filesystem::exists(mem + "/ckpt-5.pt"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(std::filesystem::exists(mem + "/ckpt-5.pt"));
  EXPECT_FALSE(std::filesystem::exists(mem + "/ckpt-15.pt.tmp.99999"));
  EXPECT_TRUE(std::filesystem::exists(mem + "/ckpt-10.pt")) << "a held copy was swept";
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr("removed what no hold names")));
  v1::CoordinatorMessage drop;
  drop.mutable_drop()->set_job_id("job-1");
  drop.mutable_drop()->set_step(10);
  ASSERT_TRUE(coord_->SendWhenConnected(drop));
  for (int i = 0; i < 500 && std::filesystem::exists(mem); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(std::filesystem::exists(mem)) << "the emptied directory stays";
}

// A worker restarted while a task of a job with a memory directory ran
// still sweeps that directory once the job is gone: it kept the directory
// in its work dir (worker/memory_dirs_file.h); nobody names it again.
TEST_F(WorkerAgentTest, ARestartedWorkerStillSweepsTheMemoryDirectoriesOfEarlierTasks) {
  memory_sweep_quiet_ = absl::Milliseconds(300);
  StartAgent();
  const std::string mem = dir_ + "/shm/job-1-100";
  std::filesystem::create_directories(mem);
  std::filesystem::permissions(mem, std::filesystem::perms::owner_all);
  for (const char* name : {"ckpt-5.pt", "ckpt-15.pt.tmp.99999"}) {
    std::ofstream(mem + "/" + name, std::ios::binary) << Pattern(100);
  }
  RankEnv env = TaskEnv(0);
  env.memory_checkpoint_dir = mem;
  env.memory_checkpoint_every = 5;
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", env)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 0, v1::TASK_RUNNING); }));
  agent_->Shutdown();  // its task goes with it
  run_.join();
  agent_.reset();
  EXPECT_TRUE(std::filesystem::exists(mem + "/ckpt-5.pt")) << "swept while its job ran";
  StartAgent();
  ASSERT_TRUE(coord_->Await([](auto&, auto& regs) { return regs.size() >= 2; }));
  for (int i = 0; i < 500 && std::filesystem::exists(mem); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(std::filesystem::exists(mem + "/ckpt-5.pt"));
  EXPECT_FALSE(std::filesystem::exists(mem)) << "the emptied directory stays";
  // Forgotten once gone: the next start watches nothing.
  for (int i = 0; i < 100; ++i) {
    auto left = ReadMemoryDirsFile(dir_ + "/work/memory-dirs");
    if (left.ok() && left->empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto left = ReadMemoryDirsFile(dir_ + "/work/memory-dirs");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
}

// A saved list is no licence: a directory it names behind a symlink (one
// put where the memory root was, say after a reboot emptied the tmpfs) is
// left alone and forgotten, and the list is rewritten without it.
TEST_F(WorkerAgentTest, AMemoryDirsFileNamingADirectoryBehindASymlinkSweepsNothing) {
  memory_sweep_quiet_ = absl::Milliseconds(300);
  const std::string real = dir_ + "/elsewhere/job-1-100";
  std::filesystem::create_directories(real);
  std::filesystem::permissions(real, std::filesystem::perms::owner_all);
  std::ofstream(real + "/ckpt-5.pt", std::ios::binary) << Pattern(100);
  std::filesystem::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/shm");
  std::filesystem::create_directories(dir_ + "/work");
  ASSERT_TRUE(
      WriteMemoryDirsFile(dir_ + "/work/memory-dirs", {{"job-1", dir_ + "/shm/job-1-100"}}).ok());
  StartAgent();
  ASSERT_TRUE(coord_->Await([](auto&, auto& regs) { return !regs.empty(); }));
  absl::StatusOr<std::vector<WatchedMemoryDir>> left;
  for (int i = 0; i < 250; ++i) {  // until the sweep forgot it (5 s at most)
    left = ReadMemoryDirsFile(dir_ + "/work/memory-dirs");
    if (left.ok() && left->empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty()) << "still watched";
  EXPECT_TRUE(std::filesystem::exists(real + "/ckpt-5.pt")) << "swept through a symlink";
}

// Without TLS and without --insecure, a hold's source off loopback is not
// dialled (the hold's secret would cross the network in plaintext): the
// hold is answered with an error naming it, unless the copy is already in
// place. (0.0.0.0 is off loopback by name, yet a connect to it stays on
// this host: the listener shows that nothing dialled.)
TEST_F(WorkerAgentTest, ASourceOffLoopbackIsNotDialledInPlaintext) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string source = absl::StrCat("0.0.0.0:", ntohs(addr.sin_port));
  StartAgent();
  const std::string data = Pattern(1000);
  std::filesystem::create_directories(dir_ + "/ck");
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(dir_ + "/ck/ckpt-5.pt", 5, data, {source})));
  // Answered before the next is sent (a newer step's hold would supersede it).
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 5); }));
  std::ofstream(dir_ + "/ck/ckpt-6.pt", std::ios::binary) << data;  // already in place
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(dir_ + "/ck/ckpt-6.pt", 6, data, {source})));
  ASSERT_TRUE(
      coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 5) && FindHeld(ms, 6); }));
  const auto ms = coord_->messages();
  EXPECT_FALSE(FindHeld(ms, 5)->ok());
  EXPECT_THAT(FindHeld(ms, 5)->error(), HasSubstr("in plaintext"));
  EXPECT_THAT(FindHeld(ms, 5)->error(), HasSubstr(source));
  EXPECT_TRUE(FindHeld(ms, 6)->ok()) << FindHeld(ms, 6)->error();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ck/ckpt-5.pt"));
  EXPECT_LT(::accept(listener, nullptr, nullptr), 0) << "the source was dialled";
  ::close(listener);
}

// A drop deletes a copy's file only when no other hold names it: two holds
// of one path (two jobs' records, say), the first drop leaves the file.
TEST_F(WorkerAgentTest, ADropLeavesAFileAnotherHoldStillNames) {
  StartAgent();
  const std::string data = Pattern(1000);
  const std::string path = dir_ + "/ck/ckpt-10.pt";
  std::filesystem::create_directories(dir_ + "/ck");
  std::ofstream(path, std::ios::binary) << data;
  v1::CoordinatorMessage other = HoldCmd(path, 10, data);
  other.mutable_hold()->set_job_id("job-2");
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(path, 10, data)));
  ASSERT_TRUE(coord_->SendWhenConnected(other));
  auto answered = [](const std::vector<v1::WorkerMessage>& ms) {
    int n = 0;
    for (const auto& m : ms) n += m.has_held() && m.held().ok() ? 1 : 0;
    return n;
  };
  ASSERT_TRUE(coord_->Await([&](auto& ms, auto&) { return answered(ms) >= 2; }));
  auto drop = [&](const std::string& job) {
    v1::CoordinatorMessage d;
    d.mutable_drop()->set_job_id(job);
    d.mutable_drop()->set_step(10);
    return coord_->SendWhenConnected(d);
  };
  ASSERT_TRUE(drop("job-1"));
  // A hold sent after it is answered after it is applied (one loop, in order).
  std::ofstream(dir_ + "/ck/ckpt-11.pt", std::ios::binary) << data;
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(dir_ + "/ck/ckpt-11.pt", 11, data)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 11); }));
  EXPECT_TRUE(std::filesystem::exists(path)) << "deleted under job-2's hold";
  ASSERT_TRUE(drop("job-2"));
  for (int i = 0; i < 200 && std::filesystem::exists(path); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A list of memory directories that cannot be read or written is said in
// the worker's log, and the worker runs on: its task starts and its
// directories are still swept, a restart would only forget them.
TEST_F(WorkerAgentTest, AMemoryDirsFileThatCannotBeReadOrWrittenIsSaidAndTheTaskStillRuns) {
  std::filesystem::create_directories(dir_ + "/work/memory-dirs");  // a directory in its place
  StartAgent();
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr("cannot read " + dir_ + "/work/memory-dirs")));
  RankEnv env = TaskEnv(0);
  env.memory_checkpoint_dir = dir_ + "/shm/job-1-100";
  env.memory_checkpoint_every = 5;
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("exec sleep 60", env)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 0, v1::TASK_RUNNING); }));
  int written_said = 0;
  for (const std::string& e : events()) {
    if (e.find(dir_ + "/work/memory-dirs") != std::string::npos &&
        e.find("cannot read") == std::string::npos) {
      ++written_said;
    }
  }
  EXPECT_EQ(written_said, 1) << "the failed write is said once";
}

// A fetch from a source that never answers: the rank waiting for it is
// killed before it ever started when the coordinator says so, and the hold
// is answered with an error naming the source once the fetch gives up.
TEST_F(WorkerAgentTest, ARankWaitingForAFetchCanBeKilledAndAFailedFetchIsAnswered) {
  std::string source, copy;
  const int silent = StartARankWaitingForAFetch(absl::Seconds(3), &source, &copy);
  ASSERT_GE(silent, 0);
  v1::CoordinatorMessage kill;
  kill.mutable_kill()->mutable_ref()->set_job_id("job-1");
  kill.mutable_kill()->set_rank(-1);
  ASSERT_TRUE(coord_->SendWhenConnected(kill));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindStatus(ms, 0, v1::TASK_KILLED); }));
  auto ms = coord_->messages();
  EXPECT_EQ(FindStatus(ms, 0, v1::TASK_RUNNING), nullptr) << "it never started";
  EXPECT_THAT(FindStatus(ms, 0, v1::TASK_KILLED)->message(), HasSubstr("waiting for its checkpoint"));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 5); }, absl::Seconds(20)));
  ms = coord_->messages();
  EXPECT_FALSE(FindHeld(ms, 5)->ok());
  EXPECT_THAT(FindHeld(ms, 5)->error(), HasSubstr(source));
  EXPECT_FALSE(std::filesystem::exists(copy));
  ::close(silent);
}

// A restart on the same node: the coordinator sends KillTask for the old
// generation and StartTask for the new one at once. With every GPU slot
// held by the dying rank, the start waits until that rank is reaped (its
// SIGTERM grace) instead of failing with "no free GPU".
TEST_F(WorkerAgentTest, AStartWaitsForTheGpuOfARankBeingKilled) {
  gpus_ = {"3"};
  StartAgent();
  // Takes its time to exit on SIGTERM, as a trainer saving state would.
  // (Its trap set before the kill comes: "ready" in its log.)
  const std::string slow_exit =
      "trap 'sleep 0.5; exit 0' TERM; echo ready; while :; do sleep 0.05; done";
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd(slow_exit, 0)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_RUNNING) && LogText(ms, 0, "stdout") == "ready\n";
  }));
  v1::CoordinatorMessage kill;
  kill.mutable_kill()->mutable_ref()->set_job_id("job-1");
  kill.mutable_kill()->mutable_ref()->set_generation(1);
  kill.mutable_kill()->set_rank(-1);
  kill.mutable_kill()->set_grace_s(5);
  RankEnv next = TaskEnv(0);
  next.generation = 2;
  ASSERT_TRUE(coord_->SendWhenConnected(kill));
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("echo $CUDA_VISIBLE_DEVICES; exit 0", next)));
  auto of_generation = [](const std::vector<v1::WorkerMessage>& ms, int64_t gen,
                          v1::TaskState state) -> const v1::TaskStatus* {
    for (const auto& m : ms) {
      if (m.has_task_status() && m.task_status().ref().generation() == gen &&
          m.task_status().state() == state)
        return &m.task_status();
    }
    return nullptr;
  };
  ASSERT_TRUE(coord_->Await([&](auto& ms, auto&) {
    return of_generation(ms, 2, v1::TASK_EXITED) || of_generation(ms, 2, v1::TASK_START_FAILED);
  }));
  auto ms = coord_->messages();
  EXPECT_EQ(of_generation(ms, 2, v1::TASK_START_FAILED), nullptr)
      << of_generation(ms, 2, v1::TASK_START_FAILED)->message();
  ASSERT_NE(of_generation(ms, 1, v1::TASK_EXITED), nullptr);  // its trap exits 0
  ASSERT_NE(of_generation(ms, 2, v1::TASK_EXITED), nullptr);
  EXPECT_EQ(of_generation(ms, 2, v1::TASK_EXITED)->exit_code(), 0);
  EXPECT_THAT(events(), ::testing::Contains(HasSubstr("waits to start: for the GPU")));
}

// A rank waiting for its checkpoint's fetch when the coordinator restarts
// is listed as running (no pid yet) in the re-registration, so the
// restarted coordinator does not take it for lost.
TEST_F(WorkerAgentTest, ARankWaitingForItsFetchIsListedWhenReRegistering) {
  std::string source, copy;
  const int silent = StartARankWaitingForAFetch(absl::Seconds(5), &source, &copy);
  ASSERT_GE(silent, 0);
  auto deferred = [&] {
    for (const std::string& e : events())
      if (e.find("waits to start: for its checkpoint's fetch") != std::string::npos) return true;
    return false;
  };
  for (int i = 0; i < 500 && !deferred(); ++i) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(deferred()) << "the start was not deferred behind the fetch";
  const int port = port_;
  StopCoordinator();
  StartCoordinator(port);
  ASSERT_TRUE(coord_->Await([](auto&, auto& regs) { return !regs.empty(); }));
  auto regs = coord_->registrations();
  ASSERT_EQ(regs[0].running_size(), 1) << regs[0].ShortDebugString();
  EXPECT_EQ(regs[0].running(0).rank(), 0);
  EXPECT_EQ(regs[0].running(0).ref().generation(), 1);
  EXPECT_EQ(regs[0].running(0).state(), v1::TASK_RUNNING);
  EXPECT_EQ(regs[0].running(0).pid(), 0);
  ::close(silent);
}

// Holds of one path that arrive while its fetch is pending are each
// answered: one sent again (a coordinator re-sending, with its own secret)
// and one of another checksum (a re-run's checkpoint of that step) are
// fetched in their turn, not left unanswered behind the first.
TEST_F(WorkerAgentTest, EveryHoldOfAPendingPathIsAnswered) {
  std::string source;
  const int silent = StartAgentBesideASilentSource(absl::Seconds(2), &source);
  ASSERT_GE(silent, 0);
  const std::string copy = dir_ + "/ck/ckpt-5.pt";
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(copy, 5, "abc", {source})));
  absl::SleepFor(absl::Milliseconds(300));  // its fetch runs (2 s against a silent source)
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(copy, 5, "abc", {source})));
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(copy, 5, "abcd", {source})));
  // Equal to the queued second one: merged into it, no further attempt.
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(copy, 5, "abc", {source})));
  auto answers = [](const std::vector<v1::WorkerMessage>& ms) {
    int n = 0;
    for (const auto& m : ms) n += m.has_held() && m.held().step() == 5;
    return n;
  };
  ASSERT_TRUE(coord_->Await([&](auto& ms, auto&) { return answers(ms) == 3; },
                            absl::Seconds(30)))
      << answers(coord_->messages()) << " of 3 holds answered";
  for (const auto& m : coord_->messages()) {
    if (!m.has_held()) continue;
    EXPECT_FALSE(m.held().ok());
    EXPECT_THAT(m.held().error(), HasSubstr(source));
  }
  EXPECT_FALSE(std::filesystem::exists(copy));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(answers(coord_->messages()), 3) << "the fourth hold was merged into the second";
  ::close(silent);
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// At most kMaxQueued holds wait for the fetch thread; more are refused
// with an error that names the hold, and the ones queued are not lost.
// A hold equal to a queued one is merged into it (the newer secret is the
// one answered); one equal to the running one is queued.
TEST(CheckpointFetcher, EqualQueuedHoldsMerge) {
  absl::Notification release;
  absl::Mutex mu;
  std::vector<std::string> secrets;
  {
    CheckpointFetcher fetcher(
        [&](HeldCheckpoint& h, const std::atomic<bool>&) {
          release.WaitForNotification();
          absl::MutexLock l(&mu);
          secrets.push_back(h.secret);
          return absl::OkStatus();
        },
        [] {});
    HeldCheckpoint h;
    h.job_id = "job-1";
    h.step = 3;
    h.path = "/tmp/x/ckpt-3.pt";
    h.checksum = "crc32:00000001";
    h.secret = "first";
    ASSERT_TRUE(fetcher.Enqueue(h).ok());
    for (int i = 0; i < 500 && !fetcher.Pending(h.path); ++i) absl::SleepFor(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(50));  // the first is running
    h.secret = "second";
    ASSERT_TRUE(fetcher.Enqueue(h).ok());
    h.secret = "third";
    ASSERT_TRUE(fetcher.Enqueue(h).ok());
    h.checksum = "crc32:00000002";
    h.secret = "other";
    ASSERT_TRUE(fetcher.Enqueue(h).ok());
    release.Notify();
    for (int i = 0; i < 1000; ++i) {
      {
        absl::MutexLock l(&mu);
        if (secrets.size() == 3) break;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(fetcher.TakeDone().size(), 3u);
  }
  EXPECT_EQ(secrets, (std::vector<std::string>{"first", "third", "other"}));
}

// A newer hold of the same job in the same directory supersedes the older
// ones still queued (done with ABORTED, never fetched); the running fetch,
// a path a rank waits to resume from, other jobs' holds and other
// directories' are left alone.
TEST(CheckpointFetcher, ANewerHoldSupersedesOlderQueuedOnesOfItsJob) {
  absl::Notification release;
  absl::Mutex mu;
  std::vector<int64_t> fetched;
  std::atomic<int> woken{0};
  {
    CheckpointFetcher fetcher(
        [&](HeldCheckpoint& h, const std::atomic<bool>&) {
          release.WaitForNotification();
          absl::MutexLock l(&mu);
          fetched.push_back(h.step);
          return absl::OkStatus();
        },
        [&] { ++woken; },
        [](const std::string& path) { return path == "/shm/job-1/ckpt-15.pt"; });
    // Destroyed before `fetcher` (which joins its thread): a failed
    // assertion below lets the running fetch end instead of hanging.
    struct Release {
      absl::Notification& n;
      ~Release() {
        if (!n.HasBeenNotified()) n.Notify();
      }
    } guard{release};
    auto hold = [](const std::string& job, int64_t step, const std::string& dir) {
      HeldCheckpoint h;
      h.job_id = job;
      h.step = step;
      h.path = absl::StrCat(dir, "/ckpt-", step, ".pt");
      h.checksum = "crc32:00000001";
      return h;
    };
    ASSERT_TRUE(fetcher.Enqueue(hold("job-1", 10, "/shm/job-1")).ok());
    for (int i = 0; i < 500 && !fetcher.Pending("/shm/job-1/ckpt-10.pt"); ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    absl::SleepFor(absl::Milliseconds(50));  // step 10 is running
    ASSERT_TRUE(fetcher.Enqueue(hold("job-1", 15, "/shm/job-1")).ok());  // a rank waits on it
    ASSERT_TRUE(fetcher.Enqueue(hold("job-1", 20, "/shm/job-1")).ok());
    ASSERT_TRUE(fetcher.Enqueue(hold("job-1", 25, "/disk/job-1")).ok());
    ASSERT_TRUE(fetcher.Enqueue(hold("job-2", 20, "/shm/job-2")).ok());
    EXPECT_EQ(woken.load(), 0);
    ASSERT_TRUE(fetcher.Enqueue(hold("job-1", 30, "/shm/job-1")).ok());  // supersedes 20
    EXPECT_EQ(woken.load(), 1) << "the superseded hold's answer was not signalled";
    auto done = fetcher.TakeDone();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].first.step, 20);
    EXPECT_EQ(done[0].second.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(std::string(done[0].second.message()),
                HasSubstr("superseded by its checkpoint of step 30"));
    EXPECT_FALSE(fetcher.Pending("/shm/job-1/ckpt-20.pt"));
    // A fetch into a directory (queued or running) keeps it from a sweep.
    EXPECT_TRUE(fetcher.PendingUnder("/shm/job-1"));
    EXPECT_TRUE(fetcher.PendingUnder("/shm//job-2/"));
    EXPECT_FALSE(fetcher.PendingUnder("/shm/job-3"));
    EXPECT_FALSE(fetcher.PendingUnder("/shm"));
    release.Notify();
    for (int i = 0; i < 1000; ++i) {
      {
        absl::MutexLock l(&mu);
        if (fetched.size() == 5) break;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  EXPECT_EQ(fetched, (std::vector<int64_t>{10, 15, 25, 20, 30}));
}

TEST(CheckpointFetcher, QueueIsBounded) {
  std::atomic<int> fetched{0};
  {
    CheckpointFetcher fetcher(
        [&](HeldCheckpoint&, const std::atomic<bool>& stop) {
          while (!stop.load()) absl::SleepFor(absl::Milliseconds(1));
          ++fetched;
          return absl::CancelledError("stopped");
        },
        [] {});
    HeldCheckpoint h;
    h.path = "/tmp/x/ckpt-1.pt";
    size_t accepted = 0;
    absl::Status refused;
    for (size_t i = 0; i < CheckpointFetcher::kMaxQueued + 2 && refused.ok(); ++i) {
      h.job_id = absl::StrCat("job-", i);  // one job's newer hold would supersede
      h.step = static_cast<int64_t>(i);
      refused = fetcher.Enqueue(h);
      if (refused.ok()) ++accepted;
    }
    EXPECT_GE(accepted, CheckpointFetcher::kMaxQueued);
    EXPECT_LE(accepted, CheckpointFetcher::kMaxQueued + 1);  // one may be running
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(refused.message()), HasSubstr("1024 fetches already wait"));
    EXPECT_TRUE(fetcher.Pending("/tmp/x/ckpt-1.pt"));
  }
  EXPECT_LE(fetched.load(), 1);  // the queue is dropped on shutdown
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// Dumping the stacks of every rank can take seconds per rank (eu-stack on
// a process stuck in the kernel: here an eu-stack first on PATH that takes
// 1.5 s); the worker keeps heartbeating between the ranks, so the
// coordinator does not declare it lost while it dumps.
TEST_F(WorkerAgentTest, HeartbeatsGoOutBetweenTheStacksOfRanks) {
  const std::string bin = dir_ + "/slow-bin";
  std::filesystem::create_directories(bin);
  {
    std::ofstream f(bin + "/eu-stack");
    f << "#!/bin/sh\nsleep 1.5\necho \"slow stacks of $2\"\n";
  }
  std::filesystem::permissions(bin + "/eu-stack", std::filesystem::perms::owner_all);
  const char* old = std::getenv("PATH");
  const std::string saved = old == nullptr ? "/usr/bin:/bin" : old;
  ::setenv("PATH", (bin + ":" + saved).c_str(), 1);
  StartAgent();
  StartTwoSleepers();
  v1::CoordinatorMessage dump;
  dump.mutable_dump()->mutable_ref()->set_job_id("job-1");
  dump.mutable_dump()->mutable_ref()->set_generation(1);
  dump.mutable_dump()->set_rank(-1);
  dump.mutable_dump()->set_why("test");
  const int64_t asked_ms = absl::ToUnixMillis(absl::Now());
  ASSERT_TRUE(coord_->SendWhenConnected(dump));
  const bool both = coord_->Await([](auto& ms, auto&) {
    return LogText(ms, 0, "stderr").find("slow stacks") != std::string::npos &&
           LogText(ms, 1, "stderr").find("slow stacks") != std::string::npos;
  });
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(both);
  int64_t last = asked_ms, widest = 0;
  for (const auto& m : coord_->messages()) {
    if (!m.has_heartbeat() || m.heartbeat().unix_ms() < asked_ms) continue;
    widest = std::max(widest, m.heartbeat().unix_ms() - last);
    last = m.heartbeat().unix_ms();
  }
  EXPECT_GE(last - asked_ms, 3000) << "both dumps (1.5 s each) lie between";
  EXPECT_LT(widest, 2500) << "no heartbeat while the two dumps ran";
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// Once a task's final status is delivered and its logs uploaded whole, the
// node deletes its log files and their now empty directories: a worker
// that runs tasks for months does not keep every one's output.
TEST_F(WorkerAgentTest, AnEndedTasksLogFilesGoOnceUploaded) {
  StartAgent();
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("echo out-$RANK; echo err >&2", 0)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_EXITED) && LogText(ms, 0, "stdout") == "out-0\n" &&
           LogText(ms, 0, "stderr") == "err\n";
  }));
  const std::string gen_dir = dir_ + "/work/job-1/g1";
  for (int i = 0; i < 800 && std::filesystem::exists(gen_dir); ++i) {  // up to 20 s
    absl::SleepFor(absl::Milliseconds(25));
  }
  EXPECT_FALSE(std::filesystem::exists(gen_dir));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/work/job-1"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/work"));
}

// A start whose job id is not one path component ("a/../victim") is
// refused, and nothing is done under the path it names: another job's
// output there is neither uploaded under the forged key nor deleted once
// the refusal is delivered.
TEST_F(WorkerAgentTest, AStartWithAPathForAJobIdTouchesNoFileThere) {
  const std::string victim = dir_ + "/work/victim/g1";
  std::filesystem::create_directories(victim);
  std::filesystem::create_directories(dir_ + "/work/a");
  std::ofstream(victim + "/rank-0.stdout") << "victim's output\n";
  StartAgent();
  ASSERT_TRUE(coord_->SendWhenConnected(StartCmd("echo forged", 0, "a/../victim")));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindStatus(ms, 0, v1::TASK_START_FAILED) != nullptr;
  }));
  EXPECT_THAT(FindStatus(coord_->messages(), 0, v1::TASK_START_FAILED)->message(),
              HasSubstr("invalid job id"));
  absl::SleepFor(absl::Seconds(2));  // log tailing and the delivered final's clean-up
  EXPECT_EQ(LogText(coord_->messages(), 0, "stdout"), "");
  EXPECT_TRUE(std::filesystem::exists(victim + "/rank-0.stdout"));
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// A restarted worker still knows the copies it held (worker/holdings_file.h)
// and reports them, with their secrets, at registration; a copy whose file
// went while it was down is not reported, and a drop is remembered too.
TEST_F(WorkerAgentTest, ARestartedWorkerReportsTheCopiesItStillHolds) {
  StartAgent();
  const std::string data = Pattern(1000);
  std::filesystem::create_directories(dir_ + "/ck");
  for (const int step : {10, 11}) {
    std::ofstream(absl::StrCat(dir_, "/ck/ckpt-", step, ".pt"), std::ios::binary) << data;
    ASSERT_TRUE(coord_->SendWhenConnected(
        HoldCmd(absl::StrCat(dir_, "/ck/ckpt-", step, ".pt"), step, data)));
  }
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) {
    return FindHeld(ms, 10) && FindHeld(ms, 10)->ok() && FindHeld(ms, 11) && FindHeld(ms, 11)->ok();
  }));
  auto restart = [&](size_t registrations) {
    agent_->Shutdown();
    run_.join();
    agent_.reset();
    StartAgent();
    EXPECT_TRUE(coord_->Await(
        [registrations](auto&, auto& regs) { return regs.size() >= registrations; }));
    return coord_->registrations().back();
  };
  std::filesystem::remove(dir_ + "/ck/ckpt-11.pt");  // gone while the worker is down
  v1::RegisterWorkerRequest reg = restart(2);
  ASSERT_EQ(reg.held_size(), 1);
  EXPECT_EQ(reg.held(0).job_id(), "job-1");
  EXPECT_EQ(reg.held(0).step(), 10);
  EXPECT_EQ(reg.held(0).secret(), "s3cret");
  // The coordinator's drop after the restart deletes the file, and the
  // next start holds nothing.
  v1::CoordinatorMessage drop;
  drop.mutable_drop()->set_job_id("job-1");
  drop.mutable_drop()->set_step(10);
  ASSERT_TRUE(coord_->SendWhenConnected(drop));
  for (int i = 0; i < 200 && std::filesystem::exists(dir_ + "/ck/ckpt-10.pt"); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ck/ckpt-10.pt"));
  reg = restart(3);
  EXPECT_EQ(reg.held_size(), 0);
}

// A worker killed in the middle of a fetch left a partial file beside the
// copy's path, or a complete copy it had not yet written to its holdings
// file; its next start removes them (worker/fetch_journal.h), and nothing
// else: not another process's partial (another pid, or the same pid with
// another tag), not another step's, not a copy it holds, not a file that
// is no longer the copy it wrote. A fetch in progress is noted, and the
// note goes with it.
TEST_F(WorkerAgentTest, AWorkerKilledMidFetchCleansUpAtTheNextStart) {
  const std::string ck = dir_ + "/ck";
  std::filesystem::create_directories(ck);
  std::filesystem::create_directories(dir_ + "/work");
  auto crc = [](const std::string& data) {
    return Crc32Text(UpdateCrc32(crc32(0L, Z_NULL, 0), data));
  };
  const std::string copy = ck + "/ckpt-7.pt";        // cut short
  const std::string unheld = ck + "/ckpt-12.pt";     // written, not yet held
  const std::string held = ck + "/ckpt-13.pt";       // written and held
  const std::string replaced = ck + "/ckpt-14.pt";   // written, then replaced
  {
    FetchJournal previous(dir_ + "/work/fetching");  // what the killed worker noted
    previous.Started(copy, 4, crc("keep"));
    for (const auto& [path, data] : {std::pair{unheld, "done"}, {held, "held"}, {replaced, "old!"}}) {
      std::ofstream(path) << data;
      previous.Copied(previous.Started(path, 4, crc(data)));
    }
    ASSERT_TRUE(previous.error().ok()) << previous.error();
    std::ofstream(replaced) << "new!";
    HeldCheckpoint h{"job-1", 13, held, 4, crc("held"), {}, true, "s3cret"};
    ASSERT_TRUE(WriteHoldingsFile(dir_ + "/work/holdings", {h}).ok());
  }
  const std::string pid = PartialTag();  // this process's: "<pid>.<hex>"
  const std::vector<std::string> stale = {copy + ".partial-" + pid + "-0",
                                          copy + ".partial-" + pid + "-12", unheld};
  const std::vector<std::string> kept = {copy, copy + ".partial-1-0",
                                         copy + ".partial-" + std::to_string(::getpid()) + ".0-0",
                                         ck + "/ckpt-8.pt.partial-" + pid + "-0",
                                         copy + ".partial-" + pid + "-x", held, replaced};
  for (size_t i = 0; i < 2; ++i) std::ofstream(stale[i]) << "half";
  for (size_t i = 0; i < 5; ++i) std::ofstream(kept[i]) << "keep";
  fetch_timeout_ = absl::Seconds(3);
  StartAgent();
  for (const auto& f : stale) EXPECT_FALSE(std::filesystem::exists(f)) << f;
  for (const auto& f : kept) EXPECT_TRUE(std::filesystem::exists(f)) << f;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/work/fetching"));
  EXPECT_THAT(absl::StrJoin(events(), "\n"), HasSubstr(stale[0] + ", left by a fetch"));
  EXPECT_THAT(absl::StrJoin(events(), "\n"), HasSubstr(unheld + ", left by a fetch"));

  // A fetch from a source that never answers: noted while it runs, the
  // note gone once it failed.
  std::string source;
  const int silent = ListenSilently(&source);
  ASSERT_GE(silent, 0);
  const std::string other = ck + "/ckpt-9.pt";
  ASSERT_TRUE(coord_->SendWhenConnected(HoldCmd(other, 9, "abc", {source})));
  std::string note;
  for (int i = 0; i < 100 && note.empty(); ++i) {
    std::ifstream in(dir_ + "/work/fetching");
    std::getline(in, note);
    if (note.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(note, absl::StrCat("v1\t", pid, "\t0\t3\t", crc("abc"), "\t",
                               absl::BytesToHexString(other)));
  ASSERT_TRUE(coord_->Await([](auto& ms, auto&) { return FindHeld(ms, 9); }, absl::Seconds(20)));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/work/fetching"));
  ::close(silent);
}

// Two fetches of one path are two notes: the second one ending (it found
// the file in place) leaves the first one's note of a copy written and not
// yet held, which a restart then cleans up. Past kMaxHeldCheckpoints notes
// the oldest goes.
TEST(FetchJournal, TwoFetchesOfOnePathAreTwoNotes) {
  const std::string dir = ::testing::TempDir() + "/fetch-journal-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/ck");
  const std::string path = dir + "/ck/ckpt-3.pt";
  std::ofstream(path) << "data";
  const std::string crc = Crc32Text(UpdateCrc32(crc32(0L, Z_NULL, 0), "data"));
  {
    FetchJournal j(dir + "/fetching");
    const uint64_t first = j.Started(path, 4, crc);
    j.Copied(first);
    const uint64_t second = j.Started(path, 4, crc);
    EXPECT_NE(first, second);
    j.Ended(second);
    EXPECT_TRUE(std::filesystem::exists(dir + "/fetching"));
  }
  FetchJournal again(dir + "/fetching");
  EXPECT_EQ(again.Recover([](const std::string&) { return false; }),
            std::vector<std::string>{path});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(dir + "/fetching"));
  // Bounded: the oldest notes go.
  for (size_t i = 0; i < kMaxHeldCheckpoints + 10; ++i) again.Started(path, 4, crc);
  std::ifstream in(dir + "/fetching");
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, kMaxHeldCheckpoints);
  // A journal that cannot be written: the fetch goes on, the error is kept.
  FetchJournal nowhere(dir + "/no-such-dir/fetching");
  EXPECT_NE(nowhere.Started(path, 4, crc), 0u);
  EXPECT_EQ(nowhere.error().code(), absl::StatusCode::kInternal);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace frameworm
