// Supervisor logic with a simulated clock and a simulated launcher: no
// processes, no sleeps.
#include "worker/supervisor.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;

// Records launches and signals; processes "exit" when the test says so, or
// on SIGKILL, or on SIGTERM unless told to ignore it.
class SimLauncher final : public ProcessLauncher {
 public:
  absl::StatusOr<int64_t> Start(const LaunchSpec& spec) override {
    if (spec.argv[0] == "missing") {
      return absl::NotFoundError("program 'missing' not found on PATH");
    }
    int64_t pid = next_pid_++;
    specs[pid] = spec;
    alive.insert(pid);
    return pid;
  }
  absl::Status Signal(int64_t pid, int sig) override {
    signals.emplace_back(pid, sig);
    if (!alive.count(pid)) return absl::NotFoundError("gone");
    if (sig == SIGKILL || (sig == SIGTERM && !ignore_term.count(pid))) {
      Exit(pid, {pid, true, 0, sig});
    }
    return absl::OkStatus();
  }
  std::vector<ProcessExit> Reap() override {
    auto out = std::move(exited_);
    exited_.clear();
    return out;
  }
  void Exit(int64_t pid, ProcessExit e) {
    alive.erase(pid);
    exited_.push_back(e);
  }

  std::map<int64_t, LaunchSpec> specs;
  std::set<int64_t> alive;
  std::set<int64_t> ignore_term;
  std::vector<std::pair<int64_t, int>> signals;

 private:
  int64_t next_pid_ = 100;
  std::vector<ProcessExit> exited_;
};

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest()
      : sup_({"/work", "10.0.0.1:7070", {{"PATH", "/bin"}, {"RANK", "junk"}}},
             clock_, launcher_) {}

  TaskLaunch Launch(const std::string& job, int64_t gen, int rank) {
    TaskLaunch l;
    l.rank_env.job_id = job;
    l.rank_env.generation = gen;
    l.rank_env.rank = rank;
    l.rank_env.local_rank = rank % 2;
    l.rank_env.node_rank = rank / 2;
    l.rank_env.world_size = 4;
    l.rank_env.local_world_size = 2;
    l.rank_env.master_addr = "10.0.0.2";
    l.rank_env.master_port = 29500;
    l.argv = {"frameworm-train", "--max-steps=5"};
    l.env = {{"OMP_NUM_THREADS", "1"}};
    return l;
  }

  SimulatedClock clock_;
  SimLauncher launcher_;
  Supervisor sup_;
};

TEST_F(SupervisorTest, StartSetsEnvironmentAndLogPaths) {
  TaskLaunch l = Launch("job-1", 2, 3);
  l.rank_env.resume_from = "/ckpt/step-10.pt";
  TaskStatusInfo st = sup_.Start(l);
  ASSERT_EQ(st.state, TaskState::kRunning) << st.message;
  const LaunchSpec& spec = launcher_.specs.at(st.pid);
  EXPECT_EQ(spec.argv, l.argv);
  EXPECT_EQ(spec.stdout_path, "/work/job-1/g2/rank-3.stdout");
  EXPECT_EQ(spec.stderr_path, "/work/job-1/g2/rank-3.stderr");
  const auto& env = spec.env;
  EXPECT_EQ(env.at("PATH"), "/bin");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("NODE_RANK"), "1");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.2");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("FRAMEWORM_JOB_ID"), "job-1");
  EXPECT_EQ(env.at("FRAMEWORM_GENERATION"), "2");
  EXPECT_EQ(env.at("FRAMEWORM_COORDINATOR"), "10.0.0.1:7070");
  EXPECT_EQ(env.at("FRAMEWORM_RESUME_FROM"), "/ckpt/step-10.pt");
  EXPECT_EQ(sup_.running_count(), 1);
}

