// What one generation of a job runs, decided before anything is sent or
// stored: ranks node-major over the chosen workers (rank = node_rank *
// nproc_per_node + local_rank), each rank's TaskSpec, and the rows that
// record the generation. A TaskSpec carries argv (TaskArgv), the job spec's
// own env only, and the rank environment as typed fields
// (common/rank_env.h via proto/rank_env_proto.h SetRankEnv): the worker
// builds the process environment from those (RankEnvOf + ToEnvironment).
//
// Thread safety: free functions, no shared state.
#ifndef FRAMEWORM_COORDINATOR_GENERATION_PLAN_H_
#define FRAMEWORM_COORDINATOR_GENERATION_PLAN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/rank_env.h"
#include "coordinator/job.h"
#include "coordinator/store.h"
#include "frameworm/v1/common.pb.h"
#include "frameworm/v1/worker_service.pb.h"

namespace frameworm::coordinator {

// The argv of a task for `spec`: a custom entrypoint runs as given; the
// built-in frameworm-train gets its train options as sorted --key=value
// flags, then the entrypoint's own arguments, then --checkpoint-dir (when
// `checkpoint_dir` is set), --checkpoint-every and --backend (when set).
// With `memory_dir` set and the spec's memory_every_n_steps not 0, also
// --memory-checkpoint-dir and --memory-checkpoint-every (a number, or auto).
std::vector<std::string> TaskArgv(const v1::JobSpec& spec,
                                  const std::string& checkpoint_dir,
                                  const std::string& memory_dir = "");

// True when a job of `spec` takes in-memory checkpoints: `memory_dir` is
// set and the spec's memory_every_n_steps is not 0. Its ranks then get
// FRAMEWORM_MEMORY_CHECKPOINT_DIR (a custom entrypoint's, too).
bool TakesMemoryCheckpoints(const v1::JobSpec& spec, const std::string& memory_dir);

// Where a job's in-memory checkpoints go on every node:
// <memory_root>/<job_id>-<submitted_ms> (the submission time keeps a job
// of another coordinator with the same id apart).
std::string MemoryCheckpointDir(const std::string& memory_root, const std::string& job_id,
                                int64_t submitted_ms);

// Where a job's checkpoints go: <spec.checkpoint.dir>/<job_id>, or
// <state_dir>/checkpoints/<job_id> when the spec names no directory.
std::string CheckpointDir(const v1::JobSpec& spec, const std::string& job_id,
                          const std::string& state_dir);

// MASTER_ADDR from a worker's advertised address: "host:port" -> "host";
// anything else (a bare host, an IPv6 address) as it is.
std::string MasterHost(const std::string& worker_address);

// The task of the rank `env` describes (its job_id and generation name it).
// `fence_after`: TaskSpec.fence_after_s (the job's heartbeat timeout).
v1::TaskSpec BuildTask(const v1::JobSpec& spec, const RankEnv& env,
                       const std::string& checkpoint_dir,
                       absl::Duration fence_after = absl::ZeroDuration(),
                       const std::string& memory_dir = "");

struct GenerationInputs {
  int64_t generation = 0;
  std::vector<std::string> workers;  // node_rank order
  std::string master_addr;
  int master_port = 0;
  std::string resume_from;  // empty: fresh start
  std::string coordinator;  // the trainers' coordinator address
  std::string state_dir;    // for the default checkpoint directory
  std::string memory_dir;   // MemoryCheckpointDir; empty: none
  int64_t started_ms = 0;
  absl::Duration fence_after;  // the job's heartbeat timeout
  // Each rank's FRAMEWORM_TOKEN; null: no tokens (tests of other parts).
  std::function<std::string()> new_token;
};

struct GenerationPlan {
  std::vector<RankState> ranks;  // by rank
  GenerationRow row;
  std::vector<AssignmentRow> assignments;  // by rank
};

GenerationPlan PlanGeneration(const std::string& job_id,
                              const v1::JobSpec& spec,
                              const GenerationInputs& in);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_GENERATION_PLAN_H_
