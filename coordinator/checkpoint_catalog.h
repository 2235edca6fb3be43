// The checkpoint catalog: per job, the complete checkpoints rank 0 reported,
// ordered by generation, then by step (a later generation's record is newer
// whatever its step: a program that counts steps from 0 again after a
// restart saves newer state at lower steps), and their retention (keep the
// newest `keep_last`). The newest record is where a restarted generation
// resumes from.
//
// Durability: Record commits the record to the Store before it changes the
// catalog; retention deletes the expired rows: a record whose row could not
// be deleted stays (not expired, so neither rank 0 nor the coordinator
// deletes its files) and is tried again at the next Record. It never deletes a
// reported path (a path from a request; rank 0 is told the expired paths and
// deletes them within its checkpoint directory). Load reads a job's records
// back after a coordinator restart.
//
// Ownership: the Store is not owned and must outlive the catalog.
// Thread safety: not thread-safe; owned by the Coordinator under its mutex.
// Errors: Record: INVALID_ARGUMENT for an empty path or a negative step,
// the Store's errors (then nothing changed); Load: the Store's errors.
#ifndef FRAMEWORM_COORDINATOR_CHECKPOINT_CATALOG_H_
#define FRAMEWORM_COORDINATOR_CHECKPOINT_CATALOG_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/store.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

class CheckpointCatalog {
 public:
  // Records whose path lies under `memory_root` are memory records when
  // loaded back (the store keeps no kind).
  explicit CheckpointCatalog(Store& store, std::string memory_root = "")
      : store_(store), memory_root_(std::move(memory_root)) {}

  // Reads the job's records from the store (replacing what is in memory).
  absl::Status Load(const std::string& job_id);
  // Adds `record` (a record with the same path is replaced), then keeps the
  // newest `keep_last` disk records (0: all) and the newest kKeepMemory
  // memory records. Returns the expired paths.
  absl::StatusOr<std::vector<std::string>> Record(
      const v1::CheckpointRecord& record, int keep_last);

  // `worker` holds a verified copy of the job's checkpoint of `step` (the
  // record Find returns)
  // (CheckpointRecord.holders, in memory only: a restarted coordinator
  // learns them again from the workers' registrations). Returns how many holders
  // the record has now (a worker counts once), 0 when there is no such
  // record; at most kMaxHolders per record (later ones are ignored).
  int AddHolder(const std::string& job_id, int64_t step, const std::string& worker);
  // `worker` holds a copy of exactly the (job, step) pairs in `held` (what
  // its registration lists): it stops being a holder of every other record
  // (a worker back with an empty work dir or a fresh /dev/shm, whose
  // copies are gone). Returns how many records it left.
  int KeepOnlyHolds(const std::string& worker,
                    const std::set<std::pair<std::string, int64_t>>& held);
  static constexpr int kMaxHolders = 64;
  static constexpr int kKeepMemory = 2;
  // Removes the job's record at `path` (store first; nothing changes when
  // that fails). NOT_FOUND when there is none.
  absl::Status Remove(const std::string& job_id, const std::string& path);
  // A restarted coordinator knows no record's secret (not stored): the
  // first holder that re-registers tells it (at most 128 bytes).
  void AdoptSecret(const std::string& job_id, int64_t step, const std::string& secret);
  // The jobs that have memory records.
  std::vector<std::string> JobsWithMemoryRecords() const;
  // The job's record of `step` (of the newest generation that has one);
  // nullptr when there is none.
  const v1::CheckpointRecord* Find(const std::string& job_id, int64_t step) const;
  // The job's newest record; nullptr when it has none.
  const v1::CheckpointRecord* NewestRecord(const std::string& job_id) const;

  // Drops the job's records from memory (its rows are the caller's).
  void Forget(const std::string& job_id) { jobs_.erase(job_id); }
  // The job's records, oldest first (generation, then step; empty for an
  // unknown job).
  const std::vector<v1::CheckpointRecord>& List(
      const std::string& job_id) const;
  // The newest record's path; empty when the job has none.
  std::string Newest(const std::string& job_id) const;

 private:
  Store& store_;
  const std::string memory_root_;
  std::map<std::string, std::vector<v1::CheckpointRecord>> jobs_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_CHECKPOINT_CATALOG_H_
