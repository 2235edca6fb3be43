// The one rank environment: what every trainer process is told about its
// place in a job. The coordinator fills it (per rank, per generation), the
// wire carries it as typed fields of frameworm.v1.TaskSpec
// (proto/rank_env_proto.h), the worker turns it into the process
// environment (ToEnvironment), and the training library reads it back
// (ParseRankEnv). No torch, no protobuf: any binary may link it.
//
// Variables (torchrun's, then Frameworm's):
//   RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR
//   MASTER_PORT                      always written
//   FRAMEWORM_COORDINATOR            when the trainer reports to a coordinator
//   FRAMEWORM_JOB_ID                 when set
//   FRAMEWORM_GENERATION             when job_id is set
//   FRAMEWORM_RESUME_FROM            when resuming from a checkpoint
//   FRAMEWORM_CHECKPOINT_DIR         where rank 0 writes checkpoints the job
//                                    reports (<dir>/ckpt-<step>.pt), when set
//   FRAMEWORM_MEMORY_CHECKPOINT_DIR  the same for in-memory checkpoints (a
//                                    tmpfs), when the job takes them
//   FRAMEWORM_MEMORY_CHECKPOINT_EVERY  with the directory: "auto" (as often
//                                    as costs at most 2% of the step time)
//                                    or N (every N steps)
//   FRAMEWORM_TOKEN                  the rank's secret for the coordinator's
//                                    trainer calls (per generation), when set
//   FRAMEWORM_TLS_DIR                when the worker talks to the
//                                    coordinator over TLS: a directory with
//                                    the cluster CA alone (rpc/tls.h
//                                    LoadTrainerTlsDir); trainers present
//                                    no certificate, their token suffices
// A job's own `env` may set none of these, nor any other FRAMEWORM_* name
// (IsReservedEnvName): those are Frameworm's.
//
// Thread safety: plain data and free functions.
#ifndef FRAMEWORM_COMMON_RANK_ENV_H_
#define FRAMEWORM_COMMON_RANK_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace frameworm {

// The largest FRAMEWORM_MEMORY_CHECKPOINT_EVERY (a job spec's
// memory_every_n_steps beyond it is refused at submission).
inline constexpr int64_t kMaxMemoryCheckpointEvery = 1'000'000'000;

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string coordinator;  // FRAMEWORM_COORDINATOR; empty: none
  std::string job_id;       // FRAMEWORM_JOB_ID; empty: not a cluster job
  int64_t generation = 0;   // FRAMEWORM_GENERATION
  std::string resume_from;  // FRAMEWORM_RESUME_FROM; empty: fresh start
  std::string checkpoint_dir;  // FRAMEWORM_CHECKPOINT_DIR; empty: none
  std::string memory_checkpoint_dir;  // FRAMEWORM_MEMORY_CHECKPOINT_DIR; empty: none
  // FRAMEWORM_MEMORY_CHECKPOINT_EVERY (with memory_checkpoint_dir only):
  // N in [1, kMaxMemoryCheckpointEvery] every N steps; 0 automatic ("auto").
  int64_t memory_checkpoint_every = 0;
  std::string token;        // FRAMEWORM_TOKEN; empty: none
  std::string tls_dir;      // FRAMEWORM_TLS_DIR; empty: plaintext
  bool operator==(const RankEnv&) const = default;
};

// Reads one variable; nullopt when unset.
using EnvLookup =
    std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (getenv) as an EnvLookup.
EnvLookup ProcessEnvLookup();

// True for a name Frameworm sets for every rank (the torchrun variables) or
// reserves (any FRAMEWORM_* name).
bool IsReservedEnvName(absl::string_view name);

// The variables of `env`, as described above.
std::map<std::string, std::string> ToEnvironment(const RankEnv& env);

// Reads a rank environment. Required: MASTER_ADDR (non-empty), MASTER_PORT
// (1-65535), WORLD_SIZE (>= 1), RANK (< WORLD_SIZE). Optional:
// LOCAL_WORLD_SIZE (default WORLD_SIZE), LOCAL_RANK (>= 0; default RANK
// modulo LOCAL_WORLD_SIZE, so the seed's multi-node recipe, which exports
// only MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, runs), NODE_RANK (default 0),
// FRAMEWORM_GENERATION (default 0), the other FRAMEWORM_* strings (default
// empty). Errors: INVALID_ARGUMENT naming the variable that is missing or
// malformed ("environment variable MASTER_ADDR is not set", "... RANK=3
// must be < WORLD_SIZE=2").
absl::StatusOr<RankEnv> ParseRankEnv(const EnvLookup& lookup);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_RANK_ENV_H_