TEST_F(SupervisorTest, RankVariablesComeFromTheRankEnvOnly) {
  Supervisor sup({"/work", "10.0.0.1:7070",
                  {{"PATH", "/bin"},
                   {"FRAMEWORM_RESUME_FROM", "/stale/ckpt.pt"},
                   {"FRAMEWORM_JOB_ID", "stale"},
                   {"FRAMEWORM_MEMORY_CHECKPOINT_DIR", "/stale/mem"},
                   {"FRAMEWORM_MEMORY_CHECKPOINT_EVERY", "7"},
                   {"FRAMEWORM_CHECKPOINT_DIR", "/stale/ck"},
                   {"FRAMEWORM_TLS_DIR", "/work/trainer-tls"},
                   {"FRAMEWORM_NO_SHM", "1"}}},
                 clock_, launcher_);
  TaskLaunch l = Launch("job-1", 1, 0);
  l.env["MASTER_PORT"] = "1";  // refused by the coordinator; dropped here
  const auto env = sup.EnvFor(l);
  EXPECT_FALSE(env.count("FRAMEWORM_RESUME_FROM")) << "fresh start";
  // A job without memory checkpoints gets none from the worker's shell.
  EXPECT_FALSE(env.count("FRAMEWORM_MEMORY_CHECKPOINT_DIR"));
  EXPECT_FALSE(env.count("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"));
  EXPECT_FALSE(env.count("FRAMEWORM_CHECKPOINT_DIR"));
  EXPECT_EQ(env.at("FRAMEWORM_TLS_DIR"), "/work/trainer-tls");  // the worker's own
  EXPECT_EQ(env.at("FRAMEWORM_JOB_ID"), "job-1");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("FRAMEWORM_NO_SHM"), "1");  // the worker's own setting
  EXPECT_EQ(env.at("FRAMEWORM_COORDINATOR"), "10.0.0.1:7070");
  // The coordinator's address for its trainers wins over the worker's.
  l.rank_env.coordinator = "10.0.0.9:7070";
  const auto full = sup.EnvFor(l);
  EXPECT_EQ(full.at("FRAMEWORM_COORDINATOR"), "10.0.0.9:7070");
  // Exactly what the trainer reads back.
  auto back = ParseRankEnv([&](const std::string& k) -> std::optional<std::string> {
    if (auto it = full.find(k); it != full.end()) return it->second;
    return std::nullopt;
  });
  ASSERT_TRUE(back.ok()) << back.status();
  RankEnv want = l.rank_env;
  want.tls_dir = "/work/trainer-tls";  // the worker's, from its base env
  EXPECT_EQ(*back, want);
}

TEST_F(SupervisorTest, StartIsIdempotentPerKey) {
  TaskStatusInfo a = sup_.Start(Launch("j", 1, 0));
  TaskStatusInfo b = sup_.Start(Launch("j", 1, 0));
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(launcher_.specs.size(), 1u);
}

TEST_F(SupervisorTest, StartFailuresAreReportedNotThrown) {
  TaskLaunch l = Launch("j", 1, 0);
  l.argv = {"missing"};
  TaskStatusInfo st = sup_.Start(l);
  EXPECT_EQ(st.state, TaskState::kStartFailed);
  EXPECT_THAT(st.message, HasSubstr("not found"));
  EXPECT_EQ(sup_.running_count(), 0);

  l = Launch("../etc", 1, 0);
  EXPECT_EQ(sup_.Start(l).state, TaskState::kStartFailed);
  // A NUL would cut the log path short ("holdings\0" names a state file);
  // the message shows it replaced.
  l = Launch(std::string("holdings\0x", 10), 1, 0);
  st = sup_.Start(l);
  EXPECT_EQ(st.state, TaskState::kStartFailed);
  EXPECT_THAT(st.message, HasSubstr("invalid job id 'holdings?x'"));
  EXPECT_EQ(sup_.Start(Launch(std::string(65, 'j'), 1, 0)).state, TaskState::kStartFailed);
  l = Launch("j", 1, 9);  // rank >= world size
  EXPECT_THAT(sup_.Start(l).message, HasSubstr("invalid rank 9"));
  l = Launch("j", 1, 1);
  l.argv.clear();
  EXPECT_EQ(sup_.Start(l).message, "empty argv");
}

TEST_F(SupervisorTest, ExitBecomesFinalStatus) {
  TaskStatusInfo st = sup_.Start(Launch("j", 1, 0));
  EXPECT_TRUE(sup_.Poll().empty());
  launcher_.Exit(st.pid, {st.pid, false, 3, 0});
  auto changes = sup_.Poll();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, TaskState::kExited);
  EXPECT_EQ(changes[0].exit_code, 3);
  EXPECT_EQ(changes[0].message, "exited with code 3");
  EXPECT_EQ(sup_.running_count(), 0);
  EXPECT_TRUE(sup_.Poll().empty());
  // The final status is kept until forgotten; a second Start is refused
  // with it.
  EXPECT_EQ(sup_.Start(Launch("j", 1, 0)).state, TaskState::kExited);
  sup_.Forget({"j", 1, 0});
  EXPECT_FALSE(sup_.Status({"j", 1, 0}).has_value());
}

