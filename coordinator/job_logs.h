// Rank logs of jobs: <root>/<job_id>/rank-<r>.log, where the root is
// <state_dir>/logs. Workers upload a trainer's output in chunks (Append);
// JobService.GetLogs reads them back from an offset (Ranks, Read). The
// files hold every byte: nothing is cached for reading, so a reader sees
// every byte appended before its call (the only state in memory is where
// each source's chunks end, for AppendAt below).
//
// Resent chunks: AppendAt takes a chunk with its source (generation and
// stream of the rank's output) and the offset of its first byte in that
// source, and writes only the bytes past what it already has from that
// source, so a worker may resend what it is not sure arrived. The ends are
// kept for the two newest generations seen per job and rank, in memory and
// in a small file beside the log (rank-<r>.ends: one fixed-size slot per
// generation parity and stream, written after the chunk's bytes), which a
// restarted coordinator reads before its first chunk of that rank, so a
// chunk resent across a restart (the coordinator killed after writing it,
// before its receipt) is not written twice. A late chunk of a generation
// older than the two newest does not overwrite a newer one's slot. A slot
// file that cannot be written or read is ignored (such a resend is written
// again). Nothing is synced: after a power loss a slot may be ahead of its
// log's bytes (a resend below it is then not written).
//
// Size: a rank's file keeps at most about `max_bytes_per_rank` of its
// newest output (common/log_cap.h: the head becomes a hole, offsets stay
// valid); Read says where the data it returns starts.
//
// Paths: a job id must be one path component (IsPathComponent) and a rank
// >= 0, so no caller can reach outside the root.
// Thread safety: every method may run concurrently from any thread (the
// ends AppendAt keeps are guarded by a mutex). A Read concurrent with an
// Append of the same file sees a prefix of the appended data.
// Errors: INVALID_ARGUMENT for a bad job id, rank or offset; INTERNAL when
// a file cannot be written; Read: NOT_FOUND when the rank has no file yet.
#ifndef FRAMEWORM_COORDINATOR_JOB_LOGS_H_
#define FRAMEWORM_COORDINATOR_JOB_LOGS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace frameworm::coordinator {

// True for a name usable as one path component: non-empty, not "." or "..",
// no '/' and no NUL. Job ids and worker names obey it.
bool IsPathComponent(absl::string_view name);

class JobLogs {
 public:
  struct Options {
    std::string root;  // <state_dir>/logs; created on the first Append
    int64_t max_bytes_per_rank = int64_t{64} << 20;  // 0: unbounded
  };
  // What Read returns: `data` starts at offset `from` (> the offset asked
  // for when that part was dropped by the size cap).
  struct Chunk {
    int64_t from = 0;
    std::string data;
  };
  explicit JobLogs(const Options& options) : options_(options) {}

  // <root>/<job_id>, and the file of one rank in it.
  std::string Dir(const std::string& job_id) const;
  std::string Path(const std::string& job_id, int rank) const;

  // Appends `data` to the rank's file (creating it and its directory).
  absl::Status Append(const std::string& job_id, int rank,
                      absl::string_view data) const;
  // Appends the bytes of `data` (which starts at `offset` of the rank's
  // `stream` in `generation`) that lie past the end already written from
  // that source: all of them when none was, or when `offset` is past it (a
  // gap the worker's own size cap made). Returns the source's end after
  // the call. An empty `stream` (a sender that names none) is written whole
  // and its end returned. INVALID_ARGUMENT for a negative offset or
  // generation, an offset + size past INT64_MAX, or a stream other than
  // "stdout", "stderr" and "".
  absl::StatusOr<int64_t> AppendAt(const std::string& job_id, int rank, int64_t generation,
                                   const std::string& stream, int64_t offset,
                                   absl::string_view data) const;
  // Deletes the job's directory and every file in it (best effort).
  void RemoveJob(const std::string& job_id) const;
  // Ranks that have a file, ascending; empty when the job has none.
  absl::StatusOr<std::vector<int>> Ranks(const std::string& job_id) const;
  // Up to `max_bytes` of the rank's file from `offset` (or from the first
  // byte kept after it); empty at or past the end.
  absl::StatusOr<Chunk> Read(const std::string& job_id, int rank,
                                   int64_t offset, size_t max_bytes) const;

 private:
  absl::Status Check(const std::string& job_id, int rank) const;
  // rank-<r>.ends beside the rank's log.
  std::string EndsPath(const std::string& job_id, int rank) const;
  // Once per job and rank in this process: the ends in its slot file.
  void LoadEndsLocked(const std::string& job_id, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes one source's end into its slot (best effort).
  void SaveEndLocked(const std::string& job_id, int rank, int64_t generation,
                     const std::string& stream, int64_t end) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable std::atomic<bool> warned_{false};  // a cap failed (said once)
  // (job, rank, generation, stream) -> end of what is written from it.
  using Source = std::tuple<std::string, int, int64_t, std::string>;
  mutable absl::Mutex mu_;
  mutable std::map<Source, int64_t> ends_ ABSL_GUARDED_BY(mu_);
  // (job, rank) whose slot file was read.
  mutable std::set<std::pair<std::string, int>> loaded_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_JOB_LOGS_H_
