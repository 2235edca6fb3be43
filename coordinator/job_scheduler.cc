#include "coordinator/job_scheduler.h"

#include "coordinator/checkpoint_replication.h"
#include "coordinator/collective_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/printable.h"
#include "common/token.h"
#include "coordinator/generation_plan.h"
#include "jobspec/job_spec.h"

namespace frameworm::coordinator {
namespace {

int64_t ToMs(absl::Time t) { return absl::ToUnixMillis(t); }

// The cause of a failed generation, for FailGeneration.
v1::Event Cause(const std::string& kind, const std::string& message, int rank = -1) {
  v1::Event e = EventLog::Make(kind, "", message);
  if (rank >= 0) e.set_rank(rank);
  return e;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) absl::StrAppend(&out, out.empty() ? "" : ",", r);
  return out;
}

}  // namespace

JobScheduler::JobScheduler(const Options& options, Clock& clock, Store& store,
                           WorkerRegistry& workers, PortAllocator& ports,
                           const CheckpointCatalog& checkpoints, EventLog& events)
    : options_(options),
      clock_(clock),
      store_(store),
      workers_(workers),
      ports_(ports),
      checkpoints_(checkpoints),
      events_(events) {}

std::unique_ptr<Job> JobScheduler::NewJob() const {
  return std::make_unique<Job>(options_.metrics);
}

absl::Duration JobScheduler::HeartbeatTimeout(const v1::JobSpec& spec) const {
  return spec.heartbeat_timeout_s() > 0
             ? absl::Seconds(spec.heartbeat_timeout_s())
             : options_.default_heartbeat_timeout;
}

// ------------------------------------------------------------------ reload

absl::Status JobScheduler::Reload() {
  const absl::Time now = clock_.Now();
  reloaded_at_ = now;
  absl::StatusOr<std::vector<JobRow>> rows = store_.LoadJobs();
  if (!rows.ok()) return rows.status();
  // Ids of deleted (expired) jobs are not given again.
  absl::StatusOr<int64_t> max_seq = store_.MaxJobSeq();
  if (!max_seq.ok()) return max_seq.status();
  next_seq_ = std::max(next_seq_, *max_seq + 1);
  for (const JobRow& row : *rows) {
    std::unique_ptr<Job> job = NewJob();
    job->id = row.job_id;
    job->seq = row.seq;
    // A row that does not parse fails its job, not the coordinator: the
    // job is FAILED with the table and key named, the others run on.
    auto corrupt = [&](const std::string& what) {
      job->state = v1::FAILED;
      job->reason = absl::StrCat("corrupt ", what, " in the state store; marked FAILED at start-up");
      job->finished_ms = ToMs(now);
      job->ranks.clear();
      job->workers.clear();
      std::fprintf(stderr, "coordinator: job %s: %s\n", job->id.c_str(), job->reason.c_str());
      LogStoreError(store_.PutJob(RowOf(*job)), "mark a corrupt job FAILED");
      next_seq_ = std::max(next_seq_, row.seq + 1);
      const std::string id = job->id;
      jobs_[id] = std::move(job);
    };
    if (!job->spec.ParseFromString(row.spec)) {
      corrupt(absl::StrCat("jobs row ", row.job_id, " (spec)"));
      continue;
    }
    if (!v1::JobState_IsValid(row.state)) {
      corrupt(absl::StrCat("jobs row ", row.job_id, " (state ", row.state, ")"));
      continue;
    }
    job->state = static_cast<v1::JobState>(row.state);
    job->generation = row.generation;
    job->restarts = row.restarts;
    job->reason = row.reason;
    job->submitted_ms = row.submitted_ms;
    job->started_ms = row.started_ms;
    job->finished_ms = row.finished_ms;
    job->heartbeat_timeout = HeartbeatTimeout(job->spec);
    next_seq_ = std::max(next_seq_, row.seq + 1);

    absl::StatusOr<std::vector<MetricRow>> metrics =
        store_.LoadMetrics(row.job_id);
    if (!metrics.ok()) return metrics.status();
    for (const MetricRow& m : *metrics) {
      v1::AggregatedStep s;
      if (s.ParseFromString(m.aggregate)) job->metrics.Restore(s);
    }
    if (const v1::AggregatedStep* last = job->metrics.Last())
      job->progress.RestoreMaxStep(last->step());

    if (job->state == v1::RUNNING) {
      absl::StatusOr<GenerationRow> gen =
          store_.LoadGeneration(row.job_id, row.generation);
      absl::StatusOr<std::vector<AssignmentRow>> as =
          store_.LoadAssignments(row.job_id, row.generation);
      bool tasks_parse = as.ok() && !as->empty();
      if (as.ok()) {
        for (const AssignmentRow& a : *as) {
          v1::TaskSpec t;
          tasks_parse = tasks_parse && t.ParseFromString(a.task) && a.node_rank >= 0 &&
                        a.node_rank < 4096;
        }
      }
      if (!gen.ok() || !tasks_parse) {
        corrupt(absl::StrCat("generations/assignments rows of ", row.job_id, " generation ",
                             row.generation, !gen.ok() ? absl::StrCat(" (", gen.status().message(), ")")
                                                       : std::string()));
        continue;
      }
      job->master_addr = gen->master_addr;
      job->master_port = gen->master_port;
      job->resume_from = gen->resume_from;
      ports_.Reserve(job->master_port);
      job->progress.Start(static_cast<int>(as->size()), now);
      // Its trainers reported before the restart: they are timed from the
      // reload plus the grace workers get too (a trainer's channel needs a
      // moment to find the restarted coordinator).
      const v1::AggregatedStep* last = job->metrics.Last();
      if (last != nullptr && last->generation() == job->generation) {
        job->progress.ExpectReportsSince(now + options_.reconnect_grace);
      }
      for (const AssignmentRow& a : *as) {
        RankState r;
        r.worker = a.worker;
        r.task.ParseFromString(a.task);
        if (a.state == 1)
          job->progress.MarkDone(static_cast<int>(job->ranks.size()));
        job->ranks.push_back(std::move(r));
        if (static_cast<int>(job->workers.size()) <= a.node_rank)
          job->workers.resize(a.node_rank + 1);
        job->workers[a.node_rank] = a.worker;
      }
      job->IndexTokens();
      // The job's workers get heartbeat timeout + grace to re-register.
      for (const std::string& w : job->workers)
        workers_.Expect(w, now + options_.reconnect_grace);
    }
    jobs_[job->id] = std::move(job);
  }
  return absl::OkStatus();
}

