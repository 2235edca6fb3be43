// The coordinator's own copies of the checkpoints rank 0 writes, so that a
// rank restarted on a host that never had the file (no shared filesystem)
// resumes from it: rank 0 uploads each checkpoint before reporting it, and a
// rank that lacks the file it is told to resume from downloads it.
//
// Layout: <root>/<job_id>/ckpt-<step>.pt, written as <...>.partial-<n> and
// renamed into place only when every declared byte arrived and the crc32
// matched; ckpt-<step>.pt.damaged marks a copy found damaged
// (MarkDamaged). Every path is built here from a checked job id and a step; no
// path from a request is ever opened. Nothing outside <root> is deleted.
//
// Limits: a copy holds at most `max_bytes` (declared up front and enforced
// while receiving); one chunk at most kMaxChunkBytes (received_file.h).
//
// Thread safety: every method may be called from any thread
// (they touch only the filesystem); one ReceivedFile is used by one thread.
// Errors: INVALID_ARGUMENT for a malformed job id, a negative step, a size
// outside [0, max_bytes], too many bytes or a checksum mismatch (naming the
// numbers); INTERNAL for filesystem errors (naming the file); NOT_FOUND from
// PathOf when there is no copy.
#ifndef FRAMEWORM_COORDINATOR_CHECKPOINT_COPIES_H_
#define FRAMEWORM_COORDINATOR_CHECKPOINT_COPIES_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/received_file.h"

namespace frameworm::coordinator {

class CheckpointCopies {
 public:
  CheckpointCopies(std::string root, int64_t max_bytes)
      : root_(std::move(root)), max_bytes_(max_bytes) {}

  // One copy being received (common/received_file.h).
  absl::StatusOr<std::unique_ptr<ReceivedFile>> Begin(const std::string& job_id,
                                                      int64_t step,
                                                      int64_t total_bytes) const;
  // The file holding the copy of (job, step); NOT_FOUND when there is none.
  absl::StatusOr<std::string> PathOf(const std::string& job_id, int64_t step) const;
  // Removes the copy of (job, step) and its damage mark; best effort.
  void Remove(const std::string& job_id, int64_t step) const;
  // The copy of (job, step) was found damaged by a rank of `generation`:
  // writes <...>/ckpt-<step>.pt.damaged holding the generation (a small
  // file, fsynced, renamed into place), then removes the copy, so that a
  // restarted coordinator still knows (DamagedIn). INTERNAL when the mark
  // cannot be written (the copy is removed all the same).
  absl::Status MarkDamaged(const std::string& job_id, int64_t step, int64_t generation) const;
  // The generation whose rank found the copy of (job, step) damaged; -1
  // when none did (no mark, one that does not parse or that can never be
  // read: a directory, a link). UNAVAILABLE when a mark cannot be read now
  // (EMFILE, ENFILE, ENOMEM, EIO).
  absl::StatusOr<int64_t> DamagedIn(const std::string& job_id, int64_t step) const;
  // Removes the job's complete copies whose step is not in `keep` (copies
  // that were uploaded but never reported); best effort. Partial files of
  // uploads in flight are left alone.
  void RemoveAllBut(const std::string& job_id, const std::set<int64_t>& keep) const;
  void RemoveJob(const std::string& job_id) const;             // best effort
  // Removes every partial file under the root (uploads a previous process
  // was receiving when it died); best effort. For start-up only: it does
  // not spare uploads in flight.
  void RemovePartials() const;
  int64_t max_bytes() const { return max_bytes_; }

 private:
  std::string FileOf(const std::string& job_id, int64_t step) const;
  const std::string root_;
  const int64_t max_bytes_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_CHECKPOINT_COPIES_H_
