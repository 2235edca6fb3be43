#include "coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "coordinator/sqlite_store.h"
#include "jobspec/job_spec.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

int64_t ToMs(absl::Time t) { return absl::ToUnixMillis(t); }

bool IsFinal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

// A job id or other name used as a path component.
bool SafeComponent(const std::string& s) {
  return !s.empty() && s != "." && s != ".." &&
         s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}

void LogError(const absl::Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "coordinator: %s: %s\n", what,
                            s.ToString().c_str());
}

}  // namespace

std::vector<std::string> TaskArgv(const v1::JobSpec& spec,
                                  const std::string& checkpoint_dir) {
  const auto& ep = spec.entrypoint();
  if (!ep.empty() && ep[0] != "frameworm-train")
    return std::vector<std::string>(ep.begin(), ep.end());
  std::vector<std::string> argv = {"frameworm-train"};
  std::map<std::string, std::string> sorted(spec.train_options().begin(),
                                            spec.train_options().end());
  for (const auto& [k, v] : sorted) argv.push_back(absl::StrCat("--", k, "=", v));
  for (int i = 1; i < ep.size(); ++i) argv.push_back(ep[i]);
  if (!checkpoint_dir.empty())
    argv.push_back(absl::StrCat("--checkpoint-dir=", checkpoint_dir));
  if (spec.checkpoint().every_n_steps() > 0)
    argv.push_back(absl::StrCat("--checkpoint-every=",
                                spec.checkpoint().every_n_steps()));
  if (!spec.backend().empty())
    argv.push_back(absl::StrCat("--backend=", spec.backend()));
  return argv;
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const CoordinatorOptions& options, Clock& clock) {
  if (options.state_dir.empty())
    return absl::InvalidArgumentError("state_dir is required");
  if (options.port_min <= 0 || options.port_max > 65535 ||
      options.port_min > options.port_max)
    return absl::InvalidArgumentError(absl::StrCat(
        "bad port range ", options.port_min, "-", options.port_max));
  if (options.straggler_factor <= 1.0)
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler factor must be > 1, got ", options.straggler_factor));
  if (options.default_heartbeat_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("heartbeat timeout must be > 0");
  CoordinatorOptions o = options;
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  o.state_dir = fs::absolute(o.state_dir, ec).lexically_normal().string();
  if (!o.state_dir.empty() && o.state_dir.back() == '/' && o.state_dir != "/")
    o.state_dir.pop_back();
  absl::StatusOr<std::unique_ptr<SqliteStore>> store =
      SqliteStore::Open(o.state_dir);
  if (!store.ok()) return store.status();
  std::unique_ptr<Coordinator> c(
      new Coordinator(o, clock, std::move(store).value()));
  if (absl::Status s = c->Reload(); !s.ok()) return s;
  return c;
}

Coordinator::Coordinator(const CoordinatorOptions& options, Clock& clock,
                         std::unique_ptr<Store> store)
    : options_(options),
      clock_(clock),
      store_(std::move(store)),
      writer_(MetricWriter::Create(store_.get())),
      boot_id_(absl::StrCat(absl::ToUnixMicros(absl::Now()) % 1000000007)),
      next_port_(options.port_min),
      advertise_(options.advertise) {}

void Coordinator::SetAdvertise(const std::string& address) {
  absl::MutexLock l(&mu_);
  advertise_ = address;
}

void Coordinator::SetListener(Listener* listener) {
  absl::MutexLock l(&mu_);
  listener_ = listener;
}

absl::Status Coordinator::Reload() {
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_.Now();
  absl::StatusOr<std::vector<JobRow>> rows = store_->LoadJobs();
  if (!rows.ok()) return rows.status();
  for (const JobRow& row : *rows) {
    auto job = std::make_unique<Job>(MetricAggregator::Options{
        options_.straggler_factor, options_.straggler_window});
    job->id = row.job_id;
    job->seq = row.seq;
    if (!job->spec.ParseFromString(row.spec))
      return absl::InternalError(
          absl::StrCat("corrupt spec of job ", row.job_id, " in the store"));
    job->state = static_cast<v1::JobState>(row.state);
    job->generation = row.generation;
    job->restarts = row.restarts;
    job->reason = row.reason;
    job->submitted_ms = row.submitted_ms;
    job->started_ms = row.started_ms;
    job->finished_ms = row.finished_ms;
    job->heartbeat_timeout =
        job->spec.heartbeat_timeout_s() > 0
            ? absl::Seconds(job->spec.heartbeat_timeout_s())
            : options_.default_heartbeat_timeout;
    next_seq_ = std::max(next_seq_, row.seq + 1);

    absl::StatusOr<std::vector<CheckpointRow>> ckpts =
        store_->LoadCheckpoints(row.job_id);
    if (!ckpts.ok()) return ckpts.status();
    for (const CheckpointRow& c : *ckpts) {
      v1::CheckpointRecord r;
      r.mutable_ref()->set_job_id(c.job_id);
      r.mutable_ref()->set_generation(c.generation);
      r.set_step(c.step);
      r.set_path(c.path);
      r.set_bytes(c.bytes);
      r.set_checksum(c.checksum);
      r.set_created_unix_ms(c.created_ms);
      job->checkpoints.push_back(std::move(r));
    }
    absl::StatusOr<std::vector<MetricRow>> metrics =
        store_->LoadMetrics(row.job_id);
    if (!metrics.ok()) return metrics.status();
    for (const MetricRow& m : *metrics) {
      v1::AggregatedStep s;
      if (s.ParseFromString(m.aggregate)) job->metrics.Restore(s);
    }
    if (const v1::AggregatedStep* last = job->metrics.Last())
      job->max_step = last->step();

    if (job->state == v1::RUNNING) {
      absl::StatusOr<GenerationRow> gen =
          store_->LoadGeneration(row.job_id, row.generation);
      if (!gen.ok()) return gen.status();
      absl::StatusOr<std::vector<AssignmentRow>> as =
          store_->LoadAssignments(row.job_id, row.generation);
      if (!as.ok()) return as.status();
      job->master_addr = gen->master_addr;
      job->master_port = gen->master_port;
      job->resume_from = gen->resume_from;
      job->last_checkpoint = now;
      for (const AssignmentRow& a : *as) {
        RankState r;
        r.worker = a.worker;
        r.node_rank = a.node_rank;
        r.local_rank = a.local_rank;
        r.task.ParseFromString(a.task);
        r.done = a.state == 1;
        job->ranks.push_back(std::move(r));
        if (static_cast<int>(job->workers.size()) <= a.node_rank)
          job->workers.resize(a.node_rank + 1);
        job->workers[a.node_rank] = a.worker;
      }
      // The job's workers get heartbeat timeout + grace to re-register.
      for (const std::string& w : job->workers) {
        Worker& worker = workers_[w];
        if (worker.name.empty()) {
          worker.name = w;
          worker.last_seen = now + options_.reconnect_grace;
        }
      }
    }
    jobs_[job->id] = std::move(job);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- helpers

Coordinator::Job* Coordinator::FindLocked(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

JobRow Coordinator::RowOf(const Job& job) const {
  JobRow r;
  r.job_id = job.id;
  r.seq = job.seq;
  job.spec.SerializeToString(&r.spec);
  r.state = job.state;
  r.generation = job.generation;
  r.restarts = job.restarts;
  r.reason = job.reason;
  r.submitted_ms = job.submitted_ms;
  r.started_ms = job.started_ms;
  r.finished_ms = job.finished_ms;
  return r;
}

v1::JobStatus Coordinator::StatusOf(const Job& job) const {
  v1::JobStatus s;
  s.set_job_id(job.id);
  *s.mutable_spec() = job.spec;
  s.set_state(job.state);
  s.set_generation(job.generation);
  s.set_restarts(job.restarts);
  s.set_reason(job.reason);
  if (const v1::AggregatedStep* last = job.metrics.Last()) {
    s.set_step(last->step());
    *s.mutable_last() = *last;
    double slowest = 0;
    for (double t : last->rank_step_seconds()) slowest = std::max(slowest, t);
    if (slowest > 0) s.set_samples_per_second(last->samples() / slowest);
  }
  for (const std::string& w : job.workers) s.add_workers(w);
  s.set_submitted_unix_ms(job.submitted_ms);
  s.set_started_unix_ms(job.started_ms);
  s.set_finished_unix_ms(job.finished_ms);
  s.set_log_dir(LogDir(job.id));
  s.set_total_steps(job.spec.total_steps() > 0 ? job.spec.total_steps()
                                               : job.reported_total_steps);
  return s;
}

std::string Coordinator::LogDir(const std::string& job_id) const {
  return (fs::path(options_.state_dir) / "logs" / job_id).string();
}

std::string Coordinator::LogPath(const std::string& job_id, int rank) const {
  return (fs::path(LogDir(job_id)) / absl::StrCat("rank-", rank, ".log"))
      .string();
}

void Coordinator::ChangedLocked(const Job& job) { notify_jobs_.insert(job.id); }

void Coordinator::SendLocked(const std::string& worker,
                             v1::CoordinatorMessage msg) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  it->second.outbox.push_back(std::move(msg));
  if (!it->second.session_id.empty())
    notify_sessions_.insert(it->second.session_id);
}

void Coordinator::SendKillLocked(const std::string& worker,
                                 const v1::JobRef& ref, int rank) {
  v1::CoordinatorMessage msg;
  *msg.mutable_kill()->mutable_ref() = ref;
  msg.mutable_kill()->set_rank(rank);
  msg.mutable_kill()->set_grace_s(options_.kill_grace_s);
  SendLocked(worker, std::move(msg));
}

void Coordinator::Flush() {
  std::set<std::string> sessions, jobs;
  Listener* listener;
  {
    absl::MutexLock l(&mu_);
    sessions.swap(notify_sessions_);
    jobs.swap(notify_jobs_);
    listener = listener_;
  }
  if (listener == nullptr) return;
  for (const std::string& s : sessions) listener->SessionHasCommands(s);
  for (const std::string& j : jobs) listener->JobChanged(j);
}

bool Coordinator::SchedulableLocked(const Worker& w) const {
  // Heard from within three heartbeat intervals: a worker that has gone
  // quiet gets no new work even before its timeout fails its jobs.
  const absl::Duration fresh =
      std::min(options_.default_heartbeat_timeout,
               absl::Seconds(3 * options_.heartbeat_interval_s));
  return w.registered && w.attached && clock_.Now() - w.last_seen <= fresh;
}

int Coordinator::FreeSlotsLocked(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return 0;
  int used = 0;
  for (const auto& [id, job] : jobs_)
    if (job->state == v1::RUNNING)
      for (const RankState& r : job->ranks)
        if (r.worker == worker) ++used;
  return it->second.slots - used;
}

int Coordinator::AllocatePortLocked() {
  std::set<int> used;
  for (const auto& [id, job] : jobs_)
    if (job->state == v1::RUNNING) used.insert(job->master_port);
  const int n = options_.port_max - options_.port_min + 1;
  for (int i = 0; i < n; ++i) {
    int p = next_port_;
    next_port_ = p >= options_.port_max ? options_.port_min : p + 1;
    if (!used.count(p)) return p;
  }
  return 0;
}

// ------------------------------------------------------------- scheduling

void Coordinator::ScheduleLocked() {
  std::vector<Job*> queue;
  for (const auto& [id, job] : jobs_)
    if (job->state == v1::PENDING || job->state == v1::RESTARTING)
      queue.push_back(job.get());
  // Highest priority first, FIFO (submission order) within a priority.
  std::sort(queue.begin(), queue.end(), [](const Job* a, const Job* b) {
    if (a->spec.priority() != b->spec.priority())
      return a->spec.priority() > b->spec.priority();
    return a->seq < b->seq;
  });
  for (Job* job : queue) {
    const int nproc = job->spec.nproc_per_node();
    int capable = 0;
    std::vector<std::string> free;
    for (const auto& [name, w] : workers_) {
      if (!SchedulableLocked(w) || w.slots < nproc) continue;
      ++capable;
      if (FreeSlotsLocked(name) >= nproc) free.push_back(name);
    }
    // A job that the live cluster cannot hold even when idle does not block
    // the queue; one that merely waits for busy slots does (strict order).
    if (capable < job->spec.nodes_min()) continue;
    if (static_cast<int>(free.size()) < job->spec.nodes_min()) break;
    if (static_cast<int>(free.size()) > job->spec.nodes_max())
      free.resize(job->spec.nodes_max());
    if (!StartGenerationLocked(*job, free)) break;
  }
}

v1::TaskSpec Coordinator::MakeTaskLocked(
    const Job& job, int64_t generation, int rank, int node_rank,
    int local_rank, int world_size, const std::string& master_addr,
    int master_port, const std::string& resume_from) const {
  v1::TaskSpec t;
  t.mutable_ref()->set_job_id(job.id);
  t.mutable_ref()->set_generation(generation);
  t.set_rank(rank);
  t.set_local_rank(local_rank);
  t.set_node_rank(node_rank);
  t.set_world_size(world_size);
  t.set_local_world_size(job.spec.nproc_per_node());
  t.set_master_addr(master_addr);
  t.set_master_port(master_port);
  t.set_resume_from(resume_from);
  const std::string ckpt_dir =
      job.spec.checkpoint().dir().empty()
          ? (fs::path(options_.state_dir) / "checkpoints" / job.id).string()
          : (fs::path(job.spec.checkpoint().dir()) / job.id).string();
  for (const std::string& a : TaskArgv(job.spec, ckpt_dir)) t.add_argv(a);
  auto& env = *t.mutable_env();
  for (const auto& [k, v] : job.spec.env()) env[k] = v;
  env["RANK"] = absl::StrCat(rank);
  env["WORLD_SIZE"] = absl::StrCat(world_size);
  env["LOCAL_RANK"] = absl::StrCat(local_rank);
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(job.spec.nproc_per_node());
  env["NODE_RANK"] = absl::StrCat(node_rank);
  env["MASTER_ADDR"] = master_addr;
  env["MASTER_PORT"] = absl::StrCat(master_port);
  env["FRAMEWORM_COORDINATOR"] = advertise_;
  env["FRAMEWORM_JOB_ID"] = job.id;
  env["FRAMEWORM_GENERATION"] = absl::StrCat(generation);
  env["FRAMEWORM_CHECKPOINT_DIR"] = ckpt_dir;
  if (!resume_from.empty()) env["FRAMEWORM_RESUME_FROM"] = resume_from;
  return t;
}

bool Coordinator::StartGenerationLocked(
    Job& job, const std::vector<std::string>& workers) {
  const absl::Time now = clock_.Now();
  const int port = AllocatePortLocked();
  if (port == 0) {
    job.reason = "waiting for a free MASTER_PORT";
    return false;
  }
  const int64_t gen = job.generation + 1;
  const int nproc = job.spec.nproc_per_node();
  const int world = static_cast<int>(workers.size()) * nproc;
  // MASTER_ADDR: the node-rank-0 worker's advertised host (without a port).
  std::string master_addr = workers_[workers[0]].address;
  if (std::count(master_addr.begin(), master_addr.end(), ':') == 1)
    master_addr = master_addr.substr(0, master_addr.find(':'));
  const std::string resume =
      job.checkpoints.empty() ? "" : job.checkpoints.back().path();

  std::vector<RankState> ranks;
  std::vector<AssignmentRow> rows;
  for (int node = 0; node < static_cast<int>(workers.size()); ++node) {
    for (int local = 0; local < nproc; ++local) {
      RankState r;
      r.worker = workers[node];
      r.node_rank = node;
      r.local_rank = local;
      r.task = MakeTaskLocked(job, gen, node * nproc + local, node, local,
                              world, master_addr, port, resume);
      AssignmentRow a;
      a.job_id = job.id;
      a.generation = gen;
      a.rank = node * nproc + local;
      a.worker = r.worker;
      a.node_rank = node;
      a.local_rank = local;
      r.task.SerializeToString(&a.task);
      rows.push_back(std::move(a));
      ranks.push_back(std::move(r));
    }
  }
  JobRow row = RowOf(job);
  row.state = v1::RUNNING;
  row.generation = gen;
  row.reason = job.state == v1::RESTARTING ? job.reason : "";
  if (row.started_ms == 0) row.started_ms = ToMs(now);
  GenerationRow g;
  g.job_id = job.id;
  g.generation = gen;
  g.started_ms = ToMs(now);
  g.master_addr = master_addr;
  g.master_port = port;
  g.resume_from = resume;
  if (absl::Status s = store_->StartGeneration(row, g, rows); !s.ok()) {
    LogError(s, "start generation");
    job.reason = s.ToString();
    return false;
  }
  job.state = v1::RUNNING;
  job.generation = gen;
  job.reason = row.reason;
  job.started_ms = row.started_ms;
  job.ranks = std::move(ranks);
  job.workers = workers;
  job.master_addr = master_addr;
  job.master_port = port;
  job.resume_from = resume;
  job.any_report = false;
  job.checkpoint_at = 0;
  job.last_checkpoint = now;
  job.metrics.ResetWindows();
  for (const RankState& r : job.ranks) {
    v1::CoordinatorMessage msg;
    *msg.mutable_start()->mutable_task() = r.task;
    SendLocked(r.worker, std::move(msg));
  }
  ChangedLocked(job);
  return true;
}

void Coordinator::KillAllLocked(Job& job) {
  v1::JobRef ref;
  ref.set_job_id(job.id);
  ref.set_generation(job.generation);
  std::set<std::string> done;
  for (const std::string& w : job.workers)
    if (done.insert(w).second) SendKillLocked(w, ref, -1);
}

void Coordinator::FailGenerationLocked(Job& job, const std::string& reason) {
  if (job.state != v1::RUNNING) return;
  const absl::Time now = clock_.Now();
  KillAllLocked(job);
  if (job.restarts < job.spec.max_restarts()) {
    job.restarts++;
    job.state = v1::RESTARTING;
    job.reason = absl::StrCat(reason, " (restart ", job.restarts, " of ",
                              job.spec.max_restarts(), ")");
  } else {
    job.state = v1::FAILED;
    job.finished_ms = ToMs(now);
    job.reason = job.spec.max_restarts() > 0
                     ? absl::StrCat(reason, " (no restarts left)")
                     : reason;
  }
  LogError(store_->EndGeneration(RowOf(job), job.generation, ToMs(now), reason),
           "end generation");
  job.ranks.clear();
  ChangedLocked(job);
}

void Coordinator::SucceedLocked(Job& job) {
  const absl::Time now = clock_.Now();
  job.state = v1::SUCCEEDED;
  job.finished_ms = ToMs(now);
  job.reason = "";
  LogError(store_->EndGeneration(RowOf(job), job.generation, ToMs(now),
                                 "succeeded"),
           "end generation");
  job.ranks.clear();
  ChangedLocked(job);
}

// ------------------------------------------------------------------- jobs

absl::Status Coordinator::ValidateSpec(const v1::JobSpec& spec) const {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", parts...));
  };
  if (spec.name().empty()) return bad("name is required");
  if (spec.nproc_per_node() < 0)
    return bad("nproc_per_node must be >= 1, got ", spec.nproc_per_node());
  if (spec.nodes_min() < 0)
    return bad("nodes.min must be >= 1, got ", spec.nodes_min());
  if (spec.nodes_max() < 0)
    return bad("nodes.max must be >= 1, got ", spec.nodes_max());
  if (spec.nodes_max() > 0 && spec.nodes_max() < spec.nodes_min())
    return bad("nodes.max (", spec.nodes_max(), ") is less than nodes.min (",
               spec.nodes_min(), ")");
  if (spec.max_restarts() < 0)
    return bad("max_restarts must be >= 0, got ", spec.max_restarts());
  if (spec.heartbeat_timeout_s() < 0)
    return bad("heartbeat_timeout must be >= 0, got ",
               spec.heartbeat_timeout_s());
  const auto& b = spec.backend();
  if (!b.empty() && b != "gloo" && b != "nccl" && b != "mpi")
    return bad("backend must be gloo, nccl or mpi, got '", b, "'");
  if (spec.checkpoint().every_n_steps() < 0)
    return bad("checkpoint.every_n_steps must be >= 0, got ",
               spec.checkpoint().every_n_steps());
  if (spec.checkpoint().every_n_minutes() < 0)
    return bad("checkpoint.every_n_minutes must be >= 0, got ",
               spec.checkpoint().every_n_minutes());
  if (spec.checkpoint().keep_last() < 0)
    return bad("checkpoint.keep_last must be >= 0, got ",
               spec.checkpoint().keep_last());
  for (const auto& [k, v] : spec.train_options())
    if (k.empty() || k.find('=') != std::string::npos)
      return bad("train option name '", k, "' is not a flag name");
  for (const auto& [k, v] : spec.env())
    if (k.empty() || k.find('=') != std::string::npos)
      return bad("env name '", k, "' is not a variable name");
  // Defaults for unset counts, then the rules every spec obeys (jobspec).
  v1::JobSpec normalized = spec;
  if (normalized.nproc_per_node() == 0) normalized.set_nproc_per_node(1);
  if (normalized.nodes_min() == 0) normalized.set_nodes_min(1);
  if (normalized.nodes_max() == 0)
    normalized.set_nodes_max(normalized.nodes_min());
  if (absl::Status s = ValidateJobSpec(normalized); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::JobSpec& in) {
  if (absl::Status s = ValidateSpec(in); !s.ok()) return s;
  v1::JobSpec spec = in;
  if (spec.nproc_per_node() == 0) spec.set_nproc_per_node(1);
  if (spec.nodes_min() == 0) spec.set_nodes_min(1);
  if (spec.nodes_max() == 0) spec.set_nodes_max(spec.nodes_min());
  std::string id;
  {
    absl::MutexLock l(&mu_);
    auto job = std::make_unique<Job>(MetricAggregator::Options{
        options_.straggler_factor, options_.straggler_window});
    job->seq = next_seq_;
    job->id = absl::StrFormat("job-%06d", job->seq);
    job->spec = std::move(spec);
    job->state = v1::PENDING;
    job->submitted_ms = ToMs(clock_.Now());
    job->heartbeat_timeout =
        job->spec.heartbeat_timeout_s() > 0
            ? absl::Seconds(job->spec.heartbeat_timeout_s())
            : options_.default_heartbeat_timeout;
    if (absl::Status s = store_->PutJob(RowOf(*job)); !s.ok()) return s;
    next_seq_++;
    id = job->id;
    ChangedLocked(*job);
    jobs_[id] = std::move(job);
    ScheduleLocked();
  }
  Flush();
  return id;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(
    const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  const Job* job = FindLocked(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return StatusOf(*job);
}

std::vector<v1::JobStatus> Coordinator::ListJobs() const {
  absl::MutexLock l(&mu_);
  std::vector<const Job*> all;
  for (const auto& [id, job] : jobs_) all.push_back(job.get());
  std::sort(all.begin(), all.end(),
            [](const Job* a, const Job* b) { return a->seq < b->seq; });
  std::vector<v1::JobStatus> out;
  for (const Job* j : all) out.push_back(StatusOf(*j));
  return out;
}

bool Coordinator::JobExists(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  return FindLocked(job_id) != nullptr;
}

bool Coordinator::JobFinal(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  const Job* job = FindLocked(job_id);
  return job == nullptr || IsFinal(job->state);
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(
    const std::string& job_id) {
  absl::StatusOr<v1::JobStatus> out;
  {
    absl::MutexLock l(&mu_);
    Job* job = FindLocked(job_id);
    if (!job) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    if (IsFinal(job->state))
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ended: ",
                       v1::JobState_Name(job->state)));
    JobRow row = RowOf(*job);
    row.state = v1::CANCELLED;
    row.finished_ms = ToMs(clock_.Now());
    row.reason = "cancelled by user";
    absl::Status s = job->state == v1::RUNNING
                         ? store_->EndGeneration(row, job->generation,
                                                 row.finished_ms, row.reason)
                         : store_->PutJob(row);
    if (!s.ok()) return s;
    if (job->state == v1::RUNNING) KillAllLocked(*job);
    job->state = v1::CANCELLED;
    job->finished_ms = row.finished_ms;
    job->reason = row.reason;
    job->ranks.clear();
    ChangedLocked(*job);
    out = StatusOf(*job);
    ScheduleLocked();
  }
  Flush();
  return out;
}

absl::StatusOr<int64_t> Coordinator::RequestCheckpoint(
    const std::string& job_id) {
  absl::MutexLock l(&mu_);
  Job* job = FindLocked(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  if (job->state != v1::RUNNING)
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job->state),
                     ", not RUNNING"));
  if (job->checkpoint_at == 0)
    job->checkpoint_at = job->max_step + options_.checkpoint_lead_steps;
  return job->checkpoint_at;
}

absl::StatusOr<std::vector<v1::CheckpointRecord>> Coordinator::ListCheckpoints(
    const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  const Job* job = FindLocked(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return job->checkpoints;
}

absl::StatusOr<std::vector<v1::AggregatedStep>> Coordinator::GetMetrics(
    const std::string& job_id, int64_t since_step) const {
  absl::MutexLock l(&mu_);
  const Job* job = FindLocked(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return job->metrics.Since(since_step);
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() const {
  absl::MutexLock l(&mu_);
  std::vector<v1::WorkerInfo> out;
  for (const auto& [name, w] : workers_) {
    v1::WorkerInfo info;
    info.set_name(name);
    info.set_address(w.address);
    info.set_slots(w.slots);
    info.set_free_slots(std::max(0, FreeSlotsLocked(name)));
    info.set_alive(SchedulableLocked(w));
    info.set_last_heartbeat_unix_ms(ToMs(w.last_seen));
    for (const auto& [id, job] : jobs_)
      for (size_t r = 0; r < job->ranks.size(); ++r)
        if (job->ranks[r].worker == name)
          info.add_running_tasks(absl::StrCat(id, "/", r));
    out.push_back(std::move(info));
  }
  return out;
}

// ---------------------------------------------------------------- workers

absl::StatusOr<Coordinator::Registration> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req) {
  if (!SafeComponent(req.name()))
    return absl::InvalidArgumentError(
        absl::StrCat("worker name '", req.name(), "' is empty or invalid"));
  if (req.address().empty())
    return absl::InvalidArgumentError("worker address is required");
  if (req.slots() < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("worker slots must be >= 1, got ", req.slots()));
  Registration reg;
  {
    absl::MutexLock l(&mu_);
    Worker& w = workers_[req.name()];
    if (!w.session_id.empty()) sessions_.erase(w.session_id);
    w.name = req.name();
    w.address = req.address();
    w.slots = req.slots();
    w.registered = true;
    w.attached = false;
    w.last_seen = clock_.Now();
    w.outbox.clear();  // undelivered commands are superseded by reconcile
    w.session_id = absl::StrCat("s", boot_id_, "-", next_session_++, "-",
                                req.name());
    sessions_[w.session_id] = w.name;
    reg.session_id = w.session_id;
    reg.heartbeat_interval_s = options_.heartbeat_interval_s;

    // Reconcile what the worker reports against the current generations.
    std::set<std::pair<std::string, int>> reported;
    for (const v1::TaskStatus& t : req.running()) {
      Job* job = FindLocked(t.ref().job_id());
      const bool current =
          job && job->state == v1::RUNNING &&
          t.ref().generation() == job->generation && t.rank() >= 0 &&
          t.rank() < static_cast<int>(job->ranks.size()) &&
          job->ranks[t.rank()].worker == w.name;
      if (current) {
        reported.insert({job->id, t.rank()});
        HandleTaskStatusLocked(w.name, t);
      } else if (t.state() == v1::TASK_RUNNING) {
        SendKillLocked(w.name, t.ref(), t.rank());
      }
    }
    for (const auto& [id, job] : jobs_) {
      if (job->state != v1::RUNNING) continue;
      for (size_t r = 0; r < job->ranks.size(); ++r) {
        const RankState& rs = job->ranks[r];
        if (rs.worker != w.name || rs.done ||
            reported.count({job->id, static_cast<int>(r)}))
          continue;
        FailGenerationLocked(
            *job, absl::StrCat("rank ", r, " lost: worker ", w.name,
                               " re-registered without it"));
        break;
      }
    }
    ScheduleLocked();
  }
  Flush();
  return reg;
}

absl::Status Coordinator::AttachSession(const std::string& session_id) {
  {
    absl::MutexLock l(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end())
      return absl::NotFoundError(absl::StrCat(
          "unknown session '", session_id, "': register the worker again"));
    Worker& w = workers_[it->second];
    w.attached = true;
    w.last_seen = clock_.Now();
    notify_sessions_.insert(session_id);
    ScheduleLocked();
  }
  Flush();
  return absl::OkStatus();
}

void Coordinator::DetachSession(const std::string& session_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  workers_[it->second].attached = false;
}

absl::StatusOr<std::vector<v1::CoordinatorMessage>> Coordinator::TakeCommands(
    const std::string& session_id) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end())
    return absl::NotFoundError(absl::StrCat(
        "unknown session '", session_id, "': register the worker again"));
  Worker& w = workers_[it->second];
  std::vector<v1::CoordinatorMessage> out(w.outbox.begin(), w.outbox.end());
  w.outbox.clear();
  return out;
}

void Coordinator::HandleTaskStatusLocked(const std::string& worker,
                                         const v1::TaskStatus& t) {
  Job* job = FindLocked(t.ref().job_id());
  const bool current =
      job && job->state == v1::RUNNING &&
      t.ref().generation() == job->generation && t.rank() >= 0 &&
      t.rank() < static_cast<int>(job->ranks.size()) &&
      job->ranks[t.rank()].worker == worker;
  if (!current) {
    // A task of an old generation or an ended job still runs: stop it.
    if (t.state() == v1::TASK_RUNNING) SendKillLocked(worker, t.ref(), t.rank());
    return;
  }
  RankState& rank = job->ranks[t.rank()];
  switch (t.state()) {
    case v1::TASK_RUNNING:
      rank.pid = t.pid();
      return;
    case v1::TASK_EXITED:
      if (t.exit_code() == 0) {
        if (rank.done) return;
        rank.done = true;
        LogError(store_->SetAssignmentState(job->id, job->generation,
                                            t.rank(), 1),
                 "assignment state");
        ChangedLocked(*job);
        if (std::all_of(job->ranks.begin(), job->ranks.end(),
                        [](const RankState& r) { return r.done; }))
          SucceedLocked(*job);
        return;
      }
      FailGenerationLocked(
          *job, absl::StrCat("rank ", t.rank(), " exited with code ",
                             t.exit_code(), " on worker ", worker));
      return;
    case v1::TASK_KILLED:
      FailGenerationLocked(
          *job, absl::StrCat("rank ", t.rank(), " killed by signal ",
                             t.signal(), " on worker ", worker));
      return;
    case v1::TASK_START_FAILED:
      FailGenerationLocked(
          *job, absl::StrCat("rank ", t.rank(), " failed to start on worker ",
                             worker, ": ", t.message()));
      return;
    default:
      return;
  }
}

absl::Status Coordinator::AppendLogLocked(const v1::LogUpload& log) {
  const std::string& id = log.ref().job_id();
  if (!SafeComponent(id) || FindLocked(id) == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("log chunk for unknown job '", id, "'"));
  if (log.rank() < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("log chunk with bad rank ", log.rank()));
  std::error_code ec;
  fs::create_directories(LogDir(id), ec);
  std::ofstream out(LogPath(id, log.rank()),
                    std::ios::binary | std::ios::app);
  out.write(log.data().data(), static_cast<std::streamsize>(log.data().size()));
  if (!out)
    return absl::InternalError(
        absl::StrCat("cannot append to ", LogPath(id, log.rank())));
  return absl::OkStatus();
}

absl::Status Coordinator::HandleWorkerMessage(const v1::WorkerMessage& m) {
  absl::Status status;
  {
    absl::MutexLock l(&mu_);
    auto it = sessions_.find(m.session_id());
    if (it == sessions_.end())
      return absl::NotFoundError(absl::StrCat(
          "unknown session '", m.session_id(), "': register the worker again"));
    Worker& w = workers_[it->second];
    const bool was_schedulable = SchedulableLocked(w);
    w.last_seen = clock_.Now();
    switch (m.kind_case()) {
      case v1::WorkerMessage::kTaskStatus:
        HandleTaskStatusLocked(w.name, m.task_status());
        break;
      case v1::WorkerMessage::kLog:
        status = AppendLogLocked(m.log());
        break;
      default:
        // A heartbeat only refreshes liveness; it can change scheduling only
        // when it makes a stale worker fresh again (fast path otherwise:
        // nothing is scheduled, nothing queued, nothing to flush).
        if (was_schedulable || !SchedulableLocked(w)) return absl::OkStatus();
        break;
    }
    ScheduleLocked();
  }
  Flush();
  return status;
}

// --------------------------------------------------------------- trainers

absl::StatusOr<v1::ReportStepResponse> Coordinator::ReportStep(
    const v1::StepMetrics& m) {
  struct Wait {
    absl::Notification done;
    absl::StatusOr<v1::ReportStepResponse> result;
  };
  auto wait = std::make_shared<Wait>();
  ReportStepAsync(m, [wait](absl::StatusOr<v1::ReportStepResponse> r) {
    wait->result = std::move(r);
    wait->done.Notify();
  });
  wait->done.WaitForNotification();
  return std::move(wait->result);
}

void Coordinator::ReportStepAsync(const v1::StepMetrics& m, ReportDone done) {
  absl::Status refused = ReportStepLocked(m, done);
  if (!refused.ok()) {
    done(refused);
    return;
  }
  Flush();
}

absl::Status Coordinator::ReportStepLocked(const v1::StepMetrics& m,
                                           ReportDone& done) {
  v1::ReportStepResponse resp;
  {
    absl::MutexLock l(&mu_);
    Job* job = FindLocked(m.ref().job_id());
    if (!job)
      return absl::NotFoundError(
          absl::StrCat("no job '", m.ref().job_id(), "'"));
    if (m.ref().generation() != job->generation || job->state != v1::RUNNING)
      return absl::AbortedError(absl::StrCat(
          "generation ", m.ref().generation(), " of job ", job->id,
          " is not current (current generation ", job->generation, ", ",
          v1::JobState_Name(job->state), ")"));
    if (m.rank() < 0 || m.rank() >= static_cast<int>(job->ranks.size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", m.rank(), " outside world of ", job->ranks.size()));
    const absl::Time now = clock_.Now();
    // The reply goes out once the batch holding `row` (or the next batch,
    // when there is no row) is committed.
    auto ack_after_commit = [&](std::optional<MetricRow> row) {
      writer_->Stage(std::move(row),
                     [resp, done = std::move(done)](absl::Status s) {
                       if (s.ok())
                         done(resp);
                       else
                         done(s);
                     });
    };
    if (m.progress_only()) {
      // A sign of life between steps (evaluation, checkpointing): it only
      // refreshes the rank's hang timer.
      job->ranks[m.rank()].last_report = now;
      resp.set_checkpoint_at_step(job->checkpoint_at);
      ack_after_commit(std::nullopt);
      return absl::OkStatus();
    }
    const v1::AggregatedStep* agg =
        job->metrics.Add(job->generation, static_cast<int>(job->ranks.size()),
                         m, ToMs(now));
    std::optional<MetricRow> row;
    if (agg != nullptr) {  // nullptr: a duplicate; it waits for the commit
      row.emplace();
      row->job_id = job->id;
      row->step = agg->step();
      agg->SerializeToString(&row->aggregate);
    }
    RankState& rank = job->ranks[m.rank()];
    rank.reported = true;
    rank.last_report = now;
    rank.last_step = m.step();
    if (!job->any_report) {
      job->any_report = true;
      job->first_report = now;
    }
    job->max_step = std::max(job->max_step, m.step());
    if (m.total_steps() > 0) job->reported_total_steps = m.total_steps();
    // A pending checkpoint every rank has long passed was missed: drop it.
    if (job->checkpoint_at > 0) {
      bool all_past = true;
      for (const RankState& r : job->ranks)
        if (!r.done && r.last_step <= job->checkpoint_at + 10) all_past = false;
      if (all_past) job->checkpoint_at = 0;
    }
    resp.set_checkpoint_at_step(job->checkpoint_at);
    ChangedLocked(*job);
    // Staged under mu_, so stage order is aggregation order: a staged row
    // is never older than one staged before it for the same step.
    ack_after_commit(std::move(row));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Coordinator::ReportCheckpoint(
    const v1::CheckpointRecord& in) {
  std::vector<std::string> expired;
  {
    absl::MutexLock l(&mu_);
    Job* job = FindLocked(in.ref().job_id());
    if (!job)
      return absl::NotFoundError(
          absl::StrCat("no job '", in.ref().job_id(), "'"));
    if (in.ref().generation() != job->generation ||
        job->state == v1::CANCELLED)
      return absl::AbortedError(absl::StrCat(
          "generation ", in.ref().generation(), " of job ", job->id,
          " is not current (current generation ", job->generation, ", ",
          v1::JobState_Name(job->state), ")"));
    if (in.path().empty())
      return absl::InvalidArgumentError("checkpoint path is empty");
    if (in.step() < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint step must be >= 0, got ", in.step()));
    const absl::Time now = clock_.Now();
    v1::CheckpointRecord rec = in;
    rec.set_created_unix_ms(ToMs(now));
    CheckpointRow row;
    row.job_id = job->id;
    row.generation = rec.ref().generation();
    row.step = rec.step();
    row.path = rec.path();
    row.bytes = rec.bytes();
    row.checksum = rec.checksum();
    row.created_ms = rec.created_unix_ms();
    if (absl::Status s = store_->AddCheckpoint(row); !s.ok()) return s;
    auto& list = job->checkpoints;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const v1::CheckpointRecord& c) {
                                return c.path() == rec.path();
                              }),
               list.end());
    auto pos = std::upper_bound(
        list.begin(), list.end(), rec,
        [](const v1::CheckpointRecord& a, const v1::CheckpointRecord& b) {
          return a.step() < b.step();
        });
    list.insert(pos, rec);
    const int keep = job->spec.checkpoint().keep_last();
    while (keep > 0 && static_cast<int>(list.size()) > keep) {
      const std::string path = list.front().path();
      LogError(store_->DeleteCheckpoint(job->id, path), "delete checkpoint");
      list.erase(list.begin());
      std::error_code ec;
      fs::remove_all(path, ec);  // best effort; the trainer may do it too
      expired.push_back(path);
    }
    if (job->checkpoint_at > 0 && rec.step() >= job->checkpoint_at)
      job->checkpoint_at = 0;
    job->last_checkpoint = now;
    ChangedLocked(*job);
  }
  Flush();
  return expired;
}

// ------------------------------------------------------------------- time

void Coordinator::Tick() {
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = clock_.Now();
    for (const auto& [id, job_ptr] : jobs_) {
      Job& job = *job_ptr;
      if (job.state != v1::RUNNING) continue;
      const absl::Duration timeout = job.heartbeat_timeout;
      bool failed = false;
      for (const std::string& wname : job.workers) {
        const Worker& w = workers_[wname];
        if (now - w.last_seen > timeout) {
          FailGenerationLocked(
              job, absl::StrCat("worker ", wname, " missed heartbeats for ",
                                absl::FormatDuration(timeout)));
          failed = true;
          break;
        }
      }
      if (failed) continue;
      if (job.any_report) {
        for (size_t r = 0; r < job.ranks.size(); ++r) {
          const RankState& rs = job.ranks[r];
          if (rs.done) continue;
          const absl::Time last = rs.reported ? rs.last_report : job.first_report;
          if (now - last > timeout) {
            FailGenerationLocked(
                job, absl::StrCat("rank ", r, " hung: no step report for ",
                                  absl::FormatDuration(now - last),
                                  " (last step ", rs.last_step, ")"));
            failed = true;
            break;
          }
        }
      }
      if (failed) continue;
      const double minutes = job.spec.checkpoint().every_n_minutes();
      if (minutes > 0 && job.any_report && job.checkpoint_at == 0 &&
          now - job.last_checkpoint >= absl::Seconds(minutes * 60)) {
        job.checkpoint_at = job.max_step + options_.checkpoint_lead_steps;
      }
    }
    ScheduleLocked();
  }
  Flush();
  // Outside mu_: the store's housekeeping never holds up commits.
  LogError(store_->Maintain(), "store maintenance");
}

}  // namespace frameworm::coordinator