// -------------------------------------------------------------------- jobs

absl::StatusOr<std::string> JobScheduler::Submit(v1::JobSpec spec) {
  std::unique_ptr<Job> job = NewJob();
  job->seq = next_seq_;
  job->id = absl::StrFormat("job-%06d", job->seq);
  job->spec = std::move(spec);
  job->state = v1::PENDING;
  job->submitted_ms = ToMs(clock_.Now());
  job->heartbeat_timeout = HeartbeatTimeout(job->spec);
  if (absl::Status s = store_.PutJob(RowOf(*job)); !s.ok()) return s;
  next_seq_++;
  Changed(*job);
  v1::Event e = EventLog::Make(
      "job_submitted", job->id,
      absl::StrCat("job ", job->id, " '", job->spec.name(), "' submitted by ", job->spec.owner(),
                   ": ", job->spec.nodes_min() == job->spec.nodes_max()
                             ? absl::StrCat(job->spec.nodes_min())
                             : absl::StrCat(job->spec.nodes_min(), "-", job->spec.nodes_max()),
                   " nodes x ", job->spec.nproc_per_node(), " ranks"));
  events_.Emit(std::move(e));
  std::string id = job->id;
  jobs_[id] = std::move(job);
  return id;
}

absl::StatusOr<const Job*> JobScheduler::Cancel(const std::string& job_id) {
  Job* job = FindMutable(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", PrintableLine(job_id, 64), "'"));
  if (IsFinal(job->state))
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " already ended: ", v1::JobState_Name(job->state)));
  JobRow row = RowOf(*job);
  row.state = v1::CANCELLED;
  row.finished_ms = ToMs(clock_.Now());
  row.reason = "cancelled by user";
  const bool running = job->state == v1::RUNNING;
  absl::Status s = running ? store_.EndGeneration(row, job->generation,
                                                  row.finished_ms, row.reason)
                           : store_.PutJob(row);
  if (!s.ok()) return s;
  if (running) {
    KillAll(*job);
    LeaveRunning(*job);
  }
  job->state = v1::CANCELLED;
  job->finished_ms = row.finished_ms;
  job->reason = row.reason;
  Changed(*job);
  EmitFinished(*job);
  return job;
}

absl::StatusOr<int64_t> JobScheduler::RequestCheckpoint(
    const std::string& job_id) {
  Job* job = FindMutable(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("no job '", PrintableLine(job_id, 64), "'"));
  if (job->state != v1::RUNNING)
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job->state),
                     ", not RUNNING"));
  return job->progress.RequestCheckpoint(options_.checkpoint_lead_steps);
}

void JobScheduler::RestoreLastCause(const std::string& job_id, const std::string& message,
                                    int64_t unix_ms) {
  if (Job* job = FindMutable(job_id)) {
    job->last_cause = message;
    job->last_cause_ms = unix_ms;
  }
}

// -------------------------------------------------------------- placement

std::vector<std::string> JobScheduler::FreeWorkers(
    int nproc, const std::vector<std::string>& exclude, int* capable,
    const std::map<std::string, int>* in_use) const {
  std::map<std::string, int> computed;
  if (in_use == nullptr) computed = SlotsInUse();
  const std::map<std::string, int>& used = in_use != nullptr ? *in_use : computed;
  std::vector<std::string> free;
  if (capable != nullptr) *capable = 0;
  for (const WorkerRegistry::Worker* w : workers_.All()) {
    if (!workers_.Schedulable(*w) || w->slots < nproc) continue;
    if (std::find(exclude.begin(), exclude.end(), w->name) != exclude.end()) continue;
    if (capable != nullptr) ++*capable;
    auto u = used.find(w->name);
    if (w->slots - (u == used.end() ? 0 : u->second) >= nproc)
      free.push_back(w->name);
  }
  return free;
}

bool JobScheduler::Avoids(const Job& job, const std::string& worker) const {
  auto it = job.avoid.find(worker);
  return it != job.avoid.end() && it->second > clock_.Now();
}

std::vector<std::string> JobScheduler::WithoutAvoided(const Job& job,
                                                      std::vector<std::string> free) const {
  std::vector<std::string> kept;
  for (const std::string& w : free) {
    if (!Avoids(job, w)) kept.push_back(w);
  }
  // Avoided only when others can take their place.
  if (static_cast<int>(kept.size()) >= job.spec.nodes_min()) return kept;
  return free;
}

