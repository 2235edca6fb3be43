// The Store (store.h) in memory, for tests of the coordinator core without
// SQLite. Rows live as long as the object: share one MemoryStore between
// two Coordinators (one after the other) to test reloading state after a
// coordinator restart.
//
// Fault injection: while FailWrites(s) is set to an error, every write
// returns `s` and changes nothing (readers still work), like a database
// whose writes fail; FailWrites(s, "DeleteCheckpoint") fails only that
// method's writes; FailWrites(OkStatus()) ends it. FailMetricReads(s):
// LoadMetrics returns `s` until FailMetricReads(OkStatus()).
//
// Thread safety: thread-safe; one absl::Mutex guards every table.
// Errors: only injected ones, and LoadGeneration's NOT_FOUND.
#ifndef FRAMEWORM_COORDINATOR_MEMORY_STORE_H_
#define FRAMEWORM_COORDINATOR_MEMORY_STORE_H_

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store.h"

namespace frameworm::coordinator {

class MemoryStore final : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  void FailWrites(absl::Status status, std::string only = "") ABSL_LOCKS_EXCLUDED(mu_);
  void FailMetricReads(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Number of successful writes so far (every Put/Add/Delete/Set/Start/End).
  int64_t writes() const ABSL_LOCKS_EXCLUDED(mu_);

  // The Store, table by table.
  // jobs
  absl::Status PutJob(const JobRow& job) override;
  absl::StatusOr<std::vector<JobRow>> LoadJobs() override;
  // generations, in their lifecycle's order (the start writes the
  // assignments too)
  absl::Status StartGeneration(
      const JobRow& job, const GenerationRow& gen,
      const std::vector<AssignmentRow>& assignments) override;
  absl::StatusOr<GenerationRow> LoadGeneration(const std::string& job_id,
                                               int64_t generation) override;
  absl::Status EndGeneration(const JobRow& job, int64_t generation,
                             int64_t ended_ms,
                             const std::string& reason) override;
  // assignments
  absl::Status SetAssignmentState(const std::string& job_id, int64_t generation,
                                  int rank, int state) override;
  absl::StatusOr<std::vector<AssignmentRow>> LoadAssignments(
      const std::string& job_id, int64_t generation) override;
  // checkpoints
  absl::Status AddCheckpoint(const CheckpointRow& row) override;
  absl::Status DeleteCheckpoint(const std::string& job_id,
                                const std::string& path) override;
  absl::StatusOr<std::vector<CheckpointRow>> LoadCheckpoints(
      const std::string& job_id) override;
  // metrics
  absl::Status PutMetrics(const std::vector<MetricRow>& rows) override;
  absl::Status DeleteMetrics(const std::string& job_id,
                             const std::vector<int64_t>& steps) override;
  absl::StatusOr<std::vector<MetricRow>> LoadMetrics(
      const std::string& job_id) override;
  // events
  absl::Status AddEvents(const std::vector<EventRow>& rows) override;
  absl::Status TrimEvents(int64_t keep) override;
  absl::StatusOr<std::vector<EventRow>> LoadEvents(const std::optional<std::string>& job_id,
                                                   int64_t after_seq, int limit) override;
  absl::StatusOr<std::vector<EventRow>> LoadNewestEvents(const std::optional<std::string>& job_id,
                                                         int limit) override;
  absl::StatusOr<int64_t> MaxEventSeq() override;
  absl::StatusOr<int64_t> MaxJobSeq() override;
  // every table
  absl::Status DeleteJob(const std::string& job_id) override;
  // Nothing to maintain.
  absl::Status Maintain() override { return absl::OkStatus(); }

 private:
  using Key = std::pair<std::string, int64_t>;  // (job_id, generation|step)
  // The injected failure, or OK after counting a write. Requires mu_.
  absl::Status WriteLocked(const char* method) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  std::string fail_only_ ABSL_GUARDED_BY(mu_);  // empty: every write
  absl::Status fail_metric_reads_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, JobRow> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<Key, GenerationRow> generations_ ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<std::string, int64_t, int>, AssignmentRow> assignments_
      ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, CheckpointRow> checkpoints_
      ABSL_GUARDED_BY(mu_);
  std::map<Key, MetricRow> metrics_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, EventRow> events_ ABSL_GUARDED_BY(mu_);  // by seq
  int64_t max_event_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_deleted_job_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_MEMORY_STORE_H_
