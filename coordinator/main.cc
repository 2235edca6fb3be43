// frameworm-coordinator: the cluster's coordinator daemon. Flags are read
// here only; everything else lives in the core (coordinator.h) and the gRPC
// glue (service.h).
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/node_address.h"
#include "coordinator/checkpoint_paths.h"
#include "common/prometheus_text.h"
#include "coordinator/coordinator.h"
#include "coordinator/dashboard.h"
#include "coordinator/metrics_text.h"
#include "coordinator/service.h"
#include "jobspec/job_spec.h"
#include "rpc/http_server.h"
#include "rpc/rpc.h"
#include "rpc/rpc_latency.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "address to serve on, HOST:PORT (port 0: a free one)");
ABSL_FLAG(std::string, state_dir, "./frameworm-state",
          "durable state, logs, default checkpoints");
ABSL_FLAG(std::string, tls_dir, "",
          "serve mutual TLS with this directory's ca.crt, tls.crt and tls.key "
          "(`frameworm-cli admin ca issue --role coordinator --name NAME`): every client "
          "must present a certificate of that CA");
ABSL_FLAG(bool, insecure, false,
          "allow a --listen address off loopback in plaintext, without --tls-dir "
          "(whoever reaches the port can run jobs); private networks only");
ABSL_FLAG(std::string, checkpoint_root, "",
          "comma-separated absolute directories a job's checkpoint.dir may be "
          "in (e.g. a shared filesystem); empty: <state-dir>/checkpoints");
ABSL_FLAG(std::string, memory_checkpoint_root, "/dev/shm/frameworm",
          "where built-in trainers keep in-memory checkpoints on every node (a tmpfs; "
          "<root>/<job>-<submitted ms>); none: no in-memory checkpoints");
ABSL_FLAG(std::string, advertise, "",
          "address trainers use to reach this coordinator, HOST:PORT; empty: "
          "the listen address as bound");
ABSL_FLAG(std::string, port_range, "29500-29999",
          "MASTER_PORT range for jobs, LO-HI within 1-65535");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "default worker/rank timeout, a duration with its unit, at least 2s");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Minutes(5),
          "a built-in trainer that has not reported this long after its start "
          "is hung (restarted); 0 turns it off");
ABSL_FLAG(absl::Duration, forget_dead_workers, absl::Hours(1),
          "a worker disconnected and silent this long (running nothing) is forgotten; 0: never");
ABSL_FLAG(absl::Duration, retain_finished, absl::Hours(7 * 24),
          "an ended job (its record, metrics, logs, the coordinator's checkpoint copies) is "
          "deleted this long after it ended; the checkpoint files its ranks wrote stay; 0: never");
ABSL_FLAG(int, metric_history, 2000,
          "aggregated steps kept per job: older ones are thinned evenly once a running job "
          "holds twice this, an ended job keeps this many; 0: all");
ABSL_FLAG(int64_t, max_log_bytes, int64_t{64} << 20,
          "a rank's log keeps about this many of its newest bytes (older ones are dropped "
          "in place; offsets stay valid); 0: unbounded");
ABSL_FLAG(int64_t, min_free_state, int64_t{64} << 20,
          "new jobs are refused while the state dir's filesystem has fewer free bytes than "
          "this (running jobs go on); 0: never");
ABSL_FLAG(int, max_queued_jobs, 10000,
          "new jobs are refused while this many wait to start (PENDING); 0: unbounded");
ABSL_FLAG(int, max_ended_jobs, 10000,
          "ended jobs kept per owner: past it that owner's oldest to have ended are deleted as "
          "--retain-finished deletes them, before their time; 0: unbounded");
ABSL_FLAG(int64_t, rpc_memory_quota, int64_t{256} << 20,
          "bytes gRPC may hold for the API's connections and calls; past it new calls are "
          "refused (RESOURCE_EXHAUSTED) and connections told to back off instead of a flood "
          "of large requests being buffered; 0: unbounded, else at least 16777216");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:7071",
          "serve Prometheus metrics at http://HOST:PORT/metrics (plaintext HTTP: loopback "
          "unless --metrics-insecure); none: no metrics endpoint");
