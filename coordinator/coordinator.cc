#include "coordinator/coordinator.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <optional>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/received_file.h"
#include "absl/synchronization/notification.h"
#include "common/byte_size.h"
#include "common/line_budget.h"
#include "common/printable.h"
#include "common/token.h"
#include "coordinator/checkpoint_paths.h"
#include "coordinator/checkpoint_replication.h"
#include "coordinator/generation_plan.h"
#include "coordinator/sqlite_store.h"
#include "coordinator/state_dir_lock.h"
#include "jobspec/job_spec.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

absl::Status CheckOptions(const CoordinatorOptions& o) {
  if (o.state_dir.empty())
    return absl::InvalidArgumentError("state_dir is required");
  if (o.port_min <= 0 || o.port_max > 65535 || o.port_min > o.port_max)
    return absl::InvalidArgumentError(
        absl::StrCat("bad port range ", o.port_min, "-", o.port_max));
  if (o.straggler_factor <= 1.0)
    return absl::InvalidArgumentError(
        absl::StrCat("straggler factor must be > 1, got ", o.straggler_factor));
  if (o.default_heartbeat_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("heartbeat timeout must be > 0");
  if (o.max_metric_backlog_bytes < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "max_metric_backlog_bytes must be >= 1, got ", o.max_metric_backlog_bytes));
  return absl::OkStatus();
}

// options.state_dir created, absolute and without a trailing '/'.
CoordinatorOptions WithAbsoluteStateDir(CoordinatorOptions o) {
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  o.state_dir = fs::absolute(o.state_dir, ec).lexically_normal().string();
  if (!o.state_dir.empty() && o.state_dir.back() == '/' && o.state_dir != "/")
    o.state_dir.pop_back();
  if (o.checkpoint_roots.empty()) o.checkpoint_roots = {o.state_dir + "/checkpoints"};
  return o;
}

// Session ids of this process never match those of an earlier one, even
// on a simulated clock: the prefix comes from the wall clock.
std::string SessionPrefix() {
  return absl::StrCat(absl::ToUnixMicros(absl::Now()) % 1000000007);
}

}  // namespace

// ------------------------------------------------------------- lifecycle

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const CoordinatorOptions& options, Clock& clock) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const CoordinatorOptions o = WithAbsoluteStateDir(options);
  absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(o.state_dir);
  if (!lock.ok()) return lock.status();
  absl::StatusOr<std::unique_ptr<SqliteStore>> store =
      SqliteStore::Open(o.state_dir);
  if (!store.ok()) return store.status();
  Store* raw = store->get();
  absl::StatusOr<std::unique_ptr<Coordinator>> c =
      Start(o, clock, std::move(store).value(), raw);
  if (c.ok()) (*c)->lock_ = std::move(lock).value();
  return c;
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::CreateWithStore(
    const CoordinatorOptions& options, Clock& clock, Store* store) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (store == nullptr) return absl::InvalidArgumentError("store is null");
  return Start(WithAbsoluteStateDir(options), clock, nullptr, store);
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(
    const CoordinatorOptions& options, Clock& clock,
    std::unique_ptr<Store> owned, Store* store) {
  std::unique_ptr<Coordinator> c(
      new Coordinator(options, clock, std::move(owned), *store));
  if (absl::Status s = c->Reload(); !s.ok()) return s;
  // Uploads the previous process was receiving when it stopped: no call
  // goes on with them, and nothing else would ever delete them.
  c->copies_.RemovePartials();
  c->RemoveFilesOfForgottenJobs();
  return c;
}