TEST_F(SupervisorTest, KillSendsTermThenKillAfterGrace) {
  TaskStatusInfo st = sup_.Start(Launch("j", 1, 0));
  launcher_.ignore_term.insert(st.pid);
  EXPECT_EQ(sup_.Kill("j", 1, -1, absl::Seconds(5)), 1);
  ASSERT_EQ(launcher_.signals.size(), 1u);
  EXPECT_EQ(launcher_.signals[0].second, SIGTERM);
  EXPECT_EQ(sup_.NextDeadline(), clock_.Now() + absl::Seconds(5));

  clock_.Advance(absl::Seconds(4));
  EXPECT_TRUE(sup_.Poll().empty());
  EXPECT_EQ(launcher_.signals.size(), 1u);  // still within grace

  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(sup_.Poll().empty());  // SIGKILL sent now, reaped next poll
  ASSERT_EQ(launcher_.signals.size(), 2u);
  EXPECT_EQ(launcher_.signals[1].second, SIGKILL);
  auto changes = sup_.Poll();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, TaskState::kKilled);
  EXPECT_EQ(changes[0].signal, SIGKILL);
  EXPECT_THAT(changes[0].message, HasSubstr("after the grace period"));
  EXPECT_FALSE(sup_.NextDeadline().has_value());
}

TEST_F(SupervisorTest, TermHonouredWithinGraceNeedsNoKill) {
  TaskStatusInfo st = sup_.Start(Launch("j", 1, 0));
  sup_.Kill("j", 1, 0, absl::Seconds(5));
  auto changes = sup_.Poll();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].signal, SIGTERM);
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(sup_.Poll().empty());
  EXPECT_EQ(launcher_.signals.size(), 1u);
  (void)st;
}

TEST_F(SupervisorTest, KillSelectsByJobGenerationAndRank) {
  sup_.Start(Launch("a", 1, 0));
  sup_.Start(Launch("a", 1, 1));
  sup_.Start(Launch("a", 2, 2));
  sup_.Start(Launch("b", 1, 0));
  EXPECT_EQ(sup_.Kill("a", 1, 1, absl::Seconds(1)), 1);  // one rank
  EXPECT_EQ(sup_.Poll().size(), 1u);
  EXPECT_EQ(sup_.Kill("a", 1, -1, absl::Seconds(1)), 1);  // rank 0 left of g1
  EXPECT_EQ(sup_.Poll().size(), 1u);
  EXPECT_EQ(sup_.Kill("a", 0, -1, absl::ZeroDuration()), 1);  // g2 remains
  EXPECT_EQ(sup_.Poll().size(), 1u);
  ASSERT_EQ(sup_.Running().size(), 1u);
  EXPECT_EQ(sup_.Running()[0].key.job_id, "b");
  EXPECT_EQ(sup_.Kill("nope", 0, -1, absl::Seconds(1)), 0);
  EXPECT_EQ(sup_.KillAll(absl::ZeroDuration()), 1);
  EXPECT_EQ(sup_.Poll().size(), 1u);
  EXPECT_EQ(sup_.running_count(), 0);
}

TEST_F(SupervisorTest, ZeroGraceKillsImmediately) {
  TaskStatusInfo st = sup_.Start(Launch("j", 1, 0));
  launcher_.ignore_term.insert(st.pid);
  sup_.Kill("j", 1, -1, absl::ZeroDuration());
  ASSERT_EQ(launcher_.signals.size(), 1u);
  EXPECT_EQ(launcher_.signals[0].second, SIGKILL);
  auto changes = sup_.Poll();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, TaskState::kKilled);
}

TEST_F(SupervisorTest, EachTaskGetsItsOwnGpuSlot) {
  Supervisor sup({"/work", "10.0.0.1:7070", {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}},
                  {"2", "3"}},
                 clock_, launcher_);
  TaskLaunch a = Launch("job-a", 1, 0);
  a.env["CUDA_VISIBLE_DEVICES"] = "0,1";  // a job's env cannot widen its slot
  TaskStatusInfo sa = sup.Start(a);
  TaskStatusInfo sb = sup.Start(Launch("job-b", 1, 0));
  ASSERT_EQ(sa.state, TaskState::kRunning) << sa.message;
  ASSERT_EQ(sb.state, TaskState::kRunning) << sb.message;
  EXPECT_EQ(launcher_.specs.at(sa.pid).env.at("CUDA_VISIBLE_DEVICES"), "2");
  EXPECT_EQ(launcher_.specs.at(sb.pid).env.at("CUDA_VISIBLE_DEVICES"), "3");

  // Every slot held: the third task does not start, and says why.
  TaskStatusInfo sc = sup.Start(Launch("job-c", 1, 0));
  EXPECT_EQ(sc.state, TaskState::kStartFailed);
  EXPECT_THAT(sc.message, HasSubstr("no free GPU"));
  EXPECT_THAT(sc.message, HasSubstr("(2,3)"));

  // Reaped: its slot is free again, and the next task gets it.
  launcher_.Exit(sa.pid, {sa.pid, false, 0, 0});
  ASSERT_EQ(sup.Poll().size(), 1u);
  TaskStatusInfo sd = sup.Start(Launch("job-d", 1, 0));
  ASSERT_EQ(sd.state, TaskState::kRunning) << sd.message;
  EXPECT_EQ(launcher_.specs.at(sd.pid).env.at("CUDA_VISIBLE_DEVICES"), "2");
}

