// A real Frameworm cluster on 127.0.0.1 for end-to-end tests: one
// frameworm-coordinator and N frameworm-worker processes (binaries from
// $FRAMEWORM_BIN_DIR), a JobService stub, and the CLI.
//
// Thread safety: one test thread. The destructor kills every daemon it
// started and any trainer that carries one of its job ids.
#ifndef FRAMEWORM_TESTS_E2E_CLUSTER_H_
#define FRAMEWORM_TESTS_E2E_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/tls.h"
#include "absl/time/time.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "tests/e2e/process.h"

namespace frameworm::e2e {

struct ClusterOptions {
  int workers = 2;
  int slots_per_worker = 1;
  double heartbeat_interval_s = 0.5;
  std::vector<std::string> coordinator_flags;  // extra flags
  std::vector<std::string> worker_flags;       // extra flags, every worker
  std::map<std::string, std::string> worker_env;  // added to every worker's
  // Mutual TLS everywhere (a CA in dir()/ca; the coordinator, each worker
  // and the test's admin get their certificates under dir()/tls/). false:
  // plaintext on loopback.
  bool tls = true;
  // > 0: the coordinator's state dir is a tmpfs of this many MiB, mounted
  // in a mount namespace of its own that a holder process keeps across
  // coordinator restarts (state_on_host() reaches it). Needs root.
  int state_tmpfs_mib = 0;
};

class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const ClusterOptions& o);
  ~Cluster();

  static std::string Bin(const std::string& name);
  const std::string& dir() const { return dir_; }
  const std::string& coordinator_address() const { return address_; }
  v1::JobService::Stub& jobs() { return *stub_; }
  // jobs() on a new channel, as WorkerAgent redials: a channel whose first
  // connection met a coordinator just restarted and then stopped
  // (SIGSTOP) was seen to answer nothing for minutes after it went on.
  void Redial();
  ChildProcess& coordinator() { return *coordinator_; }
  // With options_.tls: the TLS directory of `role`:`name`, issued on first
  // use (a worker restarted under its name reuses its certificate).
  absl::StatusOr<std::string> TlsDir(const std::string& role, const std::string& name);
  // The frameworm Python package, pip-installed from the checkout
  // ($FRAMEWORM_SOURCE_DIR/python) with its .venv's Python, as a user
  // would, into <dir>/site. FAILED_PRECONDITION without the source dir or
  // .venv, INTERNAL naming pip's output when it fails.
  struct PythonPackage {
    std::string source;  // $FRAMEWORM_SOURCE_DIR
    std::string python;  // <source>/.venv/bin/python
    std::string site;    // where it is installed (for PYTHONPATH)
  };
  absl::StatusOr<PythonPackage> InstallPythonPackage();
  // The dashboard's URL, "http(s)://HOST:PORT/" (empty: none).
  const std::string& dashboard_url() const { return dashboard_url_; }
  // The coordinator's Prometheus endpoint, HOST:PORT (empty: none).
  const std::string& metrics_address() const { return metrics_address_; }
  ChildProcess& worker(int i) { return *workers_.at(i); }

  absl::Status StartWorker(const std::string& name, int slots);
  // SIGKILLs worker `i` if it still runs and starts it again under the same
  // name, work dir and slots (options.slots_per_worker). With
  // `wait_registered` (the default) returns once it registered (30 s at
  // most); without, once it started, for callers that must not block while
  // the coordinator may be stopped.
  absl::Status RestartWorker(int i, bool wait_registered = true);
  // The coordinator's state dir as this process reaches it (through the
  // holder's /proc/<pid>/root with state_tmpfs_mib).
  std::string state_on_host() const;
  // SIGKILL the coordinator, wait `down`, then start it again on the same
  // address and state directory.
  absl::Status RestartCoordinator(absl::Duration down = absl::ZeroDuration());
  // The same with `flags` in place of options.coordinator_flags (kept for
  // later restarts).
  absl::Status RestartCoordinatorWithFlags(const std::vector<std::string>& flags);

  // frameworm-cli with --coordinator set.
  RunResult Cli(const std::vector<std::string>& args,
                absl::Duration timeout = absl::Seconds(30));
  // Its command line (with --coordinator and the admin's TLS directory),
  // for a CLI that runs beside the test (ChildProcess).
  std::vector<std::string> CliArgv(const std::vector<std::string>& args) const;
  // Writes `yaml` to a file and submits it with the CLI; the job id.
  absl::StatusOr<std::string> Submit(const std::string& yaml);
  // Polls GetJob until `done(status)` or timeout.
  absl::StatusOr<v1::JobStatus> WaitFor(
      const std::string& job_id,
      const std::function<bool(const v1::JobStatus&)>& done,
      absl::Duration timeout);
  absl::StatusOr<v1::JobStatus> WaitForFinal(const std::string& job_id,
                                             absl::Duration timeout);
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job_id);

 private:
  Cluster() = default;
  absl::Status StartCoordinator(const std::string& listen);
  absl::StatusOr<std::unique_ptr<ChildProcess>> LaunchWorker(const std::string& name, int slots,
                                                             bool wait_registered = true);

  ClusterOptions options_;
  std::string dir_;
  std::string address_;
  std::unique_ptr<ChildProcess> state_holder_;  // with state_tmpfs_mib
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::vector<std::string> job_ids_;
  int coordinator_starts_ = 0;
  int worker_starts_ = 0;  // log file names
  std::string metrics_address_;
  std::string dashboard_url_;
  TlsFiles admin_tls_;
};

bool IsFinal(v1::JobState s);

// The last "val_accuracy" rank 0 of the job printed (its log through the
// CLI); -1 when none.
double FinalAccuracy(Cluster& c, const std::string& job_id);
// Every aggregated step of the job (GetMetrics' first page; empty, with
// the error on stderr, when the call fails).
std::vector<v1::AggregatedStep> JobMetrics(Cluster& c, const std::string& job_id);

// GetJob on `stub` with a 5 s deadline; the gRPC error as an absl::Status.
absl::StatusOr<v1::JobStatus> GetJobStatus(v1::JobService::Stub& stub,
                                           const std::string& job_id);

// Polls GetJob every 100 ms until `done(status)` or `timeout`;
// DEADLINE_EXCEEDED (with the last status seen) on timeout.
absl::StatusOr<v1::JobStatus> WaitForJob(
    v1::JobService::Stub& stub, const std::string& job_id,
    const std::function<bool(const v1::JobStatus&)>& done,
    absl::Duration timeout);

// Start(o), then the cluster's InstallPythonPackage(): for tests of the
// Python package and of Python entrypoints. Either's error.
struct PythonCluster {
  std::unique_ptr<Cluster> cluster;
  Cluster::PythonPackage package;
};
absl::StatusOr<PythonCluster> StartWithPythonPackage(const ClusterOptions& o = {});

}  // namespace frameworm::e2e

#endif  // FRAMEWORM_TESTS_E2E_CLUSTER_H_
