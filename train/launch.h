// The training library's reading of the rank environment and local
// multi-process launch, without LibTorch (so this part compiles fast and is
// usable by any binary).
//
// The rank environment itself (RankEnv, its variables and their checks) is
// common/rank_env.h; this header reads it for a training process
// (ReadDistributedEnv, ReadRankEnv). launch_distributed runs nprocs copies
// of this program on this machine with those variables set (ToEnvironment)
// and a free port: the parent re-executes /proc/self/exe with the same
// arguments (never a bare fork() after torch may have started threads) and
// marks the children with FRAMEWORM_LAUNCH_CHILD=1. In a child, the same
// launch_distributed call runs fn(rank, world_size) and exits the process
// with fn's return value, so a program reaches fn by calling
// launch_distributed unconditionally.
//
// Thread safety: free functions; launch_distributed blocks the calling
// thread until every child has exited.
#ifndef FRAMEWORM_TRAIN_LAUNCH_H_
#define FRAMEWORM_TRAIN_LAUNCH_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rank_env.h"

namespace frameworm {

// ParseRankEnv over the process environment: this process is one rank of
// a distributed run. Errors: as ParseRankEnv (INVALID_ARGUMENT naming the
// variable that is missing or malformed).
absl::StatusOr<RankEnv> ReadDistributedEnv();

// True when `lookup` describes one rank of a distributed run: WORLD_SIZE is
// set (torchrun, launch_distributed and frameworm-worker all set it).
bool IsDistributedRun(const EnvLookup& lookup);

// The rank environment of any training process: ParseRankEnv when
// IsDistributedRun; otherwise a world of one (RankEnv's defaults, no
// master) whose FRAMEWORM_* fields are still read and checked as
// ParseRankEnv reads them. Errors: as ParseRankEnv.
absl::StatusOr<RankEnv> ReadRankEnv(const EnvLookup& lookup);

// The most processes one launch_distributed starts (as a job's
// nproc_per_node): a typo such as 100000 is refused, not forked.
inline constexpr int kMaxLaunchProcesses = 1024;

struct LaunchOptions {
  int nprocs = 1;  // 1..kMaxLaunchProcesses
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  // Arguments for the children (argv[0] included); empty: this process's
  // own command line (/proc/self/cmdline).
  std::vector<std::string> argv;
  // If set, receives the children's pids once they are all started.
  std::vector<pid_t>* child_pids = nullptr;
};

// Parent: runs the children and waits. OK when all exit 0; INVALID_ARGUMENT,
// starting nothing, for nprocs outside 1..kMaxLaunchProcesses. When a rank fails
// (non-zero exit or a signal), kills the others (SIGKILL), reaps every child
// and returns INTERNAL "rank R (pid P) exited with code C" (or "killed by
// signal S"). Children also die with the parent (PR_SET_PDEATHSIG). While
// the children run, the parent sleeps in poll() on their pidfds: it takes no
// CPU from them (a 5 ms check where the kernel has no pidfd_open).
// Child (FRAMEWORM_LAUNCH_CHILD=1): runs fn(RANK, WORLD_SIZE) and _exit()s
// with its result (1 if it throws); never returns.
absl::Status launch_distributed(const std::function<int(int, int)>& fn,
                                int nprocs);
absl::Status launch_distributed(const std::function<int(int, int)>& fn,
                                const LaunchOptions& options);

// True in a process started by launch_distributed.
bool IsLaunchedChild();

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> PickFreePort();

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_LAUNCH_H_
