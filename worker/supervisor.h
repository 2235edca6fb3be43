// The worker's supervisor: which trainer processes run for which
// (job_id, generation, rank), starting them, killing them (SIGTERM, then
// SIGKILL after a grace period) and turning process exits into task status
// changes. Plain C++ types only: the gRPC glue (worker_agent.h) translates.
//
// Thread safety: none; owned and driven by one thread (the agent's loop).
// Time comes from the injected Clock, processes from the injected
// ProcessLauncher; neither is owned and both must outlive the supervisor.
#ifndef FRAMEWORM_WORKER_SUPERVISOR_H_
#define FRAMEWORM_WORKER_SUPERVISOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/rank_env.h"
#include "worker/process_launcher.h"

namespace frameworm {

struct TaskKey {
  std::string job_id;
  int64_t generation = 0;
  int rank = 0;
  auto operator<=>(const TaskKey&) const = default;
};

enum class TaskState { kRunning, kExited, kKilled, kStartFailed };

struct TaskStatusInfo {
  TaskKey key;
  TaskState state = TaskState::kRunning;
  int exit_code = 0;
  int signal = 0;
  int64_t pid = 0;
  std::string message;
  // A task that failed (exit code != 0, or a signal): the last non-empty
  // line of its stderr (at most 256 bytes, control characters as '?'), so
  // the job's failure reason says why ("cannot reach ... at ...").
  std::string stderr_tail;
  bool fenced = false;  // killed by Fence() (TaskStatus.fenced)
  bool final() const { return state != TaskState::kRunning; }
};

// What the coordinator asks to run (frameworm.v1.TaskSpec in plain types).
struct TaskLaunch {
  RankEnv rank_env;  // who the trainer is (job, generation, rank, master...)
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the job's env and secret_env only
  // Killed by Fence() once the worker is cut off this long; 0: never.
  absl::Duration fence_after = absl::ZeroDuration();
  TaskKey key() const {
    return {rank_env.job_id, rank_env.generation, rank_env.rank};
  }
};

class Supervisor {
 public:
  struct Options {
    std::string work_dir;  // logs: <work_dir>/<job>/g<gen>/rank-<r>.std{out,err}
    // FRAMEWORM_COORDINATOR for trainers whose rank_env names none.
    std::string coordinator;
    // The environment every trainer starts from (the worker's own, read in
    // main); the task's env and the rank variables are laid over it.
    std::map<std::string, std::string> base_env;
    // GPU slots: the device ids (as CUDA_VISIBLE_DEVICES names them) this
    // worker hands out, one per running task. Each task gets the lowest
    // free id as its only CUDA_VISIBLE_DEVICES (so its LOCAL_RANK-th device
    // modulo the one it sees is that GPU), whatever the base or job env
    // say; an id is free again once its task is reaped. Empty: no GPU slots,
    // CUDA_VISIBLE_DEVICES is left as the base and job env have it.
    std::vector<std::string> gpus;
  };

  Supervisor(const Options& options, Clock& clock, ProcessLauncher& launcher);

  // Starts a trainer. Returns its status: kRunning, or kStartFailed with the
  // reason (bad spec, program not found, every GPU slot held, ...). Starting a key that is
  // already known returns its current status and starts nothing.
  TaskStatusInfo Start(const TaskLaunch& launch);

  // SIGTERM to every running task of `job_id` with generation <= `generation`
  // (0: any) and `rank` (-1: any); SIGKILL for those still running after
  // `grace` (immediately when grace <= 0). Returns how many were signalled.
  int Kill(const std::string& job_id, int64_t generation, int rank,
           absl::Duration grace);
  // Kill() for every running task (worker shutdown).
  int KillAll(absl::Duration grace);
  // Fencing: SIGKILL to every running task whose fence_after is > 0 and
  // <= `cut_off` (how long the worker has been without the coordinator).
  // Returns the tasks it signalled this call (each task once).
  std::vector<TaskKey> Fence(absl::Duration cut_off);

  // Reaps exited processes and escalates overdue kills. Returns the status
  // changes (final statuses) since the last call.
  std::vector<TaskStatusInfo> Poll();

  // Statuses of the running tasks (reported on (re-)registration).
  std::vector<TaskStatusInfo> Running() const;
  int running_count() const;
  // The status of a known task.
  std::optional<TaskStatusInfo> Status(const TaskKey& key) const;
  // Forgets final tasks (their logs stay on disk).
  void Forget(const TaskKey& key);
  // The earliest pending SIGKILL escalation, if any.
  std::optional<absl::Time> NextDeadline() const;
  // True when a start now would find every GPU slot held but one of them
  // is held by a task already being killed (KillTask, Fence, KillAll) and
  // its SIGKILL is at most kGpuReapWait old: the slot frees once that task
  // is reaped, so a start (a restart on the same node) should wait for it
  // instead of failing; a task SIGKILL does not end (stuck in the kernel
  // after a GPU fault) stops the wait, and the start fails "no free GPU".
  bool GpuFreedSoon() const;
  static constexpr absl::Duration kGpuReapWait = absl::Seconds(10);

  std::string StdoutPath(const TaskKey& key) const;
  std::string StderrPath(const TaskKey& key) const;
  // The complete environment a task starts with: options.base_env, then
  // the job's env, then ToEnvironment(launch.rank_env) with
  // options.coordinator as FRAMEWORM_COORDINATOR when rank_env.coordinator
  // is empty. The rank variables (every name ToEnvironment writes but
  // FRAMEWORM_TLS_DIR, which the worker sets in base_env) come from
  // rank_env only: a value in the base or job env is dropped, so a stale
  // FRAMEWORM_RESUME_FROM or FRAMEWORM_MEMORY_CHECKPOINT_DIR never reaches
  // a fresh start.
  std::map<std::string, std::string> EnvFor(const TaskLaunch& launch) const;

 private:
  // The lowest id of options_.gpus no running task holds; empty if none.
  std::string FreeGpu() const;

  struct Task {
    TaskStatusInfo status;
    std::string gpu;  // its CUDA_VISIBLE_DEVICES slot; empty: none
    std::optional<absl::Time> kill_at;  // SIGKILL when still running then
    bool sigkill_sent = false;
    bool term_sent = false;
    bool fenced = false;
    absl::Duration fence_after = absl::ZeroDuration();
  };

  const Options options_;
  Clock& clock_;
  ProcessLauncher& launcher_;
  std::map<TaskKey, Task> tasks_;
  std::map<int64_t, TaskKey> by_pid_;
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_SUPERVISOR_H_
