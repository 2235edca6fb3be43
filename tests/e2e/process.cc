#include "tests/e2e/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace frameworm::e2e {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult FromWaitStatus(int status) {
  RunResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

pid_t Spawn(const std::vector<std::string>& argv,
            const std::map<std::string, std::string>& env, int out_fd) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string s(*e);
    std::string key = s.substr(0, s.find('='));
    if (env.count(key) == 0) env_strings.push_back(s);
  }
  for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);
  return pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env,
    const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("not executable: ", argv[0]));
  }
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = Spawn(argv, env, fd);
  close(fd);
  if (pid < 0) return absl::InternalError("fork failed");
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
}

ChildProcess::~ChildProcess() {
  if (Running()) {
    kill(-pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
}

std::string ChildProcess::Output() const { return ReadFile(log_path_); }

absl::StatusOr<std::string> ChildProcess::WaitForLine(const std::string& needle,
                                                      absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::string out = Output();
    size_t at = out.find(needle);
    if (at != std::string::npos) {
      size_t begin = out.rfind('\n', at);
      begin = begin == std::string::npos ? 0 : begin + 1;
      size_t end = out.find('\n', at);
      return out.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    }
    if (!Running()) {
      return absl::FailedPreconditionError(
          absl::StrCat("process exited before printing '", needle, "':\n", out));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no '", needle, "' within ", absl::FormatDuration(timeout),
                       ":\n", out));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void ChildProcess::Signal(int sig) {
  if (!result_) kill(-pid_, sig);
}

std::optional<RunResult> ChildProcess::Wait(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!result_) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      result_ = FromWaitStatus(status);
      break;
    }
    if (r < 0) {
      result_ = RunResult{};
      break;
    }
    if (absl::Now() > deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
  RunResult out = *result_;
  out.output = Output();
  return out;
}

bool ChildProcess::Running() { return !Wait(absl::ZeroDuration()).has_value(); }

RunResult RunCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env,
                     absl::Duration timeout) {
  std::string dir = MakeTempDir("fw-cmd");
  std::string log = dir + "/out";
  auto child = ChildProcess::Start(argv, env, log);
  if (!child.ok()) {
    RunResult r;
    r.output = child.status().ToString();
    return r;
  }
  auto result = (*child)->Wait(timeout);
  if (!result) {
    (*child)->Signal(SIGKILL);
    result = (*child)->Wait(absl::Seconds(10));
    result->output += "\n[killed after timeout]";
  }
  std::remove(log.c_str());
  rmdir(dir.c_str());
  return *result;
}

std::vector<pid_t> PidsWithJobId(const std::string& job_id) {
  std::vector<pid_t> pids;
  std::string want = absl::StrCat("FRAMEWORM_JOB_ID=", job_id);
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* d = readdir(proc)) {
    char* end = nullptr;
    long pid = strtol(d->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) continue;
    if (stat[paren + 2] == 'Z') continue;  // zombie: already dead
    std::string environ_text = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    for (absl::string_view var : absl::StrSplit(environ_text, '\0')) {
      if (var == want) {
        pids.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  closedir(proc);
  return pids;
}

bool Eventually(const std::function<bool()>& pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (pred()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

std::vector<pid_t> TrainerPidsWithJobId(const std::string& job_id) {
  std::vector<pid_t> out;
  for (pid_t p : PidsWithJobId(job_id)) {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink(absl::StrCat("/proc/", p, "/exe"), ec);
    if (!ec && exe.filename() == "frameworm-task-shim") continue;
    out.push_back(p);
  }
  return out;
}

std::string EnvOf(pid_t pid, const std::string& name) {
  std::string environ_text = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  const std::string prefix = name + "=";
  for (absl::string_view var : absl::StrSplit(environ_text, '\0')) {
    if (absl::StartsWith(var, prefix)) return std::string(var.substr(prefix.size()));
  }
  return "";
}

std::string CmdlineOf(pid_t pid) {
  std::string text = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& ch : text) {
    if (ch == '\0') ch = ' ';
  }
  return text;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  char* dir = mkdtemp(buf.data());
  return dir ? std::string(dir) : std::string();
}

}  // namespace frameworm::e2e
