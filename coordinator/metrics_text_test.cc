#include "coordinator/metrics_text.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

using ::testing::HasSubstr;

// Every family's samples must stand together after its one TYPE line.
void ExpectGrouped(const std::string& text) {
  std::set<std::string> closed;
  std::string current;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      EXPECT_TRUE(closed.insert(parts[2]).second) << "family twice: " << parts[2];
      current = parts[2];
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    const std::string name(line.substr(0, line.find_first_of("{ ")));
    EXPECT_TRUE(absl::StartsWith(name, current)) << name << " outside its family " << current;
  }
}

TEST(CoordinatorMetrics, JobsAndWorkersAsPrometheusReadsThem) {
  std::vector<v1::JobStatus> jobs(2);
  jobs[0].set_job_id("job-000001");
  jobs[0].mutable_spec()->set_name("mnist \"cnn\"");
  jobs[0].set_state(v1::RUNNING);
  jobs[0].set_generation(2);
  jobs[0].set_restarts(1);
  jobs[0].set_step(120);
  jobs[0].set_total_steps(300);
  jobs[0].set_samples_per_second(512.5);
  (*jobs[0].mutable_last()->mutable_mean())["loss"] = 0.25;
  (*jobs[0].mutable_last()->mutable_mean())["accuracy"] = 0.875;
  jobs[0].mutable_last()->add_rank_step_seconds(0.03);
  jobs[0].mutable_last()->add_rank_step_seconds(0.06);
  jobs[0].mutable_last()->add_stragglers(1);
  jobs[1].set_job_id("job-000002");
  jobs[1].set_state(v1::SUCCEEDED);
  std::vector<v1::WorkerInfo> workers(2);
  workers[0].set_name("w1");
  workers[0].set_slots(2);
  workers[0].set_free_slots(1);
  workers[0].set_alive(true);
  workers[0].set_last_heartbeat_unix_ms(9500);
  workers[1].set_name("w2");
  workers[1].set_slots(1);
  PromWriter w;
  WriteCoordinatorMetrics(jobs, workers, 10000, w);
  const std::string& t = w.text();
  for (const char* line : {
           "frameworm_jobs{state=\"RUNNING\"} 1\n", "frameworm_jobs{state=\"SUCCEEDED\"} 1\n",
           "frameworm_jobs{state=\"PENDING\"} 0\n",
           "frameworm_job_info{job_id=\"job-000001\",name=\"mnist \\\"cnn\\\"\",state=\"RUNNING\"} 1\n",
           "frameworm_job_generation{job_id=\"job-000001\"} 2\n",
           "frameworm_job_restarts_total{job_id=\"job-000001\"} 1\n",
           "frameworm_job_step{job_id=\"job-000001\"} 120\n",
           "frameworm_job_total_steps{job_id=\"job-000001\"} 300\n",
           "frameworm_job_samples_per_second{job_id=\"job-000001\"} 512.5\n",
           "frameworm_job_metric{job_id=\"job-000001\",metric=\"loss\"} 0.25\n",
           "frameworm_job_metric{job_id=\"job-000001\",metric=\"accuracy\"} 0.875\n",
           "frameworm_job_rank_step_seconds{job_id=\"job-000001\",rank=\"1\"} 0.059999999999999998\n",
           "frameworm_job_stragglers{job_id=\"job-000001\"} 1\n",
           "frameworm_workers{state=\"alive\"} 1\n", "frameworm_workers{state=\"dead\"} 1\n",
           "frameworm_worker_free_slots{worker=\"w1\"} 1\n",
           "frameworm_worker_alive{worker=\"w2\"} 0\n",
           "frameworm_worker_heartbeat_age_seconds{worker=\"w1\"} 0.5\n",
           "# TYPE frameworm_job_restarts_total counter\n"}) {
    EXPECT_THAT(t, HasSubstr(line));
  }
  ExpectGrouped(t);
}

TEST(CoordinatorMetrics, AnEmptyClusterStillSaysSo) {
  PromWriter w;
  WriteCoordinatorMetrics({}, {}, 0, w);
  EXPECT_THAT(w.text(), HasSubstr("frameworm_jobs{state=\"RUNNING\"} 0\n"));
  EXPECT_THAT(w.text(), HasSubstr("frameworm_workers{state=\"alive\"} 0\n"));
  ExpectGrouped(w.text());
}

TEST(CoordinatorMetrics, TheMetricBacklogAndItsLimit) {
  PromWriter w;
  WriteMetricBacklog(1234, int64_t{64} << 20, w);
  ExpectGrouped(w.text());
  EXPECT_THAT(w.text(), HasSubstr("\nframeworm_metric_backlog_bytes 1234\n"));
  EXPECT_THAT(w.text(), HasSubstr("\nframeworm_metric_backlog_limit_bytes 67108864\n"));
  EXPECT_THAT(w.text(), HasSubstr("# TYPE frameworm_metric_backlog_bytes gauge"));
}

}  // namespace
}  // namespace frameworm::coordinator