void Coordinator::RemoveFilesOfForgottenJobs() {
  std::set<std::string> known;
  {
    absl::MutexLock l(&mu_);
    for (const Job* job : jobs_.Jobs()) known.insert(job->id);
  }
  const std::pair<const char*, std::function<void(const std::string&)>> kinds[] = {
      {"logs", [this](const std::string& id) { logs_.RemoveJob(id); }},
      {"checkpoint-copies", [this](const std::string& id) { copies_.RemoveJob(id); }},
      {"tensorboard", [this](const std::string& id) { tensorboard_.RemoveJob(id); }},
  };
  for (const auto& [sub, remove] : kinds) {
    std::error_code ec;
    std::vector<std::string> forgotten;
    for (fs::directory_iterator it(fs::path(state_dir_) / sub, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string id = it->path().filename().string();
      if (it->is_directory(ec) && !it->is_symlink(ec) && known.count(id) == 0) {
        forgotten.push_back(id);
      }
    }
    for (const std::string& id : forgotten) {
      remove(id);
      std::fprintf(stderr, "coordinator: removed %s/%s/%s (no such job)\n", state_dir_.c_str(),
                   sub, PrintableLine(id, 64).c_str());
    }
  }
}

Coordinator::Coordinator(const CoordinatorOptions& options, Clock& clock,
                         std::unique_ptr<Store> owned, Store& store)
    : state_dir_(options.state_dir),
      checkpoint_roots_(options.checkpoint_roots),
      memory_root_(options.memory_checkpoint_root),
      forget_dead_workers_after_(options.forget_dead_workers_after),
      retain_finished_(options.retain_finished),
      min_free_state_bytes_(options.min_free_state_bytes),
      max_queued_jobs_(options.max_queued_jobs),
      max_ended_jobs_(options.max_ended_jobs),
      stall_after_(options.stall_after),
      metric_history_(static_cast<size_t>(std::max(0, options.metric_history))),
      heartbeat_interval_(absl::Seconds(options.heartbeat_interval_s)),
      worker_timeout_(options.default_heartbeat_timeout),
      max_events_per_job_(std::max<int64_t>(1, options.max_events_per_job)),
      clock_(clock),
      owned_store_(std::move(owned)),
      store_(store),
      // Compacted from the store's thinned history; never when it keeps
      // every step (its rewrite would grow with the run).
      tensorboard_((fs::path(options.state_dir) / "tensorboard").string(),
                   options.metric_history > 0 ? &store_ : nullptr),
      writer_(MetricWriter::Create(
          &store_, [this](const std::vector<MetricRow>& rows) { tensorboard_.Append(rows); },
          options.max_metric_backlog_bytes)),
      logs_({.root = (fs::path(options.state_dir) / "logs").string(),
             .max_bytes_per_rank = options.max_log_bytes}),
      copies_((fs::path(options.state_dir) / "checkpoint-copies").string(),
              options.max_checkpoint_bytes),
      events_(clock),
      workers_({.heartbeat_interval_s = options.heartbeat_interval_s,
                .heartbeat_timeout = options.default_heartbeat_timeout,
                .kill_grace_s = options.kill_grace_s,
                .session_prefix = SessionPrefix()},
               clock),
      ports_({.port_min = options.port_min, .port_max = options.port_max}),
      checkpoints_(store_, options.memory_checkpoint_root),
      jobs_({.state_dir = options.state_dir,
             .memory_root = options.memory_checkpoint_root,
             .advertise = options.advertise,
             .default_heartbeat_timeout = options.default_heartbeat_timeout,
             .reconnect_grace = options.reconnect_grace,
             .startup_timeout = options.startup_timeout,
             .metrics = {.straggler_factor = options.straggler_factor,
                         .window = options.straggler_window,
                         .memory_steps = static_cast<size_t>(std::max(1, options.metric_memory_steps)),
                         .warmup = options.straggler_warmup},
             .checkpoint_lead_steps = options.checkpoint_lead_steps},
            clock, store_, workers_, ports_, checkpoints_, events_) {}

Coordinator::~Coordinator() = default;

namespace {

bool IsCause(const std::string& kind) {
  return kind == "rank_failed" || kind == "hang_detected" || kind == "worker_lost";
}

}  // namespace

absl::Status Coordinator::Reload() {
  absl::MutexLock l(&mu_);
  if (absl::Status s = jobs_.Reload(); !s.ok()) return s;
  for (const Job* job : jobs_.Jobs())
    if (absl::Status s = checkpoints_.Load(job->id); !s.ok()) return s;
  // A generation whose rank found the coordinator's copy of its resume
  // checkpoint damaged (its damage mark) is again not counted when it ends,
  // whether or not another of its ranks reports after this restart.
  for (const Job* job : jobs_.Jobs()) {
    if (IsFinal(job->state) || job->resume_from.empty()) continue;
    if (auto found = RecordOfLocked(job->id, job->resume_from)) {
      (void)CopyDamagedThisGenerationLocked(*job, job->resume_from, found->first.step(),
                                            /*has_holders=*/true);  // an unread mark: as none
    }
  }
  absl::StatusOr<int64_t> max_seq = store_.MaxEventSeq();
  if (!max_seq.ok()) return max_seq.status();
  events_.Restore(*max_seq);
  // The last cause of every job that has not ended (an ended job's reason
  // says it), from its events.
  for (const Job* job : jobs_.Jobs()) {
    if (IsFinal(job->state) || job->generation <= 1) continue;
    for (int64_t after = 0;;) {
      absl::StatusOr<std::vector<EventRow>> rows = store_.LoadEvents(job->id, after, 1000);
      if (!rows.ok()) return rows.status();
      for (const EventRow& row : *rows) {
        v1::Event e;
        if (e.ParseFromString(row.event) && IsCause(e.kind())) {
          jobs_.RestoreLastCause(job->id, e.message(), e.unix_ms());
        }
        after = row.seq;
      }
      if (rows->size() < 1000) break;
    }
  }
  return absl::OkStatus();
}

void Coordinator::SetAdvertise(const std::string& address) {
  absl::MutexLock l(&mu_);
  jobs_.set_advertise(address);
}

void Coordinator::SetListener(Listener* listener) {
  absl::MutexLock l(&mu_);
  listener_ = listener;
}

void Coordinator::Flush() {
  std::set<std::string> sessions, jobs;
  std::vector<v1::Event> events;
  Listener* listener;
  bool pending = false;
  {
    absl::MutexLock l(&mu_);
    sessions = workers_.TakeSessionsToNotify();
    jobs = jobs_.TakeChangedJobs();
    listener = listener_;
    pending = events_.HasPending();
  }
  if (pending) {
    // Events are taken and stored under flush_mu_, so they are stored in
    // seq order: two Flushes at once could otherwise store a later batch
    // first, and a follower reading between them (events -f, after_seq)
    // would pass over the earlier one for good. Only a Flush with events
    // waits here (a step report seldom makes one): no reply waits on
    // another's fsync otherwise.
    absl::MutexLock f(&flush_mu_);
    {
      absl::MutexLock l(&mu_);
      events = events_.TakePending();
    }
    if (!events.empty()) {
      std::vector<EventRow> rows;
      for (const v1::Event& e : events) {
        std::fprintf(stderr, "%s\n", EventLine(e).c_str());
        rows.push_back(RowOfEvent(e));
      }
      LogStoreError(store_.AddEvents(rows), "store events (dropped)");
    }
  }
  if (listener == nullptr) return;
  for (const std::string& s : sessions) listener->SessionHasCommands(s);
  for (const std::string& j : jobs) listener->JobChanged(j);
}

// ------------------------------------------------------------------- jobs

absl::StatusOr<const Job*> Coordinator::FindLocked(
    const std::string& job_id) const {
  const Job* job = jobs_.Find(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", PrintableLine(job_id, 64), "'"));
  return job;
}

v1::JobStatus Coordinator::StatusOf(const Job& job) const {
  v1::JobStatus s;
  s.set_job_id(job.id);
  *s.mutable_spec() = job.spec;
  for (auto& [name, value] : *s.mutable_spec()->mutable_secret_env()) value = "<redacted>";
  s.set_state(job.state);
  s.set_generation(job.generation);
  s.set_restarts(job.restarts);
  s.set_reason(job.reason);
  s.set_last_cause(job.last_cause);
  s.set_last_cause_unix_ms(job.last_cause_ms);
  s.set_warning(job.warning);
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
  s.set_log_dir(logs_.Dir(job.id));
  s.set_tensorboard_dir(tensorboard_.Dir(job.id));
  s.set_total_steps(job.spec.total_steps() > 0
                        ? job.spec.total_steps()
                        : job.progress.reported_total_steps());
  return s;
}

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::JobSpec& in,
                                                   const std::string& owner) {
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(in);
  if (!spec.ok()) return spec.status();
  spec->set_owner(owner);
  if (absl::Status s = CheckCheckpointDirAllowed(spec->checkpoint().dir(),
                                                 checkpoint_roots_);
      !s.ok()) {
    return s;
  }
  if (min_free_state_bytes_ > 0) {
    struct statvfs fs {};
    if (::statvfs(state_dir_.c_str(), &fs) == 0) {
      const int64_t free = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
      if (free < min_free_state_bytes_)
        return absl::ResourceExhaustedError(absl::StrCat(
            "the coordinator's state dir ", state_dir_, " has ", free >> 20,
            " MiB free, under --min-free-state (", min_free_state_bytes_ >> 20,
            " MiB): new jobs are refused until space is freed; running jobs go on"));
    }
  }
  absl::StatusOr<std::string> id;
  {
    absl::MutexLock l(&mu_);
    if (const int queued = jobs_.Queued(); max_queued_jobs_ > 0 && queued >= max_queued_jobs_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          queued, " jobs wait to start (--max-queued-jobs ", max_queued_jobs_,
          "): new jobs are refused until some start or are cancelled"));
    }
    id = jobs_.Submit(*std::move(spec));
    if (id.status().code() == absl::StatusCode::kResourceExhausted)
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator's state dir ", state_dir_,
                       " is full: new jobs are refused until space is freed (",
                       id.status().message(), ")"));
    if (!id.ok()) return id;
    jobs_.Schedule();
  }
  Flush();
  return id;
}

absl::StatusOr<std::string> Coordinator::JobOwner(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  absl::StatusOr<const Job*> job = FindLocked(job_id);
  if (!job.ok()) return job.status();
  return (*job)->spec.owner();
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(
    const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  absl::StatusOr<const Job*> job = FindLocked(job_id);
  if (!job.ok()) return job.status();
  return StatusOf(**job);
}

std::vector<v1::JobStatus> Coordinator::ListJobs() const {
  absl::MutexLock l(&mu_);
  std::vector<v1::JobStatus> out;
  for (const Job* j : jobs_.Jobs()) out.push_back(StatusOf(*j));
  return out;
}

bool Coordinator::JobExists(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  return jobs_.Find(job_id) != nullptr;
}

namespace {
// What a log line says of the lines a LineBudget held back before it.
std::string Suppressed(int64_t n) {
  return n > 0 ? absl::StrCat(" (", n, " more such lines not logged)") : "";
}

int64_t LargestWorld(const Job& job) {
  return int64_t{job.spec.nodes_max()} * std::max(1, job.spec.nproc_per_node());
}
}  // namespace

absl::Status Coordinator::CheckLogRequest(const std::string& job_id, int rank, int64_t offset,
                                          const std::map<int, int64_t>& rank_offsets) const {
  absl::MutexLock l(&mu_);
  const Job* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", PrintableLine(job_id, 64), "'"));
  if (rank != -1 && (rank < 0 || rank >= LargestWorld(*job))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", job_id, " has no rank ", rank, " (ranks 0..", LargestWorld(*job) - 1,
        ", or -1 for all)"));
  }
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("log offset must be >= 0, got ", offset));
  }
  if (!rank_offsets.empty() && rank != -1) {
    return absl::InvalidArgumentError(
        "rank_offsets are for every rank's log (rank -1); for one rank give offset");
  }
  for (const auto& [r, o] : rank_offsets) {
    if (r < 0 || r >= LargestWorld(*job)) {
      return absl::InvalidArgumentError(absl::StrCat("rank_offsets names rank ", r, ", but job ",
                                                     job_id, " has ranks 0..",
                                                     LargestWorld(*job) - 1));
    }
    if (o < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank_offsets: rank ", r, "'s offset must be >= 0, got ", o));
    }
  }
  return absl::OkStatus();
}

