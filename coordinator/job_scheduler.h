// Scheduling: the job table and every job's lifecycle (job.h). Jobs queue
// by priority, then submission order; a job starts as a gang on nodes.min
// to nodes.max schedulable workers with nproc_per_node free slots each, or
// not at all. Starting a generation assigns ranks (node-major), takes a
// MASTER_PORT (PortAllocator), resumes from the newest checkpoint
// (CheckpointCatalog) and queues a StartTask per rank (WorkerRegistry). A
// failed generation (a rank exiting non-zero or killed, a worker missing
// heartbeats, a hung rank, a worker re-registering without its task) kills
// every rank and restarts while max_restarts allows, else FAILED; all ranks
// exiting 0 is SUCCEEDED. Trainer calls naming an older generation get
// ABORTED.
//
// Queue order: a job that the live cluster cannot hold even when idle does
// not block the queue; one that merely waits for busy slots does (strict
// order).
//
// Elastic growth (job_growth.cc): when nothing waits in the queue, a
// RUNNING job on fewer than nodes.max workers whose trainers report steps
// and for which free workers exist asks its ranks for a checkpoint; once
// that checkpoint is recorded, the generation ends ("growing from N to M
// nodes") and the next starts at once on the old workers plus the free ones
// (up to nodes.max), resuming from it. Growth is not a failure: it does not
// count against max_restarts. A growth checkpoint the ranks miss is not
// asked for again in that generation.
//
// Time: decisions use the injected Clock; Supervise() does the time-driven
// work (heartbeat timeouts, hang detection, every_n_minutes checkpoints).
//
// Durability: a job's row is committed before Submit/Cancel return OK; a
// generation's start (job row, generation, assignments) is committed before
// its StartTask commands are queued. A generation's end or a rank's exit
// that could not be recorded is logged and retried on every Supervise until
// the store takes it (Job::unrecorded_end, unrecorded_done). Reload() rebuilds the table
// from the Store after a restart: RUNNING jobs stay RUNNING, their workers
// get heartbeat timeout + reconnect_grace to re-register, and their ranks
// (when they had reported) as long to report again.
//
// Notifications: every job that changed is recorded; TakeChangedJobs hands
// the owner that set (it notifies outside its lock).
//
// Events (event_log.h): job_submitted, job_scheduled (the first
// generation), generation_started (every generation: placement, master,
// the step it resumes from), restart (a generation after a failure, with
// that step), growing, the cause of every failed generation (rank_failed
// with its exit code or signal, hang_detected, worker_lost), straggler and
// stragglers_cleared (a change of the flagged ranks, at most one per job
// per 10 s) and job_finished.
//
// Ownership: owns the jobs. The Store, WorkerRegistry, PortAllocator,
// CheckpointCatalog and EventLog are not owned; they and the Clock must outlive it.
// Thread safety: not thread-safe; owned by the Coordinator under its mutex,
// which also guards the collaborators it is given.
// Errors: NOT_FOUND for an unknown job, FAILED_PRECONDITION for a job in the
// wrong state, ABORTED for a stale generation, INVALID_ARGUMENT for a rank
// outside the world, the Store's errors (then nothing changed).
#ifndef FRAMEWORM_COORDINATOR_JOB_SCHEDULER_H_
#define FRAMEWORM_COORDINATOR_JOB_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/checkpoint_catalog.h"
#include "coordinator/event_log.h"
#include "coordinator/job.h"
#include "coordinator/port_allocator.h"
#include "coordinator/store.h"
#include "coordinator/worker_registry.h"
#include "frameworm/v1/trainer_service.pb.h"

