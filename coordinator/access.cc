#include "coordinator/access.h"

#include "absl/strings/str_cat.h"
#include "common/printable.h"

namespace frameworm::coordinator {
namespace {

using Role = Caller::Role;

bool All(const Caller& c) { return c.role == Role::kLocal || c.role == Role::kAdmin; }

}  // namespace

absl::Status CheckJobClient(const Caller& caller) {
  if (All(caller) || caller.role == Role::kUser) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      caller.Describe(), " may not use the job API (it needs a user or admin certificate)"));
}

bool SeesJob(const Caller& caller, const std::string& owner) {
  return All(caller) || (caller.role == Role::kUser && owner == caller.Owner());
}

std::vector<v1::JobStatus> JobsSeenBy(const Caller& caller, std::vector<v1::JobStatus> all) {
  std::vector<v1::JobStatus> seen;
  for (v1::JobStatus& j : all) {
    if (SeesJob(caller, j.spec().owner())) seen.push_back(std::move(j));
  }
  return seen;
}

absl::Status CheckJobAccess(const Caller& caller, const std::string& job_id,
                            const std::string& owner) {
  if (absl::Status s = CheckJobClient(caller); !s.ok()) return s;
  if (SeesJob(caller, owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("job ", job_id, " is not ", caller.Describe(), "'s (users see their own jobs; "
                   "admins every job)"));
}

absl::Status CheckWorkerClient(const Caller& caller, const std::string& worker_name) {
  if (caller.role == Role::kLocal) return absl::OkStatus();
  if (caller.role != Role::kWorker) {
    return absl::PermissionDeniedError(
        absl::StrCat(caller.Describe(), " may not act as a worker (it needs a worker certificate)"));
  }
  if (caller.name != worker_name) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", caller.name, "'s certificate may not register as worker '",
        PrintableLine(worker_name, 64), "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckTrainerClient(const Caller& caller) {
  if (caller.role == Role::kLocal || caller.role == Role::kWorker ||
      caller.role == Role::kAnonymous) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      caller.Describe(), " may not report for trainers (trainers connect without a certificate, "
      "or with their worker's, and carry their rank's token)"));
}

absl::Status CheckWorkerSession(const Caller& caller) {
  if (caller.role == Role::kLocal || caller.role == Role::kWorker) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(caller.Describe(), " may not open a worker session (it needs a worker certificate)"));
}

}  // namespace frameworm::coordinator