bool Coordinator::JobFinal(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  const Job* job = jobs_.Find(job_id);
  return job == nullptr || IsFinal(job->state);
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(
    const std::string& job_id) {
  v1::JobStatus out;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.Cancel(job_id);
    if (!job.ok()) return job.status();
    out = StatusOf(**job);
    jobs_.Schedule();
  }
  Flush();
  return out;
}

absl::StatusOr<Coordinator::DebugAsked> Coordinator::DebugJob(const std::string& job_id,
                                                              int rank) {
  DebugAsked out;
  {
    absl::MutexLock l(&mu_);
    out.marker = absl::StrCat("frameworm-cli debug #", ++debug_requests_);
    absl::StatusOr<std::vector<int>> asked = jobs_.DebugJob(job_id, rank, out.marker);
    if (!asked.ok()) return asked.status();
    out.ranks = *std::move(asked);
    out.now = clock_.Now();
    if (const Job* job = jobs_.Find(job_id)) {
      out.generation = job->generation;
      for (int r : out.ranks) {
        if (r < job->progress.world() && job->progress.collectives(r) != nullptr) {
          out.recorders.emplace_back(r, *job->progress.collectives(r));
        }
      }
      if (auto v = job->progress.CompareRecorders(out.now)) out.collectives = v->text;
    }
  }
  Flush();
  return out;
}

absl::StatusOr<int64_t> Coordinator::RequestCheckpoint(
    const std::string& job_id) {
  absl::MutexLock l(&mu_);
  return jobs_.RequestCheckpoint(job_id);
}

absl::StatusOr<std::vector<v1::CheckpointRecord>> Coordinator::ListCheckpoints(
    const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  absl::StatusOr<const Job*> job = FindLocked(job_id);
  if (!job.ok()) return job.status();
  std::vector<v1::CheckpointRecord> out;
  for (const v1::CheckpointRecord& c : checkpoints_.List(job_id)) {
    // An ended job's memory copies are being released (trainers and workers
    // delete them; the catalog drops the records at the next BoundGrowth).
    if (c.memory() && IsFinal((*job)->state)) continue;
    v1::CheckpointRecord& r = out.emplace_back(c);
    r.clear_secret();                  // workers' business only
    r.mutable_ref()->clear_token();    // rank 0's credential, not the reader's
  }
  return out;
}

absl::StatusOr<std::vector<v1::AggregatedStep>> Coordinator::GetMetrics(
    const std::string& job_id, int64_t since_step) const {
  std::vector<v1::AggregatedStep> recent;
  int64_t evicted_below = 0;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = FindLocked(job_id);
    if (!job.ok()) return job.status();
    recent = (*job)->metrics.Since(since_step);
    evicted_below = (*job)->metrics.evicted_below();
  }
  if (since_step >= evicted_below - 1) return recent;  // memory holds all of it (no overflow: evicted_below >= 0)
  // Older steps from the store (outside the lock), memory's copy winning.
  absl::StatusOr<std::vector<MetricRow>> rows = store_.LoadMetrics(job_id);
  if (!rows.ok()) return rows.status();
  std::map<int64_t, v1::AggregatedStep> merged;
  for (const MetricRow& row : *rows) {
    if (row.step <= since_step) continue;
    v1::AggregatedStep s;
    if (s.ParseFromString(row.aggregate)) merged[row.step] = std::move(s);
  }
  for (v1::AggregatedStep& s : recent) merged[s.step()] = std::move(s);
  std::vector<v1::AggregatedStep> out;
  out.reserve(merged.size());
  for (auto& [step, s] : merged) out.push_back(std::move(s));
  return out;
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() const {
  absl::MutexLock l(&mu_);
  const std::map<std::string, int> used = jobs_.SlotsInUse();
  std::vector<v1::WorkerInfo> out;
  for (const WorkerRegistry::Worker* w : workers_.All()) {
    v1::WorkerInfo info;
    info.set_name(w->name);
    info.set_address(w->address);
    info.set_peer_endpoint(w->peer_endpoint);
    info.set_slots(w->slots);
    auto u = used.find(w->name);
    info.set_free_slots(
        std::max(0, w->slots - (u == used.end() ? 0 : u->second)));
    info.set_alive(workers_.Schedulable(*w));
    info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(w->last_seen));
    for (std::string& t : jobs_.TasksOn(w->name))
      info.add_running_tasks(std::move(t));
    out.push_back(std::move(info));
  }
  return out;
}

// ---------------------------------------------------------------- workers

