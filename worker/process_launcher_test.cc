// The real fork/exec launcher with real processes.
#include "worker/process_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/supervisor.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string t = ::testing::TempDir() + "/launcher_test_" +
                  std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(t);
  std::filesystem::create_directories(t);
  return t;
}

std::string Slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Polls the supervisor until `n` status changes arrived (bounded).
std::vector<TaskStatusInfo> WaitChanges(Supervisor& sup, size_t n,
                                        absl::Duration limit = absl::Seconds(20)) {
  std::vector<TaskStatusInfo> all;
  absl::Time end = absl::Now() + limit;
  while (all.size() < n && absl::Now() < end) {
    for (auto& c : sup.Poll()) all.push_back(c);
    if (all.size() < n) absl::SleepFor(absl::Milliseconds(10));
  }
  return all;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    launcher_ = NewPosixProcessLauncher({dir_ + "/bin"});
    sup_ = std::make_unique<Supervisor>(
        Supervisor::Options{dir_ + "/work", "127.0.0.1:1",
                            {{"PATH", "/usr/bin:/bin"}}},
        RealClock::Real(), *launcher_);
  }
  TaskLaunch Shell(const std::string& script, int rank = 0) {
    TaskLaunch l;
    l.rank_env.job_id = "job-x";
    l.rank_env.generation = 1;
    l.rank_env.rank = rank;
    l.rank_env.world_size = 4;
    l.argv = {"/bin/sh", "-c", script};
    return l;
  }
  std::string dir_;
  std::unique_ptr<ProcessLauncher> launcher_;
  std::unique_ptr<Supervisor> sup_;
};

TEST_F(LauncherTest, ExitCodeAndLogsAndEnvironment) {
  TaskStatusInfo st = sup_->Start(
      Shell("echo out-$RANK-$FRAMEWORM_JOB_ID; echo err >&2; exit 3", 2));
  ASSERT_EQ(st.state, TaskState::kRunning) << st.message;
  auto changes = WaitChanges(*sup_, 1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, TaskState::kExited);
  EXPECT_EQ(changes[0].exit_code, 3);
  EXPECT_EQ(Slurp(dir_ + "/work/job-x/g1/rank-2.stdout"), "out-2-job-x\n");
  EXPECT_EQ(Slurp(dir_ + "/work/job-x/g1/rank-2.stderr"), "err\n");
}

TEST_F(LauncherTest, PathLookupAndMissingProgram) {
  TaskLaunch l = Shell("");
  l.argv = {"true"};
  ASSERT_EQ(sup_->Start(l).state, TaskState::kRunning);
  auto changes = WaitChanges(*sup_, 1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].exit_code, 0);

  l.rank_env.rank = 1;
  l.argv = {"no-such-program-xyz"};
  TaskStatusInfo st = sup_->Start(l);
  EXPECT_EQ(st.state, TaskState::kStartFailed);
  EXPECT_THAT(st.message, HasSubstr("'no-such-program-xyz' not found on PATH"));

  l.rank_env.rank = 2;
  l.argv = {"frameworm-train"};  // not in this test's bin dir
  st = sup_->Start(l);
  EXPECT_EQ(st.state, TaskState::kStartFailed);
  EXPECT_THAT(st.message, HasSubstr("frameworm-train not found at " + dir_ + "/bin"));
}

TEST_F(LauncherTest, FramewormTrainResolvesToBinDir) {
  std::filesystem::create_directories(dir_ + "/bin");
  std::string fake = dir_ + "/bin/frameworm-train";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho fake-trainer \"$@\"\nexit 0\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  TaskLaunch l = Shell("");
  l.argv = {"frameworm-train", "--epochs=1"};
  ASSERT_EQ(sup_->Start(l).state, TaskState::kRunning);
  auto changes = WaitChanges(*sup_, 1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].exit_code, 0);
  EXPECT_EQ(Slurp(dir_ + "/work/job-x/g1/rank-0.stdout"),
            "fake-trainer --epochs=1\n");
}

