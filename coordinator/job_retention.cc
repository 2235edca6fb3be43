// JobScheduler's bounded growth: expiry of ended jobs and thinning of
// metric histories (contracts in job_scheduler.h).
#include "coordinator/job_scheduler.h"

#include <algorithm>
#include <map>

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
  // Per owner: (finished_ms, id) of its ended jobs.
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> ended;
  for (const auto& [id, job] : jobs_) {
    if (IsFinal(job->state)) ended[job->spec.owner()].emplace_back(job->finished_ms, id);
  }
  std::vector<std::string> expired;
  for (auto& [owner, mine] : ended) {
    if (mine.size() <= keep) continue;
    const size_t drop = mine.size() - keep;
    std::nth_element(mine.begin(), mine.begin() + static_cast<long>(drop), mine.end());
    for (size_t i = 0; i < drop; ++i) {
      changed_.erase(mine[i].second);
      jobs_.erase(mine[i].second);
      expired.push_back(std::move(mine[i].second));
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