namespace frameworm::coordinator {

class JobScheduler {
 public:
  struct Options {
    std::string state_dir;  // default checkpoint directories live here
    std::string memory_root;  // in-memory checkpoints (MemoryCheckpointDir); empty: none
    std::string advertise;  // the trainers' coordinator address
    absl::Duration default_heartbeat_timeout = absl::Seconds(10);
    absl::Duration reconnect_grace = absl::Seconds(5);
    // Built-in trainers (frameworm-train) that have not reported this long
    // after their generation started are hung. 0: never.
    absl::Duration startup_timeout = absl::Minutes(5);
    MetricAggregator::Options metrics;
    int checkpoint_lead_steps = 2;  // checkpoint_at = max step + this
  };
  // A step report's effect: the checkpoint step to tell the rank, and the
  // step's updated aggregate to commit (none for a progress-only or a
  // duplicate report, or a deferred one). `deferred`: a metric report that
  // was not aggregated (ReportStep's `record_metrics` false): the caller
  // answers it UNAVAILABLE so that the rank sends it again.
  struct StepOutcome {
    int64_t checkpoint_at = 0;
    std::optional<MetricRow> row;
    bool deferred = false;
  };

  JobScheduler(const Options& options, Clock& clock, Store& store,
               WorkerRegistry& workers, PortAllocator& ports,
               const CheckpointCatalog& checkpoints, EventLog& events);

  absl::Status Reload();
  // Queues a job with a normalized spec; returns its id.
  absl::StatusOr<std::string> Submit(v1::JobSpec spec);
  // Kills every rank; FAILED_PRECONDITION when the job already ended.
  absl::StatusOr<const Job*> Cancel(const std::string& job_id);
  // Asks the workers of a RUNNING job for the stacks of `rank` (-1: every
  // rank), appended to those ranks' logs under a header naming `marker`.
  // Returns the ranks asked. Errors: NOT_FOUND, FAILED_PRECONDITION (not
  // running), INVALID_ARGUMENT (rank), RESOURCE_EXHAUSTED (the job's stacks
  // were asked for less than kDebugInterval ago: a loop of requests cannot
  // keep its workers dumping stacks instead of supervising).
  static constexpr absl::Duration kDebugInterval = absl::Seconds(2);
  absl::StatusOr<std::vector<int>> DebugJob(const std::string& job_id, int rank,
                                            const std::string& marker);
  // The step every rank will checkpoint after; FAILED_PRECONDITION unless
  // RUNNING.
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string& job_id);
  // Starts what the queue allows now.
  void Schedule();
  void set_advertise(const std::string& address) {
    options_.advertise = address;
  }

  // ---- Workers ----
  // A task status from `worker`: current ranks progress, stale running
  // tasks (older generation, ended job) are killed.
  void HandleTaskStatus(const std::string& worker, const v1::TaskStatus& t);
  // After `worker` (re)registered with the tasks it still runs (`running`)
  // and the final statuses it could not deliver (`ended`): the ended ones
  // are handled first (a finished rank is done), then the running ones; a
  // current rank in neither fails its generation, unless `same_process`
  // (the worker process that was sent its StartTask, which keeps every
  // task it got until its final status is delivered) and the rank never
  // reported: then the StartTask was lost in flight and is sent again.
  // `first_since_reload`: the worker's first registration with this
  // coordinator process, which reloaded the generation (its StartTasks may
  // have been lost with the previous process): a rank that never reported
  // then fails its generation uncounted (no step was lost, and the
  // coordinator's own restart is not the job's failure).
  void Reconcile(const std::string& worker,
                 const google::protobuf::RepeatedPtrField<v1::TaskStatus>& running,
                 const google::protobuf::RepeatedPtrField<v1::TaskStatus>& ended,
                 bool same_process = false, bool first_since_reload = false);
  // Heartbeat timeouts, hung ranks, timed checkpoints.
  void Supervise();
  // The coordinator was stalled for `gap`: running generations' timers
  // move on by it (GenerationProgress::ForgiveStall).
  void ForgiveStall(absl::Duration gap);

