#include "tests/e2e/cluster.h"

#include <cstdio>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "rpc/cluster_ca.h"
#include "rpc/rpc.h"

namespace frameworm::e2e {

bool IsFinal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

std::string Cluster::Bin(const std::string& name) {
  const char* dir = std::getenv("FRAMEWORM_BIN_DIR");
  return absl::StrCat(dir ? dir : "build/bin", "/", name);
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const ClusterOptions& o) {
  std::unique_ptr<Cluster> c(new Cluster());
  c->options_ = o;
  c->dir_ = MakeTempDir("fw-e2e");
  if (c->dir_.empty()) return absl::InternalError("mkdtemp failed");
  if (o.tls) {
    if (absl::Status s = InitClusterCa(c->dir_ + "/ca"); !s.ok()) return s;
    auto admin = c->TlsDir("admin", "test");
    if (!admin.ok()) return admin.status();
    auto files = LoadTlsDir(*admin);
    if (!files.ok()) return files.status();
    c->admin_tls_ = *files;
  }
  if (o.state_tmpfs_mib > 0) {
    // unshare(1) execs sh in the new namespace: the holder's pid is that
    // namespace's, for nsenter and /proc/<pid>/root.
    auto holder = ChildProcess::Start(
        {"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
         absl::StrCat("mkdir -p '", c->dir_, "/state' && mount -t tmpfs -o size=",
                      o.state_tmpfs_mib, "m,mode=0700 tmpfs '", c->dir_,
                      "/state' && echo mounted && exec sleep 100000")},
        {}, c->dir_ + "/state-holder.log");
    if (!holder.ok()) return holder.status();
    c->state_holder_ = std::move(*holder);
    if (auto line = c->state_holder_->WaitForLine("mounted", absl::Seconds(10)); !line.ok())
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot mount a tmpfs state dir in a mount namespace (root needed): ",
          c->state_holder_->Output()));
  }
  if (auto s = c->StartCoordinator("127.0.0.1:0"); !s.ok()) return s;
  for (int i = 0; i < o.workers; ++i) {
    if (auto s = c->StartWorker(absl::StrCat("w", i), o.slots_per_worker); !s.ok()) {
      return s;
    }
  }
  return c;
}

absl::StatusOr<PythonCluster> StartWithPythonPackage(const ClusterOptions& o) {
  auto c = Cluster::Start(o);
  if (!c.ok()) return c.status();
  auto package = (*c)->InstallPythonPackage();
  if (!package.ok()) return package.status();
  return PythonCluster{std::move(*c), std::move(*package)};
}

absl::StatusOr<Cluster::PythonPackage> Cluster::InstallPythonPackage() {
  const char* src = std::getenv("FRAMEWORM_SOURCE_DIR");
  if (src == nullptr) return absl::FailedPreconditionError("FRAMEWORM_SOURCE_DIR is not set");
  const std::string python = absl::StrCat(src, "/.venv/bin/python");
  if (::access(python.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(python, ": run deploy/dev.sh install"));
  }
  const std::string site = dir_ + "/site";
  RunResult pip = RunCommand({python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              "--no-deps", "--no-build-isolation", "--target", site,
                              absl::StrCat(src, "/python")},
                             {}, absl::Seconds(120));
  if (pip.exit_code != 0) return absl::InternalError(absl::StrCat("pip install failed: ", pip.output));
  return PythonPackage{src, python, site};
}

absl::StatusOr<std::string> Cluster::TlsDir(const std::string& role, const std::string& name) {
  const std::string dir = absl::StrCat(dir_, "/tls/", name);
  if (::access((dir + "/tls.key").c_str(), F_OK) == 0) return dir;
  if (absl::Status s = IssueCertificate(dir_ + "/ca", role, name, dir); !s.ok()) return s;
  return dir;
}

std::string Cluster::state_on_host() const {
  if (!state_holder_) return dir_ + "/state";
  return absl::StrCat("/proc/", state_holder_->pid(), "/root", dir_, "/state");
}

