#include "worker/supervisor.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/printable.h"
#include "common/received_file.h"

namespace frameworm {

Supervisor::Supervisor(const Options& options, Clock& clock,
                       ProcessLauncher& launcher)
    : options_(options), clock_(clock), launcher_(launcher) {}

std::string Supervisor::StdoutPath(const TaskKey& k) const {
  return absl::StrCat(options_.work_dir, "/", k.job_id, "/g", k.generation,
                      "/rank-", k.rank, ".stdout");
}
std::string Supervisor::StderrPath(const TaskKey& k) const {
  return absl::StrCat(options_.work_dir, "/", k.job_id, "/g", k.generation,
                      "/rank-", k.rank, ".stderr");
}

namespace {

// Every name ToEnvironment may write (a RankEnv with every optional field
// set yields them all) but FRAMEWORM_TLS_DIR, which the worker itself puts
// in its base environment (worker/main.cc).
const std::map<std::string, std::string>& RankVariables() {
  static const auto* vars = [] {
    RankEnv all;
    all.coordinator = all.job_id = all.resume_from = all.token = "-";
    all.checkpoint_dir = all.memory_checkpoint_dir = "-";
    auto* env = new std::map<std::string, std::string>(ToEnvironment(all));
    env->erase("FRAMEWORM_TLS_DIR");
    return env;
  }();
  return *vars;
}

// The last non-empty line of the file at `path` (read from its last 4 KiB),
// cut to 256 bytes, control characters replaced; "" if none.
std::string LastLine(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  f.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  const size_t nl = text.rfind('\n');
  return PrintableLine(absl::string_view(text).substr(nl == std::string::npos ? 0 : nl + 1), 256);
}

}  // namespace

std::map<std::string, std::string> Supervisor::EnvFor(
    const TaskLaunch& l) const {
  std::map<std::string, std::string> env = options_.base_env;
  for (const auto& [k, v] : l.env) env[k] = v;
  for (const auto& [k, v] : RankVariables()) env.erase(k);
  RankEnv rank_env = l.rank_env;
  if (rank_env.coordinator.empty()) rank_env.coordinator = options_.coordinator;
  for (auto& [k, v] : ToEnvironment(rank_env)) env[k] = std::move(v);
  return env;
}

TaskStatusInfo Supervisor::Start(const TaskLaunch& l) {
  const TaskKey key = l.key();
  auto it = tasks_.find(key);
  if (it != tasks_.end()) return it->second.status;

  TaskStatusInfo st;
  st.key = key;
  auto fail = [&](std::string why) {
    st.state = TaskState::kStartFailed;
    st.message = std::move(why);
    tasks_[key].status = st;
    return st;
  };
  // One path component of the work dir (its logs lie under it): the same
  // rule as a hold's (no '/', NUL, "." or "..", at most 64 characters).
  if (absl::Status s = CheckJobIdComponent(key.job_id); !s.ok()) {
    return fail(absl::StrCat("invalid job id '", PrintableLine(key.job_id, 80), "'"));
  }
  const int world = l.rank_env.world_size;
  if (key.rank < 0 || world < 1 || key.rank >= world) {
    return fail(absl::StrCat("invalid rank ", key.rank, " for world size ",
                             world));
  }
  if (l.argv.empty() || l.argv[0].empty()) return fail("empty argv");

  LaunchSpec spec;
  spec.argv = l.argv;
  spec.env = EnvFor(l);
  std::string gpu;
  if (!options_.gpus.empty()) {
    gpu = FreeGpu();
    if (gpu.empty()) {
      return fail(absl::StrCat("no free GPU: all ", options_.gpus.size(),
                               " GPU slots of this worker (",
                               absl::StrJoin(options_.gpus, ","),
                               ") are held by running tasks"));
    }
    spec.env["CUDA_VISIBLE_DEVICES"] = gpu;
  }
  spec.stdout_path = StdoutPath(key);
  spec.stderr_path = StderrPath(key);
  auto pid = launcher_.Start(spec);
  if (!pid.ok()) return fail(std::string(pid.status().message()));
  st.state = TaskState::kRunning;
  st.pid = *pid;
  st.message = "running";
  tasks_[key].status = st;
  tasks_[key].gpu = gpu;
  tasks_[key].fence_after = l.fence_after;
  by_pid_[*pid] = key;
  return st;
}

int Supervisor::Kill(const std::string& job_id, int64_t generation, int rank,
                     absl::Duration grace) {
  const absl::Time now = clock_.Now();
  int n = 0;
  for (auto& [key, t] : tasks_) {
    if (key.job_id != job_id) continue;
    if (generation != 0 && key.generation > generation) continue;
    if (rank >= 0 && key.rank != rank) continue;
    if (t.status.state != TaskState::kRunning) continue;
    ++n;
    if (grace <= absl::ZeroDuration()) {
      if (!t.sigkill_sent) {
        launcher_.Signal(t.status.pid, SIGKILL).IgnoreError();
        t.sigkill_sent = true;
      }
      t.kill_at = now;
      continue;
    }
    if (!t.term_sent) {
      launcher_.Signal(t.status.pid, SIGTERM).IgnoreError();
      t.term_sent = true;
    }
    absl::Time at = now + grace;
    if (!t.kill_at || at < *t.kill_at) t.kill_at = at;
  }
  return n;
}

int Supervisor::KillAll(absl::Duration grace) {
  std::vector<std::string> jobs;
  for (const auto& [key, t] : tasks_) {
    if (t.status.state == TaskState::kRunning) jobs.push_back(key.job_id);
  }
  int n = 0;
  for (const auto& j : jobs) n += Kill(j, 0, -1, grace);
  return n;
}

std::vector<TaskKey> Supervisor::Fence(absl::Duration cut_off) {
  std::vector<TaskKey> out;
  for (const auto& [key, t] : tasks_) {
    if (t.status.state != TaskState::kRunning || t.sigkill_sent) continue;
    if (t.fence_after <= absl::ZeroDuration() || cut_off < t.fence_after) continue;
    out.push_back(key);
  }
  for (const TaskKey& key : out) {
    tasks_[key].fenced = true;
    Kill(key.job_id, key.generation, key.rank, absl::ZeroDuration());
  }
  return out;
}

std::vector<TaskStatusInfo> Supervisor::Poll() {
  std::vector<TaskStatusInfo> changes;
  for (const ProcessExit& e : launcher_.Reap()) {
    auto pit = by_pid_.find(e.pid);
    if (pit == by_pid_.end()) continue;
    const TaskKey key_of_exit = pit->second;
    Task& t = tasks_[key_of_exit];
    by_pid_.erase(pit);
    if (e.signaled) {
      t.status.state = TaskState::kKilled;
      t.status.signal = e.signal;
      t.status.message = absl::StrCat("killed by signal ", e.signal, " (",
                                      sigabbrev_np(e.signal) ? sigabbrev_np(e.signal) : "?", ")");
      if (t.sigkill_sent && e.signal == SIGKILL && t.term_sent) {
        absl::StrAppend(&t.status.message, " after the grace period");
      }
      if (t.fenced && e.signal == SIGKILL) {
        t.status.fenced = true;
        absl::StrAppend(&t.status.message,
                        ": fenced, its worker cut off from the coordinator for the job's "
                        "heartbeat timeout");
      }
    } else {
      t.status.state = TaskState::kExited;
      t.status.exit_code = e.exit_code;
      t.status.message = absl::StrCat("exited with code ", e.exit_code);
    }
    t.kill_at.reset();
    if (e.signaled || e.exit_code != 0) {
      t.status.stderr_tail = LastLine(StderrPath(key_of_exit));
    }
    changes.push_back(t.status);
  }
  const absl::Time now = clock_.Now();
  for (auto& [key, t] : tasks_) {
    if (t.status.state == TaskState::kRunning && t.kill_at &&
        *t.kill_at <= now && !t.sigkill_sent) {
      launcher_.Signal(t.status.pid, SIGKILL).IgnoreError();
      t.sigkill_sent = true;
    }
  }
  return changes;
}

std::string Supervisor::FreeGpu() const {
  for (const std::string& id : options_.gpus) {
    bool held = false;
    for (const auto& [key, t] : tasks_) {
      held = held || (t.status.state == TaskState::kRunning && t.gpu == id);
    }
    if (!held) return id;
  }
  return "";
}

bool Supervisor::GpuFreedSoon() const {
  if (options_.gpus.empty() || !FreeGpu().empty()) return false;
  const absl::Time now = clock_.Now();
  for (const auto& [key, t] : tasks_) {
    if (t.status.state == TaskState::kRunning && !t.gpu.empty() && t.kill_at &&
        now < *t.kill_at + kGpuReapWait) {
      return true;
    }
  }
  return false;
}

std::vector<TaskStatusInfo> Supervisor::Running() const {
  std::vector<TaskStatusInfo> out;
  for (const auto& [key, t] : tasks_) {
    if (t.status.state == TaskState::kRunning) out.push_back(t.status);
  }
  return out;
}

int Supervisor::running_count() const {
  int n = 0;
  for (const auto& [key, t] : tasks_) n += t.status.state == TaskState::kRunning;
  return n;
}

std::optional<TaskStatusInfo> Supervisor::Status(const TaskKey& key) const {
  auto it = tasks_.find(key);
  if (it == tasks_.end()) return std::nullopt;
  return it->second.status;
}

void Supervisor::Forget(const TaskKey& key) {
  auto it = tasks_.find(key);
  if (it != tasks_.end() && it->second.status.final()) tasks_.erase(it);
}

std::optional<absl::Time> Supervisor::NextDeadline() const {
  std::optional<absl::Time> best;
  for (const auto& [key, t] : tasks_) {
    if (t.status.state == TaskState::kRunning && t.kill_at && !t.sigkill_sent &&
        (!best || *t.kill_at < *best)) {
      best = t.kill_at;
    }
  }
  return best;
}

}  // namespace frameworm