void JobScheduler::Schedule() {
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
  bool waiting = false;
  // Slots in use, walked once per pass (not once per queued job) and again
  // only after a generation started.
  std::map<std::string, int> used = SlotsInUse();
  for (Job* job : queue) {
    int capable = 0;
    std::vector<std::string> free =
        FreeWorkers(job->spec.nproc_per_node(), {}, &capable, &used);
    // Not on the worker the last failure named before it is heard again.
    if (const WorkerRegistry::Worker* w = workers_.Find(job->implicated);
        w != nullptr && !workers_.HeardLately(*w, job->implicated_at)) {
      std::erase(free, job->implicated);
    }
    free = WithoutAvoided(*job, std::move(free));
    // Never fits the live cluster: skipped. Waits for busy slots: blocks.
    if (capable < job->spec.nodes_min()) continue;
    waiting = true;
    if (static_cast<int>(free.size()) < job->spec.nodes_min()) break;
    if (static_cast<int>(free.size()) > job->spec.nodes_max())
      free.resize(job->spec.nodes_max());
    if (AwaitsHolders(*job)) continue;  // a few seconds; others may start meanwhile
    if (!StartGeneration(*job, free)) break;
    used = SlotsInUse();
    waiting = false;
  }
  // Free capacity goes to queued jobs first, then to growing ones.
  if (!waiting) PlanGrowth();
}

bool JobScheduler::AwaitsHolders(const Job& job) const {
  if (clock_.Now() >= reloaded_at_ + options_.reconnect_grace + job.heartbeat_timeout) {
    return false;
  }
  const v1::CheckpointRecord* rec = checkpoints_.NewestRecord(job.id);
  return rec != nullptr && rec->memory() && rec->holders().empty();
}

bool JobScheduler::StartGeneration(Job& job,
                                   const std::vector<std::string>& workers) {
  const absl::Time now = clock_.Now();
  absl::StatusOr<int> port = ports_.Acquire();
  if (!port.ok()) {
    job.reason = "waiting for a free MASTER_PORT";
    return false;
  }
  GenerationInputs in;
  in.generation = job.generation + 1;
  in.workers = workers;
  // MASTER_ADDR: the node-rank-0 worker's advertised host.
  in.master_addr = MasterHost(workers_.Find(workers[0])->address);
  in.master_port = *port;
  in.resume_from = checkpoints_.Newest(job.id);
  in.coordinator = options_.advertise;
  in.state_dir = options_.state_dir;
  if (!options_.memory_root.empty()) {
    in.memory_dir = MemoryCheckpointDir(options_.memory_root, job.id, job.submitted_ms);
  }
  in.started_ms = ToMs(now);
  in.fence_after = job.heartbeat_timeout;
  in.new_token = NewToken;
  GenerationPlan plan = PlanGeneration(job.id, job.spec, in);
  const bool restarting = job.state == v1::RESTARTING && job.generation > 0 && !job.growing;
  JobRow row = RowOf(job);
  row.state = v1::RUNNING;
  row.generation = in.generation;
  row.reason = job.state == v1::RESTARTING ? job.reason : "";
  if (row.started_ms == 0) row.started_ms = in.started_ms;
  if (absl::Status s = store_.StartGeneration(row, plan.row, plan.assignments);
      !s.ok()) {
    LogStoreError(s, "start generation");
    ports_.Release(*port);
    job.reason = s.ToString();
    return false;
  }
  job.state = v1::RUNNING;
  job.generation = in.generation;
  job.growing = false;
  job.reason = row.reason;
  job.started_ms = row.started_ms;
  job.ranks = std::move(plan.ranks);
  job.IndexTokens();
  job.workers = workers;
  job.master_addr = in.master_addr;
  job.master_port = in.master_port;
  job.resume_from = in.resume_from;
  job.progress.Start(static_cast<int>(job.ranks.size()), now);
  job.metrics.ResetWindows();
  job.flagged.clear();
  {
    const v1::CheckpointRecord* from = checkpoints_.NewestRecord(job.id);
    if (from != nullptr && from->path() != in.resume_from) from = nullptr;
    const std::string resume =
        from ? absl::StrCat("resumes from step ", from->step(), " (",
                            from->memory() ? "in-memory" : "disk", " checkpoint)")
             : "starts from scratch (no checkpoint)";
    const std::string placement = absl::StrJoin(workers, ",");
    if (job.generation == 1) {
      events_.Emit(EventLog::Make(
          "job_scheduled", job.id,
          absl::StrCat("job ", job.id, " scheduled on ", placement, " after ",
                       (in.started_ms > job.submitted_ms ? absl::FormatDuration(absl::Milliseconds(in.started_ms - job.submitted_ms)) : std::string("0s")),
                       " in the queue")));
    } else if (restarting) {
      v1::Event r = EventLog::Make(
          "restart", job.id,
          absl::StrCat("job ", job.id, " restart ", job.restarts, " of ", job.spec.max_restarts(),
                       ": generation ", job.generation, " on ", placement, " ", resume));
      r.set_generation(job.generation);
      if (from) r.set_step(from->step());
      events_.Emit(std::move(r));
    }
    v1::Event g = EventLog::Make(
        "generation_started", job.id,
        absl::StrCat("job ", job.id, " generation ", job.generation, " started on ", placement,
                     " (master ", job.master_addr, ":", job.master_port, "); ", resume));
    g.set_generation(job.generation);
    if (from) g.set_step(from->step());
    for (const std::string& w : workers) g.add_workers(w);
    events_.Emit(std::move(g));
  }
  // Workers without the checkpoint fetch it first (their StartTask waits).
  // The hold and the StartTask go out back to back, in this order: a worker
  // defers the launch before any later hold can supersede the prefetch
  // (CheckpointFetcher's waited_on).
  if (const v1::CheckpointRecord* rec = checkpoints_.NewestRecord(job.id);
      rec != nullptr && rec->path() == in.resume_from) {
    for (auto& [w, m] : PrefetchCommands(workers_, *rec, workers)) workers_.Send(w, std::move(m));
  }
  for (const RankState& r : job.ranks) {
    v1::CoordinatorMessage msg;
    *msg.mutable_start()->mutable_task() = r.task;
    workers_.Send(r.worker, std::move(msg));
  }
  Changed(job);
  return true;
}