absl::Status Cluster::StartCoordinator(const std::string& listen) {
  std::vector<std::string> argv;
  if (state_holder_)
    argv = {"/usr/bin/nsenter", "-t", std::to_string(state_holder_->pid()), "-m", "--"};
  for (std::string arg : {Bin("frameworm-coordinator"),
                                   absl::StrCat("--listen=", listen),
                          absl::StrCat("--state-dir=", dir_, "/state"),
                          // in-memory checkpoints in the test's directory (removed with it)
                          absl::StrCat("--memory-checkpoint-root=", dir_, "/shm"),
                          // a free port: tests may run beside a real cluster
                          std::string("--metrics-listen=127.0.0.1:0"),
                          std::string("--dashboard-listen=127.0.0.1:0")})
    argv.push_back(arg);
  if (options_.tls) {
    auto tls = TlsDir("coordinator", "coordinator");
    if (!tls.ok()) return tls.status();
    argv.push_back(absl::StrCat("--tls-dir=", *tls));
  }
  for (const auto& f : options_.coordinator_flags) argv.push_back(f);
  auto child = ChildProcess::Start(
      argv, {}, absl::StrCat(dir_, "/coordinator-", coordinator_starts_++, ".log"));
  if (!child.ok()) return child.status();
  coordinator_ = std::move(*child);
  auto line = coordinator_->WaitForLine("listening on ", absl::Seconds(30));
  if (!line.ok()) return line.status();
  if (auto m = coordinator_->WaitForLine("metrics on http://", absl::Seconds(5)); m.ok()) {
    metrics_address_ = m->substr(m->find("http://") + 7);
    metrics_address_ = metrics_address_.substr(0, metrics_address_.find('/'));
  }
  if (auto d = coordinator_->WaitForLine("dashboard on ", absl::Seconds(5)); d.ok()) {
    dashboard_url_ = d->substr(d->find("dashboard on ") + 13);
    while (!dashboard_url_.empty() && isspace(static_cast<unsigned char>(dashboard_url_.back()))) {
      dashboard_url_.pop_back();
    }
  }
  std::string addr(line->substr(line->find("listening on ") + 13));
  while (!addr.empty() && (addr.back() == '\r' || addr.back() == ' ')) addr.pop_back();
  address_ = addr;
  Redial();
  return absl::OkStatus();
}

void Cluster::Redial() {
  stub_ = v1::JobService::NewStub(MakeChannel(address_, options_.tls ? &admin_tls_ : nullptr));
}

absl::Status Cluster::StartWorker(const std::string& name, int slots) {
  auto child = LaunchWorker(name, slots);
  if (!child.ok()) return child.status();
  workers_.push_back(std::move(*child));
  return absl::OkStatus();
}

absl::Status Cluster::RestartWorker(int i, bool wait_registered) {
  ChildProcess& old = *workers_.at(i);
  if (old.Running()) {
    old.Signal(SIGKILL);
    old.Wait(absl::Seconds(10));
  }
  auto child = LaunchWorker(absl::StrCat("w", i), options_.slots_per_worker, wait_registered);
  if (!child.ok()) return child.status();
  workers_[i] = std::move(*child);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> Cluster::LaunchWorker(const std::string& name,
                                                                    int slots,
                                                                    bool wait_registered) {
  std::string work = absl::StrCat(dir_, "/", name);
  std::vector<std::string> argv = {
      Bin("frameworm-worker"), absl::StrCat("--coordinator=", address_),
      absl::StrCat("--name=", name), absl::StrCat("--slots=", slots),
      absl::StrCat("--work-dir=", work),
      absl::StrCat("--heartbeat-interval=", options_.heartbeat_interval_s)};
  if (options_.tls) {
    auto tls = TlsDir("worker", name);
    if (!tls.ok()) return tls.status();
    argv.push_back(absl::StrCat("--tls-dir=", *tls));
  }
  for (const auto& f : options_.worker_flags) argv.push_back(f);
  auto child = ChildProcess::Start(argv, options_.worker_env,
                                   absl::StrCat(dir_, "/", name, "-", worker_starts_++, ".log"));
  if (!child.ok()) return child.status();
  if (!wait_registered) return std::move(*child);
  auto line = (*child)->WaitForLine("registered", absl::Seconds(30));
  if (!line.ok()) return line.status();
  return std::move(*child);
}

absl::Status Cluster::RestartCoordinator(absl::Duration down) {
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(absl::Seconds(10));
  absl::SleepFor(down);
  return StartCoordinator(address_);
}

absl::Status Cluster::RestartCoordinatorWithFlags(const std::vector<std::string>& flags) {
  options_.coordinator_flags = flags;
  return RestartCoordinator();
}

std::vector<std::string> Cluster::CliArgv(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {Bin("frameworm-cli"),
                                   absl::StrCat("--coordinator=", address_)};
  if (options_.tls) argv.push_back(absl::StrCat("--tls-dir=", admin_tls_.dir));
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

RunResult Cluster::Cli(const std::vector<std::string>& args, absl::Duration timeout) {
  return RunCommand(CliArgv(args), {}, timeout);
}

absl::StatusOr<std::string> Cluster::Submit(const std::string& yaml) {
  std::string path = absl::StrCat(dir_, "/job-", job_ids_.size(), ".yaml");
  std::ofstream(path) << yaml;
  RunResult r = Cli({"submit", path});
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("submit failed (", r.exit_code, "): ", r.output));
  }
  std::string id(absl::StripAsciiWhitespace(r.output));
  if (size_t nl = id.rfind('\n'); nl != std::string::npos) id = id.substr(nl + 1);
  job_ids_.push_back(id);
  return id;
}

