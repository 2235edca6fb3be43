// frameworm-worker: the per-node daemon. Flags and environment are read
// here only; everything else lives in WorkerAgent / Supervisor.
#include <glob.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/node_address.h"
#include "common/printable.h"
#include "common/replace_file.h"
#include "common/prometheus_text.h"
#include "common/worker_limits.h"
#include "rpc/http_server.h"
#include "worker/process_launcher.h"
#include "worker/run_as.h"
#include "worker/task_usage.h"
#include "worker/trainer_env.h"
#include "worker/worker_agent.h"

extern char** environ;

ABSL_FLAG(std::string, coordinator, frameworm::WorkerAgent::Options{}.coordinator,
          "the coordinator's address, HOST:PORT");
ABSL_FLAG(std::string, name, "",
          "this worker's name; empty: the --tls-dir certificate's, else the hostname (stable "
          "across restarts: a restarted worker is the same worker)");
ABSL_FLAG(int, slots, 0,
          "trainers this worker runs at once (at most 4096); 0: one per GPU slot, at least 1");
ABSL_FLAG(std::string, gpus, "",
          "GPU ids handed out one per task as its CUDA_VISIBLE_DEVICES, e.g. "
          "0,1; empty: $CUDA_VISIBLE_DEVICES if set, else one per /dev/nvidiaN; "
          "none: no GPU slots");
ABSL_FLAG(std::string, work_dir, "",
          "where trainer logs go (created 0700); empty: "
          "$XDG_STATE_HOME (else ~/.local/state)/frameworm/worker-<name>");
ABSL_FLAG(std::string, tls_dir, "",
          "mutual TLS to the coordinator with this directory's ca.crt, tls.crt and tls.key "
          "(`frameworm-cli admin ca issue --role worker --name NAME`); the worker's name is "
          "the certificate's");
ABSL_FLAG(std::string, user, "",
          "started as root: read --tls-dir as root, then run (and run every job) as this "
          "user (a name, a uid, or UID:GID, which needs --work-dir), so that job code cannot "
          "read the worker's key; the work dir must be the user's; empty: stay the user that "
          "started it");
ABSL_FLAG(bool, insecure, false,
          "allow a --coordinator off loopback in plaintext, without --tls-dir (a "
          "man in the middle could run commands here); private networks only");
ABSL_FLAG(std::string, pass_env, "",
          "comma-separated variables (or PREFIX*) of this worker's environment "
          "that trainers inherit besides the default allow-list (README)");
ABSL_FLAG(std::string, advertise, "",
          "the address trainers use as MASTER_ADDR; empty: this node's address "
          "on the interface that routes to the coordinator");
ABSL_FLAG(std::string, peer_listen, "",
          "HOST:PORT where other workers fetch this node's checkpoint copies (no shared "
          "filesystem needed); empty: the --advertise address, any free port; none: serve none. "
          "Mutual TLS with --tls-dir; plaintext off loopback only with --insecure");
ABSL_FLAG(std::string, metrics_listen, "none",
          "serve Prometheus metrics (slots, tasks, each task's CPU and memory) at "
          "http://HOST:PORT/metrics, plaintext HTTP: loopback unless --metrics-insecure; "
          "none: no endpoint");
ABSL_FLAG(bool, metrics_insecure, false,
          "allow --metrics-listen off loopback (plaintext, no authentication)");
ABSL_FLAG(double, heartbeat_interval,
          absl::ToDoubleSeconds(frameworm::WorkerAgent::Options{}.heartbeat_interval),
          "seconds between heartbeats, 0.05 to 60 (the coordinator may ask for another)");
ABSL_FLAG(double, shutdown_grace,
          absl::ToDoubleSeconds(frameworm::WorkerAgent::Options{}.shutdown_grace),
          "on SIGTERM/SIGINT/SIGHUP, seconds trainers get between SIGTERM and SIGKILL");
ABSL_FLAG(int64_t, max_log_bytes, frameworm::WorkerAgent::Options{}.max_log_bytes,
          "a task's stdout/stderr file on this node keeps about this many of its newest "
          "bytes once uploaded (in place: offsets stay valid); 0: unbounded");

