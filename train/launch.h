// torchrun's environment contract and local multi-process launch, without
// LibTorch (so this part compiles fast and is usable by any binary).
//
// ParseDistributedEnv reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and
// LOCAL_RANK through an injected lookup (main() passes getenv; tests pass a
// map). launch_distributed runs nprocs copies of this program on this
// machine with those variables set and a free port: the parent re-executes
// /proc/self/exe with the same arguments (never a bare fork() after torch
// may have started threads) and marks the children with
// FRAMEWORM_LAUNCH_CHILD=1. In a child, the same launch_distributed call
// runs fn(rank, world_size) and exits the process with fn's return value,
// so a program reaches fn by calling launch_distributed unconditionally.
//
// Thread safety: free functions; launch_distributed blocks the calling
// thread until every child has exited.
#ifndef FRAMEWORM_TRAIN_LAUNCH_H_
#define FRAMEWORM_TRAIN_LAUNCH_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct DistributedEnv {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Errors: INVALID_ARGUMENT naming the variable that is missing or malformed
// (not an integer, out of range, RANK >= WORLD_SIZE).
absl::StatusOr<DistributedEnv> ParseDistributedEnv(const EnvLookup& lookup);
// ParseDistributedEnv over the process environment.
absl::StatusOr<DistributedEnv> ReadDistributedEnv();
// The process environment as an EnvLookup.
EnvLookup ProcessEnvLookup();

struct LaunchOptions {
  int nprocs = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  // Arguments for the children (argv[0] included); empty: this process's
  // own command line (/proc/self/cmdline).
  std::vector<std::string> argv;
  // If set, receives the children's pids once they are all started.
  std::vector<pid_t>* child_pids = nullptr;
};

// Parent: runs the children and waits. OK when all exit 0. When a rank fails
// (non-zero exit or a signal), kills the others (SIGKILL), reaps every child
// and returns INTERNAL "rank R (pid P) exited with code C" (or "killed by
// signal S"). Children also die with the parent (PR_SET_PDEATHSIG).
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
