// Spawning and killing trainer processes, behind an interface so the
// supervisor's logic can be tested with a simulated launcher and clock.
//
// Thread safety: implementations are used from one thread at a time (the
// supervisor's owner thread).
#ifndef FRAMEWORM_WORKER_PROCESS_LAUNCHER_H_
#define FRAMEWORM_WORKER_PROCESS_LAUNCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct LaunchSpec {
  std::vector<std::string> argv;           // argv[0]: a path or a PATH name
  std::map<std::string, std::string> env;  // the complete environment
  std::string stdout_path;                 // created (with parent dirs),
  std::string stderr_path;                 // appended to
};

struct ProcessExit {
  int64_t pid = 0;
  bool signaled = false;  // killed by `signal`, else exited with `exit_code`
  int exit_code = 0;
  int signal = 0;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process in a process group of its own. Returns its pid.
  // Errors: NOT_FOUND (program not found / not executable), INTERNAL (fork,
  // exec or log file failure), each naming the program or file.
  virtual absl::StatusOr<int64_t> Start(const LaunchSpec& spec) = 0;
  // Sends `sig` to the process group led by `pid`. NOT_FOUND if it is gone.
  // The Posix launcher's SIGKILL (a forced kill) goes to the task's shim
  // instead, which kills the task's whole tree, descendants that left the
  // group included, and then dies by SIGKILL; a second SIGKILL, or a shim
  // not ended 10 s later (seen by Reap), SIGKILLs the group.
  virtual absl::Status Signal(int64_t pid, int sig) = 0;
  // Non-blocking: the processes that ended since the last call.
  virtual std::vector<ProcessExit> Reap() = 0;
};

struct PosixLauncherOptions {
  // Where "frameworm-train" (as argv[0]) is looked up; empty: the directory
  // of /proc/self/exe.
  std::string bin_dir;
  // The task shim (worker/task_shim_main.cc); empty: frameworm-task-shim in
  // the directory of /proc/self/exe.
  std::string shim_path;
};

// fork/exec launcher: each task runs under frameworm-task-shim, the leader
// of a new process group (the pid returned), which holds the read end of a
// pipe only this launcher writes to: when the worker dies, however (even
// SIGKILL), the shim kills the task's whole tree, descendants that left the
// group included. stdin from /dev/null, stdout/stderr appended to the spec's
// files (0600). When a task ends, its shim kills what is left of its tree
// and exits as the task did; Reap() also SIGKILLs the group before reaping.
// Destroying the launcher has every shim kill its tree (at most 10 s, then
// their groups are SIGKILLed) and reaps them.
// Errors of Start() also: NOT_FOUND when the shim is missing.
std::unique_ptr<ProcessLauncher> NewPosixProcessLauncher(
    const PosixLauncherOptions& options);

// The directory holding the running executable (dirname of /proc/self/exe).
std::string SelfBinDir();

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_PROCESS_LAUNCHER_H_
