// The coordinator's domain core, as one facade over the parts that each own
// one lifecycle (docs/ARCHITECTURE.md):
//   JobScheduler       jobs, generations, gang placement (job_scheduler.h)
//   PortAllocator      MASTER_PORTs of running generations (port_allocator.h)
//   WorkerRegistry     workers, sessions, command outboxes (worker_registry.h)
//   CheckpointCatalog  checkpoint records and retention (checkpoint_catalog.h)
//   JobLogs            rank log files, written and read (job_logs.h)
//   MetricWriter       group commit of aggregated steps (metric_writer.h)
//   TensorBoardLog     per-job TensorBoard event files (tensorboard_log.h)
//   Store              durable state (store.h: SqliteStore, MemoryStore)
// No transport: the gRPC services (service.h) translate protos to these
// calls. Proto messages appear here only as plain data (specs, task specs,
// statuses), never gRPC types.
//
// Job specs are normalized by jobspec/job_spec.h NormalizeJobSpec (the one
// rule list); a spec it refuses is not stored.
//
// Time: every decision uses the injected Clock; time-driven work (heartbeat
// timeouts, hang detection, every_n_minutes checkpoints, scheduling retries)
// happens in Tick(), which the owner calls periodically. Nothing sleeps.
//
// Durability: everything acknowledged (a submitted job, a cancel, a step
// report, a checkpoint record) is committed to the Store before the method
// returns OK (ReportStepAsync: before its callback gets OK). Step
// aggregates go through the MetricWriter (group commit on its own thread),
// so the mutex is never held across a metric write. Creating a Coordinator
// reloads that state: RUNNING jobs stay RUNNING waiting for their workers to
// re-register with the tasks they still run; a worker that does not come
// back within the job's heartbeat timeout plus `reconnect_grace` fails the
// generation as usual.
//
// Events (event_log.h): the parts emit lifecycle events under the lock;
// after each call they are stored and printed as one "event {json}" line
// each on stderr, outside the lock. The facade itself emits worker_joined
// and worker_left (a registered worker silent for the default heartbeat
// timeout, seen on Tick), checkpoint_saved and checkpoint_expired (disk
// checkpoints; memory ones are too frequent to list), checkpoint_bad and
// checkpoint_copy_bad.
// Every 10 s the store keeps the newest `max_events_per_job` of each job
// and of the cluster; a job's events go with the job.
//
// Commands to workers are queued per worker session; the Listener is told
// (outside the lock) that a session has commands, and the transport drains
// them with TakeCommands(). The Listener also hears about every job change.
//
// Thread safety: thread-safe; one absl::Mutex (mu_) guards every part
// except JobLogs (immutable, thread-safe) and the MetricWriter and Store
// (thread-safe themselves). Listener callbacks are made without the mutex
// held, from the calling thread. ReportStepAsync callbacks run without the
// mutex, on the calling thread (refusals) or the MetricWriter's thread
// (after the commit).
#ifndef FRAMEWORM_COORDINATOR_COORDINATOR_H_
#define FRAMEWORM_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/line_budget.h"
#include "coordinator/checkpoint_catalog.h"
#include "coordinator/checkpoint_copies.h"
#include "coordinator/event_log.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_scheduler.h"
#include "coordinator/metric_writer.h"
#include "coordinator/port_allocator.h"
#include "coordinator/state_dir_lock.h"
#include "coordinator/store.h"
#include "coordinator/tensorboard_log.h"
#include "coordinator/worker_registry.h"
#include "frameworm/v1/common.pb.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"