ABSL_FLAG(bool, metrics_insecure, false,
          "allow --metrics-listen off loopback (plaintext, no authentication: whoever reaches "
          "it reads job names, steps, metric means and worker names)");
ABSL_FLAG(std::string, dashboard_listen, "127.0.0.1:7080",
          "serve the web dashboard at HOST:PORT: HTTPS with client certificates when --tls-dir "
          "is given (the API's authentication), else plaintext HTTP (off loopback only with "
          "--insecure); none: no dashboard");
ABSL_FLAG(int, straggler_window, 5,
          "steps over which each rank's busy time (step - wait + data) is averaged for the "
          "straggler rule, >= 1");
ABSL_FLAG(double, straggler_factor, 1.5,
          "flag ranks slower than X times the median step time, X > 1");

namespace {

const frameworm::FlagsConfig& Config() {
  static const frameworm::FlagsConfig* config = new frameworm::FlagsConfig{
      "frameworm-coordinator",
      "usage: frameworm-coordinator [flags]\n"
      "The cluster's coordinator: job queue, scheduling, restarts, metrics.\n",
      {{"tls_dir", "FRAMEWORM_TLS_DIR"}},
      {}};
  return *config;
}

struct DaemonConfig {
  frameworm::coordinator::CoordinatorOptions core;
  std::string listen;
  size_t rpc_memory_quota = 0;  // ServerOptions::memory_quota_bytes
};

// The flags' values, checked. Errors: INVALID_ARGUMENT naming the flag and
// the value it got.
absl::StatusOr<DaemonConfig> FromFlags() {
  auto bad = [](absl::string_view flag, absl::string_view must,
                absl::string_view got) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be ", must, ", got '", got, "'"));
  };
  DaemonConfig c;
  frameworm::coordinator::CoordinatorOptions& o = c.core;
  o.state_dir = absl::GetFlag(FLAGS_state_dir);
  if (o.state_dir.empty())
    return absl::InvalidArgumentError("--state-dir must not be empty");
  c.listen = absl::GetFlag(FLAGS_listen);
  std::string host;
  int port = 0;
  if (!frameworm::ParseHostPort(c.listen, &host, &port).ok())
    return bad("listen", "HOST:PORT with a port 0..65535", c.listen);
  const std::string range = absl::GetFlag(FLAGS_port_range);
  std::vector<std::string> lo_hi = absl::StrSplit(range, '-');
  if (lo_hi.size() != 2 || !absl::SimpleAtoi(lo_hi[0], &o.port_min) ||
      !absl::SimpleAtoi(lo_hi[1], &o.port_max) || o.port_min < 1 ||
      o.port_max > 65535 || o.port_min > o.port_max)
    return bad("port-range", "LO-HI within 1-65535 with LO <= HI", range);
  o.default_heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  if (o.default_heartbeat_timeout < absl::Seconds(frameworm::kMinHeartbeatTimeoutS))
    return bad("heartbeat-timeout", "a duration of at least 2s like 10s (workers heartbeat every second)",
               absl::FormatDuration(o.default_heartbeat_timeout));
  o.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  if (o.startup_timeout < absl::ZeroDuration())
    return bad("startup-timeout", "a duration >= 0 like 5m",
               absl::FormatDuration(o.startup_timeout));
  o.forget_dead_workers_after = absl::GetFlag(FLAGS_forget_dead_workers);
  if (o.forget_dead_workers_after < absl::ZeroDuration())
    return bad("forget-dead-workers", "a duration >= 0", absl::FormatDuration(o.forget_dead_workers_after));
  o.retain_finished = absl::GetFlag(FLAGS_retain_finished);
  if (o.retain_finished < absl::ZeroDuration())
    return bad("retain-finished", "a duration >= 0 like 168h", absl::FormatDuration(o.retain_finished));
  o.metric_history = absl::GetFlag(FLAGS_metric_history);
  if (o.metric_history < 0 || o.metric_history == 1)
    return bad("metric-history", "0 or a count >= 2", absl::StrCat(o.metric_history));
  o.max_log_bytes = absl::GetFlag(FLAGS_max_log_bytes);
  if (o.max_log_bytes < 0 || (o.max_log_bytes > 0 && o.max_log_bytes < (1 << 20)))
    return bad("max-log-bytes", "0 or at least 1048576", absl::StrCat(o.max_log_bytes));
  const int64_t quota = absl::GetFlag(FLAGS_rpc_memory_quota);
  if (quota < 0 || (quota > 0 && quota < (16 << 20)))
    return bad("rpc-memory-quota", "0 or at least 16777216 (one largest message)",
               absl::StrCat(quota));
  c.rpc_memory_quota = static_cast<size_t>(quota);
  o.min_free_state_bytes = absl::GetFlag(FLAGS_min_free_state);
  o.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs);
  if (o.max_queued_jobs < 0)
    return bad("max-queued-jobs", "a count >= 0", absl::StrCat(o.max_queued_jobs));
  o.max_ended_jobs = absl::GetFlag(FLAGS_max_ended_jobs);
  if (o.max_ended_jobs < 0)
    return bad("max-ended-jobs", "a count >= 0", absl::StrCat(o.max_ended_jobs));
  if (o.min_free_state_bytes < 0)
    return bad("min-free-state", "a byte count >= 0", absl::StrCat(o.min_free_state_bytes));
  if (absl::Status s = frameworm::CheckMetricsListen(absl::GetFlag(FLAGS_metrics_listen),
                                                     absl::GetFlag(FLAGS_metrics_insecure));
      !s.ok()) {
    return s;
  }
  o.straggler_window = absl::GetFlag(FLAGS_straggler_window);
  if (o.straggler_window < 1)
    return bad("straggler-window", "a number of steps >= 1", absl::StrCat(o.straggler_window));
  o.straggler_factor = absl::GetFlag(FLAGS_straggler_factor);
  if (!(o.straggler_factor > 1.0))
    return bad("straggler-factor", "a number > 1",
               absl::StrCat(o.straggler_factor));
  // State, logs and checkpoint copies are the coordinator's alone.
  ::umask(077);
  o.advertise = absl::GetFlag(FLAGS_advertise);
  if (!o.advertise.empty() && !frameworm::IsDialEndpoint(o.advertise))
    return bad("advertise", "HOST:PORT with a port 1..65535", o.advertise);
  for (absl::string_view root :
       absl::StrSplit(absl::GetFlag(FLAGS_checkpoint_root), ',', absl::SkipEmpty())) {
    if (!frameworm::coordinator::IsCleanAbsolutePath(std::string(root))) {
      frameworm::FlagErrorExit(Config(), absl::StrCat("--checkpoint-root: '", root,
                                           "' is not an absolute path without '.' or '..'"));
    }
    o.checkpoint_roots.emplace_back(root);
  }
  o.memory_checkpoint_root = absl::GetFlag(FLAGS_memory_checkpoint_root);
  if (o.memory_checkpoint_root == "none") {
    o.memory_checkpoint_root.clear();
  } else if (!frameworm::coordinator::IsCleanAbsolutePath(o.memory_checkpoint_root) ||
             o.memory_checkpoint_root == "/") {
    frameworm::FlagErrorExit(Config(), absl::StrCat("--memory-checkpoint-root: '",
                                                    o.memory_checkpoint_root,
                                                    "' is not an absolute path without '.' or '..'"));
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so every Mutex::Lock also
  // records lock order in a global graph (a global lock and a stack trace):
  // about 3% of the coordinator's CPU under load. Tests keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::vector<std::string> positional =
      frameworm::ParseFlagsOrExit(argc, argv, Config());
  if (!positional.empty())
    frameworm::FlagErrorExit(
        Config(), absl::StrCat("unexpected argument '", positional[0], "'"));
  absl::StatusOr<DaemonConfig> config = FromFlags();
  if (!config.ok())
    frameworm::FlagErrorExit(Config(), std::string(config.status().message()));
  const frameworm::coordinator::CoordinatorOptions& o = config->core;
  const std::string& listen = config->listen;
  const std::string listen_host = frameworm::HostOfEndpoint(listen);
  std::optional<frameworm::TlsFiles> tls;
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir); !dir.empty()) {
    absl::StatusOr<frameworm::TlsFiles> loaded = frameworm::LoadTlsDir(dir);
    if (!loaded.ok()) {
      frameworm::FlagErrorExit(Config(), "--tls-dir: " + std::string(loaded.status().message()));
    }
    absl::StatusOr<frameworm::Caller> who = frameworm::IdentityOf(*loaded);
    if (!who.ok() || who->role != frameworm::Caller::Role::kCoordinator) {
      frameworm::FlagErrorExit(
          Config(), "--tls-dir: " + dir + "/tls.crt is not a coordinator certificate (issue one "
                    "with `frameworm-cli admin ca issue --role coordinator --name NAME`)");
    }
    tls = *std::move(loaded);
    if (const std::string w = frameworm::TlsExpiryWarning(*tls, absl::Now()); !w.empty()) {
      std::fprintf(stderr, "frameworm-coordinator: %s\n", w.c_str());
    }
  }
  if (const std::string d = absl::GetFlag(FLAGS_dashboard_listen);
      d != "none" && !tls && !absl::GetFlag(FLAGS_insecure)) {
    std::string host;
    int port = 0;
    if (!frameworm::ParseHostPort(d, &host, &port).ok()) {
      frameworm::FlagErrorExit(Config(), "--dashboard-listen must be HOST:PORT or none, got '" + d + "'");
    }
    if (!frameworm::IsLoopbackHost(host)) {
      frameworm::FlagErrorExit(
          Config(), "--dashboard-listen=" + d +
                        " is off loopback without TLS: anyone who reaches it could read every "
                        "job; give --tls-dir (the dashboard then needs a client certificate, like "
                        "the API), listen on 127.0.0.1, or add --insecure");
    }
  }
  if (!tls && !frameworm::IsLoopbackHost(listen_host)) {
    if (!absl::GetFlag(FLAGS_insecure)) {
      frameworm::FlagErrorExit(
          Config(), absl::StrCat("--listen=", listen,
                                 " is off loopback without TLS: anyone who reaches it could run "
                                 "commands on your workers. Create the cluster's certificates "
                                 "(`frameworm-cli admin ca init --ca-dir D`, then `admin ca issue "
                                 "--ca-dir D --role coordinator --name NAME`) and pass "
                                 "--tls-dir; or listen on 127.0.0.1; or add --insecure on a "
                                 "network only your cluster reaches"));
    }
    std::fprintf(stderr,
                 "frameworm-coordinator: WARNING: --insecure: serving %s in plaintext without "
                 "authentication; anyone who reaches it can submit jobs and read their env\n",
                 listen.c_str());
  }

  // SIGINT/SIGTERM are taken by sigwait() below, in every thread.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // A write to a peer that reset its connection is an error to handle
  // (EPIPE), never the end of the coordinator (as in the worker).
  ::signal(SIGPIPE, SIG_IGN);

  auto core = frameworm::coordinator::Coordinator::Create(
      o, frameworm::RealClock::Real());
  if (!core.ok()) {
    std::fprintf(stderr, "frameworm-coordinator: %s\n",
                 core.status().ToString().c_str());
    return 1;
  }
  frameworm::coordinator::CoordinatorService service(core->get());
  frameworm::RpcLatency latency;
  frameworm::ServerOptions so;
  so.listen = listen;
  so.max_message_bytes = 16 << 20;
  so.memory_quota_bytes = config->rpc_memory_quota;
  so.tls = tls;
  // Trainers connect with the cluster CA alone (their worker holds the
  // key): kAnonymous, trainer calls with their rank's token only.
  so.client_certificate_optional = true;
  so.latency = &latency;
  auto server = frameworm::StartServer(so, service.services());
  if (!server.ok()) {
    std::fprintf(stderr, "frameworm-coordinator: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  const std::string bound =
      absl::StrCat(listen.substr(0, listen.rfind(':')), ":", server->port);
  // No --advertise: trainers get the bound address, unless it is a wildcard
  // (0.0.0.0, ::), which is no address on another host; then each worker
  // hands its trainers the address it reaches the coordinator by.
  if (o.advertise.empty() && !frameworm::IsWildcardHost(listen_host)) {
    (*core)->SetAdvertise(bound);
  }

  // Prometheus: the same views the JobService serves, plus RPC latency.
  std::unique_ptr<frameworm::HttpServer> metrics;
  if (const std::string m = absl::GetFlag(FLAGS_metrics_listen); m != "none") {
    auto started = frameworm::HttpServer::Start(
        {.listen = m}, [&core, &latency, &tls](const frameworm::HttpRequest& request) {
          if (request.path != "/metrics") {
            return frameworm::HttpResponse{404, "text/plain", "only /metrics is served here\n"};
          }
          frameworm::PromWriter w;
          frameworm::coordinator::WriteCoordinatorMetrics(
              (*core)->ListJobs(), (*core)->ListWorkers(),
              absl::ToUnixMillis(frameworm::RealClock::Real().Now()), w);
          frameworm::coordinator::WriteMetricBacklog((*core)->metric_backlog_bytes(),
                                                     (*core)->metric_backlog_limit_bytes(), w);
          latency.Write(w);
          frameworm::WriteTlsExpiryMetric(tls ? &*tls : nullptr, w);
          return frameworm::HttpResponse{200, frameworm::kPromContentType, w.text()};
        });
    if (!started.ok()) {
      std::fprintf(stderr, "frameworm-coordinator: --metrics-listen: %s (none turns it off)\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    metrics = *std::move(started);
    std::printf("frameworm-coordinator metrics on http://%s:%d/metrics\n",
                m.substr(0, m.rfind(':')).c_str(), metrics->port());
  }

  // The dashboard: the API's own authentication (client certificates with
  // --tls-dir; plaintext only where the API is plaintext too).
  frameworm::coordinator::Dashboard dashboard(core->get());
  std::unique_ptr<frameworm::HttpServer> web;
  if (const std::string d = absl::GetFlag(FLAGS_dashboard_listen); d != "none") {
    frameworm::HttpServer::Options wo{.listen = d};
    wo.tls = tls;
    auto started = frameworm::HttpServer::Start(
        wo, [&dashboard](const frameworm::HttpRequest& r) { return dashboard.Handle(r); });
    if (!started.ok()) {
      std::fprintf(stderr, "frameworm-coordinator: --dashboard-listen: %s (none turns it off)\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    web = *std::move(started);
    std::printf("frameworm-coordinator dashboard on %s://%s:%d/\n", tls ? "https" : "http",
                d.substr(0, d.rfind(':')).c_str(), web->port());
  }

  absl::Notification stop;
  std::thread ticker([&] {
    while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100)))
      (*core)->Tick();
  });
  std::printf("frameworm-coordinator listening on %s\n", bound.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "frameworm-coordinator: signal %d, shutting down\n",
               sig);
  stop.Notify();
  ticker.join();
  metrics.reset();
  web.reset();
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(1));
  server->server->Wait();
  return 0;
}