  // ---- Trainers ----
  // A rank's report, checked (job, generation, rank, token, bounds). With
  // `record_metrics` false (the metric writer's backlog is full: the store
  // fails) a metric report still counts as the rank's progress (its hang
  // timer, its step), but its values are not aggregated: `deferred`; and
  // the job's aggregator keeps kDeferredMemorySteps in memory for the rest
  // of the generation, so that the ranks' reports sent again (each rank
  // keeps at most 4,096: trainer/step_reporter.h, the Python Reporter's
  // MAX_QUEUED) merge however far apart the ranks send them.
  static constexpr size_t kDeferredMemorySteps = 4096 + 1024;
  // Restarts a job may take without counting them, each caused by this
  // coordinator's own absence (TaskStatus.fenced) or by a resume
  // checkpoint with no usable copy (ResumeFailed); past it they count.
  static constexpr int kMaxUncountedRestarts = 16;
  absl::StatusOr<StepOutcome> ReportStep(const v1::StepMetrics& m, bool record_metrics);
  // Who makes a trainer call to `job` (ref's job; null: none): the rank of
  // its current generation whose token `ref` carries (looked up in
  // Job::token_rank). A token that is no rank's gets one answer,
  // PERMISSION_DENIED naming only what the caller sent, whether the job
  // exists or not and whatever generation it names: a caller without a
  // token learns neither. A token of one of the job's last
  // Job::kPastGenerations generations (not kept across a coordinator
  // restart), or a current one naming another generation, or the job no
  // longer RUNNING (`running`; else CANCELLED), is ABORTED: that
  // generation is over.
  absl::StatusOr<int> TrainerCaller(const Job* job, const v1::JobRef& ref, bool running) const;
  // The job a checkpoint of `ref` belongs to (TrainerCaller's answers).
  // Any rank may read (fetch a copy, report a bad one); only rank 0 writes
  // (uploads a copy, records a checkpoint): `writes` with another rank's
  // token is PERMISSION_DENIED naming it.
  absl::StatusOr<const Job*> CheckpointTarget(const v1::JobRef& ref, bool writes) const;
  // A checkpoint of `step` was recorded: the pending request it satisfies
  // is done, the every_n_minutes timer restarts.
  void CheckpointRecorded(const std::string& job_id, int64_t step);
  // A rank of the job's current generation found no copy at all of the
  // checkpoint it resumes from (no holder, no coordinator copy; its record
  // is dropped), or only the coordinator's copy, damaged (removed; the
  // record kept for its holders): the failure of this generation that
  // follows is not counted against max_restarts (bounded by the records,
  // by one per generation and by kMaxUncountedRestarts).
  void ResumeFailed(const std::string& job_id);
  // Keeps Job::copy_verdict for the job's current generation.
  void NoteCopyVerdict(const std::string& job_id, const std::string& path, bool damaged);

  // ---- Bounded growth (job_retention.cc) ----
  // Removes the jobs that ended (SUCCEEDED, FAILED, CANCELLED) before
  // `before_ms` from the table; returns their ids. Their rows and files are
  // the caller's to delete.
  std::vector<std::string> ExpireFinished(int64_t before_ms);
  // Removes each owner's ended jobs beyond the `keep` that ended last
  // (ties: the higher id stays), so one user's flood removes only that
  // user's history; returns their ids, as ExpireFinished.
  std::vector<std::string> ExpireOldestFinished(size_t keep);
  // Thins every job's metric history (MetricAggregator::Thin): a job that
  // has not ended once it holds over 2 x `limit` steps, an ended one to
  // `limit`. Returns (job id, removed steps) for the caller to delete from
  // the store. limit 0: nothing.
  std::vector<std::pair<std::string, std::vector<int64_t>>> ThinMetrics(
      size_t limit);

  // ---- Views ----
  const Job* Find(const std::string& job_id) const;
  std::vector<const Job*> Jobs() const;  // submission order
  int Queued() const;                    // jobs PENDING
  // Slots each worker's running ranks hold.
  std::map<std::string, int> SlotsInUse() const;
  // "<job_id>/<rank>" of every rank running on `worker`.
  std::vector<std::string> TasksOn(const std::string& worker) const;
  std::set<std::string> TakeChangedJobs();
  // After Reload: the job's last cause, read from its events (unknown
  // jobs are ignored).
  void RestoreLastCause(const std::string& job_id, const std::string& message, int64_t unix_ms);

