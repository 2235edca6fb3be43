// End-to-end: a real Prometheus server (Debian's `prometheus`) scrapes a
// running cluster's coordinator and worker and answers queries about the
// job it trains. Prometheus missing is a failure that says how to install
// it, never a skip.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rpc/http_server.h"
#include "tests/e2e/cluster.h"

namespace frameworm::e2e {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";

// A port free on 127.0.0.1 now (Prometheus takes no port 0).
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The value of the first sample in a Prometheus instant-query answer
// ({"data":{"result":[{"metric":{..},"value":[ts,"V"]}]}}); -1 when none.
double FirstValue(const std::string& json) {
  const size_t at = json.find("\"value\":[");
  if (at == std::string::npos) return -1;
  const size_t q = json.find(",\"", at);
  if (q == std::string::npos) return -1;
  return std::atof(json.c_str() + q + 2);
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

TEST(PrometheusE2E, ARealPrometheusScrapesTheCoordinatorAndAWorker) {
  ASSERT_TRUE(std::filesystem::exists(kPrometheus))
      << kPrometheus << " is missing: install Debian's prometheus (deploy/dev.sh install does)";
  ClusterOptions o;
  o.workers = 1;
  o.slots_per_worker = 2;
  o.worker_flags = {"--metrics-listen=127.0.0.1:0"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_FALSE((*c)->metrics_address().empty()) << (*c)->coordinator().Output();
  auto worker_line = (*c)->worker(0).WaitForLine("metrics on http://", absl::Seconds(10));
  ASSERT_TRUE(worker_line.ok()) << (*c)->worker(0).Output();
  std::string worker_metrics = worker_line->substr(worker_line->find("http://") + 7);
  worker_metrics = worker_metrics.substr(0, worker_metrics.find('/'));

  auto id = (*c)->Submit(R"(name: scraped
nodes: 1
nproc_per_node: 2
backend: gloo
train:
  model: mlp
  dataset: fashion-mnist
  max_steps: 100000
  epochs: 100
  batch_size: 32
)");
  ASSERT_TRUE(id.ok()) << id.status();

  const std::string dir = (*c)->dir() + "/prometheus";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/prometheus.yml") << absl::StrCat(
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
      "scrape_configs:\n"
      "  - job_name: frameworm-coordinator\n    static_configs:\n      - targets: ['",
      (*c)->metrics_address(), "']\n",
      "  - job_name: frameworm-worker\n    static_configs:\n      - targets: ['", worker_metrics,
      "']\n");
  const std::string web = absl::StrCat("127.0.0.1:", FreePort());
  auto prom = ChildProcess::Start({kPrometheus, "--config.file=" + dir + "/prometheus.yml",
                                   "--storage.tsdb.path=" + dir + "/data",
                                   "--web.listen-address=" + web},
                                  {}, dir + "/prometheus.log");
  ASSERT_TRUE(prom.ok()) << prom.status();

  // Asked as a user would, through Prometheus's HTTP API.
  auto query = [&](const std::string& promql) {
    auto r = HttpGet(web, "/api/v1/query?query=" + UrlEncode(promql), absl::Seconds(5));
    return r.ok() && r->status == 200 ? FirstValue(r->body) : -1.0;
  };
  const std::string step = absl::StrCat("frameworm_job_step{job_id=\"", *id, "\"}");
  const std::string cpu = absl::StrCat("sum(frameworm_task_cpu_seconds_total{job_id=\"", *id, "\"})");
  const std::string reports =
      "sum(frameworm_rpc_duration_seconds_count{method=\"/frameworm.v1.TrainerService/"
      "ReportStep\"})";
  const std::string running = "frameworm_jobs{state=\"RUNNING\"}";
  const std::string tasks = "frameworm_worker_tasks";
  double s = -1, cpu_s = -1, calls = -1, run = -1, n = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    s = query(step);
    cpu_s = query(cpu);
    calls = query(reports);
    run = query(running);
    n = query(tasks);
    if (s >= 20 && cpu_s > 0 && calls >= 20 && run == 1 && n == 2) break;
    absl::SleepFor(absl::Seconds(1));
  }
  EXPECT_GE(s, 20) << "job step as Prometheus saw it\n" << (*prom)->Output();
  EXPECT_GT(cpu_s, 0) << "the trainers' CPU time";
  EXPECT_GE(calls, 20) << "ReportStep calls timed";
  EXPECT_EQ(run, 1) << "running jobs";
  EXPECT_EQ(n, 2) << "tasks on the worker";
  // Both targets are up, and both export when their certificates expire
  // (the cluster runs with mutual TLS; certificates are issued for a year
  // and more).
  EXPECT_EQ(query("sum(up)"), 2);
  EXPECT_EQ(query("count(frameworm_tls_expiry_timestamp_seconds > time() + 30 * 86400)"), 2);
  // The store takes the rows: the backlog is exported, under its bound.
  EXPECT_EQ(query("count(frameworm_metric_backlog_bytes < frameworm_metric_backlog_limit_bytes)"),
            1);
  (*prom)->Signal(SIGTERM);
  (*prom)->Wait(absl::Seconds(10));
  RunResult cancel = (*c)->Cli({"cancel", *id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.output;
}

}  // namespace
}  // namespace frameworm::e2e