// ------------------------------------------------------ ending generations

absl::StatusOr<std::vector<int>> JobScheduler::DebugJob(const std::string& job_id, int rank,
                                                        const std::string& marker) {
  Job* job = FindMutable(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", PrintableLine(job_id, 64), "'"));
  if (job->state != v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", v1::JobState_Name(job->state), ": only a running job has stacks"));
  }
  const int world = static_cast<int>(job->ranks.size());
  if (rank < -1 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be -1 (every rank) or 0..", world - 1, ", got ", rank));
  }
  const absl::Time now = clock_.Now();
  if (now - job->debugged_at < kDebugInterval) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the stacks of job ", job_id, " were asked for ",
        absl::FormatDuration(absl::Trunc(now - job->debugged_at, absl::Milliseconds(1))),
        " ago; ask again in ",
        absl::FormatDuration(absl::Ceil(kDebugInterval - (now - job->debugged_at), absl::Milliseconds(100)))));
  }
  job->debugged_at = now;
  v1::JobRef ref;
  ref.set_job_id(job->id);
  ref.set_generation(job->generation);
  std::vector<int> asked;
  for (int r = 0; r < world; ++r) {
    if (rank >= 0 && r != rank) continue;
    workers_.SendDumpStacks(job->ranks[r].worker, ref, r, marker);
    asked.push_back(r);
  }
  return asked;
}

void JobScheduler::KillAll(Job& job) {
  v1::JobRef ref;
  ref.set_job_id(job.id);
  ref.set_generation(job.generation);
  std::set<std::string> done;
  for (const std::string& w : job.workers)
    if (done.insert(w).second) workers_.SendKill(w, ref, -1);
}

void JobScheduler::LeaveRunning(Job& job) {
  ports_.Release(job.master_port);
  if (!job.ranks.empty()) {
    Job::PastGeneration& ended = job.past[job.generation];
    ended = {};
    for (const RankState& r : job.ranks) {
      ended.rank_workers.push_back(r.worker);
      if (!r.task.token().empty()) ended.tokens.insert(r.task.token());
    }
    while (job.past.size() > Job::kPastGenerations) job.past.erase(job.past.begin());
  }
  job.ranks.clear();
  job.token_rank.clear();
  job.grow_at = 0;
}

