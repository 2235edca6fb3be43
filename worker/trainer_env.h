// Which of the worker's own environment variables a trainer inherits: a
// documented allow-list, not the worker's secrets. A trainer's environment
// is this base, then the job's env, then Frameworm's rank variables
// (Supervisor::EnvFor).
//
// Thread safety: free functions over their arguments.
#ifndef FRAMEWORM_WORKER_TRAINER_ENV_H_
#define FRAMEWORM_WORKER_TRAINER_ENV_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace frameworm {

// Names always passed: PATH HOME USER LOGNAME SHELL LANG LANGUAGE TZ TERM
// TMPDIR LD_LIBRARY_PATH PYTHONPATH PYTHONHOME VIRTUAL_ENV FRAMEWORM_NO_SHM;
// prefixes: LC_ CUDA_ NCCL_ GLOO_ OMP_ MKL_ KMP_ NVIDIA_ TORCH_.
const std::vector<std::string>& DefaultTrainerEnvAllowList();

// An allow-list entry: an environment name ("HF_HOME") or a prefix ending
// in '*' ("WANDB_*"). INVALID_ARGUMENT names a bad entry.
absl::Status CheckAllowEntry(const std::string& entry);

// The variables of `worker_env` that DefaultTrainerEnvAllowList() or
// `extra` (entries as above) let through.
std::map<std::string, std::string> TrainerBaseEnv(
    const std::map<std::string, std::string>& worker_env,
    const std::vector<std::string>& extra);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_TRAINER_ENV_H_
