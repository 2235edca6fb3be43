// The in-memory checkpoint directories of this node's jobs, swept of the
// files no hold names once the job has left the node: a snapshot rank 0
// wrote but was killed before reporting, a killed writer's partial file
// (`ckpt-<step>.pt.<suffix>`), a copy no record names any more. Nothing
// else deletes them (no record names them), and they sit in RAM (a tmpfs).
// Plain data and the filesystem: no gRPC types; the agent calls it from its
// loop with the time and what it knows (worker/worker_agent.cc).
//
// Contract:
//  - Launched(job, dir, now): a task of `job` was started with `dir` as its
//    memory checkpoint directory (RankEnv::memory_checkpoint_dir). Only an
//    absolute path with no "." or ".." component and at least two
//    components is kept; at most kMaxDirs are (more are ignored). Returns
//    kRefused for one not kept, kChanged when the dir is new or now of
//    another job (what Watched() lists changed), else kUnchanged.
//    Launching again restarts the dir's quiet time.
//  - Sweep(now, busy, held): a dir for which `busy(job, dir)` is true (a task
//    of it runs or waits here, a fetch into the dir is pending, the
//    coordinator is away) starts its quiet time again at `now`. A dir
//    quiet for at least `quiet` is swept: each regular file directly in it
//    (never a symlink, never recursing) whose name is `ckpt-<digits>.pt` or
//    starts with `ckpt-<digits>.pt.`, whose modification time is at least
//    `quiet` before `now`, and for which `held(path)` is false, is removed.
//    The dir is opened component by component from "/", none followed if
//    it is a symlink; every directory on the way must be root's or this
//    process's effective uid's, and writable by no one else unless sticky
//    (/tmp, /dev/shm), and the dir itself this uid's and writable by no one
//    else: so no other user can redirect the sweep (e.g. a symlink put
//    where a directory was, after a reboot emptied the tmpfs). A dir left
//    empty is removed (unlinkat on its parent, opened the same way) and
//    forgotten, as is one that is gone; one that fails those rules is left
//    alone and forgotten (one that cannot be opened for another reason,
//    e.g. no descriptor left, is tried again at the next sweep). Returns
//    the paths removed (files and dirs).
//  - Watched(): the dirs it watches, with their jobs (by path), so that a
//    restarted worker still sweeps those of tasks it started before
//    (worker/memory_dirs_file.h; Launched again at the start).
//
// Thread safety: none (the agent's loop owns it).
#ifndef FRAMEWORM_WORKER_MEMORY_DIR_SWEEPER_H_
#define FRAMEWORM_WORKER_MEMORY_DIR_SWEEPER_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace frameworm {

struct WatchedMemoryDir {
  std::string job_id;
  std::string dir;
  bool operator==(const WatchedMemoryDir&) const = default;
};

class MemoryDirSweeper {
 public:
  static constexpr size_t kMaxDirs = 1024;

  explicit MemoryDirSweeper(absl::Duration quiet) : quiet_(quiet) {}

  enum class Launch { kChanged, kUnchanged, kRefused };
  Launch Launched(const std::string& job_id, const std::string& dir, absl::Time now);
  std::vector<std::string> Sweep(absl::Time now,
                                 const std::function<bool(const std::string& job_id,
                                                          const std::string& dir)>& busy,
                                 const std::function<bool(const std::string& path)>& held);
  std::vector<WatchedMemoryDir> Watched() const;
  size_t size() const { return dirs_.size(); }

 private:
  struct Dir {
    std::string job_id;
    absl::Time quiet_since;
  };
  absl::Duration quiet_;
  std::map<std::string, Dir> dirs_;  // by path
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_MEMORY_DIR_SWEEPER_H_
