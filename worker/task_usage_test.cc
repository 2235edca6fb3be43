// Process-tree usage read from the real /proc (a shell and its children)
// and from a fake /proc with odd process names; the worker's metrics text.
#include "worker/task_usage.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;

TEST(TaskUsage, ATreeOfRealProcessesIsCountedWhole) {
  // sh, which starts two sleeps and a busy loop, all its descendants.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c",
            "sleep 30 & sleep 30 & i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; wait",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  TreeUsage u;
  for (int i = 0; i < 100; ++i) {  // until the busy loop has run a while
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    u = ProcessTreeUsage(pid);
    if (u.processes == 3 && u.cpu_seconds >= 0.1) break;
  }
  EXPECT_EQ(u.processes, 3);
  EXPECT_GE(u.cpu_seconds, 0.1);
  EXPECT_GT(u.rss_bytes, 0);
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(ProcessTreeUsage(pid).processes, 0);
}

TEST(TaskUsage, NamesWithSpacesAndParenthesesAndJunkEntriesAreHandled) {
  const std::string proc = ::testing::TempDir() + "/fake-proc-" + std::to_string(::getpid());
  std::filesystem::remove_all(proc);
  auto add = [&](const std::string& pid, const std::string& stat) {
    std::filesystem::create_directories(proc + "/" + pid);
    std::ofstream(proc + "/" + pid + "/stat") << stat;
  };
  const long ticks = ::sysconf(_SC_CLK_TCK);
  const long page = ::sysconf(_SC_PAGESIZE);
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
  // cmajflt utime stime cutime cstime priority nice threads itrealvalue
  // starttime vsize rss
  auto stat = [&](int pid, const std::string& comm, int ppid, long utime, long rss) {
    return std::to_string(pid) + " (" + comm + ") S " + std::to_string(ppid) +
           " 0 0 0 0 0 0 0 0 0 " + std::to_string(utime) + " " + std::to_string(utime) +
           " 0 0 20 0 1 0 0 0 " + std::to_string(rss) + "\n";
  };
  add("100", stat(100, "shim", 1, ticks, 10));
  add("101", stat(101, "python3 (trainer) x", 100, ticks, 20));
  add("102", stat(102, "worker) (", 101, 0, 30));
  add("200", stat(200, "other", 1, ticks * 5, 1000));
  add("300", "garbage");
  add("self", stat(1, "x", 0, 0, 0));
  TreeUsage u = ProcessTreeUsage(100, proc);
  EXPECT_EQ(u.processes, 3);
  EXPECT_DOUBLE_EQ(u.cpu_seconds, 4.0);  // (1 + 1) s for 100 and for 101
  EXPECT_EQ(u.rss_bytes, 60 * page);
  EXPECT_EQ(ProcessTreeUsage(999, proc).processes, 0);
  std::filesystem::remove_all(proc);
}

TEST(TaskUsage, WorkerMetricsNameEachTask) {
  TaskStatusInfo t;
  t.key = {"job-000001", 2, 1};
  t.pid = 42;
  PromWriter w;
  WriteWorkerMetrics("node1", 2, true, {t}, {{t.key, TreeUsage{1.5, 4096, 3}}}, w);
  const std::string& s = w.text();
  EXPECT_THAT(s, HasSubstr("frameworm_worker_connected{worker=\"node1\"} 1\n"));
  EXPECT_THAT(s, HasSubstr("frameworm_worker_tasks{worker=\"node1\"} 1\n"));
  EXPECT_THAT(s, HasSubstr("frameworm_task_cpu_seconds_total{worker=\"node1\",job_id=\"job-000001\","
                           "generation=\"2\",rank=\"1\"} 1.5\n"));
  EXPECT_THAT(s, HasSubstr("frameworm_task_memory_bytes{worker=\"node1\",job_id=\"job-000001\","
                           "generation=\"2\",rank=\"1\"} 4096\n"));
  PromWriter idle;
  WriteWorkerMetrics("node1", 1, false, {}, {}, idle);
  EXPECT_THAT(idle.text(), HasSubstr("frameworm_worker_tasks{worker=\"node1\"} 0\n"));
  EXPECT_THAT(idle.text(), ::testing::Not(HasSubstr("frameworm_task_")));
}

}  // namespace
}  // namespace frameworm
