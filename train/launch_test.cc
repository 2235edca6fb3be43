// A training process's rank environment (ReadRankEnv over ParseRankEnv)
// and launch_distributed with real child processes (this binary
// re-executed with a --gtest_filter).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "train/launch.h"

namespace frameworm {
namespace {

EnvLookup MapLookup(const std::map<std::string, std::string>& m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> GoodEnv() {
  return {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
          {"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}};
}

TEST(ReadRankEnvTest, ParsesTorchrunVariables) {
  auto env = ReadRankEnv(MapLookup(GoodEnv()));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);  // torchrun's default: WORLD_SIZE
  EXPECT_TRUE(env->job_id.empty());
}

TEST(ReadRankEnvTest, EachMissingVariableIsNamed) {
  // What ReadDistributedEnv reads (ReadRankEnv would take a missing
  // WORLD_SIZE for a world of one; see below). LOCAL_RANK has a default
  // (common/rank_env.h).
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) {
    auto m = GoodEnv();
    m.erase(name);
    auto env = ParseRankEnv(MapLookup(m));
    ASSERT_FALSE(env.ok()) << name;
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(env.status().message().find(name), std::string::npos) << env.status();
    EXPECT_NE(env.status().message().find("not set"), std::string::npos) << env.status();
  }
}

TEST(ReadRankEnvTest, EachMalformedVariableIsNamed) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"MASTER_ADDR", ""},       {"MASTER_PORT", "http"}, {"MASTER_PORT", "70000"},
      {"MASTER_PORT", "0"},      {"RANK", "one"},         {"RANK", "-1"},
      {"RANK", "4"},             {"WORLD_SIZE", "0"},     {"WORLD_SIZE", "2x"},
      {"LOCAL_RANK", "-3"},      {"LOCAL_RANK", ""},
      {"LOCAL_WORLD_SIZE", "0"}, {"FRAMEWORM_GENERATION", "g1"}};
  for (const auto& [name, value] : bad) {
    auto m = GoodEnv();
    m[name] = value;
    auto env = ReadRankEnv(MapLookup(m));
    ASSERT_FALSE(env.ok()) << name << "=" << value;
    EXPECT_NE(env.status().message().find(name), std::string::npos)
        << name << "=" << value << ": " << env.status();
  }
}

TEST(ReadRankEnvTest, WithoutWorldSizeTheProcessIsAWorldOfOne) {
  const std::map<std::string, std::string> cluster = {
      {"FRAMEWORM_COORDINATOR", "10.0.0.9:7070"},
      {"FRAMEWORM_JOB_ID", "job-7"},
      {"FRAMEWORM_GENERATION", "3"},
      {"FRAMEWORM_RESUME_FROM", "/ckpt/ckpt-10.pt"},
      {"RANK", "5"}};  // ignored without WORLD_SIZE
  EXPECT_FALSE(IsDistributedRun(MapLookup(cluster)));
  auto env = ReadRankEnv(MapLookup(cluster));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_EQ(env->master_addr, "");
  EXPECT_EQ(env->master_port, 0);
  EXPECT_EQ(env->coordinator, "10.0.0.9:7070");
  EXPECT_EQ(env->job_id, "job-7");
  EXPECT_EQ(env->generation, 3);
  EXPECT_EQ(env->resume_from, "/ckpt/ckpt-10.pt");

  auto bad = ReadRankEnv(MapLookup({{"FRAMEWORM_GENERATION", "two"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("FRAMEWORM_GENERATION"), std::string::npos)
      << bad.status();
  EXPECT_TRUE(IsDistributedRun(MapLookup(GoodEnv())));
}

std::vector<std::string> SelfArgs() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return {"/proc/self/exe",
          std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name()};
}

TEST(LaunchTest, AllRanksSucceedWithTheirEnvironment) {
  LaunchOptions o;
  o.nprocs = 3;
  o.argv = SelfArgs();
  absl::Status s = launch_distributed(
      [](int rank, int world) -> int {
        auto env = ReadDistributedEnv();
        if (!env.ok()) return 20;
        if (env->rank != rank || env->world_size != 3 || world != 3) return 21;
        if (env->local_rank != rank || env->master_addr != "127.0.0.1") return 22;
        if (env->local_world_size != 3 || env->node_rank != 0) return 23;
        return 0;
      },
      o);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(LaunchTest, FailingRankIsReportedAndNoChildSurvives) {
  std::vector<pid_t> pids;
  LaunchOptions o;
  o.nprocs = 3;
  o.argv = SelfArgs();
  o.child_pids = &pids;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = launch_distributed(
      [](int rank, int) -> int {
        if (rank == 1) return 3;
        std::this_thread::sleep_for(std::chrono::seconds(60));  // killed
        return 0;
      },
      o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("exited with code 3"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  ASSERT_EQ(pids.size(), 3u);
  for (pid_t p : pids) {
    errno = 0;
    EXPECT_EQ(::kill(p, 0), -1) << "pid " << p << " survived";
    EXPECT_EQ(errno, ESRCH) << "pid " << p;
  }
}

// The parent must not take CPU from the ranks while they train: on a
// 2-core machine each wakeup preempts one. Checking every 5 ms woke it
// about 200 times in this test's second.
TEST(LaunchTest, ParentSleepsWhileTheRanksRun) {
  LaunchOptions o;
  o.nprocs = 2;
  o.argv = SelfArgs();
  rusage before{}, after{};
  ::getrusage(RUSAGE_THREAD, &before);
  absl::Status s = launch_distributed(
      [](int, int) -> int {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        return 0;
      },
      o);
  ::getrusage(RUSAGE_THREAD, &after);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LT(after.ru_nvcsw - before.ru_nvcsw, 40)
      << "the launching thread woke " << after.ru_nvcsw - before.ru_nvcsw
      << " times while its ranks slept for a second";
}

TEST(LaunchTest, RejectsBadProcessCount) {
  absl::Status s = launch_distributed([](int, int) { return 0; }, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Too many is refused before anything is forked (a child would run this
  // test binary again).
  std::vector<pid_t> pids;
  LaunchOptions o;
  o.nprocs = kMaxLaunchProcesses + 1;
  o.child_pids = &pids;
  s = launch_distributed([](int, int) { return 0; }, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("between 1 and 1024, got 1025"), std::string::npos) << s;
  EXPECT_TRUE(pids.empty());
}

}  // namespace
}  // namespace frameworm