void JobScheduler::FailGeneration(Job& job, v1::Event cause, bool counted) {
  if (job.state != v1::RUNNING) return;
  const absl::Time now = clock_.Now();
  const std::string reason = cause.message();
  cause.set_job_id(job.id);
  cause.set_generation(job.generation);
  cause.set_message(absl::StrCat("job ", job.id, " generation ", job.generation, ": ", reason));
  job.last_cause = cause.message();
  job.last_cause_ms = ToMs(now);
  job.implicated = cause.worker();
  job.implicated_at = now;
  events_.Emit(std::move(cause));
  KillAll(job);
  if (job.resume_failed_generation == job.generation) counted = false;  // ResumeFailed
  if (!counted && job.uncounted_restarts < kMaxUncountedRestarts) {
    job.uncounted_restarts++;
    job.state = v1::RESTARTING;
    job.reason = absl::StrCat(reason, " (a restart not counted against max_restarts)");
  } else if (job.restarts < job.spec.max_restarts()) {
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
  RecordGenerationEnd(job, reason);
  if (job.state == v1::FAILED) EmitFinished(job);
}

bool JobScheduler::ActOnStraggler(Job& job, absl::Time now) {
  if (job.spec.on_straggler() != "restart_without" || job.straggler_rank < 0) return false;
  if (now - job.straggler_seen > absl::Seconds(10)) {  // no longer flagged
    job.straggler_rank = -1;
    return false;
  }
  const absl::Duration grace = job.spec.straggler_grace_s() > 0
                                   ? absl::Seconds(job.spec.straggler_grace_s())
                                   : absl::Seconds(60);
  const int r = job.straggler_rank;
  if (now - job.straggler_since < grace || r >= static_cast<int>(job.ranks.size())) return false;
  const std::string worker = job.ranks[r].worker;
  job.straggler_rank = -1;
  job.avoid[worker] = now + absl::Minutes(10);
  v1::Event cause = Cause(
      "straggler_removed",
      absl::StrCat("rank ", r, " on worker ", worker, " was a straggler for ",
                   absl::FormatDuration(absl::Trunc(now - job.straggler_since, absl::Seconds(1))),
                   " (on_straggler: restart_without): the next generation avoids ", worker,
                   " where others can take its place"),
      r);
  cause.set_worker(worker);
  FailGeneration(job, std::move(cause));
  return true;
}

void JobScheduler::EmitFinished(const Job& job) {
  const std::string state = v1::JobState_Name(job.state);
  v1::Event e = EventLog::Make(
      "job_finished", job.id,
      absl::StrCat("job ", job.id, " ", state, " after ", job.generation, " generation",
                   job.generation == 1 ? "" : "s", " and ", job.restarts, " restart",
                   job.restarts == 1 ? "" : "s", job.reason.empty() ? "" : ": " + job.reason));
  e.set_generation(job.generation);
  e.set_state(state);
  if (const v1::AggregatedStep* last = job.metrics.Last()) e.set_step(last->step());
  events_.Emit(std::move(e));
}

void JobScheduler::NoteStragglers(Job& job, const std::vector<int>& flagged) {
  const absl::Time now = clock_.Now();
  if (job.spec.on_straggler() == "restart_without" && !flagged.empty()) {
    const bool same = job.straggler_rank >= 0 && now - job.straggler_seen <= absl::Seconds(10) &&
                      std::find(flagged.begin(), flagged.end(), job.straggler_rank) != flagged.end();
    if (!same) {
      job.straggler_rank = flagged[0];
      job.straggler_since = now;
    }
    job.straggler_seen = now;
  }
  if (flagged == job.flagged || now - job.flagged_at < absl::Seconds(10)) return;
  job.flagged = flagged;
  job.flagged_at = now;
  v1::Event e = flagged.empty()
                    ? EventLog::Make("stragglers_cleared", job.id,
                                     absl::StrCat("job ", job.id, ": no straggler any more"))
                    : EventLog::Make("straggler", job.id,
                                     absl::StrCat("job ", job.id, ": rank", flagged.size() > 1 ? "s " : " ",
                                                  RankList(flagged), " flagged as straggler",
                                                  flagged.size() > 1 ? "s" : ""));
  e.set_generation(job.generation);
  if (flagged.size() == 1) e.set_rank(flagged[0]);
  if (const v1::AggregatedStep* last = job.metrics.Last()) e.set_step(last->step());
  events_.Emit(std::move(e));
}

void JobScheduler::Succeed(Job& job) {
  job.state = v1::SUCCEEDED;
  job.finished_ms = ToMs(clock_.Now());
  job.reason = "";
  RecordGenerationEnd(job, "succeeded");
  EmitFinished(job);
}

void JobScheduler::RecordGenerationEnd(Job& job, const std::string& why) {
  const int64_t ended_ms = ToMs(clock_.Now());
  absl::Status s = store_.EndGeneration(RowOf(job), job.generation, ended_ms, why);
  if (!s.ok()) {  // retried by Supervise (RetryUnrecorded)
    LogStoreError(s, "end generation (will retry)");
    job.unrecorded_end = Job::UnrecordedEnd{job.generation, ended_ms, why};
  }
  job.unrecorded_done.clear();
  LeaveRunning(job);
  Changed(job);
}

void JobScheduler::RetryUnrecorded(Job& job) {
  if (job.unrecorded_end &&
      store_.EndGeneration(RowOf(job), job.unrecorded_end->generation,
                           job.unrecorded_end->ended_ms, job.unrecorded_end->why)
          .ok()) {
    job.unrecorded_end.reset();
  }
  for (auto it = job.unrecorded_done.begin(); it != job.unrecorded_done.end();) {
    if (!store_.SetAssignmentState(job.id, job.generation, *it, 1).ok()) break;
    it = job.unrecorded_done.erase(it);
  }
}

// ----------------------------------------------------------------- workers

bool JobScheduler::IsCurrentTask(const Job* job, const std::string& worker,
                                 const v1::TaskStatus& t) const {
  return job && job->state == v1::RUNNING &&
         t.ref().generation() == job->generation && t.rank() >= 0 &&
         t.rank() < static_cast<int>(job->ranks.size()) &&
         job->ranks[t.rank()].worker == worker;
}

void JobScheduler::HandleTaskStatus(const std::string& worker,
                                    const v1::TaskStatus& t) {
  Job* job = FindMutable(t.ref().job_id());
  if (!IsCurrentTask(job, worker, t)) {
    // A task of an old generation or an ended job still runs: stop it.
    if (t.state() == v1::TASK_RUNNING)
      workers_.SendKill(worker, t.ref(), t.rank());
    return;
  }
  RankState& rank = job->ranks[t.rank()];
  std::string where = absl::StrCat(" on worker ", worker);
  // A failed rank's last stderr line, from the worker: bounded and printable
  // before it enters a reason (the worker may be anyone).
  if (!t.stderr_tail().empty() && t.state() != v1::TASK_RUNNING) {
    absl::StrAppend(&where, ": ", PrintableLine(t.stderr_tail(), 256));
  }
  switch (t.state()) {
    case v1::TASK_RUNNING:
      rank.pid = t.pid();
      return;
    case v1::TASK_EXITED:
      if (t.exit_code() != 0) {
        v1::Event cause = Cause("rank_failed",
                                absl::StrCat("rank ", t.rank(), " exited with code ",
                                             t.exit_code(), where),
                                t.rank());
        cause.set_exit_code(t.exit_code());
        cause.set_worker(worker);
        FailGeneration(*job, std::move(cause));
        return;
      }
      if (!job->progress.MarkDone(t.rank())) return;
      if (absl::Status s = store_.SetAssignmentState(job->id, job->generation, t.rank(), 1);
          !s.ok()) {
        LogStoreError(s, "assignment state (will retry)");
        job->unrecorded_done.insert(t.rank());
      }
      Changed(*job);
      if (job->progress.AllDone()) Succeed(*job);
      return;
    case v1::TASK_KILLED: {
      // Fenced while current: its worker was cut off for the heartbeat
      // timeout and this coordinator never noticed (it would have ended the
      // generation first), so the coordinator itself was away.
      v1::Event cause = Cause(
          "rank_failed",
          t.fenced()
              ? absl::StrCat("rank ", t.rank(), " killed by its worker ", worker,
                             ", cut off from the coordinator for the job's heartbeat timeout "
                             "while the coordinator was stopped or restarting")
              : absl::StrCat("rank ", t.rank(), " killed by signal ", t.signal(), where),
          t.rank());
      cause.set_signal(t.signal());
      cause.set_worker(worker);
      FailGeneration(*job, std::move(cause), /*counted=*/!t.fenced());
      return;
    }
    case v1::TASK_START_FAILED: {
      v1::Event cause = Cause(
          "rank_failed",
          absl::StrCat("rank ", t.rank(), " failed to start", where, ": ",
                       PrintableLine(t.message(), 512)),
          t.rank());
      cause.set_worker(worker);
      FailGeneration(*job, std::move(cause));
      return;
    }
    default:
      return;
  }
}

void JobScheduler::Reconcile(
    const std::string& worker,
    const google::protobuf::RepeatedPtrField<v1::TaskStatus>& running,
    const google::protobuf::RepeatedPtrField<v1::TaskStatus>& ended,
    bool same_process, bool first_since_reload) {
  // StartTasks the worker's old session never took are still queued for the
  // new one: a current rank among them is not lost; stale ones are dropped.
  const std::set<std::pair<std::string, int>> pending =
      workers_.KeepPendingStarts(worker, [&](const v1::TaskSpec& t) {
        v1::TaskStatus as_status;
        *as_status.mutable_ref() = t.ref();
        as_status.set_rank(t.rank());
        return IsCurrentTask(Find(t.ref().job_id()), worker, as_status);
      });
  std::set<std::pair<std::string, int>> reported = pending;
  // First what ended while the worker was away (a finished rank is done,
  // a failed one fails its generation), then what still runs.
  for (const v1::TaskStatus& t : ended) {
    if (t.state() == v1::TASK_RUNNING) continue;
    if (IsCurrentTask(FindMutable(t.ref().job_id()), worker, t))
      reported.insert({t.ref().job_id(), t.rank()});
    HandleTaskStatus(worker, t);
  }
  for (const v1::TaskStatus& t : running) {
    if (IsCurrentTask(FindMutable(t.ref().job_id()), worker, t))
      reported.insert({t.ref().job_id(), t.rank()});
    HandleTaskStatus(worker, t);  // current: progresses; stale: killed
  }
  for (const auto& [id, job] : jobs_) {
    if (job->state != v1::RUNNING) continue;
    for (size_t r = 0; r < job->ranks.size(); ++r) {
      if (job->ranks[r].worker != worker || job->progress.done(r) ||
          reported.count({job->id, static_cast<int>(r)}))
        continue;
      if (same_process && !job->progress.reported(static_cast<int>(r))) {
        // Taken by the old session, never received: with the prefetch hold
        // that went before it (a rank that resumes from a checkpoint this
        // worker lacks must not start before its fetch).
        if (const v1::CheckpointRecord* rec = checkpoints_.NewestRecord(job->id);
            rec != nullptr && rec->path() == job->resume_from) {
          for (auto& [w, m] : PrefetchCommands(workers_, *rec, {worker})) {
            workers_.Send(w, std::move(m));
          }
        }
        v1::CoordinatorMessage msg;
        *msg.mutable_start()->mutable_task() = job->ranks[r].task;
        workers_.Send(worker, std::move(msg));
        continue;
      }
      const bool startup_lost =
          first_since_reload && !job->progress.reported(static_cast<int>(r));
      v1::Event cause = Cause(
          "rank_failed",
          absl::StrCat("rank ", r, " lost: worker ", worker, " re-registered without it",
                       startup_lost ? " after the coordinator restarted, before the rank "
                                      "reported a step (not counted)"
                                    : ""),
          static_cast<int>(r));
      cause.set_worker(worker);
      FailGeneration(*job, std::move(cause), /*counted=*/!startup_lost);
      break;
    }
  }
}

void JobScheduler::ForgiveStall(absl::Duration gap) {
  const absl::Time now = clock_.Now();
  for (auto& [id, job] : jobs_)
    if (job->state == v1::RUNNING) job->progress.ForgiveStall(gap, now);
}

void JobScheduler::Supervise() {
  const absl::Time now = clock_.Now();
  for (const auto& [id, job_ptr] : jobs_) {
    Job& job = *job_ptr;
    if (job.unrecorded_end || !job.unrecorded_done.empty()) RetryUnrecorded(job);
    if (job.state != v1::RUNNING) continue;
    // Every rank exited 0, yet the job runs: the end was never stored (the
    // store failed between the last rank's state and the generation's end,
    // and the coordinator restarted), so it is found here.
    if (!job.ranks.empty() && job.progress.AllDone()) {
      Succeed(job);
      continue;
    }
    const absl::Duration timeout = job.heartbeat_timeout;
    // A worker whose ranks all exited 0 may go quiet (its host shut down):
    // only a worker with a rank still running is lost.
    auto has_running_rank = [&](const std::string& w) {
      for (size_t r = 0; r < job.ranks.size(); ++r) {
        if (job.ranks[r].worker == w && !job.progress.done(static_cast<int>(r))) return true;
      }
      return false;
    };
    auto silent = std::find_if(job.workers.begin(), job.workers.end(),
                               [&](const std::string& w) {
                                 return now - workers_.LastSeen(w) > timeout &&
                                        has_running_rank(w);
                               });
    if (silent != job.workers.end()) {
      v1::Event cause = Cause("worker_lost", absl::StrCat("worker ", *silent,
                                                          " missed heartbeats for ",
                                                          absl::FormatDuration(timeout)));
      cause.set_worker(*silent);
      FailGeneration(job, std::move(cause));
      continue;
    }
    std::optional<absl::Duration> startup;
    if (UsesBuiltInTrainer(job.spec) && options_.startup_timeout > absl::ZeroDuration()) {
      startup = std::max(options_.startup_timeout, timeout);
    }
    int hung_rank = -1;
    if (std::optional<std::string> hung = job.progress.Hung(now, timeout, startup, &hung_rank)) {
      v1::Event cause = Cause("hang_detected", *hung, hung_rank);
      if (hung_rank >= 0 && hung_rank < static_cast<int>(job.ranks.size())) {
        cause.set_worker(job.ranks[hung_rank].worker);
        // Its stacks, into its log, before the kill that follows.
        v1::JobRef ref;
        ref.set_job_id(job.id);
        ref.set_generation(job.generation);
        workers_.SendDumpStacks(job.ranks[hung_rank].worker, ref, hung_rank,
                                absl::StrCat("hang detected: ", *hung));
      }
      FailGeneration(job, std::move(cause));
      continue;
    }
    if (ActOnStraggler(job, now)) continue;
    // A growth checkpoint the ranks passed without taking: not retried.
    if (job.grow_at > 0 && job.progress.checkpoint_at() == 0) job.grow_at = -1;
    job.progress.MaybeTimedCheckpoint(
        now, absl::Seconds(job.spec.checkpoint().every_n_minutes() * 60),
        options_.checkpoint_lead_steps);
    // The built-in trainer takes every_n_steps as a flag; another program
    // is asked through its Directive.
    if (!UsesBuiltInTrainer(job.spec)) {
      job.progress.MaybeSteppedCheckpoint(job.spec.checkpoint().every_n_steps(),
                                          options_.checkpoint_lead_steps);
    }
  }
}

// ---------------------------------------------------------------- trainers

absl::Status JobScheduler::CheckGeneration(const Job& job,
                                           const v1::JobRef& ref,
                                           bool running) const {
  const bool live =
      running ? job.state == v1::RUNNING : job.state != v1::CANCELLED;
  if (ref.generation() == job.generation && live) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("generation ", ref.generation(), " of job ", job.id,
                   " is not current (current generation ", job.generation, ", ",
                   v1::JobState_Name(job.state), ")"));
}

