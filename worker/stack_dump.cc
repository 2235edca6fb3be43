#include "worker/stack_dump.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "worker/task_usage.h"

extern char** environ;

namespace frameworm {
namespace {

constexpr size_t kMaxPerProcess = 256 << 10;
constexpr int kMaxProcesses = 16;

std::string Cmdline(int64_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str().substr(0, 300);
  std::replace(s.begin(), s.end(), '\0', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

std::string RunBounded(const std::vector<std::string>& argv, absl::Duration timeout,
                       size_t max_bytes, bool* timed_out) {
  *timed_out = false;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "cannot make a pipe";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc));
  }
  std::string out;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[8192];
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      *timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // the deadline check above ends it
    const ssize_t k = ::read(fds[0], buf, sizeof(buf));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;  // EOF: it exited
    if (out.size() < max_bytes) out.append(buf, std::min(static_cast<size_t>(k), max_bytes - out.size()));
  }
  ::close(fds[0]);
  if (*timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return out;
}

std::string DumpStacks(const TaskKey& key, int64_t root_pid, const std::string& why,
                       absl::Duration timeout) {
  std::string out = absl::StrCat("=== frameworm: stacks of job ", key.job_id, " generation ",
                                 key.generation, " rank ", key.rank, " (", why, ") at ",
                                 absl::FormatTime(absl::Now(), absl::UTCTimeZone()), " ===\n");
  const absl::Time deadline = absl::Now() + timeout;
  int shown = 0;
  for (int64_t pid : ProcessTree(root_pid)) {
    const std::string cmd = Cmdline(pid);
    if (cmd.find("frameworm-task-shim") != std::string::npos) continue;  // the supervisor's own
    if (++shown > kMaxProcesses) {
      absl::StrAppend(&out, "--- more processes left out (at most ", kMaxProcesses, ") ---\n");
      break;
    }
    absl::StrAppend(&out, "--- pid ", pid, ": ", cmd, " ---\n");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      absl::StrAppend(&out, "(no time left: the block may take ", absl::FormatDuration(timeout), ")\n");
      break;
    }
    bool timed_out = false;
    std::string stacks = RunBounded({"eu-stack", "-p", std::to_string(pid)}, left,
                                    kMaxPerProcess, &timed_out);
    if (stacks.rfind("cannot run eu-stack", 0) == 0) {
      absl::StrAppend(&out, stacks,
                      " (install elfutils, Debian's package with eu-stack, on this node)\n");
      break;
    }
    absl::StrAppend(&out, stacks);
    if (!stacks.empty() && stacks.back() != '\n') out += '\n';
    if (timed_out) absl::StrAppend(&out, "(eu-stack did not finish within ", absl::FormatDuration(left), ")\n");
  }
  if (shown == 0) out += "(no process of the task is left)\n";
  out += "=== frameworm: end of stacks ===\n";
  return out;
}

}  // namespace frameworm
