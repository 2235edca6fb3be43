// JobScheduler's bounded growth: expiry of ended jobs and thinning of
// metric histories (contracts in job_scheduler.h).
#include "coordinator/job_scheduler.h"

#include <algorithm>

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

std::vector<std::string> JobScheduler::ExpireOldestFinished(size_t keep) {
  std::vector<std::pair<int64_t, std::string>> ended;  // (finished_ms, id)
  for (const auto& [id, job] : jobs_) {
    if (IsFinal(job->state)) ended.emplace_back(job->finished_ms, id);
  }
  std::vector<std::string> expired;
  if (ended.size() <= keep) return expired;
  const size_t drop = ended.size() - keep;
  std::nth_element(ended.begin(), ended.begin() + static_cast<long>(drop), ended.end());
  for (size_t i = 0; i < drop; ++i) {
    changed_.erase(ended[i].second);
    jobs_.erase(ended[i].second);
    expired.push_back(std::move(ended[i].second));
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
