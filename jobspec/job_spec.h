// Job specs: YAML (what users write) -> frameworm.v1.JobSpec, and the one
// normalizer (defaults + validation) both the CLI and the coordinator
// apply. Every rule lives here once (CheckSpec in job_spec.cc), with one
// message per rule that names the field.
//
// YAML schema (every key optional unless marked):
//   name: str (required)
//   entrypoint: [str, ...] | str        # a command (a string is split like a
//                                       # shell would, quotes honoured);
//                                       # omitted => ["frameworm-train"], whose
//                                       # arguments follow train:'s rules
//   train: {model: cnn, epochs: 2, ...} # frameworm-train options (flag -> value,
//                                       # '_' in names becomes '-'); only with
//                                       # the built-in trainer; not the flags
//                                       # the coordinator sets (checkpoint-dir,
//                                       # backend, nprocs, resume, ...); each a
//                                       # flag of the trainer with a value of
//                                       # its kind (jobspec/train_flags.h);
//                                       # batch_size and batch-size are one
//                                       # flag (both: a duplicate field)
//   nodes: int | {min: int, max: int}   # default 1 (max defaults to min)
//   nproc_per_node: int                 # default 1
//   backend: gloo | nccl                # default "" = nccl with GPUs, else gloo;
//                                       # mpi refused (no build has MPI)
//   env: {KEY: value}                   # not RANK, MASTER_*, FRAMEWORM_*, ...
//   max_restarts: int                   # default 0
//   heartbeat_timeout: seconds          # number or "30s"; 0 = coordinator's;
//                                       # else >= kMinHeartbeatTimeoutS
//   priority: int                       # default 0
//   total_steps: int                    # default: train.max_steps if given
//   checkpoint: {dir: str, every_n_steps: int, every_n_minutes: float,
//                keep_last: int,        # default kDefaultKeepLast; 0: keep all
//                replicas: int,         # 0..kMaxCheckpointReplicas, default 1
//                memory_every_n_steps: int}  # default automatic; 0: none
//
// A key with no value ("backend:") means the default. Nothing is partially
// accepted: any error returns no spec. The text is one YAML document (a
// second one is an error, empty ones after it aside). Every string must be
// UTF-8, and each entrypoint argument, env entry (NAME=value) and train
// option (--name=value) at most MAX_ARG_STRLEN - 1 bytes; checkpoint.dir
// follows the coordinator's rule (absolute, no ".", ".." or "//"). YAML
// anchors and aliases work, but the strings the parser copies out (an alias
// counting its anchor's text each time) are bounded (a little over 1 MiB),
// so a small document cannot expand into a huge spec; past the bound the
// error names it.
//
// Errors are INVALID_ARGUMENT and name the field and its 1-based line, e.g.
//   "job.yaml:7: unknown field 'nprocs_per_node' (did you mean 'nproc_per_node'?)"
//   "job.yaml:4: nproc_per_node must be >= 1, got -2"
// Thread safety: free functions, no shared state.
#ifndef FRAMEWORM_JOBSPEC_JOB_SPEC_H_
#define FRAMEWORM_JOBSPEC_JOB_SPEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm {

inline constexpr int kDefaultKeepLast = 3;
inline constexpr int kMaxCheckpointReplicas = 8;
// checkpoint.replicas when a spec leaves it out.
inline constexpr int kDefaultCheckpointReplicas = 1;
// The shortest heartbeat timeout (a job's, or the coordinator's default):
// workers heartbeat every second, so a shorter one would declare healthy
// workers lost between two heartbeats and fail every generation.
inline constexpr double kMinHeartbeatTimeoutS = 2;
// The longest: a worker fences (kills its trainers) after the job's
// heartbeat timeout without the coordinator only up to this long
// (worker_agent.cc); a longer one would never fence.
inline constexpr double kMaxHeartbeatTimeoutS = 7 * 24 * 3600;
// The largest step count (total_steps) a spec may plan: the coordinator's
// bound on reported counters (2^48).
inline constexpr int64_t kMaxTotalSteps = int64_t{1} << 48;

// Parses YAML text. `source_name` prefixes error messages (a file name).
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml,
                                             const std::string& source_name);

// Checks a spec's values (ranges, backend names, required fields, names in
// env/train). Errors name the field: "nproc_per_node must be >= 1, got -2".
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// What the coordinator applies to every submitted spec (from YAML or from a
// raw RPC): proto3's zero values mean "unset" and get the defaults
// (nproc_per_node 1, nodes.min 1, nodes.max = nodes.min), then
// ValidateJobSpec. (YAML's defaults for absent keys are set by the parser
// before its own ValidateJobSpec, so an explicit `nodes: 0` is an error at
// its line.) Errors: INVALID_ARGUMENT "invalid job spec: <rule's message>".
absl::StatusOr<v1::JobSpec> NormalizeJobSpec(v1::JobSpec spec);

// True when the job runs the built-in frameworm-train (no entrypoint, or
// one whose program is "frameworm-train").
bool UsesBuiltInTrainer(const v1::JobSpec& spec);

}  // namespace frameworm

#endif  // FRAMEWORM_JOBSPEC_JOB_SPEC_H_
