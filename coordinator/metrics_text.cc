#include "coordinator/metrics_text.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {

void WriteCoordinatorMetrics(const std::vector<v1::JobStatus>& jobs,
                             const std::vector<v1::WorkerInfo>& workers, int64_t now_unix_ms,
                             PromWriter& w) {
  std::map<std::string, int> by_state;
  for (int s = v1::PENDING; s <= v1::CANCELLED; ++s) {
    if (v1::JobState_IsValid(s)) by_state[v1::JobState_Name(static_cast<v1::JobState>(s))] = 0;
  }
  for (const auto& j : jobs) by_state[v1::JobState_Name(j.state())]++;
  w.Family("frameworm_jobs", "gauge", "Jobs the coordinator holds, by state.");
  for (const auto& [state, n] : by_state) w.Sample("frameworm_jobs", {{"state", state}}, n);

  // Each family's samples together, as the format requires.
  using PerJob = void (*)(const v1::JobStatus&, const std::string&, PromWriter&);
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    PerJob write;
  };
  static const Family kFamilies[] = {
      {"frameworm_job_info", "gauge", "1 per job, with its name and state.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}, {"name", j.spec().name()},
                      {"state", v1::JobState_Name(j.state())}}, 1);
       }},
      {"frameworm_job_generation", "gauge", "The job's current generation.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}}, static_cast<double>(j.generation()));
       }},
      {"frameworm_job_restarts_total", "counter", "Restarts after failures.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}}, j.restarts());
       }},
      {"frameworm_job_step", "gauge", "Newest aggregated step.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}}, static_cast<double>(j.step()));
       }},
      {"frameworm_job_total_steps", "gauge", "Planned steps (0: unknown).",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}}, static_cast<double>(j.total_steps()));
       }},
      {"frameworm_job_samples_per_second", "gauge", "Samples per second at the newest step.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}}, j.samples_per_second());
       }},
      {"frameworm_job_metric", "gauge", "Mean across ranks of each value at the newest step.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         std::map<std::string, double> mean(j.last().mean().begin(), j.last().mean().end());
         for (const auto& [metric, v] : mean) w.Sample(n, {{"job_id", j.job_id()}, {"metric", metric}}, v);
       }},
      {"frameworm_job_rank_step_seconds", "gauge", "Each rank's step time at the newest step.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         for (int r = 0; r < j.last().rank_step_seconds_size(); ++r) {
           w.Sample(n, {{"job_id", j.job_id()}, {"rank", absl::StrCat(r)}},
                    j.last().rank_step_seconds(r));
         }
       }},
      {"frameworm_job_stragglers", "gauge", "Ranks flagged as stragglers at the newest step.",
       [](const v1::JobStatus& j, const std::string& n, PromWriter& w) {
         w.Sample(n, {{"job_id", j.job_id()}}, j.last().stragglers_size());
       }},
  };
  if (!jobs.empty()) {
    for (const Family& f : kFamilies) {
      w.Family(f.name, f.type, f.help);
      for (const auto& j : jobs) f.write(j, f.name, w);
    }
  }

  int alive = 0;
  for (const auto& wk : workers) alive += wk.alive() ? 1 : 0;
  w.Family("frameworm_workers", "gauge", "Registered workers, alive or not.");
  w.Sample("frameworm_workers", {{"state", "alive"}}, alive);
  w.Sample("frameworm_workers", {{"state", "dead"}}, static_cast<double>(workers.size()) - alive);
  if (workers.empty()) return;
  struct WorkerFamily {
    const char* name;
    const char* help;
    double (*value)(const v1::WorkerInfo&, int64_t now_ms);
  };
  static const WorkerFamily kWorkerFamilies[] = {
      {"frameworm_worker_slots", "Slots (GPUs) the worker declared.",
       [](const v1::WorkerInfo& wk, int64_t) { return static_cast<double>(wk.slots()); }},
      {"frameworm_worker_free_slots", "Slots no running rank holds.",
       [](const v1::WorkerInfo& wk, int64_t) { return static_cast<double>(wk.free_slots()); }},
      {"frameworm_worker_alive", "1 while the worker is attached and heartbeating.",
       [](const v1::WorkerInfo& wk, int64_t) { return wk.alive() ? 1.0 : 0.0; }},
      {"frameworm_worker_heartbeat_age_seconds", "Time since the worker was last heard.",
       [](const v1::WorkerInfo& wk, int64_t now_ms) {
         return std::max<int64_t>(0, now_ms - wk.last_heartbeat_unix_ms()) / 1000.0;
       }},
  };
  for (const WorkerFamily& f : kWorkerFamilies) {
    w.Family(f.name, "gauge", f.help);
    for (const auto& wk : workers) w.Sample(f.name, {{"worker", wk.name()}}, f.value(wk, now_unix_ms));
  }
}

void WriteMetricBacklog(int64_t backlog_bytes, int64_t limit_bytes, PromWriter& w) {
  w.Family("frameworm_metric_backlog_bytes", "gauge",
           "Aggregated metric rows waiting for the coordinator's store (staged or committing).");
  w.Sample("frameworm_metric_backlog_bytes", {}, static_cast<double>(backlog_bytes));
  w.Family("frameworm_metric_backlog_limit_bytes", "gauge",
           "The backlog past which step reports are deferred until the store takes writes.");
  w.Sample("frameworm_metric_backlog_limit_bytes", {}, static_cast<double>(limit_bytes));
}

}  // namespace frameworm::coordinator