namespace {

// Stored rows as events, in order; a row that does not parse stays, saying so.
absl::StatusOr<std::vector<v1::Event>> EventsOfRows(
    const absl::StatusOr<std::vector<EventRow>>& rows) {
  if (!rows.ok()) return rows.status();
  std::vector<v1::Event> out;
  for (const EventRow& row : *rows) {
    v1::Event e;
    if (!e.ParseFromString(row.event)) {  // kept in order, with what the row says
      e = EventLog::Make("unreadable", row.job_id, "this event's stored row does not parse");
      e.set_unix_ms(row.unix_ms);
    }
    e.set_seq(row.seq);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<v1::Event>> Coordinator::ListEvents(
    const std::optional<std::string>& job_id, int64_t after_seq, int limit) const {
  return EventsOfRows(store_.LoadEvents(job_id, after_seq, limit));
}

absl::StatusOr<std::vector<v1::Event>> Coordinator::ListNewestEvents(
    const std::optional<std::string>& job_id, int limit) const {
  return EventsOfRows(store_.LoadNewestEvents(job_id, limit));
}

std::map<std::string, std::string> Coordinator::JobOwners() const {
  absl::MutexLock l(&mu_);
  std::map<std::string, std::string> out;
  for (const Job* job : jobs_.Jobs()) out[job->id] = job->spec.owner();
  return out;
}

absl::StatusOr<Coordinator::Registration> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req) {
  Registration reg;
  {
    absl::MutexLock l(&mu_);
    const WorkerRegistry::Worker* before = workers_.Find(req.name());
    const bool same_process = before != nullptr && before->registered &&
                              !req.instance().empty() && before->instance == req.instance();
    // Known only from the reload (WorkerRegistry::Expect): its first
    // registration with this process.
    const bool first_since_reload = before != nullptr && !before->registered;
    absl::StatusOr<std::string> session = workers_.Register(req);
    if (!session.ok()) return session.status();
    reg.session_id = *std::move(session);
    reg.heartbeat_interval_s = workers_.heartbeat_interval_s();
    if (live_workers_.insert(req.name()).second) {
      v1::Event e = EventLog::Make(
          "worker_joined", "",
          absl::StrCat("worker ", req.name(), " joined from ", req.address(), " with ", req.slots(),
                       " slot", req.slots() == 1 ? "" : "s",
                       req.running_size() > 0
                           ? absl::StrCat(", running ", req.running_size(), " task(s)")
                           : ""));
      e.set_worker(req.name());
      events_.Emit(std::move(e));
    }
    jobs_.Reconcile(req.name(), req.running(), req.ended(), same_process, first_since_reload);
    // Copies it still holds (a restarted coordinator knew no holders); the
    // list is whole (a worker holds at most kMaxHeld), so a copy it no
    // longer lists is gone (an empty work dir, a fresh /dev/shm): it holds
    // that one no more, and no rank is sent to fetch from it.
    {
      std::set<std::pair<std::string, int64_t>> listed;
      for (const v1::CheckpointHeld& h : req.held())
        if (h.ok()) listed.insert({h.job_id(), h.step()});
      checkpoints_.KeepOnlyHolds(req.name(), listed);
    }
    for (const v1::CheckpointHeld& h : req.held()) {
      DropUnrecordedLocked(req.name(), h);
      if (h.ok() && HolderClaimCountsLocked(req.name(), h) &&
          checkpoints_.AddHolder(h.job_id(), h.step(), req.name()) > 0) {
        checkpoints_.AdoptSecret(h.job_id(), h.step(), h.secret());
      }
    }
    jobs_.Schedule();
  }
  Flush();
  return reg;
}

absl::Status Coordinator::AttachSession(const std::string& session_id) {
  {
    absl::MutexLock l(&mu_);
    if (absl::Status s = workers_.Attach(session_id); !s.ok()) return s;
    jobs_.Schedule();
  }
  Flush();
  return absl::OkStatus();
}

void Coordinator::DetachSession(const std::string& session_id) {
  absl::MutexLock l(&mu_);
  workers_.Detach(session_id);
}

absl::StatusOr<std::vector<v1::CoordinatorMessage>> Coordinator::TakeCommands(
    const std::string& session_id) {
  absl::MutexLock l(&mu_);
  return workers_.Take(session_id);
}

absl::Status Coordinator::CheckLogLocked(const std::string& worker,
                                         const v1::LogUpload& log) const {
  const std::string& id = log.ref().job_id();
  const Job* job = jobs_.Find(id);
  if (job == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("log chunk for unknown job '", PrintableLine(id, 64), "'"));
  if (log.rank() < 0 || log.rank() >= LargestWorld(*job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log chunk for rank ", log.rank(), " outside job ", id));
  }
  // Only the worker that ran the rank in that generation adds to its log.
  const int64_t gen = log.ref().generation() == 0 ? job->generation : log.ref().generation();
  if (gen < 1 || gen > job->generation) {
    return absl::InvalidArgumentError(absl::StrCat("log chunk for generation ", gen, " of job ",
                                                   id, ", which is at generation ",
                                                   job->generation));
  }
  const size_t rank = static_cast<size_t>(log.rank());
  bool ran_it;
  if (gen == job->generation && !job->ranks.empty()) {
    ran_it = rank < job->ranks.size() && job->ranks[rank].worker == worker;
  } else if (auto past = job->past.find(gen); past != job->past.end()) {
    const std::vector<std::string>& ran = past->second.rank_workers;
    ran_it = rank < ran.size() && ran[rank] == worker;
  } else {
    // Older than what is remembered, or ended before a coordinator
    // restart: one of the job's workers.
    ran_it = std::find(job->workers.begin(), job->workers.end(), worker) != job->workers.end();
  }
  if (!ran_it) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log chunk for rank ", log.rank(), " of job ", id, " generation ", gen, " from worker ",
        worker, ", which did not run it"));
  }
  if (log.data().size() > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log chunk of ", log.data().size(), " bytes; at most 1 MiB"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::HandleWorkerMessage(const v1::WorkerMessage& m) {
  absl::Status status;
  bool append = false;
  std::string worker;
  int64_t log_generation = 0;  // a chunk's generation (0 in the request: the job's current)
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<WorkerRegistry::Heard> heard = workers_.Hear(m.session_id());
    if (!heard.ok()) return heard.status();
    worker = heard->worker->name;  // also used after the lock
    switch (m.kind_case()) {
      case v1::WorkerMessage::kTaskStatus: {
        const v1::TaskStatus& t = m.task_status();
        jobs_.HandleTaskStatus(worker, t);
        if (t.state() == v1::TASK_EXITED || t.state() == v1::TASK_KILLED ||
            t.state() == v1::TASK_START_FAILED) {
          // Applied: the worker may forget it (else it resends it).
          ReceiptLocked(worker, t.ref(), t.rank(), /*final_status=*/true, "", 0);
        }
        break;
      }
      case v1::WorkerMessage::kHeld:
        HeldLocked(worker, m.held());
        break;
      case v1::WorkerMessage::kLog:
        // Checked here, written below without the lock: a slow disk holds up
        // only this session (its messages are handled one at a time, so
        // chunks stay in order).
        status = CheckLogLocked(worker, m.log());
        append = status.ok();
        if (!append) ReceiptLogLocked(worker, m.log(), std::nullopt);  // refused for good
        if (append) {
          const Job* job = jobs_.Find(m.log().ref().job_id());  // checked: it exists
          log_generation = m.log().ref().generation() != 0 ? m.log().ref().generation()
                                                           : job->generation;
        }
        if (!heard->became_schedulable) break;
        jobs_.Schedule();
        break;
      default:
        // A heartbeat only refreshes liveness; it can change scheduling only
        // when it makes a stale worker fresh again (fast path otherwise:
        // nothing is scheduled, nothing queued, nothing to flush).
        if (!heard->became_schedulable) return absl::OkStatus();
        break;
    }
    if (!m.has_log()) jobs_.Schedule();
  }
  Flush();
  if (!append) return status;
  const v1::LogUpload& log = m.log();
  absl::StatusOr<int64_t> end = logs_.AppendAt(log.ref().job_id(), log.rank(), log_generation,
                                               log.stream(), log.offset(), log.data());
  // A disk error is not receipted (the worker keeps the bytes and sends
  // them again on its next session); a refused chunk is, as never stored.
  if (!end.ok() && !absl::IsInvalidArgument(end.status())) return end.status();
  {
    absl::MutexLock l(&mu_);
    ReceiptLogLocked(worker, log, end.ok() ? std::optional<int64_t>(*end) : std::nullopt);
  }
  Flush();
  return end.status();
}

void Coordinator::ReceiptLogLocked(const std::string& worker, const v1::LogUpload& log,
                                   std::optional<int64_t> end) {
  // Refused: the chunk's own end (saturated; the worker counts no more
  // than it sent).
  const int64_t size = static_cast<int64_t>(log.data().size());
  const int64_t own_end = log.offset() < 0              ? 0
                          : log.offset() > INT64_MAX - size ? INT64_MAX
                                                            : log.offset() + size;
  ReceiptLocked(worker, log.ref(), log.rank(), /*final_status=*/false, PrintableLine(log.stream(), 16),
                end.value_or(own_end));
}

void Coordinator::ReceiptLocked(const std::string& worker, const v1::JobRef& ref, int rank,
                                bool final_status, const std::string& stream, int64_t log_end) {
  v1::CoordinatorMessage r;
  v1::Receipt* receipt = r.mutable_receipt();
  *receipt->mutable_ref() = ref;
  receipt->set_rank(rank);
  receipt->set_final_status(final_status);
  receipt->set_stream(stream);
  receipt->set_log_offset(log_end);
  workers_.SendReceipt(worker, std::move(r));
}

bool Coordinator::HolderClaimCountsLocked(const std::string& worker,
                                          const v1::CheckpointHeld& held) const {
  const v1::CheckpointRecord* rec = checkpoints_.Find(held.job_id(), held.step());
  if (rec == nullptr) return false;
  if (workers_.SentHold(worker, held.job_id(), held.step())) return true;
  // Not asked by this coordinator process: the worker must show the hold's
  // secret (stored with the record, so a restart keeps it). A record stored
  // by an older coordinator has none: the first holder that shows one
  // gives it (AdoptSecret).
  if (rec->secret().empty()) return !held.secret().empty();
  return TokensEqual(held.secret(), rec->secret());
}

bool Coordinator::DropUnrecordedLocked(const std::string& worker,
                                       const v1::CheckpointHeld& held) {
  if (!held.ok() || !IsPlainName(held.job_id()) ||
      checkpoints_.Find(held.job_id(), held.step()) != nullptr) {
    return false;
  }
  // What a holder of the record would have been sent when it went: the
  // step's drop while the job is known (its records expire one by one), the
  // whole job's once it is gone (only copies go; a rank's own files stay).
  const int64_t step = jobs_.Find(held.job_id()) != nullptr ? held.step() : -1;
  workers_.SendUnrecordedDrop(worker, held.job_id(), step);
  return true;
}

