// The in-memory checkpoint directories a worker watches (worker/
// memory_dir_sweeper.h), kept in a file of its work dir
// (`<work-dir>/memory-dirs`) so that a restarted worker still sweeps the
// directories of tasks it started before the restart: it learns them from
// launches only, and the coordinator does not name them again once their
// jobs left the node. Without the file, what such a job left on the node's
// tmpfs (RAM) stayed until the node rebooted.
//
// Format: one line per directory, "v1", the job id and the directory
// hex-encoded, tab-separated; replaced whole on every change
// (common/replace_file.h: a crash leaves the old list or the new, not
// fsynced). Read back, a line that does not parse is skipped, as is every
// line past MemoryDirSweeper::kMaxDirs; what a line names is checked again
// by MemoryDirSweeper::Launched and by each sweep (owner, no symlink).
#ifndef FRAMEWORM_WORKER_MEMORY_DIRS_FILE_H_
#define FRAMEWORM_WORKER_MEMORY_DIRS_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/memory_dir_sweeper.h"

namespace frameworm {

absl::Status WriteMemoryDirsFile(const std::string& path,
                                 const std::vector<WatchedMemoryDir>& dirs);

// What WriteMemoryDirsFile wrote (see above); no file is an empty list.
// Errors: INTERNAL naming the file when it exists but is not a regular file
// or cannot be read.
absl::StatusOr<std::vector<WatchedMemoryDir>> ReadMemoryDirsFile(const std::string& path);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_MEMORY_DIRS_FILE_H_
