// Durable coordinator state in an embedded SQLite database (WAL journal):
// jobs, generations, rank assignments, the checkpoint catalog and the
// aggregated metric history. Every method commits before it returns, so a
// caller may acknowledge what it wrote.
//
// WAL checkpoints: automatic checkpoints inside a commit are off; the owner
// calls CheckpointIfLarge() periodically (the Coordinator does, from Tick()),
// which checkpoints on a second connection so commits are not held up. A
// WAL past a hard limit (kHardWalPages) is checkpointed inside the commit
// that crossed it, so the WAL stays bounded even if nobody calls it.
//
// Rows are plain structs; proto messages that are stored whole (the job
// spec, a task spec, an aggregated step) travel as serialized bytes.
//
// Thread safety: thread-safe. mu_ guards the main connection (every read and
// write); ckpt_mu_ guards the checkpoint connection (CheckpointIfLarge only).
// No method holds both.
// Errors: INTERNAL for SQLite failures (the message names the statement),
// INVALID_ARGUMENT / UNAVAILABLE from Open when the directory cannot be
// created or the file cannot be opened.
#ifndef FRAMEWORM_COORDINATOR_STORE_H_
#define FRAMEWORM_COORDINATOR_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct sqlite3;
struct sqlite3_stmt;

namespace frameworm::coordinator {

struct JobRow {
  std::string job_id;
  int64_t seq = 0;            // submission order
  std::string spec;           // serialized v1::JobSpec
  int state = 0;              // v1::JobState
  int64_t generation = 0;     // current generation (0: never started)
  int restarts = 0;
  std::string reason;
  int64_t submitted_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
};

struct GenerationRow {
  std::string job_id;
  int64_t generation = 0;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;       // 0 while current
  std::string end_reason;
  std::string master_addr;
  int master_port = 0;
  std::string resume_from;
};

struct AssignmentRow {
  std::string job_id;
  int64_t generation = 0;
  int rank = 0;
  std::string worker;
  int node_rank = 0;
  int local_rank = 0;
  std::string task;           // serialized v1::TaskSpec
  int state = 0;              // 0 running, 1 exited 0
};

struct CheckpointRow {
  std::string job_id;
  int64_t generation = 0;
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  std::string checksum;
  int64_t created_ms = 0;
};

struct MetricRow {
  std::string job_id;
  int64_t step = 0;
  std::string aggregate;      // serialized v1::AggregatedStep
};

class Store {
 public:
  // Opens (creating if needed) <dir>/coordinator.db. `dir` is created.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& dir);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts or replaces the job row.
  absl::Status PutJob(const JobRow& job);
  // One transaction: the job row, a new generation and its assignments.
  absl::Status StartGeneration(const JobRow& job, const GenerationRow& gen,
                               const std::vector<AssignmentRow>& assignments);
  // One transaction: the job row and the end of its current generation.
  absl::Status EndGeneration(const JobRow& job, int64_t generation,
                             int64_t ended_ms, const std::string& reason);
  absl::Status SetAssignmentState(const std::string& job_id,
                                  int64_t generation, int rank, int state);
  absl::Status AddCheckpoint(const CheckpointRow& row);
  absl::Status DeleteCheckpoint(const std::string& job_id,
                                const std::string& path);
  absl::Status PutMetric(const MetricRow& row);
  // Inserts or replaces every row in one transaction (a cached prepared
  // statement); all or nothing. OK for an empty list.
  absl::Status PutMetrics(const std::vector<MetricRow>& rows);

  // Runs a PASSIVE WAL checkpoint when the WAL holds at least `min_pages`
  // pages (it never waits for readers or writers). Returns the WAL size in
  // pages seen after the last commit.
  absl::StatusOr<int> CheckpointIfLarge(int min_pages = 1000);
  // A WAL this large is checkpointed inside the commit that grew it.
  static constexpr int kHardWalPages = 20000;

  // Readers. Jobs in submission order, checkpoints by step, metrics by step.
  absl::StatusOr<std::vector<JobRow>> LoadJobs();
  absl::StatusOr<GenerationRow> LoadGeneration(const std::string& job_id,
                                               int64_t generation);
  absl::StatusOr<std::vector<AssignmentRow>> LoadAssignments(
      const std::string& job_id, int64_t generation);
  absl::StatusOr<std::vector<CheckpointRow>> LoadCheckpoints(
      const std::string& job_id);
  absl::StatusOr<std::vector<MetricRow>> LoadMetrics(const std::string& job_id);

 private:
  Store(sqlite3* db, std::string path) : path_(std::move(path)), db_(db) {}
  absl::Status ExecLocked(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutJobLocked(const JobRow& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static int WalHook(void* self, sqlite3* db, const char* name, int pages);

  const std::string path_;
  std::atomic<int> wal_pages_{0};  // set by WalHook after each commit

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  sqlite3_stmt* put_metric_ ABSL_GUARDED_BY(mu_) = nullptr;  // lazily

  absl::Mutex ckpt_mu_;
  sqlite3* ckpt_db_ ABSL_GUARDED_BY(ckpt_mu_) = nullptr;  // lazily
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_STORE_H_