 private:
  Job* FindMutable(const std::string& job_id);
  std::unique_ptr<Job> NewJob() const;
  absl::Duration HeartbeatTimeout(const v1::JobSpec& spec) const;
  // Job `j` of the current generation of `ref`, or ABORTED.
  absl::Status CheckGeneration(const Job& j, const v1::JobRef& ref,
                               bool running) const;
  bool IsCurrentTask(const Job* job, const std::string& worker,
                     const v1::TaskStatus& t) const;
  bool StartGeneration(Job& job, const std::vector<std::string>& workers);
  // After a reload the coordinator knows no holder until workers register:
  // true while a generation of `job` would resume from an in-memory
  // checkpoint (no coordinator copy) with no holder known yet, within the
  // workers' time to re-register (reconnect_grace + the job's heartbeat
  // timeout from the reload). Its start waits instead of sending ranks that
  // find no copy (and would drop the checkpoint as bad).
  bool AwaitsHolders(const Job& job) const;
  // Schedulable workers with `nproc` free slots, not in `exclude`, in the
  // registry's order; `capable` (optional) counts those with enough slots
  // at all; `in_use` (optional): SlotsInUse() as the caller has it.
  std::vector<std::string> FreeWorkers(int nproc, const std::vector<std::string>& exclude,
                                       int* capable = nullptr,
                                       const std::map<std::string, int>* in_use = nullptr) const;
  // Growth (job_growth.cc): asks growable jobs for their checkpoint;
  // grows `job` once the checkpoint of `step` is recorded.
  void PlanGrowth();
  // Free workers a growing `job` may take: not its own, not ones it avoids.
  std::vector<std::string> GrowthWorkers(const Job& job) const;
  void MaybeGrow(Job& job, int64_t step);
  void KillAll(Job& job);
  // Ends the generation for `cause` (an event whose kind and details the
  // caller set; its message is the reason): emitted, kept as the job's
  // last cause; restarts or FAILED. `counted`: false when the coordinator's
  // own absence caused it (the restart does not use up max_restarts, at
  // most kMaxUncountedRestarts times per job).
  void FailGeneration(Job& job, v1::Event cause, bool counted = true);
  // on_straggler: restart_without: ends the generation of a job whose
  // tracked straggler (NoteStragglers) has been flagged for its grace
  // period, its worker avoided for 10 minutes. True when it did.
  bool ActOnStraggler(Job& job, absl::Time now);
  // `free` without the workers `job` avoids, unless that leaves fewer than
  // nodes.min (then `free` as it is).
  std::vector<std::string> WithoutAvoided(const Job& job, std::vector<std::string> free) const;
  // True while `job` avoids `worker` (on_straggler: restart_without).
  bool Avoids(const Job& job, const std::string& worker) const;
  // job_finished for a job that just ended.
  void EmitFinished(const Job& job);
  // straggler / stragglers_cleared when `flagged` differs from the job's.
  void NoteStragglers(Job& job, const std::vector<int>& flagged);
  void Succeed(Job& job);
  // The RUNNING generation of `job` ended: its port is given back and its
  // ranks are dropped. Only for a job that was RUNNING.
  void LeaveRunning(Job& job);
  // The RUNNING generation of `job` ended, its new state already set: the
  // job's row and the generation's end (`why`) are recorded (a store error
  // is logged), then LeaveRunning; the job changed.
  void RecordGenerationEnd(Job& job, const std::string& why);
  // Writes what RecordGenerationEnd or a rank's exit could not record.
  void RetryUnrecorded(Job& job);
  void Changed(const Job& job) { changed_.insert(job.id); }

  Options options_;
  Clock& clock_;
  Store& store_;
  WorkerRegistry& workers_;
  PortAllocator& ports_;
  const CheckpointCatalog& checkpoints_;
  EventLog& events_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  int64_t next_seq_ = 1;
  std::set<std::string> changed_;
  absl::Time reloaded_at_ = absl::InfinitePast();  // when Reload ran
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_JOB_SCHEDULER_H_