namespace frameworm::coordinator {

struct CoordinatorOptions {
  std::string state_dir;  // required; SQLite db, logs/, checkpoints/
  std::string advertise;  // FRAMEWORM_COORDINATOR handed to trainers
  int port_min = 29500;   // MASTER_PORT range, inclusive
  int port_max = 29999;
  absl::Duration default_heartbeat_timeout = absl::Seconds(10);
  // Extra time a worker gets to re-register after a coordinator restart.
  absl::Duration reconnect_grace = absl::Seconds(5);
  // A built-in trainer with no report this long after its start is hung.
  absl::Duration startup_timeout = absl::Minutes(5);
  // A worker detached and silent this long (and running nothing) is
  // forgotten: ListWorkers no longer shows it. 0: never.
  absl::Duration forget_dead_workers_after = absl::Hours(1);
  // An ended job (SUCCEEDED, FAILED, CANCELLED) is deleted this long after
  // it ended: its rows, rank logs and the coordinator's checkpoint copies
  // (never the checkpoint files its ranks wrote). 0: kept forever.
  absl::Duration retain_finished = absl::Hours(7 * 24);
  // Metric history per job (MetricAggregator::Thin): a running job keeps at
  // most 2 x this many aggregated steps, an ended job this many. 0: all.
  int metric_history = 2000;
  // Aggregated steps per job kept in memory (the most recently updated);
  // older ones are read from the store when asked for.
  int metric_memory_steps = 256;
  // A rank's log keeps at most about this much of its newest output
  // (JobLogs). 0: unbounded.
  int64_t max_log_bytes = int64_t{64} << 20;
  // SubmitJob is refused (RESOURCE_EXHAUSTED) while the state dir's
  // filesystem has less free than this, so the jobs that run keep room for
  // their records. 0: never.
  int64_t min_free_state_bytes = int64_t{64} << 20;
  // SubmitJob is refused (RESOURCE_EXHAUSTED) while this many jobs wait
  // to start (PENDING): each holds its spec in memory and is looked at on
  // every scheduling pass. 0: unbounded.
  int max_queued_jobs = 10000;
  // At most this many ended jobs are kept per owner (JobSpec.owner, the
  // submitter): past it that owner's oldest to have ended are deleted as
  // retain_finished deletes them, before their time (cancelled submissions
  // would otherwise pile up for retain_finished, each with its spec, and
  // every listing copies them all). 0: unbounded.
  int max_ended_jobs = 10000;
  // Tick() calls this far apart mean the coordinator itself was stalled
  // (stopped, starved, a paused VM): worker and rank timers move on by the
  // gap, so nobody is failed for the coordinator's silence. Tick is meant
  // to run every 100 ms. 0: off (tests that jump a simulated clock).
  absl::Duration stall_after = absl::Seconds(2);
  double heartbeat_interval_s = 1.0;  // told to workers
  double straggler_factor = 1.5;
  int straggler_window = 5;
  int straggler_warmup = 3;  // each rank's first reports of a generation not judged
  double kill_grace_s = 3.0;      // KillTask: SIGTERM, SIGKILL after this
  int checkpoint_lead_steps = 2;  // checkpoint_at = max reported step + this
  // The largest checkpoint the coordinator keeps a copy of (uploads).
  int64_t max_checkpoint_bytes = int64_t{64} << 30;
  // Where a job's checkpoint.dir may point (clean absolute paths); empty:
  // <state_dir>/checkpoints only.
  std::vector<std::string> checkpoint_roots;
  // In-memory checkpoints of built-in trainers go under this directory on
  // every node (a tmpfs); empty: none.
  std::string memory_checkpoint_root = "/dev/shm/frameworm";
  // Events kept per job, and of the cluster (worker events); >= 1.
  int64_t max_events_per_job = 10000;
  // Aggregated metric rows waiting for the store (it fails, or lags) are
  // bounded by this many bytes; beyond it step reports are answered
  // UNAVAILABLE without being aggregated (they still count as the rank's
  // progress) and the ranks send them again (MetricWriter::Full).
  int64_t max_metric_backlog_bytes = MetricWriter::kDefaultMaxBacklogBytes;
};

class Coordinator {
 public:
  // Told about changes; called without the coordinator's lock, possibly
  // from several threads at once. May call back into the Coordinator.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void SessionHasCommands(const std::string& session_id) = 0;
    virtual void JobChanged(const std::string& job_id) = 0;
  };

