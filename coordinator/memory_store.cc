#include "coordinator/memory_store.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {

void MemoryStore::FailWrites(absl::Status status, std::string only) {
  absl::MutexLock l(&mu_);
  fail_ = std::move(status);
  fail_only_ = std::move(only);
}

int64_t MemoryStore::writes() const {
  absl::MutexLock l(&mu_);
  return writes_;
}

absl::Status MemoryStore::WriteLocked(const char* method) {
  if (!fail_.ok() && (fail_only_.empty() || fail_only_ == method)) return fail_;
  ++writes_;
  return absl::OkStatus();
}

absl::Status MemoryStore::PutJob(const JobRow& job) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("PutJob"); !s.ok()) return s;
  jobs_[job.job_id] = job;
  return absl::OkStatus();
}

absl::Status MemoryStore::StartGeneration(
    const JobRow& job, const GenerationRow& gen,
    const std::vector<AssignmentRow>& assignments) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("StartGeneration"); !s.ok()) return s;
  jobs_[job.job_id] = job;
  generations_[{gen.job_id, gen.generation}] = gen;
  for (const AssignmentRow& a : assignments)
    assignments_[{a.job_id, a.generation, a.rank}] = a;
  const int64_t gone = gen.generation - kKeptGenerations;
  std::erase_if(generations_, [&](const auto& e) {
    return std::get<0>(e.first) == gen.job_id && std::get<1>(e.first) <= gone;
  });
  std::erase_if(assignments_, [&](const auto& e) {
    return std::get<0>(e.first) == gen.job_id && std::get<1>(e.first) <= gone;
  });
  return absl::OkStatus();
}

absl::Status MemoryStore::EndGeneration(const JobRow& job, int64_t generation,
                                        int64_t ended_ms,
                                        const std::string& reason) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("EndGeneration"); !s.ok()) return s;
  jobs_[job.job_id] = job;
  auto it = generations_.find({job.job_id, generation});
  if (it != generations_.end()) {
    it->second.ended_ms = ended_ms;
    it->second.end_reason = reason;
  }
  return absl::OkStatus();
}

absl::Status MemoryStore::SetAssignmentState(const std::string& job_id,
                                             int64_t generation, int rank,
                                             int state) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("SetAssignmentState"); !s.ok()) return s;
  auto it = assignments_.find({job_id, generation, rank});
  if (it != assignments_.end()) it->second.state = state;
  return absl::OkStatus();
}

absl::Status MemoryStore::AddCheckpoint(const CheckpointRow& row) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("AddCheckpoint"); !s.ok()) return s;
  checkpoints_[{row.job_id, row.path}] = row;
  return absl::OkStatus();
}

absl::Status MemoryStore::DeleteCheckpoint(const std::string& job_id,
                                           const std::string& path) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("DeleteCheckpoint"); !s.ok()) return s;
  checkpoints_.erase({job_id, path});
  return absl::OkStatus();
}

absl::Status MemoryStore::PutMetrics(const std::vector<MetricRow>& rows) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("PutMetrics"); !s.ok()) return s;
  for (const MetricRow& m : rows) metrics_[{m.job_id, m.step}] = m;
  return absl::OkStatus();
}

absl::Status MemoryStore::DeleteMetrics(const std::string& job_id,
                                        const std::vector<int64_t>& steps) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("DeleteMetrics"); !s.ok()) return s;
  for (int64_t step : steps) metrics_.erase({job_id, step});
  return absl::OkStatus();
}

absl::Status MemoryStore::DeleteJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("DeleteJob"); !s.ok()) return s;
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    max_deleted_job_seq_ = std::max(max_deleted_job_seq_, it->second.seq);
  }
  jobs_.erase(job_id);
  auto in_job = [&](const auto& key) { return std::get<0>(key) == job_id; };
  std::erase_if(generations_, [&](const auto& e) { return in_job(e.first); });
  std::erase_if(assignments_, [&](const auto& e) { return in_job(e.first); });
  std::erase_if(checkpoints_, [&](const auto& e) { return in_job(e.first); });
  std::erase_if(metrics_, [&](const auto& e) { return in_job(e.first); });
  std::erase_if(events_, [&](const auto& e) { return e.second.job_id == job_id; });
  return absl::OkStatus();
}

