// Elastic growth of RUNNING jobs (the contract is in job_scheduler.h): a
// job below nodes.max checkpoints, then restarts on more workers.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_scheduler.h"

namespace frameworm::coordinator {

std::vector<std::string> JobScheduler::GrowthWorkers(const Job& job) const {
  std::vector<std::string> out;
  for (std::string& w : FreeWorkers(job.spec.nproc_per_node(), job.workers)) {
    if (!Avoids(job, w)) out.push_back(std::move(w));
  }
  return out;
}

void JobScheduler::PlanGrowth() {
  for (const auto& [id, job_ptr] : jobs_) {
    Job& job = *job_ptr;
    if (job.state != v1::RUNNING || job.grow_at != 0 ||
        static_cast<int>(job.workers.size()) >= job.spec.nodes_max() ||
        !job.progress.any_report()) {
      continue;
    }
    if (GrowthWorkers(job).empty()) continue;
    job.grow_at = job.progress.RequestCheckpoint(options_.checkpoint_lead_steps);
  }
}

void JobScheduler::MaybeGrow(Job& job, int64_t step) {
  if (job.state != v1::RUNNING || job.grow_at <= 0 || step < job.grow_at) return;
  std::vector<std::string> extra = GrowthWorkers(job);
  const int room = job.spec.nodes_max() - static_cast<int>(job.workers.size());
  if (extra.empty() || room <= 0) {
    job.grow_at = 0;  // the free workers went elsewhere; planned again later
    return;
  }
  if (static_cast<int>(extra.size()) > room) extra.resize(room);
  std::vector<std::string> next = job.workers;
  next.insert(next.end(), extra.begin(), extra.end());
  const std::string reason =
      absl::StrCat("growing from ", job.workers.size(), " to ", next.size(),
                   " nodes after the checkpoint of step ", step);
  KillAll(job);
  job.state = v1::RESTARTING;
  job.growing = true;  // not a restart (no restart event, no count)
  job.reason = reason;
  RecordGenerationEnd(job, reason);
  v1::Event e = EventLog::Make("growing", job.id, absl::StrCat("job ", job.id, ": ", reason));
  e.set_generation(job.generation);
  e.set_step(step);
  events_.Emit(std::move(e));
  // When the start cannot happen now (no MASTER_PORT, the store), the job
  // stays RESTARTING and Schedule() starts it like any other.
  StartGeneration(job, next);
}

}  // namespace frameworm::coordinator
