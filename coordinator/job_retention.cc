// JobScheduler's bounded growth: expiry of ended jobs and thinning of
// metric histories (contracts in job_scheduler.h).
#include "coordinator/job_scheduler.h"

namespace frameworm::coordinator {

std::vector<std::string> JobScheduler::ExpireFinished(int64_t before_ms) {
  std::vector<std::string> expired;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& job = *it->second;
    if (IsFinal(job.state) && job.finished_ms < before_ms) {
      expired.push_back(it->first);
      changed_.erase(it->first);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

std::vector<std::pair<std::string, std::vector<int64_t>>>
JobScheduler::ThinMetrics(size_t limit) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> thinned;
  if (limit == 0) return thinned;
  for (auto& [id, job] : jobs_) {
    const size_t trigger = IsFinal(job->state) ? limit : 2 * limit;
    std::vector<int64_t> removed = job->metrics.Thin(limit, trigger);
    if (!removed.empty()) thinned.emplace_back(id, std::move(removed));
  }
  return thinned;
}

}  // namespace frameworm::coordinator