  struct Registration {
    std::string session_id;
    double heartbeat_interval_s = 1;
  };

  // Opens the SQLite store under options.state_dir and reloads state.
  // Errors: INVALID_ARGUMENT for bad options, the Store's errors.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      const CoordinatorOptions& options, Clock& clock);
  // The same on a given store (not owned; it must outlive the Coordinator),
  // e.g. a MemoryStore in tests. options.state_dir still holds logs/ and
  // the default checkpoints/.
  static absl::StatusOr<std::unique_ptr<Coordinator>> CreateWithStore(
      const CoordinatorOptions& options, Clock& clock, Store* store);
  ~Coordinator();

  // Not owned; must outlive the Coordinator or be reset to nullptr first.
  void SetListener(Listener* listener);
  // Replaces options.advertise (once the server's port is known); affects
  // generations started afterwards.
  void SetAdvertise(const std::string& address);

  // ---- Jobs (JobService) ----
  // INVALID_ARGUMENT "invalid job spec: ..." (naming the field) for a bad
  // spec; nothing is stored.
  // `owner` (Caller::Owner() of the submitter, coordinator/access.h) is
  // recorded as the spec's owner, replacing whatever the spec said.
  // RESOURCE_EXHAUSTED, naming the state dir and its free space, while that
  // is under options.min_free_state_bytes or the store says the disk is
  // full (nothing stored).
  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec,
                                        const std::string& owner = "local");
  // The spec's owner of a job; NOT_FOUND for an unknown job.
  absl::StatusOr<std::string> JobOwner(const std::string& job_id) const;
  // NOT_FOUND for an unknown job.
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job_id) const;
  std::vector<v1::JobStatus> ListJobs() const;
  // Kills every rank; FAILED_PRECONDITION when the job already ended.
  absl::StatusOr<v1::JobStatus> CancelJob(const std::string& job_id);
  // The step every rank will checkpoint after. FAILED_PRECONDITION unless
  // the job is RUNNING.
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string& job_id);
  // JobScheduler::DebugJob, the commands sent at once: the ranks asked,
  // their generation, and the marker their blocks' headers carry.
  struct DebugAsked {
    std::vector<int> ranks;
    int64_t generation = 0;
    std::string marker;
    // The asked ranks' flight recorders as last pinged, and the verdict of
    // comparing every rank's (empty: none).
    std::vector<std::pair<int, RankCollectives>> recorders;
    std::string collectives;
    absl::Time now;
  };
  absl::StatusOr<DebugAsked> DebugJob(const std::string& job_id, int rank);
  // The job's checkpoint records, oldest first, without secrets or tokens;
  // an ended job's in-memory records are left out (they are being released).
  absl::StatusOr<std::vector<v1::CheckpointRecord>> ListCheckpoints(
      const std::string& job_id) const;
  // Aggregated steps with step > since_step (older ones are read from the
  // store, outside the lock; MetricAggregator keeps only a tail in memory).
  absl::StatusOr<std::vector<v1::AggregatedStep>> GetMetrics(
      const std::string& job_id, int64_t since_step) const;
  std::vector<v1::WorkerInfo> ListWorkers() const;
  // Aggregated metric rows waiting for the store, and the bound past which
  // reports are deferred (CoordinatorOptions::max_metric_backlog_bytes).
  int64_t metric_backlog_bytes() const { return writer_->backlog_bytes(); }
  int64_t metric_backlog_limit_bytes() const { return writer_->max_backlog_bytes(); }
  // Events after `after_seq`, oldest first, at most `limit`: the job's, or
  // every event with nullopt (the caller filters by access). Read from the
  // store; the store's errors.
  absl::StatusOr<std::vector<v1::Event>> ListEvents(const std::optional<std::string>& job_id,
                                                    int64_t after_seq, int limit) const;
  // The newest `limit` events, oldest first (the dashboard's view).
  absl::StatusOr<std::vector<v1::Event>> ListNewestEvents(
      const std::optional<std::string>& job_id, int limit) const;
  // The owners of every job now known (for filtering events by access).
  std::map<std::string, std::string> JobOwners() const;
  bool JobExists(const std::string& job_id) const;
  // GetLogs' arguments: NOT_FOUND for an unknown job, INVALID_ARGUMENT for
  // a rank that is neither -1 (every rank) nor within the job's largest
  // world (nodes.max x nproc_per_node), or a negative offset.
  // `rank_offsets` (rank -1 only; INVALID_ARGUMENT with one rank): each key
  // a rank of that world, each value >= 0.
  absl::Status CheckLogRequest(const std::string& job_id, int rank, int64_t offset,
                               const std::map<int, int64_t>& rank_offsets = {}) const;
  bool JobFinal(const std::string& job_id) const;
  // The rank logs (<state_dir>/logs); thread-safe, usable without any lock.
  const JobLogs& logs() const { return logs_; }

  // ---- Workers (WorkerService) ----
  // (Re)registers a worker and reconciles the tasks it reports: current
  // tasks keep running, stale ones are killed, current tasks it no longer
  // runs fail their generation; the checkpoint copies it reports make it a
  // holder of those records. INVALID_ARGUMENT for a missing name or
  // address or slots < 1.
  absl::StatusOr<Registration> RegisterWorker(
      const v1::RegisterWorkerRequest& request);
  // The session's stream opened. NOT_FOUND for an unknown or replaced
  // session (the worker must register again).
  absl::Status AttachSession(const std::string& session_id);
  // A heartbeat, task status or log chunk. NOT_FOUND as for AttachSession;
  // INVALID_ARGUMENT for a log chunk naming an unknown job, a bad rank or a
  // bad source (generation, stream, offset). A final task status applied,
  // a log chunk stored (JobLogs::AppendAt: only bytes not already there)
  // and a chunk refused with INVALID_ARGUMENT each queue a Receipt for the
  // worker; a chunk the disk did not take (INTERNAL) is not receipted.
  absl::Status HandleWorkerMessage(const v1::WorkerMessage& message);
  void DetachSession(const std::string& session_id);
  // Commands queued for the session, oldest first (and removes them).
  absl::StatusOr<std::vector<v1::CoordinatorMessage>> TakeCommands(
      const std::string& session_id);

  // ---- Trainers (TrainerService) ----
  using ReportDone =
      std::function<void(absl::StatusOr<v1::ReportStepResponse>)>;
  // Aggregates one rank's step report and stages the step's aggregate for
  // the next group commit; never waits on the disk. `done` runs exactly
  // once: from this call with NOT_FOUND (unknown job), ABORTED (an older
  // generation, or a job no longer running) or INVALID_ARGUMENT (a rank
  // outside the world); otherwise from the MetricWriter thread after the
  // commit that covers this report (also for a duplicate report: it waits
  // for its step's row), with the response, or UNAVAILABLE when the commit
  // failed (the row is retried with the next commit; a retried report is a
  // duplicate and is acknowledged once that commit succeeds).
  void ReportStepAsync(const v1::StepMetrics& m, ReportDone done);
  // A batch of step reports (TrainerService.ReportSteps), in order under
  // one lock hold; `done` gets OK (the newest report's checkpoint step)
  // once every accepted row is committed, or the first refused report's
  // error (INVALID_ARGUMENT "report i of n: ..."); the reports before it
  // stay accepted. INVALID_ARGUMENT for an empty batch or one of more than
  // kMaxStepReports.
  static constexpr int kMaxStepReports = 256;
  void ReportStepsAsync(const v1::StepReports& batch, ReportDone done);
  // ReportStepAsync, waiting for `done`. Blocks until the commit.
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::StepMetrics& m);
  // Records a complete checkpoint (rank 0's token only: another rank's is
  // PERMISSION_DENIED) and applies retention; returns
  // the expired paths (the coordinator deletes only its own copies of
  // them; rank 0 deletes its files). A step with an uploaded copy must
  // report that copy's size (0: the copy's is taken). Errors as
  // ReportStep, INVALID_ARGUMENT for an empty path or another size.
  absl::StatusOr<std::vector<std::string>> ReportCheckpoint(
      const v1::CheckpointRecord& record);
  // A rank of the current generation could load no copy of `bad.path`,
  // the checkpoint the generation resumed from: its record is dropped,
  // with the coordinator's copy and the workers' (DropCheckpoint), so the
  // next generation resumes from the one before (or from scratch when none
  // is left). A second report of the same path (another rank) is OK and
  // changes nothing. With `bad.coordinator_copy` (only the coordinator's
  // copy failed, its download's bytes were not the record's) the copy is
  // checked first: one that matches its record is FAILED_PRECONDITION and
  // nothing changes; a damaged one is removed, and while any worker holds
  // the checkpoint the record stays and true is returned (the next
  // generation fetches it from them; this generation's end is not counted
  // against max_restarts); with no holder the record is dropped as above.
  // Returns whether the record was kept. Errors as ReportStep's;
  // INVALID_ARGUMENT when `path` is not what this generation resumed from;
  // the store's.
  absl::StatusOr<bool> ReportBadCheckpoint(const v1::BadCheckpoint& bad);
  // Receiving rank 0's copy of a checkpoint (<state_dir>/checkpoint-copies,
  // see checkpoint_copies.h). The job's copies of steps it has no record
  // of (uploaded, never reported) are removed first, so uploads that are
  // never reported cannot fill the disk. Errors as ReportStep (the ref must
  // name the job's current generation and carry rank 0's token), and
  // CheckpointCopies::Begin's.
  // Whether `ref` may upload a checkpoint copy now (BeginCheckpointUpload's
  // checks of the caller alone), so that a caller without rank 0's token
  // is refused before it is counted against the uploads in flight.
  absl::Status CheckCheckpointUpload(const v1::JobRef& ref) const;
  // Before an upload's copy replaces the copy of `step`: FAILED_PRECONDITION
  // when that step is recorded (on disk) with another checksum, since every
  // download is checked against the record's.
  absl::Status CheckCopyMatchesRecord(const v1::JobRef& ref, int64_t step,
                                      const std::string& checksum) const;
  absl::StatusOr<std::unique_ptr<ReceivedFile>> BeginCheckpointUpload(
      const v1::JobRef& ref, int64_t step, int64_t total_bytes);
  // The coordinator's copy of the checkpoint the job reported at `path`,
  // for a rank of the current generation. NOT_FOUND when the job reported
  // no such path or no copy was uploaded; ABORTED for an old generation.
  // `checksum` (when given): the record's, which the copy was checked
  // against when it was uploaded.
  absl::StatusOr<std::string> CheckpointCopyOf(const v1::JobRef& ref, const std::string& path,
                                               std::string* checksum = nullptr) const;
  // For a user: the record of the job's disk checkpoint of `step` (0: the
  // newest one of which the coordinator holds a copy) and the path of the
  // coordinator's copy of it. Errors: NOT_FOUND for an unknown job, no such
  // step (naming the steps there are) or no copy; INVALID_ARGUMENT for a
  // negative step.
  absl::StatusOr<std::pair<v1::CheckpointRecord, std::string>> CheckpointForUser(
      const std::string& job_id, int64_t step) const;

  // Time-driven work; call periodically (e.g. every 100 ms). Also runs the
  // store's housekeeping (Store::Maintain) and, every 10 s, the bounded
  // growth (retention of ended jobs, metric thinning) whose deletes
  // (rows, then files) happen outside the mutex. A failed delete is logged;
  // its rows are found and expired again after a restart.
  void Tick();

  // The interval workers are told to heartbeat at (options).
  absl::Duration heartbeat_interval() const { return heartbeat_interval_; }

 private:
  Coordinator(const CoordinatorOptions& options, Clock& clock,
              std::unique_ptr<Store> owned, Store& store);
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(
      const CoordinatorOptions& options, Clock& clock,
      std::unique_ptr<Store> owned, Store* store);
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);
  // At start-up, after Reload: removes the log, checkpoint-copy and
  // TensorBoard directories under the state dir whose job the store does
  // not have (an expiry that deleted the job's rows but stopped before its
  // files went, or a log chunk written just after they went), so they do
  // not outlive every bound. Best effort.
  void RemoveFilesOfForgottenJobs() ABSL_LOCKS_EXCLUDED(mu_);
  // ReportBadCheckpoint's coordinator_copy part: checks the coordinator's
  // copy of `bad.path` against its record (its size, then its CRC-32, read
  // outside the lock; once per generation: Job::copy_verdict), removes a
  // damaged one and, while the checkpoint has holders, keeps the record
  // (true). False: the record is to be dropped as for any bad checkpoint
  // (no holder left, `*removed` then true; a memory record or one with
  // neither size nor checksum, nothing to check; no copy; or another
  // rank's report dropped it already). FAILED_PRECONDITION when the copy
  // matches its record; UNAVAILABLE when it cannot be read (nothing
  // removed). A damaged copy whose record stays is marked as it is removed
  // (CheckpointCopies::MarkDamaged), so a restarted coordinator gives the
  // generation's other ranks the same answer; with no holder it is only
  // removed (the record goes too).
  absl::StatusOr<bool> DropDamagedCopy(const v1::BadCheckpoint& bad, bool* removed)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a rank of `job`'s current generation found the coordinator's
  // copy of `path` (step `step`) damaged: Job::copy_verdict, or after a
  // restart the copy's damage mark (CheckpointCopies::DamagedIn; read
  // under the lock, a file of a few bytes), adopted as the verdict and,
  // with holders, the generation's end again not counted. The mark's
  // UNAVAILABLE when it cannot be read (the caller drops nothing).
  absl::StatusOr<bool> CopyDamagedThisGenerationLocked(const Job& job, const std::string& path,
                                                       int64_t step, bool has_holders)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Those of `holders` that can serve a rank now: registered, attached and
  // heard from lately (WorkerRegistry::Schedulable). A lost worker stays a
  // record's holder (back with its copy it serves again; a registration
  // without it ends its claim); a generation that found no copy while none
  // served is not counted.
  std::vector<std::string> ServingLocked(const std::vector<std::string>& holders) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record of `path` in `job` and its holders; nullopt when none.
  std::optional<std::pair<v1::CheckpointRecord, std::vector<std::string>>> RecordOfLocked(
      const std::string& job_id, const std::string& path) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus StatusOf(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job view under mu_: NOT_FOUND for an unknown job.
  absl::StatusOr<const Job*> FindLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's log chunk may be written: the job exists, the rank is within
  // its largest world and, for the current generation, runs on `worker`;
  // data at most 1 MiB. INVALID_ARGUMENT otherwise. (The write itself
  // happens without the lock.)
  // Queues a Receipt of `log` for `worker` up to `end` (none: the chunk's
  // own end, for a chunk refused for good).
  void ReceiptLogLocked(const std::string& worker, const v1::LogUpload& log,
                        std::optional<int64_t> end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a Receipt for `worker` (its fields as in worker_service.proto).
  void ReceiptLocked(const std::string& worker, const v1::JobRef& ref, int rank, bool final_status,
                     const std::string& stream, int64_t log_end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLogLocked(const std::string& worker, const v1::LogUpload& log) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Log lines of holds refused or failed (any worker can send those).
  // UNAVAILABLE for a report deferred while the metric writer is full
  // (logged at most once per 5 s).
  absl::Status BacklogFull() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LineBudget held_log_budget_ ABSL_GUARDED_BY(mu_){/*per_second=*/5, /*burst=*/20};
  LineBudget backlog_log_budget_ ABSL_GUARDED_BY(mu_){/*per_second=*/0.2, /*burst=*/1};
  // Whether `worker`'s claim to hold (job, step) may make it a holder (a
  // source others fetch from, showing it the record's secret): this
  // coordinator sent it that hold, or the claim shows the record's secret
  // (any secret when the record's is not known, after a restart). A claim
  // of a step with no record never counts.
  bool HolderClaimCountsLocked(const std::string& worker, const v1::CheckpointHeld& held) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker that says it holds a copy of a step with no record (a fetch
  // that ended after the record expired or was released, a copy kept across
  // a restart) is told to drop it, as the record's holders were: the step
  // while the job is known, the job's copies once the job is gone (a claim
  // whose job id is no plain name is ignored; repeats are queued once, at
  // most WorkerRegistry::kMaxQueuedUnrecordedDrops). Returns whether it
  // was told.
  bool DropUnrecordedLocked(const std::string& worker, const v1::CheckpointHeld& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's answer to a HoldCheckpoint: a verified copy becomes one of
  // the record's holders; a failure is logged.
  void HeldLocked(const std::string& worker, const v1::CheckpointHeld& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls the listener for what the parts queued under the lock, and
  // stores and prints the staged events.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // worker_left for every live worker silent for worker_timeout_.
  void NoteLostWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ended jobs' memory checkpoints: records removed, holders told to drop
  // them. True when any was.
  bool ReleaseMemoryCheckpointsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every 10 s: expires ended jobs, releases their memory checkpoints and
  // thins histories (see Tick).
  void BoundGrowth() ABSL_LOCKS_EXCLUDED(mu_);

  // Held by Create()'s coordinators; declared first, released last.
  std::unique_ptr<StateDirLock> lock_;
  const std::string state_dir_;                      // absolute
  const std::vector<std::string> checkpoint_roots_;  // never empty
  const std::string memory_root_;
  const absl::Duration forget_dead_workers_after_;
  const absl::Duration retain_finished_;
  const int64_t min_free_state_bytes_;
  const int max_queued_jobs_;
  const int max_ended_jobs_;
  const absl::Duration stall_after_;
  int64_t debug_requests_ ABSL_GUARDED_BY(mu_) = 0;  // DebugJob markers
  const size_t metric_history_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration worker_timeout_;  // default heartbeat timeout
  const int64_t max_events_per_job_;
  Clock& clock_;
  const std::unique_ptr<Store> owned_store_;  // null: not owned
  Store& store_;
  // TensorBoard files (<state_dir>/tensorboard), fed by the MetricWriter's
  // commits; declared before it, so destroyed after it.
  TensorBoardLog tensorboard_;
  // Declared after the store: destroyed (committing what is staged) first.
  const std::unique_ptr<MetricWriter> writer_;
  const JobLogs logs_;
  const CheckpointCopies copies_;  // thread-safe (filesystem only)

  // Held across taking the pending events and storing them (Flush), so
  // they reach the store in seq order; taken before mu_, never under it.
  absl::Mutex flush_mu_;
  mutable absl::Mutex mu_;
  EventLog events_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> live_workers_ ABSL_GUARDED_BY(mu_);  // joined, not left
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  PortAllocator ports_ ABSL_GUARDED_BY(mu_);
  CheckpointCatalog checkpoints_ ABSL_GUARDED_BY(mu_);
  JobScheduler jobs_ ABSL_GUARDED_BY(mu_);
  Listener* listener_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_bound_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_tick_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_COORDINATOR_H_
