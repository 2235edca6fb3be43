// Real child processes for end-to-end tests: spawn with argv/env, output to
// a file, wait for a line, signal, reap. No shell involved.
//
// Thread safety: a ChildProcess is used from one thread. The destructor
// kills (SIGKILL) the child's process group if it is still running, so a
// failing test leaves nothing behind.
#ifndef FRAMEWORM_TESTS_E2E_PROCESS_H_
#define FRAMEWORM_TESTS_E2E_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace frameworm::e2e {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr together
};

class ChildProcess {
 public:
  // Starts argv with the current environment plus `env`, stdout and stderr
  // appended to `log_path`, in a new process group.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& argv,
      const std::map<std::string, std::string>& env,
      const std::string& log_path);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // Everything the child wrote so far.
  std::string Output() const;
  // Waits until the output contains `needle`; returns the line holding it.
  // DEADLINE_EXCEEDED on timeout, FAILED_PRECONDITION if the child exited.
  absl::StatusOr<std::string> WaitForLine(const std::string& needle,
                                          absl::Duration timeout);
  void Signal(int sig);  // to the whole process group
  // Waits for exit up to `timeout`; nullopt if still running.
  std::optional<RunResult> Wait(absl::Duration timeout);
  bool Running();

 private:
  ChildProcess(pid_t pid, std::string log_path)
      : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
  std::optional<RunResult> result_;
};

// Runs argv to completion (or kills it after `timeout`) and returns its
// exit status and output.
RunResult RunCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env,
                     absl::Duration timeout);

// Polls `pred` every 100 ms until it holds (true) or `timeout` passes (false).
bool Eventually(const std::function<bool()>& pred, absl::Duration timeout);

// Pids of live processes (not zombies) whose environment holds
// FRAMEWORM_JOB_ID=<job_id>: every process of that job's tasks, wherever
// they run, their frameworm-task-shim included.
std::vector<pid_t> PidsWithJobId(const std::string& job_id);

// PidsWithJobId without the shims: the tasks' own processes (trainers).
std::vector<pid_t> TrainerPidsWithJobId(const std::string& job_id);

// The value of `name` in the environment of process `pid` ("" if unset).
std::string EnvOf(pid_t pid, const std::string& name);

// The command line of process `pid`, arguments joined by single spaces
// ("" if it is gone or a kernel thread).
std::string CmdlineOf(pid_t pid);

// A fresh temporary directory under $TMPDIR.
std::string MakeTempDir(const std::string& prefix);

}  // namespace frameworm::e2e

#endif  // FRAMEWORM_TESTS_E2E_PROCESS_H_
