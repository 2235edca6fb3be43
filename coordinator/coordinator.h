// The coordinator's domain core: job lifecycle with generations, worker
// registry with heartbeat timeouts, gang scheduler, rank assignment and
// MASTER_PORT allocation, failure handling with restarts from the newest
// checkpoint, hang detection, the checkpoint catalog with retention, and
// metric aggregation. No transport: the gRPC services (service.h) translate
// protos to these calls. Proto messages appear here only as plain data
// (specs, task specs, statuses), never gRPC types.
//
// Job: PENDING -> RUNNING -> (RESTARTING -> RUNNING)* -> SUCCEEDED | FAILED |
// CANCELLED. Each (re)start of a job's process group is a new generation;
// trainer calls carrying an older generation get ABORTED.
//
// Time: every decision uses the injected Clock; time-driven work (heartbeat
// timeouts, hang detection, every_n_minutes checkpoints, scheduling retries)
// happens in Tick(), which the owner calls periodically. Nothing sleeps.
//
// Durability: everything acknowledged (a submitted job, a cancel, a step
// report, a checkpoint record) is committed to the Store before the method
// returns OK (ReportStepAsync: before its callback gets OK). Step
// aggregates go through a MetricWriter (group commit on its own thread), so
// the core mutex is never held across a metric write. Create() reloads that state: RUNNING jobs stay RUNNING waiting
// for their workers to re-register with the tasks they still run; a worker
// that does not come back within the job's heartbeat timeout plus
// `reconnect_grace` fails the generation as usual.
//
// Commands to workers are queued per worker session; the Listener is told
// (outside the lock) that a session has commands, and the transport drains
// them with TakeCommands(). The Listener also hears about every job change.
//
// Thread safety: thread-safe; one absl::Mutex guards all state. Listener
// callbacks are made without the mutex held, from the calling thread.
// ReportStepAsync callbacks run without the mutex, on the calling thread
// (refusals) or the MetricWriter's thread (after the commit).
#ifndef FRAMEWORM_COORDINATOR_COORDINATOR_H_
#define FRAMEWORM_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/metric_writer.h"
#include "coordinator/metrics.h"
#include "coordinator/store.h"
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
  double heartbeat_interval_s = 1.0;  // told to workers
  double straggler_factor = 1.5;
  int straggler_window = 5;
  double kill_grace_s = 3.0;  // KillTask: SIGTERM, SIGKILL after this
  int checkpoint_lead_steps = 2;  // checkpoint_at = max reported step + this
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

  // Opens the store under options.state_dir and reloads state. Errors:
  // INVALID_ARGUMENT for bad options, the Store's errors.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      const CoordinatorOptions& options, Clock& clock);

  // Not owned; must outlive the Coordinator or be reset to nullptr first.
  void SetListener(Listener* listener);
  // Replaces options.advertise (once the server's port is known); affects
  // generations started afterwards.
  void SetAdvertise(const std::string& address);

  // ---- Jobs (JobService) ----
  // INVALID_ARGUMENT (naming the field) for a bad spec; nothing is stored.
  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec);
  // NOT_FOUND for an unknown job.
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job_id) const;
  std::vector<v1::JobStatus> ListJobs() const;
  // Kills every rank; FAILED_PRECONDITION when the job already ended.
  absl::StatusOr<v1::JobStatus> CancelJob(const std::string& job_id);
  // The step every rank will checkpoint after. FAILED_PRECONDITION unless
  // the job is RUNNING.
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string& job_id);
  absl::StatusOr<std::vector<v1::CheckpointRecord>> ListCheckpoints(
      const std::string& job_id) const;
  // Aggregated steps with step > since_step.
  absl::StatusOr<std::vector<v1::AggregatedStep>> GetMetrics(
      const std::string& job_id, int64_t since_step) const;
  std::vector<v1::WorkerInfo> ListWorkers() const;
  bool JobExists(const std::string& job_id) const;
  bool JobFinal(const std::string& job_id) const;
  // <state_dir>/logs/<job_id>, and the file of one rank in it.
  std::string LogDir(const std::string& job_id) const;
  std::string LogPath(const std::string& job_id, int rank) const;

  // ---- Workers (WorkerService) ----
  // (Re)registers a worker and reconciles the tasks it reports: current
  // tasks keep running, stale ones are killed, current tasks it no longer
  // runs fail their generation. INVALID_ARGUMENT for a missing name or
  // address or slots < 1.
  absl::StatusOr<Registration> RegisterWorker(
      const v1::RegisterWorkerRequest& request);
  // The session's stream opened. NOT_FOUND for an unknown or replaced
  // session (the worker must register again).
  absl::Status AttachSession(const std::string& session_id);
  // A heartbeat, task status or log chunk. NOT_FOUND as for AttachSession;
  // INVALID_ARGUMENT for a log chunk naming an unknown job or a bad rank.
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
  // ReportStepAsync, waiting for `done`. Blocks until the commit.
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::StepMetrics& m);
  // Records a complete checkpoint (rank 0) and applies retention; returns
  // the expired paths (already deleted here, best effort). Errors as
  // ReportStep, INVALID_ARGUMENT for an empty path.
  absl::StatusOr<std::vector<std::string>> ReportCheckpoint(
      const v1::CheckpointRecord& record);

  // Time-driven work; call periodically (e.g. every 100 ms). Also runs the
  // store's housekeeping (Store::Maintain) outside the mutex.
  void Tick();

 private:
  struct RankState {
    std::string worker;
    int node_rank = 0;
    int local_rank = 0;
    v1::TaskSpec task;
    bool done = false;      // exited 0
    int64_t pid = 0;
    bool reported = false;  // sent a step report this generation
    absl::Time last_report;
    int64_t last_step = 0;
  };
  struct Job {
    explicit Job(const MetricAggregator::Options& o) : metrics(o) {}
    std::string id;
    int64_t seq = 0;
    v1::JobSpec spec;
    v1::JobState state = v1::PENDING;
    int64_t generation = 0;
    int restarts = 0;
    std::string reason;
    int64_t submitted_ms = 0, started_ms = 0, finished_ms = 0;
    absl::Duration heartbeat_timeout;
    // Current generation (empty unless RUNNING).
    std::vector<RankState> ranks;
    std::vector<std::string> workers;  // node_rank order
    std::string master_addr;
    int master_port = 0;
    std::string resume_from;
    bool any_report = false;
    absl::Time first_report;
    int64_t max_step = 0;
    int64_t reported_total_steps = 0;  // from the trainers, not persisted
    int64_t checkpoint_at = 0;  // pending checkpoint step, 0: none
    absl::Time last_checkpoint;
    std::vector<v1::CheckpointRecord> checkpoints;  // by step, oldest first
    MetricAggregator metrics;
  };
  struct Worker {
    std::string name;
    std::string address;
    int slots = 0;
    std::string session_id;
    bool registered = false;  // false: known only from reloaded state
    bool attached = false;
    absl::Time last_seen;
    std::deque<v1::CoordinatorMessage> outbox;
  };

  Coordinator(const CoordinatorOptions& options, Clock& clock,
              std::unique_ptr<Store> store);
  absl::Status Reload();
  absl::Status ValidateSpec(const v1::JobSpec& spec) const;
  // ReportStepAsync's work under mu_: a refusal (done untouched), or OK with
  // `done` moved into the MetricWriter.
  absl::Status ReportStepLocked(const v1::StepMetrics& m, ReportDone& done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // All *Locked helpers require mu_.
  JobRow RowOf(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus StatusOf(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Job* FindLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SchedulableLocked(const Worker& w) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int FreeSlotsLocked(const std::string& worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int AllocatePortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StartGenerationLocked(Job& job, const std::vector<std::string>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::TaskSpec MakeTaskLocked(const Job& job, int64_t generation, int rank,
                              int node_rank, int local_rank, int world_size,
                              const std::string& master_addr, int master_port,
                              const std::string& resume_from) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KillAllLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailGenerationLocked(Job& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SucceedLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTaskStatusLocked(const std::string& worker,
                              const v1::TaskStatus& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(const std::string& worker, v1::CoordinatorMessage msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendKillLocked(const std::string& worker, const v1::JobRef& ref,
                      int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChangedLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendLogLocked(const v1::LogUpload& log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls the listener for what was queued under the lock. Call without mu_.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  Clock& clock_;
  const std::unique_ptr<Store> store_;
  // Declared after store_: destroyed (committing what is staged) first.
  const std::unique_ptr<MetricWriter> writer_;
  const std::string boot_id_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  int next_port_ ABSL_GUARDED_BY(mu_) = 0;
  Listener* listener_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string advertise_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> notify_sessions_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> notify_jobs_ ABSL_GUARDED_BY(mu_);
};

// The argv of a task for `spec` (see the class comment of the design:
// built-in frameworm-train gets its options as --key=value flags plus
// --checkpoint-dir, --checkpoint-every, --backend). Exposed for tests.
std::vector<std::string> TaskArgv(const v1::JobSpec& spec,
                                  const std::string& checkpoint_dir);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_COORDINATOR_H_
