#include "train/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace frameworm {
namespace {

constexpr char kChildMarker[] = "FRAMEWORM_LAUNCH_CHILD";

std::vector<std::string> SelfCmdline() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)),
                  std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  std::string cur;
  for (char c : all) {
    if (c == '\0') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// A pidfd for each of `pids` (readable once that child has ended), or none
// at all where the kernel has no pidfd_open.
std::vector<int> OpenPidfds(const std::vector<pid_t>& pids) {
  std::vector<int> fds;
  for (pid_t pid : pids) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
      for (int f : fds) ::close(f);
      return {};
    }
    fds.push_back(fd);
  }
  return fds;
}

// Blocks until a child that is not `done` may have ended: poll() on the
// pidfds of those children without a timeout, or 5 ms without pidfds.
void SleepUntilAChildEnds(const std::vector<int>& pidfds, const std::vector<bool>& done) {
  if (pidfds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return;
  }
  std::vector<pollfd> watch;
  for (size_t r = 0; r < pidfds.size(); ++r) {
    if (!done[r]) watch.push_back(pollfd{pidfds[r], POLLIN, 0});
  }
  if (watch.empty()) return;
  ::poll(watch.data(), watch.size(), -1);  // EINTR: the caller checks again
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("ended with status ", status);
}

}  // namespace

absl::StatusOr<RankEnv> ReadDistributedEnv() {
  return ParseRankEnv(ProcessEnvLookup());
}

bool IsDistributedRun(const EnvLookup& lookup) {
  return lookup("WORLD_SIZE").has_value();
}

absl::StatusOr<RankEnv> ReadRankEnv(const EnvLookup& lookup) {
  if (IsDistributedRun(lookup)) return ParseRankEnv(lookup);
  // A world of one: its torchrun variables stand in for the absent ones, so
  // that ParseRankEnv reads and checks the FRAMEWORM_* variables.
  RankEnv one;
  one.master_addr = "127.0.0.1";
  one.master_port = 1;
  const std::map<std::string, std::string> vars = ToEnvironment(one);
  absl::StatusOr<RankEnv> env =
      ParseRankEnv([&](const std::string& name) -> std::optional<std::string> {
        if (auto it = vars.find(name); it != vars.end()) return it->second;
        return lookup(name);
      });
  if (!env.ok()) return env.status();
  env->master_addr.clear();
  env->master_port = 0;
  return env;
}

bool IsLaunchedChild() {
  const char* v = std::getenv(kChildMarker);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

absl::StatusOr<int> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("bind: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return static_cast<int>(ntohs(a.sin_port));
}

absl::Status launch_distributed(const std::function<int(int, int)>& fn,
                                int nprocs) {
  LaunchOptions o;
  o.nprocs = nprocs;
  return launch_distributed(fn, o);
}

absl::Status launch_distributed(const std::function<int(int, int)>& fn,
                                const LaunchOptions& options) {
  if (IsLaunchedChild()) {
    int code = 1;
    auto env = ReadDistributedEnv();
    if (!env.ok()) {
      std::cerr << "launch_distributed child: " << env.status().message()
                << std::endl;
    } else {
      try {
        code = fn(env->rank, env->world_size);
      } catch (const std::exception& e) {
        std::cerr << "rank " << env->rank << ": " << e.what() << std::endl;
        code = 1;
      }
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::cout.flush();
    ::_exit(code);
  }
  if (options.nprocs < 1 || options.nprocs > kMaxLaunchProcesses) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nprocs must be between 1 and ", kMaxLaunchProcesses, ", got ", options.nprocs));
  }
  int port = options.master_port;
  if (port == 0) {
    auto p = PickFreePort();
    if (!p.ok()) return p.status();
    port = *p;
  }
  std::vector<std::string> args =
      options.argv.empty() ? SelfCmdline() : options.argv;
  if (args.empty()) return absl::InternalError("cannot read /proc/self/cmdline");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Everything the children need is prepared before fork(): between fork
  // and exec the child only calls async-signal-safe functions.
  std::vector<std::vector<std::string>> envs(options.nprocs);
  std::vector<std::vector<char*>> envps(options.nprocs);
  for (int r = 0; r < options.nprocs; ++r) {
    RankEnv rank_env;
    rank_env.rank = r;
    rank_env.world_size = options.nprocs;
    rank_env.local_rank = r;
    rank_env.local_world_size = options.nprocs;
    rank_env.master_addr = options.master_addr;
    rank_env.master_port = port;
    std::map<std::string, std::string> vars = ToEnvironment(rank_env);
    vars[kChildMarker] = "1";
    // This process's own environment, less what the children are told.
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      const std::string name(*e, eq == nullptr ? std::strlen(*e) : eq - *e);
      if (!vars.count(name)) envs[r].push_back(*e);
    }
    for (const auto& [name, value] : vars)
      envs[r].push_back(absl::StrCat(name, "=", value));
    for (auto& s : envs[r]) envps[r].push_back(s.data());
    envps[r].push_back(nullptr);
  }
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  std::vector<bool> done(options.nprocs, false);
  auto kill_all = [&] {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!done[r]) ::kill(pids[r], SIGKILL);
    }
    for (size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int st = 0;
      while (::waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
      }
      done[r] = true;
    }
  };
  for (int r = 0; r < options.nprocs; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      kill_all();
      return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(err)));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::execve("/proc/self/exe", argv.data(), envps[r].data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  if (options.child_pids != nullptr) *options.child_pids = pids;
  // The parent sleeps until a child ends: a pidfd per child, polled with no
  // timeout, so it never wakes while training runs (on a small machine every
  // wakeup takes a core from a rank). Where pidfds are unavailable (Linux
  // before 5.3), it checks every 5 ms instead.
  const std::vector<int> pidfds = OpenPidfds(pids);
  const absl::Cleanup close_pidfds = [&pidfds] {
    for (int fd : pidfds) ::close(fd);
  };
  int remaining = options.nprocs;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < options.nprocs; ++r) {
      if (done[r]) continue;
      int st = 0;
      pid_t got = ::waitpid(pids[r], &st, WNOHANG);
      if (got == 0) continue;
      if (got < 0 && errno == EINTR) continue;
      done[r] = true;
      --remaining;
      progressed = true;
      const bool ok = got == pids[r] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok) {
        const std::string what =
            got < 0 ? std::string("could not be waited for")
                    : DescribeExit(st);
        kill_all();
        return absl::InternalError(absl::StrCat(
            "rank ", r, " (pid ", pids[r], ") ", what,
            "; the other ranks were killed"));
      }
    }
    if (remaining > 0 && !progressed) SleepUntilAChildEnds(pidfds, done);
  }
  return absl::OkStatus();
}

}  // namespace frameworm
