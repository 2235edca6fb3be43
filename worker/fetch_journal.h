// The fetches of checkpoint copies in progress, noted in a file of the
// worker's work dir (`<work-dir>/fetching`), so that a worker killed in
// the middle of one (SIGKILL, the OOM killer) cleans up at its next start
// what nothing else knows of: the partial file beside the copy's path (on
// /dev/shm, RAM), and a copy that was complete but not yet in the holdings
// file (worker/holdings_file.h), which no drop would ever delete. (The
// file is not fsynced: after a power cut it may be gone, and so may what
// it would have cleaned up on a tmpfs.)
//
// A fetch is noted when it starts (Started, which gives it an id: two
// fetches of one path are two notes), marked once its copy is in place
// (Copied), and un-noted once the agent wrote the copy to the holdings
// file or gave it up (Ended). At most kMaxHeldCheckpoints notes: past that
// the oldest goes.
//
// Format: one line per fetch, "v1", the writer's PartialTag() (its pid and
// a random tag), copied (0/1), bytes, checksum and the copy's path
// hex-encoded, tab-separated; replaced whole on every change
// (common/replace_file.h). A partial file is "<path>.partial-<tag>-<n>"
// (common/received_file.h): Recover deletes only those of the tag a line
// names, so a fetch of the same path by another live process (even one
// with the same pid, in another container) is left alone; and a copied
// one only when it still has the noted size and checksum and is not held.
// Nothing is touched under a path the hold rules (CheckHold's: absolute,
// normal, ending in ckpt-<step>.pt) refuse.
//
// Thread safety: thread-safe (one mutex).
#ifndef FRAMEWORM_WORKER_FETCH_JOURNAL_H_
#define FRAMEWORM_WORKER_FETCH_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace frameworm {

class FetchJournal {
 public:
  explicit FetchJournal(std::string path) : path_(std::move(path)) {}

  // At start, before any fetch: for every line a previous run left, removes
  // the partial files of its tag and, for a copied one, the copy itself
  // unless `held(path)`; then empties the journal. Returns the files
  // removed. A missing or unreadable journal, or a malformed line, removes
  // nothing (for that line).
  std::vector<std::string> Recover(const std::function<bool(const std::string&)>& held);

  // The note's id (never 0). A file that cannot be written costs only the
  // clean-up after a kill: the fetch goes on (the first failure is kept in
  // error()).
  uint64_t Started(const std::string& path, int64_t bytes, const std::string& checksum);
  void Copied(uint64_t id);
  void Ended(uint64_t id);
  absl::Status error() const;

 private:
  struct Entry {
    std::string path;
    bool copied = false;
    int64_t bytes = 0;
    std::string checksum;
  };
  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by id, oldest first
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_FETCH_JOURNAL_H_
