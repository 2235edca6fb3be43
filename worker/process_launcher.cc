#include "worker/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace frameworm {
namespace {

std::string ErrnoText(int e) { return std::strerror(e); }

class PosixProcessLauncher final : public ProcessLauncher {
 public:
  explicit PosixProcessLauncher(const PosixLauncherOptions& o)
      : bin_dir_(o.bin_dir.empty() ? SelfBinDir() : o.bin_dir),
        shim_path_(o.shim_path.empty() ? SelfBinDir() + "/frameworm-task-shim"
                                       : o.shim_path) {
    if (::pipe2(liveness_, O_CLOEXEC) != 0) liveness_[0] = liveness_[1] = -1;
  }

  ~PosixProcessLauncher() override {
    // Never leave a child behind: a launcher that goes away has each shim
    // kill its task's whole tree, then kills the groups of shims that have
    // not ended within kShimKillWait.
    for (int64_t pid : live_) ::kill(static_cast<pid_t>(pid), SIGUSR2);
    const absl::Time give_up = absl::Now() + kShimKillWait;
    for (int64_t pid : live_) {
      while (::waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG) == 0) {
        if (absl::Now() >= give_up) {
          ::kill(-static_cast<pid_t>(pid), SIGKILL);
          ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
          break;
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    for (int fd : liveness_) {
      if (fd >= 0) ::close(fd);
    }
  }

  absl::StatusOr<int64_t> Start(const LaunchSpec& spec) override {
    if (spec.argv.empty() || spec.argv[0].empty()) {
      return absl::InvalidArgumentError("empty argv");
    }
    auto path = Resolve(spec);
    if (!path.ok()) return path.status();
    if (::access(shim_path_.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(
          "frameworm-task-shim not found at ", shim_path_,
          " (it is installed next to frameworm-worker)"));
    }
    if (liveness_[0] < 0) return absl::InternalError("no liveness pipe (pipe2 failed)");

    std::error_code ec;
    for (const std::string& p : {spec.stdout_path, spec.stderr_path}) {
      std::filesystem::create_directories(
          std::filesystem::path(p).parent_path(), ec);
    }
    int out = ::open(spec.stdout_path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out < 0) {
      return absl::InternalError(absl::StrCat(
          "cannot open ", spec.stdout_path, ": ", ErrnoText(errno)));
    }
    int err = ::open(spec.stderr_path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (err < 0) {
      int e = errno;
      ::close(out);
      return absl::InternalError(
          absl::StrCat("cannot open ", spec.stderr_path, ": ", ErrnoText(e)));
    }
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) {
      int e = errno;
      ::close(out);
      ::close(err);
      if (devnull >= 0) ::close(devnull);
      return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(e)));
    }

    // Everything the child touches is prepared before fork (only
    // async-signal-safe calls after it).
    // The shim runs the task:
    //   shim <liveness-fd> <status-fd> <path> <argv0> [args...].
    const std::string fd_text = std::to_string(liveness_[0]);
    const std::string status_text = std::to_string(pipefd[1]);
    std::vector<char*> argv = {const_cast<char*>(shim_path_.c_str()),
                               const_cast<char*>(fd_text.c_str()),
                               const_cast<char*>(status_text.c_str()),
                               const_cast<char*>(path->c_str())};
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    pid_t pid = ::fork();
    if (pid < 0) {
      int e = errno;
      ::close(out);
      ::close(err);
      ::close(pipefd[0]);
      ::close(pipefd[1]);
      if (devnull >= 0) ::close(devnull);
      return absl::InternalError(absl::StrCat("fork: ", ErrnoText(e)));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      // The shim watches the pipe's read end (EOF: the worker is gone).
      ::fcntl(liveness_[0], F_SETFD, 0);
      ::fcntl(pipefd[1], F_SETFD, 0);  // the shim reports the task's exec
      // Restore default dispositions and a mask of SIGUSR2 only (the worker
      // blocks SIGTERM/SIGCHLD for its signal thread; a forced kill sent
      // before the shim reads SIGUSR2 from its signalfd waits for it).
      sigset_t usr2;
      sigemptyset(&usr2);
      sigaddset(&usr2, SIGUSR2);
      ::sigprocmask(SIG_SETMASK, &usr2, nullptr);
      for (int s : {SIGTERM, SIGINT, SIGCHLD, SIGPIPE, SIGHUP}) {
        ::signal(s, SIG_DFL);
      }
      if (devnull >= 0) ::dup2(devnull, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execve(shim_path_.c_str(), argv.data(), envp.data());
      const int report[2] = {0, errno};  // {0: the shim, errno}
      ssize_t ignored = ::write(pipefd[1], report, sizeof(report));
      (void)ignored;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent: no race with Signal()
    ::close(pipefd[1]);
    ::close(out);
    ::close(err);
    if (devnull >= 0) ::close(devnull);
    // EOF once the task's exec succeeded (close-on-exec); {which, errno}
    // when the shim (0) or the task (1) could not be executed.
    int report[2] = {0, 0};
    ssize_t n;
    do {
      n = ::read(pipefd[0], report, sizeof(report));
    } while (n < 0 && errno == EINTR);
    ::close(pipefd[0]);
    if (n == sizeof(report)) {
      ::waitpid(pid, nullptr, 0);
      return absl::InternalError(absl::StrCat(
          "exec ", report[0] == 0 ? shim_path_ : *path, ": ",
          ErrnoText(report[1])));
    }
    live_.insert(pid);
    return static_cast<int64_t>(pid);
  }

  absl::Status Signal(int64_t pid, int sig) override {
    if (!live_.count(pid)) {
      return absl::NotFoundError(absl::StrCat("no live process ", pid));
    }
    // A forced kill goes to the shim, which kills the whole tree (a SIGKILL
    // to the group would kill the shim first and leave the descendants that
    // left the group); the group's SIGKILL only when asked again, or by
    // Reap once the shim has not ended within kShimKillWait.
    if (sig == SIGKILL && kill_asked_.emplace(pid, absl::Now()).second &&
        ::kill(static_cast<pid_t>(pid), SIGUSR2) == 0) {
      return absl::OkStatus();
    }
    if (::kill(-static_cast<pid_t>(pid), sig) != 0) {
      // The group may be gone while the leader is still a zombie.
      if (::kill(static_cast<pid_t>(pid), sig) != 0) {
        return absl::NotFoundError(absl::StrCat("kill ", pid, ": ",
                                                ErrnoText(errno)));
      }
    }
    return absl::OkStatus();
  }

  std::vector<ProcessExit> Reap() override {
    std::vector<ProcessExit> out;
    const absl::Time now = absl::Now();
    for (const auto& [pid, asked] : kill_asked_) {
      if (now - asked >= kShimKillWait) ::kill(-static_cast<pid_t>(pid), SIGKILL);
    }
    for (auto it = live_.begin(); it != live_.end();) {
      pid_t pid = static_cast<pid_t>(*it);
      siginfo_t info{};
      // Look without reaping: while the leader is a zombie its pid (= the
      // group id) cannot be reused, so killing the group is safe.
      if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
          info.si_pid == 0) {
        ++it;
        continue;
      }
      ::kill(-pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      ProcessExit e;
      e.pid = pid;
      if (WIFSIGNALED(status)) {
        e.signaled = true;
        e.signal = WTERMSIG(status);
      } else {
        e.exit_code = WEXITSTATUS(status);
      }
      out.push_back(e);
      kill_asked_.erase(*it);
      it = live_.erase(it);
    }
    return out;
  }

 private:
  absl::StatusOr<std::string> Resolve(const LaunchSpec& spec) const {
    const std::string& prog = spec.argv[0];
    auto executable = [](const std::string& p) {
      struct stat st;
      return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
             ::access(p.c_str(), X_OK) == 0;
    };
    if (prog == "frameworm-train") {
      std::string p = bin_dir_ + "/frameworm-train";
      if (!executable(p)) {
        return absl::NotFoundError(
            absl::StrCat("frameworm-train not found at ", p));
      }
      return p;
    }
    if (prog.find('/') != std::string::npos) {
      if (!executable(prog)) {
        return absl::NotFoundError(
            absl::StrCat("program '", prog, "' does not exist or is not executable"));
      }
      return prog;
    }
    auto it = spec.env.find("PATH");
    std::string path_var =
        it != spec.env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
    for (absl::string_view dir : absl::StrSplit(path_var, ':')) {
      if (dir.empty()) continue;
      std::string p = absl::StrCat(dir, "/", prog);
      if (executable(p)) return p;
    }
    return absl::NotFoundError(
        absl::StrCat("program '", prog, "' not found on PATH (", path_var, ")"));
  }

  const std::string bin_dir_;
  const std::string shim_path_;
  int liveness_[2] = {-1, -1};  // [0] to every shim; [1] only here
  std::set<int64_t> live_;
  std::map<int64_t, absl::Time> kill_asked_;  // shims sent a forced kill, and when
  // How long a shim has to kill its tree (its KillTree gives up after 5 s).
  static constexpr absl::Duration kShimKillWait = absl::Seconds(10);
};

}  // namespace

std::string SelfBinDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return p.parent_path().string();
}

std::unique_ptr<ProcessLauncher> NewPosixProcessLauncher(
    const PosixLauncherOptions& options) {
  return std::make_unique<PosixProcessLauncher>(options);
}

}  // namespace frameworm
