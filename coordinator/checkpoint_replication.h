// Where copies of a job's checkpoints live on workers, so that hosts need
// no shared filesystem (docs/ARCHITECTURE.md, data path 4), and the worker
// commands that put them there. Pure functions over the registry and a
// catalog record; the callers (Coordinator, JobScheduler) hold the
// coordinator's lock and queue what these return.
//
//  - After rank 0 reported a checkpoint: its own worker holds the file it
//    wrote (a HoldCheckpoint without sources); once it answered that it
//    does, up to `replicas` other live workers fetch it from there, the
//    job's own workers first, then the others in name order.
//  - Before a generation that resumes from a record starts: every worker of
//    the generation that is not a holder fetches it from the holders (live
//    ones first); its StartTask, queued after, waits for that.
//  - When a record expires or its job is deleted: each holder drops it.
//
// Only schedulable (live, attached) workers are sent holds to fetch; a hold
// names at most 8 sources.
#ifndef FRAMEWORM_COORDINATOR_CHECKPOINT_REPLICATION_H_
#define FRAMEWORM_COORDINATOR_CHECKPOINT_REPLICATION_H_

#include <string>
#include <utility>
#include <vector>

#include "coordinator/worker_registry.h"
#include "frameworm/v1/common.pb.h"
#include "frameworm/v1/worker_service.pb.h"

namespace frameworm::coordinator {

using WorkerCommand = std::pair<std::string, v1::CoordinatorMessage>;  // (worker, command)

// The hold for `source` (rank 0's worker), which wrote `rec`.
WorkerCommand SourceHold(const v1::CheckpointRecord& rec, const std::string& source);
// The holds for the replicas once `source` holds `rec`; empty when it
// serves no copies.
std::vector<WorkerCommand> ReplicaHolds(const WorkerRegistry& workers,
                                        const v1::CheckpointRecord& rec,
                                        const std::string& source,
                                        const std::vector<std::string>& job_workers,
                                        int replicas);

// The holds before a generation on `workers` resumes from `rec`; empty
// when no holder serves copies.
std::vector<WorkerCommand> PrefetchCommands(const WorkerRegistry& workers,
                                            const v1::CheckpointRecord& rec,
                                            const std::vector<std::string>& generation_workers);

// A DropCheckpoint of (job, step) for each of `holders` (step -1: every step).
std::vector<WorkerCommand> DropCommands(const std::string& job_id, int64_t step,
                                        const std::vector<std::string>& holders);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_CHECKPOINT_REPLICATION_H_