namespace {

const frameworm::FlagsConfig& Config() {
  static const auto* config = new frameworm::FlagsConfig{
      "frameworm-worker",
      "usage: frameworm-worker [flags]\n"
      "  The per-node daemon: registers with the coordinator and runs the\n"
      "  trainer processes it is sent.\n",
      {{"coordinator", "FRAMEWORM_COORDINATOR"}, {"tls_dir", "FRAMEWORM_TLS_DIR"}},
      {}};
  return *config;
}

int CountGpus() {
  glob_t g;
  int n = 0;
  if (::glob("/dev/nvidia[0-9]*", 0, nullptr, &g) == 0) n = g.gl_pathc;
  ::globfree(&g);
  return n;
}

// --gpus: "none" -> {}; "" -> $CUDA_VISIBLE_DEVICES, else 0..N-1 for the
// /dev/nvidiaN devices; else the comma-separated ids (no empty or repeated
// id; each [A-Za-z0-9-]+, as CUDA accepts indexes and GPU-UUIDs).
std::vector<std::string> GpuSlots(const std::string& flag) {
  using frameworm::FlagErrorExit;
  if (flag == "none") return {};
  std::string list = flag;
  if (list.empty()) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible != nullptr && *visible != '\0') {
      list = visible;
    } else {
      std::vector<std::string> ids;
      for (int i = 0; i < CountGpus(); ++i) ids.push_back(std::to_string(i));
      return ids;
    }
  }
  std::vector<std::string> ids = absl::StrSplit(list, ',');
  std::set<std::string> seen;
  for (const std::string& id : ids) {
    const bool ok = !id.empty() && id.size() <= 64 &&
                    id.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") ==
                        std::string::npos;
    if (!ok) FlagErrorExit(Config(), "--gpus: bad GPU id '" + id + "' in '" + list + "'");
    if (!seen.insert(id).second) {
      FlagErrorExit(Config(), "--gpus: GPU id '" + id + "' appears twice in '" + list + "'");
    }
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so every Mutex::Lock also
  // records lock order in a global graph (a global lock and a stack trace):
  // about 3% of the coordinator's CPU under load. Tests keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using frameworm::FlagErrorExit;
  const std::vector<std::string> args =
      frameworm::ParseFlagsOrExit(argc, argv, Config());
  if (!args.empty()) FlagErrorExit(Config(), "unexpected argument '" + args[0] + "'");

  frameworm::WorkerAgent::Options o;
  o.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!frameworm::IsDialEndpoint(o.coordinator)) {
    FlagErrorExit(Config(), "--coordinator must be HOST:PORT with a port 1..65535, got '" +
                                o.coordinator.substr(0, 200) + "'");
  }
  std::string cert_name;
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir); !dir.empty()) {
    absl::StatusOr<frameworm::TlsFiles> tls = frameworm::LoadTlsDir(dir);
    if (!tls.ok()) FlagErrorExit(Config(), "--tls-dir: " + std::string(tls.status().message()));
    absl::StatusOr<frameworm::Caller> who = frameworm::IdentityOf(*tls);
    if (!who.ok()) FlagErrorExit(Config(), "--tls-dir: " + std::string(who.status().message()));
    if (who->role != frameworm::Caller::Role::kWorker) {
      FlagErrorExit(Config(), "--tls-dir: " + dir + "/tls.crt is " + who->Describe() +
                                  "'s certificate, not a worker's");
    }
    cert_name = who->name;
    tls->dir = std::filesystem::absolute(dir).string();
    if (const std::string w = frameworm::TlsExpiryWarning(*tls, absl::Now()); !w.empty()) {
      std::fprintf(stderr, "frameworm-worker: %s\n", w.c_str());
    }
    o.tls = *std::move(tls);
  }
  o.insecure = absl::GetFlag(FLAGS_insecure);
  if (!o.tls && !frameworm::IsLoopbackHost(frameworm::HostOfEndpoint(o.coordinator))) {
    if (!absl::GetFlag(FLAGS_insecure)) {
      FlagErrorExit(Config(), "--coordinator=" + o.coordinator +
                                  " is off loopback: use mutual TLS (--tls-dir, made by "
                                  "`frameworm-cli admin ca issue --role worker --name NAME`; "
                                  "see the README's Security section), or add --insecure on a "
                                  "network only your cluster reaches");
    }
    std::fprintf(stderr,
                 "frameworm-worker: WARNING: --insecure: talking to %s in plaintext\n",
                 o.coordinator.c_str());
  }
  o.name = absl::GetFlag(FLAGS_name);
  if (!cert_name.empty() && !o.name.empty() && o.name != cert_name) {
    FlagErrorExit(Config(), "--name=" + o.name + " but the --tls-dir certificate is worker:" +
                                cert_name + " (the coordinator accepts only that name)");
  }
  if (o.name.empty()) o.name = cert_name;
  const bool named = !o.name.empty();
  if (o.name.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    o.name = host;
  }
  // The coordinator refuses any other name; retrying would never succeed.
  if (!frameworm::IsPlainName(o.name)) {
    const std::string shown = frameworm::PrintableLine(o.name, 64);
    FlagErrorExit(Config(), named ? absl::StrCat("--name '", shown,
                                                 "' is not 1 to 64 characters of A-Z a-z 0-9 . _ -")
                                  : absl::StrCat("this host's name '", shown,
                                                 "' is not 1 to 64 characters of A-Z a-z 0-9 . _ -; "
                                                 "name the worker with --name"));
  }
  o.slots = absl::GetFlag(FLAGS_slots);
  if (o.slots < 0 || o.slots > frameworm::kMaxWorkerSlots) {
    FlagErrorExit(Config(), absl::StrCat("--slots must be between 0 and ", frameworm::kMaxWorkerSlots,
                                         ", got ", o.slots));
  }
  o.gpus = GpuSlots(absl::GetFlag(FLAGS_gpus));
  if (o.slots == 0) o.slots = std::max<int>(1, o.gpus.size());
  if (!o.gpus.empty() && o.slots > static_cast<int>(o.gpus.size())) {
    FlagErrorExit(Config(), absl::StrCat("--slots=", o.slots, " is more than the ",
                                         o.gpus.size(), " GPU slots (--gpus=none for none)"));
  }
  o.advertise = absl::GetFlag(FLAGS_advertise);
  if (o.advertise.empty()) {
    auto toward = frameworm::AddressTowardEndpoint(o.coordinator);
    if (!toward.ok()) {
      FlagErrorExit(Config(), "--advertise is empty and cannot be derived from --coordinator: " +
                                  std::string(toward.status().message()));
    }
    o.advertise = *toward;
  }
  o.peer_listen = absl::GetFlag(FLAGS_peer_listen);
  if (o.peer_listen == "none") {
    o.peer_listen.clear();
  } else {
    if (o.peer_listen.empty()) {
      o.peer_listen = o.advertise.find(':') != std::string::npos
                          ? absl::StrCat("[", o.advertise, "]:0")
                          : absl::StrCat(o.advertise, ":0");
    }
    if (!o.tls && !frameworm::IsLoopbackHost(frameworm::HostOfEndpoint(o.peer_listen)) &&
        !absl::GetFlag(FLAGS_insecure)) {
      FlagErrorExit(Config(), "--peer-listen=" + o.peer_listen +
                                  " is off loopback: checkpoint copies would be served in "
                                  "plaintext; use --tls-dir, add --insecure on a network only "
                                  "your cluster reaches, or --peer-listen=none");
    }
  }
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (absl::Status s =
          frameworm::CheckMetricsListen(metrics_listen, absl::GetFlag(FLAGS_metrics_insecure));
      !s.ok()) {
    FlagErrorExit(Config(), std::string(s.message()));
  }
  const double heartbeat = absl::GetFlag(FLAGS_heartbeat_interval);
  // The range of the interval a coordinator may ask for (HeartbeatIntervalOf).
  if (!(heartbeat >= 0.05 && heartbeat <= 60)) {
    FlagErrorExit(Config(), "--heartbeat-interval must be a number of seconds from 0.05 to 60");
  }
  o.heartbeat_interval = absl::Seconds(heartbeat);
  const double grace = absl::GetFlag(FLAGS_shutdown_grace);
  if (!(grace >= 0)) {
    FlagErrorExit(Config(), "--shutdown-grace must be a number of seconds >= 0");
  }
  o.shutdown_grace = absl::Seconds(grace);
  o.max_log_bytes = absl::GetFlag(FLAGS_max_log_bytes);
  if (o.max_log_bytes < 0 || (o.max_log_bytes > 0 && o.max_log_bytes < (1 << 20))) {
    FlagErrorExit(Config(), absl::StrCat("--max-log-bytes must be 0 or at least 1048576, got '",
                                         o.max_log_bytes, "'"));
  }
  std::optional<frameworm::RunAsUser> run_as;
  if (const std::string user = absl::GetFlag(FLAGS_user); !user.empty()) {
    absl::StatusOr<frameworm::RunAsUser> found = frameworm::LookUpUser(user);
    if (!found.ok()) FlagErrorExit(Config(), std::string(found.status().message()));
    run_as = *std::move(found);
    // The user's environment for the default work dir and for the jobs
    // (a UID:GID user has no home: its work dir is its HOME).
    if (run_as->numeric) {
      if (absl::GetFlag(FLAGS_work_dir).empty()) {
        FlagErrorExit(Config(), "--user " + run_as->name + " (UID:GID) needs --work-dir");
      }
      // HOME is set once the work dir is absolute, below.
      const std::string uid = std::to_string(run_as->uid);  // getpass.getuser() needs one
      ::setenv("USER", uid.c_str(), 1);
      ::setenv("LOGNAME", uid.c_str(), 1);
    } else {
      ::setenv("HOME", run_as->home.c_str(), 1);
      ::setenv("USER", run_as->name.c_str(), 1);
      ::setenv("LOGNAME", run_as->name.c_str(), 1);
    }
    ::unsetenv("XDG_STATE_HOME");
  }
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  if (o.work_dir.empty()) {
    const char* state = std::getenv("XDG_STATE_HOME");
    const char* home = std::getenv("HOME");
    if (state != nullptr && *state == '/') {
      o.work_dir = absl::StrCat(state, "/frameworm/worker-", o.name);
    } else if (home != nullptr && *home == '/') {
      o.work_dir = absl::StrCat(home, "/.local/state/frameworm/worker-", o.name);
    } else {
      FlagErrorExit(Config(), "--work-dir is empty and neither $XDG_STATE_HOME nor $HOME is set");
    }
  }
  // What this worker and its trainers create is theirs alone (0700 / 0600).
  ::umask(077);
  if (run_as) {
    absl::Status s = frameworm::DropPrivileges(*run_as);
    if (s.ok() && o.tls) s = frameworm::CheckKeyUnreadable(*run_as, o.tls->dir + "/tls.key");
    if (s.ok()) s = frameworm::CheckWorkDirOwned(*run_as, o.work_dir);
    if (!s.ok()) {
      std::cerr << "frameworm-worker: " << s.message() << "\n";
      return 1;
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) {
    std::cerr << "frameworm-worker: cannot create --work-dir " << o.work_dir
              << ": " << ec.message() << "\n";
    return 1;
  }
  if (std::filesystem::is_symlink(o.work_dir)) {
    std::cerr << "frameworm-worker: --work-dir " << o.work_dir << " is a symbolic link\n";
    return 1;
  }
  std::filesystem::permissions(o.work_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  o.work_dir = std::filesystem::absolute(o.work_dir).string();
  if (run_as && run_as->numeric) ::setenv("HOME", o.work_dir.c_str(), 1);
  std::vector<std::string> pass_env;
  for (absl::string_view e : absl::StrSplit(absl::GetFlag(FLAGS_pass_env), ',', absl::SkipEmpty())) {
    if (absl::Status s = frameworm::CheckAllowEntry(std::string(e)); !s.ok()) {
      FlagErrorExit(Config(), "--pass-env: " + std::string(s.message()));
    }
    pass_env.emplace_back(e);
  }
  std::map<std::string, std::string> own_env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) own_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  o.base_env = frameworm::TrainerBaseEnv(own_env, pass_env);
  // Trainers get the cluster CA alone, never this worker's key: they
  // connect without a certificate, their rank's token authorizes each call
  // (rpc/tls.h LoadTrainerTlsDir).
  if (o.tls) {
    const std::string trainer_tls = o.work_dir + "/trainer-tls";
    std::filesystem::create_directories(trainer_tls, ec);
    absl::Status wrote = ec ? absl::InternalError(ec.message())
                            : frameworm::ReplaceFile(trainer_tls + "/ca.crt", o.tls->ca_pem);
    if (!wrote.ok()) {
      std::cerr << "frameworm-worker: cannot write " << trainer_tls << "/ca.crt: "
                << wrote.message() << "\n";
      return 1;
    }
    o.base_env["FRAMEWORM_TLS_DIR"] = trainer_tls;
  } else {
    o.base_env.erase("FRAMEWORM_TLS_DIR");
  }
  o.on_event = [](const std::string& line) {
    std::cout << line << std::endl;
  };

  // Signals are taken by one thread with sigwait; every other thread
  // (gRPC's included) inherits the blocked mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);  // a closed terminal stops the worker cleanly too
  sigaddset(&set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto launcher = frameworm::NewPosixProcessLauncher({});
  absl::StatusOr<std::unique_ptr<frameworm::WorkerAgent>> created =
      frameworm::WorkerAgent::Create(o, *launcher);
  if (!created.ok()) {
    std::cerr << "frameworm-worker: --peer-listen: " << created.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<frameworm::WorkerAgent> agent = *std::move(created);
  std::thread([&agent, set] {
    for (;;) {
      int sig = 0;
      if (::sigwait(&set, &sig) != 0) continue;
      if (sig == SIGCHLD) {
        agent->Wake();
      } else {
        agent->Shutdown();
      }
    }
  }).detach();
  std::unique_ptr<frameworm::HttpServer> metrics;
  if (metrics_listen != "none") {
    auto started = frameworm::HttpServer::Start(
        {.listen = metrics_listen},
        [&agent, name = o.name, tls = o.tls](const frameworm::HttpRequest& request) {
          if (request.path != "/metrics") {
            return frameworm::HttpResponse{404, "text/plain", "only /metrics is served here\n"};
          }
          const frameworm::WorkerAgent::Snapshot seen = agent->Observe();
          std::map<frameworm::TaskKey, frameworm::TreeUsage> usage;
          for (const auto& t : seen.running) usage[t.key] = frameworm::ProcessTreeUsage(t.pid);
          frameworm::PromWriter w;
          frameworm::WriteWorkerMetrics(name, seen.slots, seen.connected, seen.running, usage, w);
          frameworm::WriteTlsExpiryMetric(tls ? &*tls : nullptr, w);
          return frameworm::HttpResponse{200, frameworm::kPromContentType, w.text()};
        });
    if (!started.ok()) {
      std::cerr << "frameworm-worker: --metrics-listen: " << started.status().message()
                << " (none turns it off)\n";
      return 1;
    }
    metrics = *std::move(started);
    std::cout << "frameworm-worker " << o.name << " metrics on http://"
              << metrics_listen.substr(0, metrics_listen.rfind(':')) << ":" << metrics->port()
              << "/metrics" << std::endl;
  }
  std::cout << "frameworm-worker " << o.name << " starting: coordinator "
            << o.coordinator << ", " << o.slots << " slot(s), work dir "
            << o.work_dir
            << (agent->peer_endpoint().empty()
                    ? std::string(", serving no checkpoint copies")
                    : ", checkpoint copies served on " + agent->peer_endpoint())
            << std::endl;
  agent->Run();
  std::cout << "frameworm-worker " << o.name << " stopped" << std::endl;
  std::fflush(stdout);
  std::_Exit(0);  // the signal thread is still parked in sigwait
}