namespace {

// A step report's numbers: non-negative counters, finite non-negative
// times, a bounded map of finite metric values with short names (a NaN
// never reaches an aggregate or a sort).
absl::Status CheckStepReport(const v1::StepMetrics& m) {
  if (m.step() < 0 || m.epoch() < 0 || m.samples() < 0 || m.total_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step report counters must be >= 0 (step ", m.step(), ", epoch ", m.epoch(),
        ", samples ", m.samples(), ", total_steps ", m.total_steps(), ")"));
  }
  // Far past any real run, and far enough below INT64_MAX that step and
  // sample arithmetic (step + lead, sums over ranks and steps) cannot
  // overflow (epoch is 32 bits: no sum of it can).
  constexpr int64_t kMaxCounter = int64_t{1} << 48;
  if (m.step() > kMaxCounter || m.samples() > kMaxCounter || m.total_steps() > kMaxCounter) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step report counters must be at most 2^48 (step ", m.step(), ", samples ", m.samples(),
        ", total_steps ", m.total_steps(), ")"));
  }
  if (!std::isfinite(m.step_seconds()) || m.step_seconds() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step_seconds must be finite and >= 0, got ", m.step_seconds()));
  }
  if (!std::isfinite(m.wait_seconds()) || m.wait_seconds() < 0 ||
      !std::isfinite(m.data_seconds()) || m.data_seconds() < 0 ||
      m.wait_seconds() > m.step_seconds() * (1 + 1e-9) + 1e-9 ||
      !std::isfinite(m.waiting_seconds()) || m.waiting_seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait_seconds, data_seconds and waiting_seconds must be finite and >= 0, "
        "wait_seconds at most step_seconds (",
        m.step_seconds(), "); got ", m.wait_seconds(), ", ", m.data_seconds(), " and ",
        m.waiting_seconds()));
  }
  if (absl::Status s = CheckCollectiveProgress(m.collectives()); !s.ok()) return s;
  if (m.checkpoint_in_flight() < 0 || m.checkpoint_in_flight() > m.step()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_in_flight ",
                                                   m.checkpoint_in_flight(),
                                                   " outside [0, step ", m.step(), "]"));
  }
  if (m.warning().size() > 512) {
    return absl::InvalidArgumentError(
        absl::StrCat("step report warning of ", m.warning().size(), " bytes; at most 512"));
  }
  if (m.values_size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("step report has ", m.values_size(), " metrics; at most 64"));
  }
  for (const auto& [name, v] : m.values()) {
    if (name.empty() || name.size() > 64 || HasControlCharacter(name)) {
      return absl::InvalidArgumentError(
          "metric names must be 1 to 64 characters, none of them a control character");
    }
    // Bounded so the weighted mean over ranks (value x samples, summed)
    // stays finite.
    if (!std::isfinite(v) || std::abs(v) > 1e200) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metric '", name, "' is ", v, "; only finite values within +-1e200 are accepted"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> JobScheduler::TrainerCaller(const Job* job, const v1::JobRef& ref,
                                                bool running) const {
  // Hash lookups, not a scan of every rank's token: the same few steps for
  // a job of any size, or none (a token of 256 random bits cannot be
  // guessed from how a hash table probes).
  int rank = -1;
  bool past = false;
  if (job != nullptr && !ref.token().empty()) {
    if (auto it = job->token_rank.find(ref.token()); it != job->token_rank.end()) {
      rank = it->second;
    }
    for (const auto& [generation, ended] : job->past) past |= ended.tokens.contains(ref.token());
  }
  if (rank >= 0) {
    if (absl::Status s = CheckGeneration(*job, ref, running); !s.ok()) return s;
    return rank;
  }
  if (past) {
    return absl::AbortedError(absl::StrCat("generation ", ref.generation(), " of job ", job->id,
                                           " is over (current generation ", job->generation,
                                           ", ", v1::JobState_Name(job->state), ")"));
  }
  // The same answer whether the job exists or not, and whatever its
  // generation: only what the caller sent is named.
  return absl::PermissionDeniedError(absl::StrCat(
      "no rank of job '", PrintableLine(ref.job_id(), 64), "' generation ", ref.generation(),
      " holds this FRAMEWORM_TOKEN (a trainer call needs its rank's token of the running "
      "generation)"));
}

