#include "worker/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace frameworm {
namespace {

std::string ErrnoText(int e) { return std::strerror(e); }

class PosixProcessLauncher final : public ProcessLauncher {
 public:
  explicit PosixProcessLauncher(const PosixLauncherOptions& o)
      : bin_dir_(o.bin_dir.empty() ? SelfBinDir() : o.bin_dir) {}

  ~PosixProcessLauncher() override {
    // Never leave a child behind: a launcher that goes away kills its groups.
    for (int64_t pid : live_) {
      ::kill(-static_cast<pid_t>(pid), SIGKILL);
      ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
    }
  }

  absl::StatusOr<int64_t> Start(const LaunchSpec& spec) override {
    if (spec.argv.empty() || spec.argv[0].empty()) {
      return absl::InvalidArgumentError("empty argv");
    }
    auto path = Resolve(spec);
    if (!path.ok()) return path.status();

    std::error_code ec;
    for (const std::string& p : {spec.stdout_path, spec.stderr_path}) {
      std::filesystem::create_directories(
          std::filesystem::path(p).parent_path(), ec);
    }
    int out = ::open(spec.stdout_path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0) {
      return absl::InternalError(absl::StrCat(
          "cannot open ", spec.stdout_path, ": ", ErrnoText(errno)));
    }
    int err = ::open(spec.stderr_path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();

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
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the worker already died
      // Restore default dispositions and an empty mask (the worker blocks
      // SIGTERM/SIGCHLD for its signal thread).
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s : {SIGTERM, SIGINT, SIGCHLD, SIGPIPE, SIGHUP}) {
        ::signal(s, SIG_DFL);
      }
      if (devnull >= 0) ::dup2(devnull, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execve(path->c_str(), argv.data(), envp.data());
      int e = errno;
      ssize_t ignored = ::write(pipefd[1], &e, sizeof(e));
      (void)ignored;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent: no race with Signal()
    ::close(pipefd[1]);
    ::close(out);
    ::close(err);
    if (devnull >= 0) ::close(devnull);
    int child_errno = 0;
    ssize_t n;
    do {
      n = ::read(pipefd[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    ::close(pipefd[0]);
    if (n == sizeof(child_errno)) {
      ::waitpid(pid, nullptr, 0);
      return absl::InternalError(absl::StrCat("exec ", *path, ": ",
                                              ErrnoText(child_errno)));
    }
    live_.insert(pid);
    return static_cast<int64_t>(pid);
  }

  absl::Status Signal(int64_t pid, int sig) override {
    if (!live_.count(pid)) {
      return absl::NotFoundError(absl::StrCat("no live process ", pid));
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
  std::set<int64_t> live_;
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