TEST_F(LauncherTest, TermThenKillAfterGraceAndNoPidSurvives) {
  // Rank 0 ignores SIGTERM and has a child that does too; rank 1 obeys.
  std::string pidfile = dir_ + "/child.pid";
  TaskStatusInfo stubborn = sup_->Start(Shell(
      "trap '' TERM; (trap '' TERM; echo $$ > /dev/null; sleep 60) & echo $! > " +
          pidfile + "; echo ready; wait",
      0));
  TaskStatusInfo polite = sup_->Start(Shell("exec sleep 60", 1));
  ASSERT_EQ(stubborn.state, TaskState::kRunning);
  ASSERT_EQ(polite.state, TaskState::kRunning);
  // Wait until the grandchild exists.
  absl::Time end = absl::Now() + absl::Seconds(10);
  while (Slurp(pidfile).empty() && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_t grandchild = std::stoi(Slurp(pidfile));
  ASSERT_TRUE(Alive(grandchild));

  EXPECT_EQ(sup_->Kill("job-x", 1, -1, absl::Milliseconds(300)), 2);
  auto changes = WaitChanges(*sup_, 2);
  ASSERT_EQ(changes.size(), 2u);
  std::map<int, TaskStatusInfo> by_rank;
  for (auto& c : changes) by_rank[c.key.rank] = c;
  EXPECT_EQ(by_rank[1].state, TaskState::kKilled);
  EXPECT_EQ(by_rank[1].signal, SIGTERM);
  EXPECT_EQ(by_rank[0].state, TaskState::kKilled);
  EXPECT_EQ(by_rank[0].signal, SIGKILL);
  EXPECT_THAT(by_rank[0].message, HasSubstr("after the grace period"));
  EXPECT_FALSE(Alive(stubborn.pid));
  EXPECT_FALSE(Alive(polite.pid));
  // The grandchild was in the group: killed too (it may linger briefly as a
  // zombie of init, so wait for it to vanish).
  end = absl::Now() + absl::Seconds(5);
  while (Alive(grandchild) && absl::Now() < end) {
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string s;
    std::getline(stat, s);
    if (s.find(") Z ") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
  std::string s;
  std::getline(stat, s);
  EXPECT_TRUE(s.empty() || s.find(") Z ") != std::string::npos) << s;
}

// True once `pid` is gone or a zombie (bounded by `limit`).
bool GoneWithin(pid_t pid, absl::Duration limit) {
  absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(stat, s);
    if (s.empty() || s.find(") Z ") != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// Waits (bounded) until `path` holds a pid.
pid_t ReadPidFile(const std::string& path) {
  absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    std::string s = Slurp(path);
    if (!s.empty() && s.back() == '\n') return std::stoi(s);
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

TEST_F(LauncherTest, ExitingLeaderTakesItsGroupAlong) {
  std::string pidfile = dir_ + "/bg.pid";
  sup_->Start(Shell("sleep 60 & echo $! > " + pidfile + "; exit 0"));
  auto changes = WaitChanges(*sup_, 1);
  ASSERT_EQ(changes.size(), 1u);
  pid_t bg = std::stoi(Slurp(pidfile));
  EXPECT_TRUE(GoneWithin(bg, absl::Seconds(5)))
      << "background child " << bg << " survived its task";
}

TEST_F(LauncherTest, FailedTaskCarriesItsLastStderrLine) {
  sup_->Start(Shell("echo first >&2; printf 'boom: at 10.0.0.7\\033x\\n\\n' >&2; exit 3"));
  sup_->Start(Shell("echo fine >&2; exit 0", 1));
  auto changes = WaitChanges(*sup_, 2);
  ASSERT_EQ(changes.size(), 2u);
  for (const auto& c : changes) {
    if (c.key.rank == 0) {
      EXPECT_EQ(c.exit_code, 3);
      EXPECT_EQ(c.stderr_tail, "boom: at 10.0.0.7?x");
    } else {
      EXPECT_EQ(c.stderr_tail, "");  // succeeded: nothing to explain
    }
  }
}

TEST_F(LauncherTest, DescendantThatLeftTheGroupDiesWithItsTask) {
  std::string pidfile = dir_ + "/bg.pid";
  sup_->Start(Shell("setsid sleep 60 & echo $! > " + pidfile + "; exit 3"));
  auto changes = WaitChanges(*sup_, 1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].exit_code, 3);
  pid_t bg = ReadPidFile(pidfile);
  ASSERT_GT(bg, 0);
  EXPECT_TRUE(GoneWithin(bg, absl::Seconds(5)))
      << "setsid descendant " << bg << " survived its task";
}

// A forced kill (a task that ignores SIGTERM past its grace, KillTask with
// no grace, a fence) takes the descendants that left the task's group too,
// and the task is still reported killed by SIGKILL.
TEST_F(LauncherTest, AForcedKillTakesDescendantsThatLeftTheGroup) {
  std::string pidfile = dir_ + "/bg.pid";
  TaskStatusInfo st = sup_->Start(
      Shell("trap '' TERM; setsid sleep 60 & echo $! > " + pidfile + "; sleep 60; wait"));
  ASSERT_EQ(st.state, TaskState::kRunning);
  pid_t bg = ReadPidFile(pidfile);
  ASSERT_GT(bg, 0);
  EXPECT_EQ(sup_->Kill("job-x", 1, 0, absl::ZeroDuration()), 1);
  auto changes = WaitChanges(*sup_, 1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, TaskState::kKilled);
  EXPECT_EQ(changes[0].signal, SIGKILL);
  EXPECT_TRUE(GoneWithin(bg, absl::Seconds(5)))
      << "setsid descendant " << bg << " survived a forced kill of its task";
}

// The same when the launcher goes away (the worker shutting down).
TEST_F(LauncherTest, DestroyingTheLauncherTakesDescendantsThatLeftTheGroup) {
  std::string pidfile = dir_ + "/bg.pid";
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", "setsid sleep 60 & echo $! > " + pidfile + "; sleep 60"};
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.stdout_path = dir_ + "/o";
  spec.stderr_path = dir_ + "/e";
  auto launcher = NewPosixProcessLauncher({dir_ + "/bin"});
  auto pid = launcher->Start(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  pid_t bg = ReadPidFile(pidfile);
  ASSERT_GT(bg, 0);
  launcher.reset();
  EXPECT_FALSE(Alive(static_cast<pid_t>(*pid)));
  EXPECT_TRUE(GoneWithin(bg, absl::Seconds(5)))
      << "setsid descendant " << bg << " survived its launcher";
}

TEST_F(LauncherTest, TaskTreeDiesWhenTheWorkerIsKilled) {
  // A stand-in worker: a process that owns a launcher and one task, then is
  // SIGKILLed (no destructor runs).
  std::string pidfile = dir_ + "/bg.pid";
  pid_t worker = ::fork();
  ASSERT_GE(worker, 0);
  if (worker == 0) {
    auto launcher = NewPosixProcessLauncher({dir_ + "/bin"});
    LaunchSpec spec;
    spec.argv = {"/bin/sh", "-c",
                 "setsid sleep 60 & echo $! > " + pidfile + "; sleep 60"};
    spec.env = {{"PATH", "/usr/bin:/bin"}};
    spec.stdout_path = dir_ + "/o";
    spec.stderr_path = dir_ + "/e";
    if (!launcher->Start(spec).ok()) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  pid_t bg = ReadPidFile(pidfile);
  ::kill(worker, SIGKILL);
  ::waitpid(worker, nullptr, 0);
  ASSERT_GT(bg, 0);
  EXPECT_TRUE(GoneWithin(bg, absl::Seconds(5)))
      << "task descendant " << bg << " survived its killed worker";
}

TEST_F(LauncherTest, LogsArePrivateToTheWorkersUser) {
  LaunchSpec spec;
  spec.argv = {"/bin/true"};
  spec.stdout_path = dir_ + "/logs/o";
  spec.stderr_path = dir_ + "/logs/e";
  ASSERT_TRUE(launcher_->Start(spec).ok());
  for (const auto& p : {spec.stdout_path, spec.stderr_path}) {
    auto perms = std::filesystem::status(p).permissions();
    EXPECT_EQ(perms & (std::filesystem::perms::group_all |
                       std::filesystem::perms::others_all),
              std::filesystem::perms::none)
        << p;
  }
}

TEST_F(LauncherTest, MissingShimIsNotFound) {
  PosixLauncherOptions o{dir_ + "/bin"};
  o.shim_path = dir_ + "/no-such-shim";
  auto launcher = NewPosixProcessLauncher(o);
  LaunchSpec spec;
  spec.argv = {"/bin/true"};
  spec.stdout_path = dir_ + "/o";
  spec.stderr_path = dir_ + "/e";
  auto pid = launcher->Start(spec);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pid.status().message(), HasSubstr("no-such-shim"));
}

TEST_F(LauncherTest, UnwritableLogDirIsStartFailure) {
  auto launcher = NewPosixProcessLauncher({dir_});
  LaunchSpec spec;
  spec.argv = {"/bin/true"};
  spec.stdout_path = "/proc/nonexistent/x.stdout";
  spec.stderr_path = "/proc/nonexistent/x.stderr";
  auto pid = launcher->Start(spec);
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(pid.status().message(), HasSubstr("cannot open /proc/nonexistent"));
}

TEST_F(LauncherTest, ExecFailureIsReported) {
  std::string notexec = dir_ + "/notexec";
  { std::ofstream f(notexec); f << "\x7f" "ELFgarbage"; }
  std::filesystem::permissions(notexec, std::filesystem::perms::owner_all);
  auto launcher = NewPosixProcessLauncher({dir_});
  LaunchSpec spec;
  spec.argv = {notexec};
  spec.stdout_path = dir_ + "/o";
  spec.stderr_path = dir_ + "/e";
  auto pid = launcher->Start(spec);
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(pid.status().message(), HasSubstr("exec " + notexec));
}

TEST_F(LauncherTest, DestroyingLauncherKillsChildren) {
  auto launcher = NewPosixProcessLauncher({dir_});
  LaunchSpec spec;
  spec.argv = {"/bin/sleep", "60"};
  spec.stdout_path = dir_ + "/o";
  spec.stderr_path = dir_ + "/e";
  auto pid = launcher->Start(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_TRUE(Alive(*pid));
  launcher.reset();
  EXPECT_FALSE(Alive(*pid));
}

}  // namespace
}  // namespace frameworm