absl::StatusOr<JobScheduler::StepOutcome> JobScheduler::ReportStep(
    const v1::StepMetrics& m, bool record_metrics) {
  Job* job = FindMutable(m.ref().job_id());
  absl::StatusOr<int> caller = TrainerCaller(job, m.ref(), /*running=*/true);
  if (!caller.ok()) return caller.status();
  if (m.rank() < 0 || m.rank() >= static_cast<int>(job->ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", m.rank(), " outside world of ", job->ranks.size()));
  }
  if (m.rank() != *caller) {
    return absl::PermissionDeniedError(absl::StrCat(
        "step report for rank ", m.rank(), " of job ", job->id, " generation ", job->generation,
        " with rank ", *caller, "'s FRAMEWORM_TOKEN"));
  }
  if (absl::Status s = CheckStepReport(m); !s.ok()) return s;
  const absl::Time now = clock_.Now();
  StepOutcome out;
  if (!m.warning().empty()) {
    job->warning = absl::StrCat("rank ", m.rank(), " at step ", m.step(), ": ",
                                PrintableLine(m.warning(), 512));
    Changed(*job);
  }
  if (m.ping()) {  // liveness only: says whether the rank waits, never progress
    job->progress.Ping(m.rank(), now, m.waiting_seconds(), m.measures_wait(),
                       m.has_collectives() ? std::optional<RankCollectives>(
                                                 ToRankCollectives(m.collectives()))
                                           : std::nullopt);
    return out;
  }
  if (m.progress_only()) {
    out.checkpoint_at = job->progress.Progress(m.rank(), now, m.checkpoint_in_flight());
    return out;
  }
  const v1::AggregatedStep* agg = nullptr;
  if (record_metrics) {
    agg = job->metrics.Add(job->generation, static_cast<int>(job->ranks.size()), m, ToMs(now));
  } else {
    out.deferred = true;
    job->metrics.KeepInMemory(kDeferredMemorySteps);
  }
  if (agg != nullptr) {  // nullptr: a duplicate, or deferred
    out.row.emplace();
    out.row->job_id = job->id;
    out.row->step = agg->step();
    agg->SerializeToString(&out.row->aggregate);
    NoteStragglers(*job, {agg->stragglers().begin(), agg->stragglers().end()});
  }
  out.checkpoint_at =
      job->progress.Step(m.rank(), m.step(), m.total_steps(), now, m.checkpoint_in_flight());
  Changed(*job);
  return out;
}

absl::StatusOr<const Job*> JobScheduler::CheckpointTarget(
    const v1::JobRef& ref, bool writes) const {
  // Any rank of the current generation may fetch; rank 0 writes.
  const Job* job = Find(ref.job_id());
  absl::StatusOr<int> trainer = TrainerCaller(job, ref, /*running=*/false);
  if (!trainer.ok()) return trainer.status();
  const int caller = *trainer;
  if (writes && caller != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", caller, " of job ", job->id, " cannot upload or record a checkpoint: only rank 0 "
        "saves the job's checkpoints (every rank loads them)"));
  }
  return job;
}