TEST_F(SupervisorTest, WithoutGpuSlotsTheEnvironmentDecides) {
  TaskLaunch l = Launch("job-1", 1, 0);
  l.env["CUDA_VISIBLE_DEVICES"] = "1";
  TaskStatusInfo st = sup_.Start(l);
  ASSERT_EQ(st.state, TaskState::kRunning) << st.message;
  EXPECT_EQ(launcher_.specs.at(st.pid).env.at("CUDA_VISIBLE_DEVICES"), "1");
}

// A start waits for a GPU only while its holder is being killed, and only
// until kGpuReapWait past that holder's SIGKILL: a task the kill does not end
// (stuck in the kernel) stops the wait.
TEST_F(SupervisorTest, AGpuIsAwaitedOnlyWhileItsHolderIsBeingKilled) {
  Supervisor sup({"/work", "10.0.0.1:7070", {}, {"0"}}, clock_, launcher_);
  EXPECT_FALSE(sup.GpuFreedSoon()) << "a GPU is free";
  ASSERT_EQ(sup.Start(Launch("job-1", 1, 0)).state, TaskState::kRunning);
  EXPECT_FALSE(sup.GpuFreedSoon()) << "held, nobody is being killed";
  EXPECT_EQ(sup.Start(Launch("job-2", 1, 0)).state, TaskState::kStartFailed);
  ASSERT_EQ(sup.Kill("job-1", 1, 0, absl::Seconds(5)), 1);
  EXPECT_TRUE(sup.GpuFreedSoon());
  clock_.Advance(absl::Seconds(5) + Supervisor::kGpuReapWait - absl::Seconds(1));
  EXPECT_TRUE(sup.GpuFreedSoon());
  clock_.Advance(absl::Seconds(2));
  EXPECT_FALSE(sup.GpuFreedSoon()) << "its SIGKILL did not end it: waiting stops";
}

TEST_F(SupervisorTest, FenceKillsTasksCutOffLongerThanTheirTimeout) {
  TaskLaunch slow = Launch("job-1", 1, 0);
  slow.fence_after = absl::Seconds(10);
  TaskLaunch quick = Launch("job-2", 1, 0);
  quick.fence_after = absl::Seconds(3);
  TaskLaunch never = Launch("job-3", 1, 0);  // fence_after 0: never fenced
  TaskStatusInfo a = sup_.Start(slow);
  TaskStatusInfo b = sup_.Start(quick);
  TaskStatusInfo c = sup_.Start(never);
  EXPECT_TRUE(sup_.Fence(absl::Seconds(2)).empty());
  std::vector<TaskKey> fenced = sup_.Fence(absl::Seconds(3));
  ASSERT_EQ(fenced.size(), 1u);
  EXPECT_EQ(fenced[0].job_id, "job-2");
  EXPECT_FALSE(launcher_.alive.count(b.pid));
  EXPECT_TRUE(sup_.Fence(absl::Seconds(5)).empty());  // each task once
  fenced = sup_.Fence(absl::Hours(100));
  ASSERT_EQ(fenced.size(), 1u);
  EXPECT_EQ(fenced[0].job_id, "job-1");
  EXPECT_FALSE(launcher_.alive.count(a.pid));
  EXPECT_TRUE(launcher_.alive.count(c.pid));
  std::vector<TaskStatusInfo> changes = sup_.Poll();
  ASSERT_EQ(changes.size(), 2u);
  for (const auto& ch : changes) {
    EXPECT_EQ(ch.state, TaskState::kKilled);
    EXPECT_TRUE(ch.fenced) << ch.message;  // the coordinator tells its own silence by it
    EXPECT_NE(ch.message.find("fenced"), std::string::npos) << ch.message;
  }
  // A task killed otherwise is not fenced.
  sup_.Kill("job-3", 1, 0, absl::ZeroDuration());
  changes = sup_.Poll();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].fenced);
}

}  // namespace
}  // namespace frameworm