absl::StatusOr<v1::JobStatus> GetJobStatus(v1::JobService::Stub& stub,
                                           const std::string& job_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus st;
  grpc::Status s = stub.GetJob(&ctx, req, &st);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  return st;
}

absl::StatusOr<v1::JobStatus> WaitForJob(
    v1::JobService::Stub& stub, const std::string& job_id,
    const std::function<bool(const v1::JobStatus&)>& done,
    absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::OkStatus();
  v1::JobStatus st;
  while (absl::Now() < deadline) {
    auto got = GetJobStatus(stub, job_id);
    if (got.ok()) {
      st = *got;
      if (done(st)) return st;
    } else {
      last = got.status();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", job_id, " not there within ", absl::FormatDuration(timeout),
      "; last: ", st.ShortDebugString(), " ", last.ToString()));
}

absl::StatusOr<v1::JobStatus> Cluster::GetJob(const std::string& job_id) {
  return GetJobStatus(*stub_, job_id);
}

absl::StatusOr<v1::JobStatus> Cluster::WaitFor(
    const std::string& job_id, const std::function<bool(const v1::JobStatus&)>& done,
    absl::Duration timeout) {
  return WaitForJob(*stub_, job_id, done, timeout);
}

absl::StatusOr<v1::JobStatus> Cluster::WaitForFinal(const std::string& job_id,
                                                    absl::Duration timeout) {
  return WaitFor(job_id, [](const v1::JobStatus& s) { return IsFinal(s.state()); },
                 timeout);
}

Cluster::~Cluster() {
  for (auto& w : workers_) {
    if (w->Running()) {
      w->Signal(SIGTERM);
      w->Signal(SIGCONT);  // a stopped (frozen) worker handles it too
      if (!w->Wait(absl::Seconds(10))) w->Signal(SIGKILL);
    }
  }
  if (coordinator_ && coordinator_->Running()) {
    coordinator_->Signal(SIGTERM);
    if (!coordinator_->Wait(absl::Seconds(5))) coordinator_->Signal(SIGKILL);
  }
  for (const auto& id : job_ids_) {
    for (pid_t p : PidsWithJobId(id)) kill(p, SIGKILL);
  }
  if (!std::getenv("FRAMEWORM_KEEP_TEST_DIRS")) {
    std::string cmd = absl::StrCat("rm -rf '", dir_, "'");
    (void)std::system(cmd.c_str());
  }
}

std::vector<v1::AggregatedStep> JobMetrics(Cluster& c, const std::string& job_id) {
  grpc::ClientContext ctx;
  v1::GetMetricsRequest req;
  req.set_job_id(job_id);
  v1::GetMetricsResponse resp;
  grpc::Status s = c.jobs().GetMetrics(&ctx, req, &resp);
  if (!s.ok()) std::fprintf(stderr, "GetMetrics(%s): %s\n", job_id.c_str(), s.error_message().c_str());
  return {resp.steps().begin(), resp.steps().end()};
}

double FinalAccuracy(Cluster& c, const std::string& job_id) {
  RunResult logs = c.Cli({"logs", job_id, "--rank", "0"});
  const std::string key = "\"val_accuracy\":";
  const size_t at = logs.output.rfind(key);
  if (at == std::string::npos) return -1;
  std::string num = logs.output.substr(at + key.size(), 24);
  num = num.substr(0, num.find_first_of(",}"));
  double v = -1;
  return absl::SimpleAtod(num, &v) ? v : -1;
}

}  // namespace frameworm::e2e
