// The fetches of checkpoint copies in progress, noted in a file of the
// worker's work dir (`<work-dir>/fetching`), so that a worker killed in
// the middle of one (SIGKILL, the OOM killer) cleans up at its next start
// what nothing else knows of: the partial file beside the copy's path (on
// /dev/shm, RAM), and a copy that was complete but not yet in the holdings
// file (worker/holdings_file.h), which no drop would ever delete. (The
// file is not fsynced: after a power cut it may be gone, and so may what
// it would have cleaned up on a tmpfs.)
//
// A fetch is noted when it starts (Started), marked once its copy is in
// place (Copied: size and checksum), and un-noted once the agent wrote the
// copy to the holdings file or gave it up (Ended).
//
// Format: one line per fetch, "v1", the writer's PartialTag() (its pid and
// a random tag), copied (0/1), bytes, checksum and the copy's path
// hex-encoded, tab-separated; rewritten to a temporary file and renamed on
// every change. A partial file is "<path>.partial-<tag>-<n>"
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

  // Errors (of writing the file): INTERNAL naming it; the fetch goes on.
  absl::Status Started(const std::string& path, int64_t bytes, const std::string& checksum);
  absl::Status Copied(const std::string& path);
  void Ended(const std::string& path);

 private:
  struct Entry {
    bool copied = false;
    int64_t bytes = 0;
    std::string checksum;
  };
  absl::Status WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by copy path
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_FETCH_JOURNAL_H_
