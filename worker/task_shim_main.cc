// frameworm-task-shim: the parent of every task a worker starts, so that no
// process of a task outlives the task, nor the worker.
//
//   frameworm-task-shim <liveness-fd> <status-fd> <program-path> <argv0> [args...]
//
// The worker starts the shim as the leader of a new process group, with the
// read end of a pipe whose write end only the worker holds (<liveness-fd>).
// <status-fd> is the write end of a close-on-exec pipe the worker reads until
// EOF: when <program> cannot be executed, the shim's child writes two ints
// there ({1, errno}) before exiting 127, so the worker reports the exec
// failure from Start() instead of as an exit code.
// The shim becomes a child subreaper, runs <program> (same environment) in
// its group (as argv0, args...), and then:
//   * when <program> ends, kills every process left in the group or
//     reparented to the shim (SIGKILL), and exits as <program> did (same
//     exit code, or the same signal);
//   * when the pipe reports EOF (the worker died, however), kills the task's
//     whole tree the same way and exits with 137;
//   * on SIGUSR2, sent to the shim alone (the worker's forced kill: a
//     SIGKILL to the group would kill the shim first, and with it what
//     finds descendants that left the group), kills the task's whole tree
//     the same way and then dies by SIGKILL itself, as the task did. The
//     launcher starts the shim with SIGUSR2 blocked, so one sent before the
//     shim is ready waits for it.
// Signals the worker sends to the group (SIGTERM, SIGINT, SIGHUP) reach the
// task directly; the shim itself ignores them (no-op handlers, reset by
// exec), so only the task decides how to stop.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void Ignore(int) {}

// Pids (not ours) whose process group is ours or whose parent is us.
std::vector<pid_t> TreeMembers() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == self) continue;
    std::string path = std::string("/proc/") + e->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char buf[1024] = {0};
    size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
    char* close = std::strrchr(buf, ')');
    if (close == nullptr) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(close + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == self || ppid == self) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

void ReapAll() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// SIGKILLs the whole tree until nothing is left (bounded: 5 s).
void KillTree() {
  for (int round = 0; round < 250; ++round) {
    std::vector<pid_t> left = TreeMembers();
    ReapAll();
    if (left.empty()) return;
    for (pid_t p : left) kill(p, SIGKILL);
    usleep(20000);
  }
}

}  // namespace

namespace {

bool ParseFd(const char* text, int* fd) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 0 || v > 1 << 20) return false;
  *fd = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: frameworm-task-shim <liveness-fd> <status-fd> "
                 "<program-path> <argv0> [args...]\n");
    return 2;
  }
  int live_fd = -1, status_fd = -1;
  if (!ParseFd(argv[1], &live_fd) || !ParseFd(argv[2], &status_fd)) {
    std::fprintf(stderr, "frameworm-task-shim: bad fd arguments '%s' '%s'\n",
                 argv[1], argv[2]);
    return 2;
  }
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct sigaction sa {};
  sa.sa_handler = Ignore;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaction(s, &sa, nullptr);
  // SIGCHLD arrives through a signalfd, so the task's end is seen at once;
  // SIGUSR2 (a forced kill) too.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigaddset(&chld, SIGUSR2);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sig_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  fcntl(status_fd, F_SETFD, FD_CLOEXEC);

  const pid_t task = fork();
  if (task < 0) {
    std::fprintf(stderr, "frameworm-task-shim: fork: %s\n", std::strerror(errno));
    return 127;
  }
  if (task == 0) {
    close(live_fd);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[3], argv + 4);
    const int report[2] = {1, errno};
    ssize_t ignored = write(status_fd, report, sizeof(report));
    (void)ignored;
    _exit(127);
  }
  close(status_fd);

  int status = 0;
  bool task_done = false;
  bool worker_gone = false;
  bool forced = false;
  while (!task_done && !worker_gone && !forced) {
    pollfd p[2] = {{live_fd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
    int r = poll(p, sig_fd >= 0 ? 2 : 1, 200);
    if (r > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) worker_gone = true;
    if (sig_fd >= 0 && (p[1].revents & POLLIN)) {
      signalfd_siginfo info;
      while (read(sig_fd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGUSR2) forced = true;
      }
    }
    for (;;) {
      int st = 0;
      pid_t w = waitpid(-1, &st, WNOHANG);
      if (w <= 0) break;
      if (w == task) {
        status = st;
        task_done = true;
      }
    }
  }
  KillTree();
  if (worker_gone && !task_done) return 137;
  if (forced && !task_done) {
    kill(getpid(), SIGKILL);  // the task was killed so: end as it did
    return 128 + SIGKILL;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
    return 128 + sig;
  }
  return WEXITSTATUS(status);
}
