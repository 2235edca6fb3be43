// Confinement of checkpoint paths that arrive over RPC. Checkpoints are
// written on workers' hosts, so the rules are lexical (the coordinator cannot
// resolve another host's symlinks): absolute, no "." or ".." components, and
// inside the directories the operator allowed.
//
// Thread safety: free functions over their arguments.
#ifndef FRAMEWORM_COORDINATOR_CHECKPOINT_PATHS_H_
#define FRAMEWORM_COORDINATOR_CHECKPOINT_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace frameworm::coordinator {

// True when `path` is absolute, has no "." / ".." / empty components (a
// single trailing '/' aside) and no NUL or other control character
// (HasControlCharacter: it reaches terminals).
bool IsCleanAbsolutePath(const std::string& path);

// A job's `checkpoint.dir` (empty: the default, always allowed) must be a
// clean absolute path equal to or below one of `roots`. INVALID_ARGUMENT
// names the directory and the roots (the coordinator's --checkpoint-root).
absl::Status CheckCheckpointDirAllowed(const std::string& dir,
                                       const std::vector<std::string>& roots);

// A reported checkpoint must be the file ckpt-<step>.pt directly inside the
// job's checkpoint directory `job_dir` (what frameworm-train writes).
// INVALID_ARGUMENT names the path and the directory.
absl::Status CheckReportedCheckpointPath(const std::string& path, int64_t step,
                                         const std::string& job_dir);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_CHECKPOINT_PATHS_H_