void Coordinator::HeldLocked(const std::string& worker, const v1::CheckpointHeld& held) {
  if (DropUnrecordedLocked(worker, held)) return;  // routine: no line
  if (held.ok()) {
    if (!HolderClaimCountsLocked(worker, held)) {
      if (int64_t more = 0; held_log_budget_.Take(clock_.Now(), &more)) {
        std::fprintf(stderr,
                     "coordinator: worker %s claims job %s's checkpoint of step %lld, which it "
                     "was not asked to hold; ignored%s\n",
                     worker.c_str(), PrintableLine(held.job_id(), 64).c_str(),
                     static_cast<long long>(held.step()), Suppressed(more).c_str());
      }
      return;
    }
    const int holders = checkpoints_.AddHolder(held.job_id(), held.step(), worker);
    checkpoints_.AdoptSecret(held.job_id(), held.step(), held.secret());
    if (holders != 1) return;
    // The first holder is rank 0's worker: now the replicas fetch from it.
    const Job* job = jobs_.Find(held.job_id());
    if (job == nullptr || job->ranks.empty() || job->ranks[0].worker != worker) return;
    const v1::CheckpointPolicy& policy = job->spec.checkpoint();
    const int replicas = policy.has_replicas() ? policy.replicas() : kDefaultCheckpointReplicas;
    for (const v1::CheckpointRecord& rec : checkpoints_.List(held.job_id())) {
      if (rec.step() != held.step()) continue;
      for (auto& [w, m] : ReplicaHolds(workers_, rec, worker, job->workers, replicas)) {
        workers_.Send(w, std::move(m));
      }
    }
    return;
  }
  if (int64_t more = 0; held_log_budget_.Take(clock_.Now(), &more)) {
    std::fprintf(stderr,
                 "coordinator: worker %s holds no copy of job %s's checkpoint of step %lld: %s%s\n",
                 worker.c_str(), PrintableLine(held.job_id(), 64).c_str(),
                 static_cast<long long>(held.step()), PrintableLine(held.error(), 512).c_str(),
                 Suppressed(more).c_str());
  }
}

// --------------------------------------------------------------- trainers

absl::Status Coordinator::BacklogFull() {
  const absl::Status cause = writer_->last_error();
  const std::string what = absl::StrCat(
      ByteSize(writer_->backlog_bytes()), " of aggregated metrics wait for the coordinator's store",
      cause.ok() ? std::string(", which lags")
                 : absl::StrCat(", whose last write failed: ", cause.message()));
  if (int64_t more = 0; backlog_log_budget_.Take(clock_.Now(), &more)) {
    std::fprintf(stderr, "coordinator: step reports are deferred: %s%s\n", what.c_str(),
                 Suppressed(more).c_str());
  }
  return absl::UnavailableError(absl::StrCat(
      "step report not recorded, send it again: ", what));
}

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
  absl::Status refused;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<JobScheduler::StepOutcome> out = jobs_.ReportStep(m, !writer_->Full());
    if (!out.ok()) {
      refused = out.status();
    } else {
      v1::ReportStepResponse resp;
      resp.set_checkpoint_at_step(out->checkpoint_at);
      const absl::Status deferred = out->deferred ? BacklogFull() : absl::OkStatus();
      // The reply goes out once the batch holding the row (or the next
      // batch, when there is none: a progress report, a duplicate) is
      // committed. Staged under mu_, so stage order is aggregation order: a
      // staged row is never older than one staged before it for its step.
      // A deferred report stages nothing but still waits for a commit: its
      // call is what makes the writer try the failing store again.
      writer_->Stage(std::move(out->row),
                     [resp, deferred, done = std::move(done)](absl::Status s) {
                       if (!deferred.ok())
                         done(deferred);
                       else if (s.ok())
                         done(resp);
                       else
                         done(s);
                     });
    }
  }
  if (!refused.ok()) {
    done(refused);  // not moved: only the accepted branch moves it
    return;
  }
  Flush();
}

void Coordinator::ReportStepsAsync(const v1::StepReports& batch, ReportDone done) {
  const int n = batch.reports_size();
  if (n == 0 || n > kMaxStepReports) {
    done(absl::InvalidArgumentError(absl::StrCat("a batch holds 1 to ", kMaxStepReports,
                                                 " step reports, got ", n)));
    return;
  }
  {
    absl::MutexLock l(&mu_);
    absl::Status refused;
    v1::ReportStepResponse resp;
    // Asked once: a batch is recorded whole or deferred whole (sent again
    // whole, its recorded reports then count once as duplicates).
    const bool record = !writer_->Full();
    int refused_at = -1;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<JobScheduler::StepOutcome> out = jobs_.ReportStep(batch.reports(i), record);
      if (!out.ok()) {
        refused = absl::Status(out.status().code(), absl::StrCat("report ", i + 1, " of ", n, ": ",
                                                                 out.status().message()));
        refused_at = i;
        break;
      }
      resp.set_checkpoint_at_step(out->checkpoint_at);
      // Staged under mu_, in order, as ReportStepAsync does.
      writer_->Stage(std::move(out->row), [](absl::Status) {});
    }
    // Deferred: the reports before a refused one were not recorded either,
    // so the batch must come back (a refusal at its first report is final).
    if (!record && refused_at != 0) {
      refused = BacklogFull();
    }
    // Runs after the commit that covers every row staged above.
    writer_->Stage(std::nullopt, [refused, resp, done = std::move(done)](absl::Status s) {
      if (!refused.ok()) {
        done(refused);
      } else if (!s.ok()) {
        done(s);
      } else {
        done(resp);
      }
    });
  }
  Flush();
}