void JobScheduler::ResumeFailed(const std::string& job_id) {
  if (Job* job = FindMutable(job_id)) job->resume_failed_generation = job->generation;
}

void JobScheduler::NoteCopyVerdict(const std::string& job_id, const std::string& path,
                                   bool damaged) {
  if (Job* job = FindMutable(job_id)) job->copy_verdict = Job::CopyVerdict{job->generation, path, damaged};
}

void JobScheduler::CheckpointRecorded(const std::string& job_id, int64_t step) {
  Job* job = FindMutable(job_id);
  if (!job) return;
  job->progress.CheckpointRecorded(step, clock_.Now());
  Changed(*job);
  MaybeGrow(*job, step);
}

// ------------------------------------------------------------------- views

Job* JobScheduler::FindMutable(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const Job* JobScheduler::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

int JobScheduler::Queued() const {
  int n = 0;
  for (const auto& [id, job] : jobs_) n += job->state == v1::PENDING;
  return n;
}

std::vector<const Job*> JobScheduler::Jobs() const {
  std::vector<const Job*> all;
  for (const auto& [id, job] : jobs_) all.push_back(job.get());
  std::sort(all.begin(), all.end(),
            [](const Job* a, const Job* b) { return a->seq < b->seq; });
  return all;
}

std::map<std::string, int> JobScheduler::SlotsInUse() const {
  std::map<std::string, int> used;
  for (const auto& [id, job] : jobs_)
    if (job->state == v1::RUNNING)
      for (const RankState& r : job->ranks) ++used[r.worker];
  return used;
}

std::vector<std::string> JobScheduler::TasksOn(
    const std::string& worker) const {
  std::vector<std::string> out;
  for (const auto& [id, job] : jobs_)
    for (size_t r = 0; r < job->ranks.size(); ++r)
      if (job->ranks[r].worker == worker)
        out.push_back(absl::StrCat(id, "/", r));
  return out;
}

std::set<std::string> JobScheduler::TakeChangedJobs() {
  return std::exchange(changed_, {});
}

}  // namespace frameworm::coordinator
