// The Store (store.h) in an embedded SQLite database, <dir>/coordinator.db,
// WAL journal with synchronous=FULL: a commit is on disk (fsynced) before
// it returns, so neither a crash nor a power loss drops it.
//
// WAL checkpoints: automatic checkpoints inside a commit are off; the owner
// calls Maintain() (or CheckpointIfLarge()) periodically (the Coordinator
// does, from Tick()), which checkpoints on a second connection so commits
// are not held up. A WAL past a hard limit (kHardWalPages) is checkpointed
// inside the commit that crossed it, so the WAL stays bounded even if
// nobody calls it.
//
// Thread safety: thread-safe. mu_ guards the main connection (every read and
// write); ckpt_mu_ guards the checkpoint connection (CheckpointIfLarge only).
// No method holds both.
// Errors: INTERNAL for SQLite failures (the message names the statement),
// RESOURCE_EXHAUSTED for a full disk (SQLITE_FULL),
// INVALID_ARGUMENT / UNAVAILABLE from Open when the directory cannot be
// created or the file cannot be opened.
#ifndef FRAMEWORM_COORDINATOR_SQLITE_STORE_H_
#define FRAMEWORM_COORDINATOR_SQLITE_STORE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace frameworm::coordinator {

class SqliteStore final : public Store {
 public:
  // Opens (creating if needed) <dir>/coordinator.db. `dir` is created.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& dir);
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  absl::Status PutJob(const JobRow& job) override;
  absl::Status StartGeneration(
      const JobRow& job, const GenerationRow& gen,
      const std::vector<AssignmentRow>& assignments) override;
  absl::Status EndGeneration(const JobRow& job, int64_t generation,
                             int64_t ended_ms,
                             const std::string& reason) override;
  absl::Status SetAssignmentState(const std::string& job_id, int64_t generation,
                                  int rank, int state) override;
  absl::Status AddCheckpoint(const CheckpointRow& row) override;
  absl::Status DeleteCheckpoint(const std::string& job_id,
                                const std::string& path) override;
  // One transaction on a cached prepared statement.
  absl::Status PutMetrics(const std::vector<MetricRow>& rows) override;
  absl::Status DeleteMetrics(const std::string& job_id,
                             const std::vector<int64_t>& steps) override;
  absl::Status DeleteJob(const std::string& job_id) override;
  // CheckpointIfLarge() with the default threshold.
  absl::Status Maintain() override;

  // Runs a PASSIVE WAL checkpoint when the WAL holds at least `min_pages`
  // pages (it never waits for readers or writers). Returns the frames it
  // copied into the database (0 when under `min_pages` or busy).
  absl::StatusOr<int> CheckpointIfLarge(int min_pages = kMaintainWalPages);
  // Maintain()'s threshold: about 40 MB of WAL. Few large checkpoints beat
  // many small ones: each one's fsyncs delay the commits beside it (the
  // soak benchmark: 1,000 pages meant a checkpoint every 1.5 s at 1,000
  // reports/s and slow seconds throughout).
  static constexpr int kMaintainWalPages = 10000;
  // A WAL this large is checkpointed inside the commit that grew it.
  static constexpr int kHardWalPages = 20000;

  absl::Status AddEvents(const std::vector<EventRow>& rows) override;
  absl::Status TrimEvents(int64_t keep) override;
  absl::StatusOr<std::vector<EventRow>> LoadEvents(const std::optional<std::string>& job_id,
                                                   int64_t after_seq, int limit) override;
  absl::StatusOr<std::vector<EventRow>> LoadNewestEvents(const std::optional<std::string>& job_id,
                                                         int limit) override;
  absl::StatusOr<int64_t> MaxEventSeq() override;
  absl::StatusOr<int64_t> MaxJobSeq() override;
  absl::StatusOr<std::vector<JobRow>> LoadJobs() override;
  absl::StatusOr<GenerationRow> LoadGeneration(const std::string& job_id,
                                               int64_t generation) override;
  absl::StatusOr<std::vector<AssignmentRow>> LoadAssignments(
      const std::string& job_id, int64_t generation) override;
  absl::StatusOr<std::vector<CheckpointRow>> LoadCheckpoints(
      const std::string& job_id) override;
  absl::StatusOr<std::vector<MetricRow>> LoadMetrics(
      const std::string& job_id) override;

 private:
  SqliteStore(sqlite3* db, std::string path)
      : path_(std::move(path)), db_(db) {}
  absl::Status ExecLocked(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutJobLocked(const JobRow& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` between BEGIN and COMMIT; ROLLBACK when it fails.
  template <typename Body>
  absl::Status TransactionLocked(Body body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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

#endif  // FRAMEWORM_COORDINATOR_SQLITE_STORE_H_