absl::StatusOr<std::vector<std::string>> Coordinator::ReportCheckpoint(
    const v1::CheckpointRecord& in) {
  absl::StatusOr<std::vector<std::string>> expired;
  // The steps before, with their holders; then: the steps that expired.
  std::map<int64_t, std::vector<std::string>> steps_before;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.CheckpointTarget(in.ref(), /*writes=*/true);
    if (!job.ok()) return job.status();
    if (in.step() < 0 || in.bytes() < 0 || in.checksum().size() > 128) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint record out of range: step ", in.step(), ", bytes ", in.bytes(),
          ", checksum of ", in.checksum().size(), " characters (at most 128)"));
    }
    if (!in.checksum().empty() && !IsCrc32Text(in.checksum())) {  // empty: not given
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint record checksum '", PrintableLine(in.checksum(), 40),
                       "' is not crc32:xxxxxxxx (8 lower-case hex digits)"));
    }
    if (in.memory() && memory_root_.empty()) {
      return absl::InvalidArgumentError("this coordinator takes no in-memory checkpoints");
    }
    // A copy uploaded for this step is the file the record describes: a
    // record of another size would make every replica's fetch of it fail.
    // Bytes not given (0): the copy's.
    // (In-memory records have no copy.)
    int64_t copy_bytes = -1;
    if (absl::StatusOr<std::string> copy =
            in.memory() ? absl::NotFoundError("") : copies_.PathOf(in.ref().job_id(), in.step());
        copy.ok()) {
      std::error_code ec;
      const uintmax_t size = std::filesystem::file_size(*copy, ec);
      if (!ec) copy_bytes = static_cast<int64_t>(size);
      if (!ec && in.bytes() != 0 && static_cast<int64_t>(size) != in.bytes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint record of step ", in.step(), " says ", in.bytes(),
                         " bytes; the copy uploaded for that step has ", size));
      }
    }
    // What every holder checks a copy against: a record that has neither
    // (nor an uploaded copy to take them from) could never be held or fetched.
    if (copy_bytes < 0 && (in.checksum().empty() || in.bytes() == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint record of step ", in.step(), " needs its size (bytes > 0) and checksum "
          "(crc32:xxxxxxxx) unless a copy of that step was uploaded first; got bytes ",
          in.bytes(), ", checksum '", PrintableLine(in.checksum(), 40), "'"));
    }
    if (absl::Status s = CheckReportedCheckpointPath(
            in.path(), in.step(),
            in.memory() ? MemoryCheckpointDir(memory_root_, (*job)->id, (*job)->submitted_ms)
                        : CheckpointDir((*job)->spec, (*job)->id, state_dir_));
        !s.ok()) {
      return s;
    }
    v1::CheckpointRecord rec = in;
    if (rec.bytes() == 0 && copy_bytes >= 0) rec.set_bytes(copy_bytes);
    rec.clear_holders();  // read-only: learned from the workers' answers
    rec.clear_secret();   // the coordinator's, never a trainer's
    rec.set_created_unix_ms(absl::ToUnixMillis(clock_.Now()));
    for (const auto& c : checkpoints_.List(rec.ref().job_id())) {
      // The same file reported again (a retried report, its answer lost):
      // recorded already, nothing expires anew. No row, event or hold is
      // written again, so repeating a report costs the coordinator nothing.
      if (c.path() == rec.path() && c.checksum() == rec.checksum() && c.bytes() == rec.bytes() &&
          c.step() == rec.step() && c.memory() == rec.memory() &&
          c.ref().generation() == rec.ref().generation()) {
        return std::vector<std::string>{};
      }
      // The same file from another generation: its holders stay.
      if (c.path() == rec.path() && c.checksum() == rec.checksum() && c.bytes() == rec.bytes()) {
        *rec.mutable_holders() = c.holders();
        rec.set_secret(c.secret());
      }
    }
    if (rec.secret().empty()) rec.set_secret(NewToken());  // what peers must show to fetch it
    std::set<int64_t> memory_steps;  // in-memory records expire too often to tell
    for (const auto& c : checkpoints_.List(rec.ref().job_id())) {
      steps_before[c.step()].assign(c.holders().begin(), c.holders().end());
      if (c.memory()) memory_steps.insert(c.step());
    }
    steps_before[rec.step()];
    expired = checkpoints_.Record(rec, (*job)->spec.checkpoint().keep_last());
    if (!expired.ok()) return expired;
    for (const auto& c : checkpoints_.List(rec.ref().job_id())) steps_before.erase(c.step());
    // Only a disk checkpoint answers a requested one (a growth's, a timed
    // one): an in-memory record has no coordinator copy and, this early, no
    // holder, so no new node could resume from it; its steps may also come
    // in before a disk checkpoint that is still uploading.
    if (!rec.memory()) jobs_.CheckpointRecorded(rec.ref().job_id(), rec.step());
    if (!rec.memory()) {
      v1::Event e = EventLog::Make(
          "checkpoint_saved", rec.ref().job_id(),
          absl::StrCat("job ", rec.ref().job_id(), ": checkpoint of step ", rec.step(), " (",
                       rec.bytes(), " bytes) saved at ", PrintableLine(rec.path(), 300)));
      e.set_generation(rec.ref().generation());
      e.set_step(rec.step());
      events_.Emit(std::move(e));
    }
    for (const auto& [step, holders] : steps_before) {
      if (step == rec.step() || memory_steps.count(step)) continue;
      v1::Event e = EventLog::Make(
          "checkpoint_expired", rec.ref().job_id(),
          absl::StrCat("job ", rec.ref().job_id(), ": checkpoint of step ", step,
                       " expired (keep_last ", (*job)->spec.checkpoint().keep_last(), ")"));
      e.set_step(step);
      events_.Emit(std::move(e));
    }
    // Copies on workers: rank 0's worker holds the file (replicas fetch it
    // once it says so, HeldLocked); holders of expired steps drop theirs.
    std::vector<WorkerCommand> commands;
    if (!(*job)->ranks.empty()) commands.push_back(SourceHold(rec, (*job)->ranks[0].worker));
    for (const auto& [step, holders] : steps_before) {
      for (auto& c : DropCommands(rec.ref().job_id(), step, holders)) commands.push_back(c);
    }
    for (auto& [w, m] : commands) workers_.Send(w, std::move(m));
  }
  Flush();
  // Outside the lock: file deletes never hold up the core.
  for (const auto& [gone, holders] : steps_before) copies_.Remove(in.ref().job_id(), gone);
  return expired;
}

namespace {

// INVALID_ARGUMENT unless `path` is what `job`'s generation resumed from.
absl::Status CheckResumedFrom(const Job& job, const std::string& path) {
  if (!path.empty() && path == job.resume_from) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("'", PrintableLine(path, 200),
                                                 "' is not the checkpoint generation ",
                                                 job.generation, " of job ", job.id,
                                                 " resumed from"));
}

}  // namespace

std::optional<std::pair<v1::CheckpointRecord, std::vector<std::string>>>
Coordinator::RecordOfLocked(const std::string& job_id, const std::string& path) const {
  for (const auto& c : checkpoints_.List(job_id)) {
    if (c.path() == path) {
      return std::make_pair(c, std::vector<std::string>(c.holders().begin(), c.holders().end()));
    }
  }
  return std::nullopt;
}

std::vector<std::string> Coordinator::ServingLocked(
    const std::vector<std::string>& holders) const {
  std::vector<std::string> out;
  for (const std::string& h : holders) {
    const WorkerRegistry::Worker* w = workers_.Find(h);
    if (w != nullptr && workers_.Schedulable(*w)) out.push_back(h);
  }
  return out;
}

absl::StatusOr<bool> Coordinator::CopyDamagedThisGenerationLocked(const Job& job,
                                                                  const std::string& path,
                                                                  int64_t step, bool has_holders) {
  const Job::CopyVerdict& v = job.copy_verdict;
  if (v.generation == job.generation && v.path == path) return v.damaged;
  // None in memory: a coordinator restarted since a rank of this
  // generation found the copy damaged finds its mark.
  absl::StatusOr<int64_t> marked = copies_.DamagedIn(job.id, step);
  if (!marked.ok()) return marked.status();
  if (*marked != job.generation) return false;
  jobs_.NoteCopyVerdict(job.id, path, /*damaged=*/true);
  if (has_holders) jobs_.ResumeFailed(job.id);
  return true;
}

