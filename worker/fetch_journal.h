// The fetch of a checkpoint copy in progress, noted in a file of the
// worker's work dir (`<work-dir>/fetching`), so that a worker killed in
// the middle of one (SIGKILL, the OOM killer) removes the partial file it
// left beside the copy's path at its next start: nothing else knows that
// directory, and on /dev/shm the partial is RAM. (The note is not fsynced:
// after a power cut it may be gone, and a partial on disk stays.)
//
// Format: one line, "v1", the writer's PartialTag() (its pid and a random
// tag) and the copy's path hex-encoded, tab-separated; written to a
// temporary file and renamed. A partial file is
// "<path>.partial-<tag>-<n>" (common/received_file.h): RemoveStalePartials
// deletes only those of the tag the journal names, so a fetch of the same
// path by another live process (even one with the same pid, in another
// container) is left alone, and only when the path still passes the hold
// rules (CheckHold's: absolute, normal, ending in ckpt-<step>.pt).
//
// Thread safety: free functions; one fetch at a time per work dir (the
// agent's fetcher runs one).
#ifndef FRAMEWORM_WORKER_FETCH_JOURNAL_H_
#define FRAMEWORM_WORKER_FETCH_JOURNAL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace frameworm {

// Notes that this process (PartialTag()) starts fetching into `target`.
// Errors: INTERNAL naming the file.
absl::Status NoteFetchStarted(const std::string& journal, const std::string& target);
// The fetch ended (either way): removes the note.
void NoteFetchEnded(const std::string& journal);

// At start: removes the partial files the fetch noted in `journal` left
// (those of the noted tag, beside the noted path) and the note itself;
// returns the files removed. A missing, unreadable or malformed note
// removes no partial file.
std::vector<std::string> RemoveStalePartials(const std::string& journal);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_FETCH_JOURNAL_H_