absl::Status MemoryStore::AddEvents(const std::vector<EventRow>& rows) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("AddEvents"); !s.ok()) return s;
  for (const EventRow& e : rows) {
    events_[e.seq] = e;
    max_event_seq_ = std::max(max_event_seq_, e.seq);
  }
  return absl::OkStatus();
}

absl::Status MemoryStore::TrimEvents(int64_t keep) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = WriteLocked("TrimEvents"); !s.ok()) return s;
  std::map<std::string, int64_t> seen;  // per job, newest first
  std::vector<int64_t> old;
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (++seen[it->second.job_id] > std::max<int64_t>(keep, 1)) old.push_back(it->first);
  }
  for (int64_t seq : old) events_.erase(seq);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EventRow>> MemoryStore::LoadEvents(
    const std::optional<std::string>& job_id, int64_t after_seq, int limit) {
  absl::MutexLock l(&mu_);
  std::vector<EventRow> out;
  for (auto it = events_.upper_bound(after_seq);
       it != events_.end() && static_cast<int>(out.size()) < limit; ++it) {
    if (!job_id || it->second.job_id == *job_id) out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<std::vector<EventRow>> MemoryStore::LoadNewestEvents(
    const std::optional<std::string>& job_id, int limit) {
  absl::MutexLock l(&mu_);
  std::vector<EventRow> out;
  for (auto it = events_.rbegin(); it != events_.rend() && static_cast<int>(out.size()) < limit;
       ++it) {
    if (!job_id || it->second.job_id == *job_id) out.push_back(it->second);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

absl::StatusOr<int64_t> MemoryStore::MaxEventSeq() {
  absl::MutexLock l(&mu_);
  return max_event_seq_;
}

absl::StatusOr<int64_t> MemoryStore::MaxJobSeq() {
  absl::MutexLock l(&mu_);
  int64_t max = max_deleted_job_seq_;
  for (const auto& [id, row] : jobs_) max = std::max(max, row.seq);
  return max;
}

absl::StatusOr<std::vector<JobRow>> MemoryStore::LoadJobs() {
  absl::MutexLock l(&mu_);
  std::vector<JobRow> out;
  for (const auto& [id, row] : jobs_) out.push_back(row);
  std::stable_sort(
      out.begin(), out.end(),
      [](const JobRow& a, const JobRow& b) { return a.seq < b.seq; });
  return out;
}

absl::StatusOr<GenerationRow> MemoryStore::LoadGeneration(
    const std::string& job_id, int64_t generation) {
  absl::MutexLock l(&mu_);
  auto it = generations_.find({job_id, generation});
  if (it == generations_.end())
    return absl::NotFoundError(
        absl::StrCat("no generation ", generation, " of job ", job_id));
  return it->second;
}

absl::StatusOr<std::vector<AssignmentRow>> MemoryStore::LoadAssignments(
    const std::string& job_id, int64_t generation) {
  absl::MutexLock l(&mu_);
  std::vector<AssignmentRow> out;  // the key orders them by rank
  for (auto it = assignments_.lower_bound({job_id, generation, INT32_MIN});
       it != assignments_.end() && it->second.job_id == job_id &&
       it->second.generation == generation;
       ++it)
    out.push_back(it->second);
  return out;
}

absl::StatusOr<std::vector<CheckpointRow>> MemoryStore::LoadCheckpoints(
    const std::string& job_id) {
  absl::MutexLock l(&mu_);
  std::vector<CheckpointRow> out;
  for (const auto& [key, row] : checkpoints_)
    if (key.first == job_id) out.push_back(row);
  std::stable_sort(out.begin(), out.end(),
                   [](const CheckpointRow& a, const CheckpointRow& b) {
                     return std::tie(a.step, a.created_ms) <
                            std::tie(b.step, b.created_ms);
                   });
  return out;
}

void MemoryStore::FailMetricReads(absl::Status status) {
  absl::MutexLock l(&mu_);
  fail_metric_reads_ = std::move(status);
}

absl::StatusOr<std::vector<MetricRow>> MemoryStore::LoadMetrics(
    const std::string& job_id) {
  absl::MutexLock l(&mu_);
  if (!fail_metric_reads_.ok()) return fail_metric_reads_;
  std::vector<MetricRow> out;  // the key orders them by step
  for (auto it = metrics_.lower_bound({job_id, INT64_MIN});
       it != metrics_.end() && it->first.first == job_id; ++it)
    out.push_back(it->second);
  return out;
}

}  // namespace frameworm::coordinator