absl::StatusOr<bool> Coordinator::DropDamagedCopy(const v1::BadCheckpoint& bad, bool* removed) {
  const std::string& job_id = bad.ref().job_id();
  auto intact = [&](const v1::CheckpointRecord& r) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator's copy of job ", job_id, "'s checkpoint of step ", r.step(),
        " matches its record (", r.bytes(), " bytes, ", r.checksum(),
        "): it is not damaged; the download that was not these bytes failed on its way"));
  };
  // The verdict a report of this generation already had: the same answer.
  auto answer = [&](const Job& job, const v1::CheckpointRecord& r, bool has_holders)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<absl::StatusOr<bool>> {
    const Job::CopyVerdict& v = job.copy_verdict;
    if (v.generation == job.generation && v.path == bad.path() && !v.damaged) {
      return intact(r);
    }
    absl::StatusOr<bool> damaged =
        CopyDamagedThisGenerationLocked(job, bad.path(), r.step(), has_holders);
    if (!damaged.ok()) return damaged.status();
    if (!*damaged) return std::nullopt;
    *removed = true;
    return has_holders;
  };
  std::optional<v1::CheckpointRecord> record;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.CheckpointTarget(bad.ref(), /*writes=*/false);
    if (!job.ok()) return job.status();
    if (absl::Status s = CheckResumedFrom(**job, bad.path()); !s.ok()) return s;
    auto found = RecordOfLocked(job_id, bad.path());
    // None (another rank's report dropped it), a memory record (no copy
    // here) or one with nothing to check a copy against: as any bad one.
    if (!found || found->first.memory() ||
        (found->first.bytes() == 0 && found->first.checksum().empty())) {
      return false;
    }
    if (auto a = answer(**job, found->first, !found->second.empty())) return *a;
    record = found->first;
  }
  // The check: outside the lock (it may read the whole copy). No copy here
  // is no verdict, unless another rank's report gave one meanwhile; a copy
  // that cannot be read is none either (UNAVAILABLE: nothing removed).
  std::optional<bool> damaged;
  absl::StatusOr<std::string> copy = copies_.PathOf(job_id, record->step());
  if (copy.ok()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(*copy, ec);
    if (!ec && record->bytes() > 0 && static_cast<int64_t>(size) != record->bytes()) {
      damaged = true;  // another size: no need to read it
    } else {
      absl::StatusOr<std::pair<int64_t, std::string>> sum = FileChecksum(*copy);
      if (!sum.ok()) {
        return absl::UnavailableError(absl::StrCat(
            "the coordinator cannot check its copy of job ", job_id, "'s checkpoint of step ",
            record->step(), " now: ", sum.status().message()));
      }
      damaged = !((record->bytes() == 0 || sum->first == record->bytes()) &&
                  (record->checksum().empty() || sum->second == record->checksum()));
    }
  }
  std::vector<std::string> holders;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.CheckpointTarget(bad.ref(), /*writes=*/false);
    if (!job.ok()) return job.status();  // the generation ended meanwhile
    auto found = RecordOfLocked(job_id, bad.path());
    if (!found) return false;
    holders = found->second;
    if (auto a = answer(**job, found->first, !holders.empty())) return *a;
    if (!damaged) return false;  // no copy to check, no verdict: as any bad one
    jobs_.NoteCopyVerdict(job_id, bad.path(), *damaged);
    if (!*damaged) return intact(found->first);
    *removed = true;
    if (!holders.empty()) {
      jobs_.ResumeFailed(job_id);
      v1::Event e = EventLog::Make(
          "checkpoint_copy_bad", job_id,
          absl::StrCat("job ", job_id, ": the coordinator's copy of the checkpoint of step ",
                       record->step(), " is damaged (", PrintableLine(bad.reason(), 512),
                       "); it is removed and the next generation fetches the checkpoint from ",
                       absl::StrJoin(holders, ", ")));
      e.set_generation(bad.ref().generation());
      e.set_step(record->step());
      events_.Emit(std::move(e));
    }
  }
  // With no holder the caller drops the record: the copy goes, no mark
  // is needed.
  if (holders.empty()) {
    copies_.Remove(job_id, record->step());
    return false;
  }
  // Marked (for a restarted coordinator) and removed after the verdict is
  // kept: a report that finds no copy from now on finds the verdict. A
  // mark that cannot be written is logged (the copy is removed all the
  // same; only a restart before this generation's other reports forgets
  // the verdict).
  if (absl::Status s = copies_.MarkDamaged(job_id, record->step(), bad.ref().generation());
      !s.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(s.message()).c_str());
  }
  Flush();
  return true;
}

absl::StatusOr<bool> Coordinator::ReportBadCheckpoint(const v1::BadCheckpoint& bad) {
  bool removed = false;  // the coordinator's copy was found damaged
  if (bad.coordinator_copy()) {
    absl::StatusOr<bool> kept = DropDamagedCopy(bad, &removed);
    if (!kept.ok() || *kept) return kept;
  }
  int64_t step = -1;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.CheckpointTarget(bad.ref(), /*writes=*/false);
    if (!job.ok()) return job.status();
    if (absl::Status s = CheckResumedFrom(**job, bad.path()); !s.ok()) return s;
    auto found = RecordOfLocked((*job)->id, bad.path());
    if (!found) return false;  // another rank of the generation told first
    step = found->first.step();
    const std::vector<std::string>& holders = found->second;
    // Another rank of this generation found the coordinator's copy damaged
    // and it was removed for the holders: this rank's download found none.
    // (Whether they serve now or not: every rank of a generation gets the
    // same verdict.)
    if (!holders.empty()) {
      absl::StatusOr<bool> damaged =
          CopyDamagedThisGenerationLocked(**job, bad.path(), step, /*has_holders=*/true);
      if (!damaged.ok()) return damaged.status();  // the mark unread: nothing dropped
      if (*damaged) return true;
    }
    // No copy anywhere (no holder left, or only lost ones; none on the
    // coordinator: an in-memory checkpoint whose holders are gone) is the
    // catalog's staleness, not a fault of the job: the generation's end is
    // not counted. A copy that exists but does not load counts as before, so
    // max_restarts bounds how many records a load error can drop; so does
    // a coordinator copy found damaged with no holder left.
    // A holder that is lost (not serving: silent, detached) served no rank.
    const bool unavailable = ServingLocked(holders).empty() && !removed &&
                             !copies_.PathOf((*job)->id, step).ok();
    if (absl::Status s = checkpoints_.Remove((*job)->id, bad.path()); !s.ok()) return s;
    if (unavailable) jobs_.ResumeFailed((*job)->id);
    for (auto& [w, m] : DropCommands((*job)->id, step, holders)) workers_.Send(w, std::move(m));
    const std::string next = checkpoints_.Newest((*job)->id);
    v1::Event e = EventLog::Make(
        "checkpoint_bad", (*job)->id,
        absl::StrCat("job ", (*job)->id, ": no copy of the checkpoint of step ", step,
                     " loads (", PrintableLine(bad.reason(), 512), "); the next generation resumes from ",
                     next.empty() ? "the start (no checkpoint left)" : PrintableLine(next, 300)));
    e.set_generation(bad.ref().generation());
    e.set_step(step);
    events_.Emit(std::move(e));
  }
  Flush();
  copies_.Remove(bad.ref().job_id(), step);
  return false;
}

absl::Status Coordinator::CheckCheckpointUpload(const v1::JobRef& ref) const {
  absl::MutexLock l(&mu_);
  return jobs_.CheckpointTarget(ref, /*writes=*/true).status();
}

absl::Status Coordinator::CheckCopyMatchesRecord(const v1::JobRef& ref, int64_t step,
                                                 const std::string& checksum) const {
  absl::MutexLock l(&mu_);
  for (const auto& c : checkpoints_.List(ref.job_id())) {
    if (c.step() != step || c.memory() || c.checksum().empty() || c.checksum() == checksum) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", PrintableLine(ref.job_id(), 64), "'s checkpoint of step ", step,
        " is recorded as ", c.checksum(), "; an upload of other bytes (",
        PrintableLine(checksum, 40), ") does not replace its copy"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReceivedFile>>
Coordinator::BeginCheckpointUpload(const v1::JobRef& ref, int64_t step,
                                   int64_t total_bytes) {
  std::set<int64_t> recorded;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.CheckpointTarget(ref, /*writes=*/true);
    if (!job.ok()) return job.status();
    for (const v1::CheckpointRecord& r : checkpoints_.List(ref.job_id())) {
      recorded.insert(r.step());
    }
  }
  // Copies uploaded and never reported (a report that failed, or a trainer
  // uploading steps it never reports) are removed, so at most one waits
  // for its report at a time.
  copies_.RemoveAllBut(ref.job_id(), recorded);
  return copies_.Begin(ref.job_id(), step, total_bytes);
}

absl::StatusOr<std::string> Coordinator::CheckpointCopyOf(const v1::JobRef& ref,
                                                          const std::string& path,
                                                          std::string* checksum) const {
  int64_t step = -1;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = jobs_.CheckpointTarget(ref, /*writes=*/false);
    if (!job.ok()) return job.status();
    for (const auto& c : checkpoints_.List(ref.job_id())) {
      if (c.path() != path) continue;
      step = c.step();
      if (checksum != nullptr) *checksum = c.checksum();
    }
  }
  if (step < 0)
    return absl::NotFoundError(absl::StrCat("job ", ref.job_id(),
                                            " reported no checkpoint at '",
                                            PrintableLine(path, 200), "'"));
  return copies_.PathOf(ref.job_id(), step);
}

