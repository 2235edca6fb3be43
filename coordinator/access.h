// Who may call what on the coordinator. The Caller comes from the
// transport (rpc/tls.h CallerOf): a verified certificate's role and name,
// or kLocal for a plaintext connection (loopback, or --insecure by the
// operator's choice), which may do anything.
//
//   JobService      admins and local callers: every job; users: the jobs
//                   they submitted (ListJobs shows only those; another's
//                   job is PERMISSION_DENIED); ListWorkers: any user.
//                   Workers and coordinators: nothing.
//   WorkerService   workers, under their certificate's name only.
//   TrainerService  callers without a certificate (kAnonymous: trainers,
//                   whose worker hands them the cluster CA alone) and
//                   workers; every call also carries the rank's token,
//                   which is what authorizes it. A kAnonymous caller may
//                   call nothing else.
//   WorkerService.Session: workers (CheckWorkerSession), then the session
//                   id (unguessable) in its first message says which.
//
// Errors: PERMISSION_DENIED naming who called and what it may do.
// Thread safety: free functions.
#ifndef FRAMEWORM_COORDINATOR_ACCESS_H_
#define FRAMEWORM_COORDINATOR_ACCESS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/caller.h"
#include "frameworm/v1/job_service.pb.h"

namespace frameworm::coordinator {

absl::Status CheckJobClient(const Caller& caller);
// `owner`: the job's spec().owner().
absl::Status CheckJobAccess(const Caller& caller, const std::string& job_id,
                            const std::string& owner);
bool SeesJob(const Caller& caller, const std::string& owner);
// The jobs of `all` that `caller` sees (SeesJob), in their order: what
// ListJobs and the dashboard's /api/jobs page through.
std::vector<v1::JobStatus> JobsSeenBy(const Caller& caller, std::vector<v1::JobStatus> all);
absl::Status CheckWorkerClient(const Caller& caller, const std::string& worker_name);
absl::Status CheckTrainerClient(const Caller& caller);
absl::Status CheckWorkerSession(const Caller& caller);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_ACCESS_H_
