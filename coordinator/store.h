// The coordinator's durable state behind one interface: jobs, generations,
// rank assignments, the checkpoint catalog and the aggregated metric
// history, as plain row structs. Proto messages that are stored whole (the
// job spec, a task spec, an aggregated step) travel as serialized bytes.
//
// Implementations: SqliteStore (sqlite_store.h, the daemon's, durable across
// restarts) and MemoryStore (memory_store.h, for tests; durable only as long
// as the object lives, so two Coordinators sharing one see a "restart").
//
// Contract (every implementation):
//  - Every write is committed before it returns OK, so a caller may
//    acknowledge what it wrote. A write that returns an error changed
//    nothing (multi-row writes are all or nothing).
//  - Writes are "insert or replace" by primary key: jobs by job_id,
//    generations by (job_id, generation), assignments by (job_id,
//    generation, rank), checkpoints by (job_id, path), metrics by (job_id,
//    step), events by seq. An update of a missing row (EndGeneration's generation,
//    SetAssignmentState) creates nothing and is not an error.
//  - Readers: jobs in submission order (seq), assignments by rank,
//    checkpoints by step (then created_ms), metrics by step, events by
//    seq.
//    LoadGeneration: NOT_FOUND for a missing generation.
//
// Thread safety: implementations are thread-safe (the MetricWriter's thread
// writes metrics while the Coordinator writes everything else).
// Errors: implementation-specific (SqliteStore: INTERNAL naming the
// statement; MemoryStore: what a test injected).
#ifndef FRAMEWORM_COORDINATOR_STORE_H_
#define FRAMEWORM_COORDINATOR_STORE_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm::coordinator {

struct JobRow {
  std::string job_id;
  int64_t seq = 0;         // submission order
  std::string spec;        // serialized v1::JobSpec
  int state = 0;           // v1::JobState
  int64_t generation = 0;  // current generation (0: never started)
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
  int64_t ended_ms = 0;  // 0 while current
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
  std::string task;  // serialized v1::TaskSpec
  int state = 0;     // 0 running, 1 exited 0
};

struct CheckpointRow {
  std::string job_id;
  int64_t generation = 0;
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  std::string checksum;
  int64_t created_ms = 0;
  // What workers show to fetch a copy from each other (CheckpointRecord.
  // secret); empty in rows stored before it was kept.
  std::string secret;
};

struct EventRow {
  int64_t seq = 0;
  std::string job_id;  // empty: a cluster event
  int64_t unix_ms = 0;
  std::string event;  // serialized v1::Event
};

struct MetricRow {
  std::string job_id;
  int64_t step = 0;
  std::string aggregate;  // serialized v1::AggregatedStep
};

class Store {
 public:
  virtual ~Store() = default;

  // Inserts or replaces the job row.
  virtual absl::Status PutJob(const JobRow& job) = 0;
  // One transaction: the job row, a new generation and its assignments;
  // the rows of the job's generations kKeptGenerations or more before it
  // are deleted (only the current one is read back; a job that restarts
  // without end must not grow the store a generation at a time).
  static constexpr int64_t kKeptGenerations = 4;
  virtual absl::Status StartGeneration(
      const JobRow& job, const GenerationRow& gen,
      const std::vector<AssignmentRow>& assignments) = 0;
  // One transaction: the job row and the end of its current generation.
  virtual absl::Status EndGeneration(const JobRow& job, int64_t generation,
                                     int64_t ended_ms,
                                     const std::string& reason) = 0;
  virtual absl::Status SetAssignmentState(const std::string& job_id,
                                          int64_t generation, int rank,
                                          int state) = 0;
  virtual absl::Status AddCheckpoint(const CheckpointRow& row) = 0;
  virtual absl::Status DeleteCheckpoint(const std::string& job_id,
                                        const std::string& path) = 0;
  // Inserts or replaces every row in one transaction; all or nothing. OK
  // for an empty list.
  virtual absl::Status PutMetrics(const std::vector<MetricRow>& rows) = 0;
  absl::Status PutMetric(const MetricRow& row) { return PutMetrics({row}); }
  // Deletes the job's metric rows of `steps` in one transaction (missing
  // rows are not an error).
  virtual absl::Status DeleteMetrics(const std::string& job_id,
                                     const std::vector<int64_t>& steps) = 0;
  // Inserts or replaces every event row in one transaction.
  virtual absl::Status AddEvents(const std::vector<EventRow>& rows) = 0;
  // Keeps the newest `keep` events of every job and of the cluster (job_id
  // empty); deletes the older ones. keep >= 1.
  virtual absl::Status TrimEvents(int64_t keep) = 0;
  // Deletes every row of the job (job, generations, assignments,
  // checkpoint records, metrics, events) in one transaction.
  virtual absl::Status DeleteJob(const std::string& job_id) = 0;

  // Periodic housekeeping, called from the owner's timer without any of the
  // owner's locks (SqliteStore: a passive WAL checkpoint once the WAL has
  // grown). Never holds up concurrent commits.
  virtual absl::Status Maintain() = 0;

  // Readers (orders as in the file comment).
  virtual absl::StatusOr<std::vector<JobRow>> LoadJobs() = 0;
  virtual absl::StatusOr<GenerationRow> LoadGeneration(
      const std::string& job_id, int64_t generation) = 0;
  virtual absl::StatusOr<std::vector<AssignmentRow>> LoadAssignments(
      const std::string& job_id, int64_t generation) = 0;
  virtual absl::StatusOr<std::vector<CheckpointRow>> LoadCheckpoints(
      const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<MetricRow>> LoadMetrics(
      const std::string& job_id) = 0;
  // At most `limit` events with seq > after_seq, by seq: the job's, or
  // every event when `job_id` is nullopt.
  virtual absl::StatusOr<std::vector<EventRow>> LoadEvents(
      const std::optional<std::string>& job_id, int64_t after_seq, int limit) = 0;
  // The newest `limit` events (the job's, or every event with nullopt),
  // oldest first: what a view of the latest events shows, without reading
  // the older ones.
  virtual absl::StatusOr<std::vector<EventRow>> LoadNewestEvents(
      const std::optional<std::string>& job_id, int limit) = 0;
  // The highest event seq ever stored (0: none).
  virtual absl::StatusOr<int64_t> MaxEventSeq() = 0;
  // The highest job seq ever stored, jobs deleted since included (0:
  // none): a job id is never given twice, even after its job expired and
  // the coordinator restarted (its checkpoint directory, named by the id,
  // may still hold the old job's files).
  virtual absl::StatusOr<int64_t> MaxJobSeq() = 0;
};

// For a best-effort write whose failure the caller does not return (the
// in-memory state moves on; the next write of the row repairs it): writes
// "coordinator: <what>: <status>" to stderr when `s` is an error.
inline void LogStoreError(const absl::Status& s, const char* what) {
  if (!s.ok())
    std::fprintf(stderr, "coordinator: %s: %s\n", what, s.ToString().c_str());
}

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_STORE_H_