absl::StatusOr<std::pair<v1::CheckpointRecord, std::string>> Coordinator::CheckpointForUser(
    const std::string& job_id, int64_t step) const {
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step must be >= 0 (0: the newest), got ", step));
  }
  std::vector<v1::CheckpointRecord> disk;  // the job's disk records, newest first
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Job*> job = FindLocked(job_id);
    if (!job.ok()) return job.status();
    for (const auto& c : checkpoints_.List(job_id)) {
      if (!c.memory()) disk.push_back(c);
    }
  }
  std::sort(disk.begin(), disk.end(),
            [](const auto& a, const auto& b) { return a.step() > b.step(); });
  // Step 0: the newest of which the coordinator holds a copy (a record
  // reported without an upload, or whose damaged copy went while workers
  // hold it, has none); otherwise that step's.
  std::optional<v1::CheckpointRecord> found;
  absl::StatusOr<std::string> path = absl::NotFoundError("");
  for (const v1::CheckpointRecord& c : disk) {
    if (step != 0 && c.step() != step) continue;
    path = copies_.PathOf(job_id, c.step());
    found = c;
    if (path.ok() || step != 0) break;
  }
  if (!found) {
    std::vector<int64_t> steps;
    for (const v1::CheckpointRecord& c : disk) steps.push_back(c.step());
    std::sort(steps.begin(), steps.end());
    return absl::NotFoundError(
        steps.empty() ? absl::StrCat("job ", job_id, " has no disk checkpoint")
                      : absl::StrCat("job ", job_id, " has no checkpoint of step ", step,
                                     "; it has: ", absl::StrJoin(steps, ", ")));
  }
  if (!path.ok()) {
    return step != 0 ? path.status()
                     : absl::NotFoundError(absl::StrCat(
                           "the coordinator holds a copy of none of job ", job_id,
                           "'s disk checkpoints (steps ", disk.back().step(), " to ",
                           disk.front().step(), "); they are on the workers' disks"));
  }
  found->clear_secret();
  if (found->checksum().empty()) {  // reported without one: the copy's own
    absl::StatusOr<std::pair<int64_t, std::string>> sum = FileChecksum(*path);
    if (!sum.ok()) return sum.status();
    found->set_checksum(sum->second);
  }
  return std::make_pair(*std::move(found), *std::move(path));
}

// ------------------------------------------------------------------- time

void Coordinator::Tick() {
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = clock_.Now();
    if (stall_after_ > absl::ZeroDuration() && last_tick_ != absl::InfinitePast() &&
        now - last_tick_ > stall_after_) {
      const absl::Duration gap = now - last_tick_;
      workers_.ForgiveStall(gap);
      jobs_.ForgiveStall(gap);
      std::fprintf(stderr,
                   "coordinator: stalled for %s (no tick): worker and rank timers moved on by "
                   "that much\n",
                   absl::FormatDuration(gap).c_str());
    } else if (stall_after_ > absl::ZeroDuration() && last_tick_ != absl::InfinitePast() &&
               now < last_tick_) {
      // The wall clock stepped back (NTP): times seen before lie ahead of
      // now, and a silent worker would be missed for the step on top of its
      // timeout. They are brought back to now.
      workers_.ForgiveStall(absl::ZeroDuration());
      jobs_.ForgiveStall(absl::ZeroDuration());
      std::fprintf(stderr,
                   "coordinator: the clock stepped back by %s: worker and rank timers start "
                   "again from now\n",
                   absl::FormatDuration(last_tick_ - now).c_str());
    }
    last_tick_ = now;
    NoteLostWorkersLocked();
    jobs_.Supervise();
    jobs_.Schedule();
    if (forget_dead_workers_after_ > absl::ZeroDuration()) {
      std::set<std::string> busy;
      for (const auto& [name, slots] : jobs_.SlotsInUse()) busy.insert(name);
      workers_.ForgetSilentSince(clock_.Now() - forget_dead_workers_after_, busy);
    }
  }
  Flush();
  BoundGrowth();
  // Outside mu_: the store's housekeeping never holds up the core.
  LogStoreError(store_.Maintain(), "store maintenance");
}

void Coordinator::NoteLostWorkersLocked() {
  const absl::Time now = clock_.Now();
  for (auto it = live_workers_.begin(); it != live_workers_.end();) {
    const WorkerRegistry::Worker* w = workers_.Find(*it);
    if (w != nullptr && now - w->last_seen <= worker_timeout_) {
      ++it;
      continue;
    }
    v1::Event e = EventLog::Make(
        "worker_left", "",
        absl::StrCat("worker ", *it, " left: ",
                     w == nullptr ? "forgotten"
                                  : absl::StrCat("silent for ",
                                                 absl::FormatDuration(absl::Trunc(
                                                     now - w->last_seen, absl::Milliseconds(100))))));
    e.set_worker(*it);
    events_.Emit(std::move(e));
    it = live_workers_.erase(it);
  }
}

bool Coordinator::ReleaseMemoryCheckpointsLocked() {
  bool released = false;
  for (const std::string& id : checkpoints_.JobsWithMemoryRecords()) {
    const Job* job = jobs_.Find(id);
    if (job != nullptr && !IsFinal(job->state)) continue;
    std::vector<v1::CheckpointRecord> memory;
    for (const auto& c : checkpoints_.List(id)) {
      if (c.memory()) memory.push_back(c);
    }
    for (const auto& c : memory) {
      if (!checkpoints_.Remove(id, c.path()).ok()) continue;  // tried again in 10 s
      for (auto& [w, m] : DropCommands(id, c.step(), {c.holders().begin(), c.holders().end()})) {
        workers_.Send(w, std::move(m));
      }
      released = true;
    }
  }
  return released;
}

void Coordinator::BoundGrowth() {
  bool released = false;
  std::vector<std::string> expired;
  std::vector<std::pair<std::string, std::vector<int64_t>>> thinned;
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = clock_.Now();
    if (now - last_bound_ < absl::Seconds(10)) return;
    last_bound_ = now;
    released = ReleaseMemoryCheckpointsLocked();  // before the records expire
    if (retain_finished_ > absl::ZeroDuration()) {
      expired = jobs_.ExpireFinished(absl::ToUnixMillis(now - retain_finished_));
    }
    if (max_ended_jobs_ > 0) {
      for (std::string& id : jobs_.ExpireOldestFinished(static_cast<size_t>(max_ended_jobs_))) {
        expired.push_back(std::move(id));
      }
    }
    for (const std::string& id : expired) {
      std::set<std::string> holders;  // each drops every copy of the job
      for (const auto& c : checkpoints_.List(id)) holders.insert(c.holders().begin(), c.holders().end());
      for (auto& [w, m] : DropCommands(id, -1, {holders.begin(), holders.end()})) {
        workers_.Send(w, std::move(m));
      }
      checkpoints_.Forget(id);
    }
    thinned = jobs_.ThinMetrics(metric_history_);
  }
  if (!expired.empty() || released) Flush();
  // In transactions of at most 500 rows: metric commits get the store in
  // between.
  for (const auto& [id, steps] : thinned) {
    for (size_t i = 0; i < steps.size(); i += 500) {
      const std::vector<int64_t> part(steps.begin() + static_cast<long>(i),
                                      steps.begin() + static_cast<long>(std::min(steps.size(), i + 500)));
      LogStoreError(store_.DeleteMetrics(id, part), "thin a job's metric history");
    }
  }
  LogStoreError(store_.TrimEvents(max_events_per_job_), "trim events");
  for (const std::string& id : expired) {
    absl::Status s = store_.DeleteJob(id);
    LogStoreError(s, "delete an expired job");
    if (!s.ok()) continue;  // its rows come back after a restart: kept files
    logs_.RemoveJob(id);
    copies_.RemoveJob(id);
    tensorboard_.RemoveJob(id);
    std::fprintf(stderr, "coordinator: job %s expired (ended over %s ago, or one of over %d ended jobs)\n",
                 id.c_str(), absl::FormatDuration(retain_finished_).c_str(), max_ended_jobs_);
  }
}

}  // namespace frameworm::coordinator
