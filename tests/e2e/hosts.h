// Simulated machines for end-to-end tests ("hosts") and a Frameworm cluster
// spread over them.
//
// HostNetwork: one Linux bridge and N hosts on it. A host is
//  - a network namespace (`ip netns add`) joined to the bridge by a veth pair
//    (its end is "eth0") with its own IPv4 address in a private /24 of
//    10.213.0.0/16 that no route of the machine covers, `lo` up, and no
//    default route: traffic never leaves the bridge;
//  - a holder process (`ip netns exec NS unshare --mount --uts ...`, then
//    `sleep infinity`) that owns the host's private mount and UTS namespaces:
//    tmpfs on /tmp and /dev/shm, its own hostname ("host<i>"), and an
//    /etc/hosts where that hostname resolves to 127.0.1.1, as Debian's does.
//    The host's files live as long as the host, not as long as the processes
//    that wrote them (a killed worker's disk survives, as on a machine).
// A process runs "on host i" through
//   nsenter --target=<holder> --net --mount --uts --wdns=DIR -- argv...
// which execs argv in place: a ChildProcess's pid is the program's own. The
// root filesystem is shared (binaries, datasets), /tmp and /dev/shm are not:
// a host cannot see another host's or the test's files there.
//
// The test process itself stays in the root namespace and gets the subnet's
// .254 on the bridge, so its gRPC calls and the CLI reach the hosts; nothing
// else on the machine does.
//
// Names: every namespace and link made here starts with "fwh<pid>" (netns
// "fwh<pid>h<i>", links "fwh<pid>br" and "fwh<pid>v<i>"). Create() first
// removes leftovers of this pid and of dead pids (killing, by pid, the
// processes still inside such a namespace); the destructor kills every
// process in its namespaces and removes everything it made, waiting (bounded)
// until `ip netns list` and `ip link` show none of its names. At most one
// HostNetwork exists per process at a time.
//
// Errors: FAILED_PRECONDITION naming what is missing (root, a tool, kernel
// support) when hosts cannot be made: the tests fail with it, never skip.
// Every wait is bounded in count and time.
//
// Thread safety: a HostNetwork or MultiHostCluster is driven by one test
// thread; its const accessors may be read from any thread.
#ifndef FRAMEWORM_TESTS_E2E_HOSTS_H_
#define FRAMEWORM_TESTS_E2E_HOSTS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/tls.h"
#include "absl/time/time.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "tests/e2e/process.h"

namespace frameworm::e2e {

struct Host {
  int index = 0;
  std::string netns;     // network namespace name
  std::string hostname;  // "host<index>"; resolves to 127.0.1.1 on itself
  std::string address;   // IPv4 address on the bridge, without prefix length
  std::string veth;      // root-side end of its veth pair (a bridge port)
  pid_t holder = 0;      // holds its mount and UTS namespaces
};

class HostNetwork {
 public:
  // OK when this process can make hosts: root, `ip`, `nsenter`, `unshare`.
  static absl::Status CheckPrerequisites();
  // The name prefix of this process's namespaces and links ("fwh<pid>").
  static std::string ProcessPrefix();
  // Network namespaces and links whose names start with `prefix`, now.
  static std::vector<std::string> Leftovers(const std::string& prefix);

  // Makes `hosts` hosts; holder logs and host files go to `log_dir` (a
  // directory of the root namespace). Every host gets a private /tmp and
  // /dev/shm, except the directories in `shared` (absolute, under /tmp or
  // /dev/shm: e.g. a checkout with its build and .venv), which each host
  // sees at the same path, bind-mounted from the root namespace.
  static absl::StatusOr<std::unique_ptr<HostNetwork>> Create(
      int hosts, const std::string& log_dir, const std::vector<std::string>& shared = {});
  ~HostNetwork();
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  const Host& host(int i) const { return hosts_.at(i); }
  const std::string& prefix() const { return prefix_; }
  const std::string& subnet() const { return subnet_; }  // "10.213.K.0/24"
  // The test process's own address on the bridge.
  const std::string& root_address() const { return root_address_; }

  // The command line that runs `argv` (argv[0] a path or a PATH name) on
  // host `i` with working directory `wd` (a path as the host sees it).
  std::vector<std::string> OnHost(int i, const std::vector<std::string>& argv,
                                   const std::string& wd = "/") const;
  // Starts `argv` on host `i`; output to `log_path` (root namespace). The
  // environment is the test's plus `env`, with TMPDIR=/tmp (the host's).
  absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      int i, const std::vector<std::string>& argv,
      const std::map<std::string, std::string>& env, const std::string& log_path,
      const std::string& wd = "/") const;
  // Runs `argv` on host `i` to completion (killed after `timeout`).
  RunResult Run(int i, const std::vector<std::string>& argv,
                absl::Duration timeout = absl::Seconds(10)) const;
  // Where the root namespace reads `path` of host `i` (through its holder's
  // /proc/<pid>/root).
  std::string PathOnHost(int i, const std::string& path) const;
  // Processes whose network namespace is host `i`'s, its holder included.
  std::vector<pid_t> Pids(int i) const;

  // Faults. LinkDown/LinkUp set the bridge side of host i's veth down/up:
  // its eth0 loses carrier, nothing is reset, packets are lost (a pulled
  // cable). DropAll/AllowAll add/remove an nftables table in host i's
  // namespace that drops every packet but loopback's (FAILED_PRECONDITION
  // when `nft` is not installed: Debian package nftables).
  absl::Status LinkDown(int i);
  absl::Status LinkUp(int i);
  absl::Status DropAll(int i);
  absl::Status AllowAll(int i);

  // A listening TCP socket inside host `i`'s namespace, bound to its
  // address and `port`; the caller owns (closes) the fd.
  absl::StatusOr<int> TcpListen(int i, int port) const;
  // OK when a TCP connection from inside host `from` to address:port is
  // established within `timeout`; UNAVAILABLE / DEADLINE_EXCEEDED otherwise.
  absl::Status TcpConnect(int from, const std::string& address, int port,
                          absl::Duration timeout) const;

 private:
  HostNetwork() = default;
  absl::Status Build(int hosts);
  absl::StatusOr<int> SocketIn(int i) const;
  void KillHostProcesses(int i);

  std::string prefix_;
  std::string log_dir_;
  std::vector<std::string> shared_;  // Create(shared)
  std::string subnet_;
  std::string subnet_base_;  // "10.213.K."
  std::string root_address_;
  std::string bridge_;
  std::vector<Host> hosts_;
  std::vector<std::unique_ptr<ChildProcess>> holders_;
  bool claimed_ = false;
};

struct MultiHostOptions {
  int workers = 2;  // worker hosts 1..workers; host 0 runs the coordinator
  // Worker daemons Start() starts (hosts 1..started_workers); the other
  // hosts exist, idle, until StartWorker. -1: all.
  int started_workers = -1;
  int slots_per_worker = 1;
  double heartbeat_interval_s = 0.5;
  std::vector<std::string> coordinator_flags;  // extra flags
  // The coordinator listens on 0.0.0.0:7070 (not host 0's address) and
  // workers get no --advertise: every address is derived.
  bool derive_addresses = false;
};

// Certificates of a MultiHostCluster (rpc/cluster_ca.h): the CA and an
// admin's TLS directory in the log directory (root namespace); each host's
// own (coordinator:coordinator, worker:<hostname>) at kTlsDir on that host.
inline constexpr char kTlsDir[] = "/tmp/frameworm/tls";

// A Frameworm cluster on a HostNetwork: frameworm-coordinator on host 0
// listening on its bridge address (port 7070, state dir on host 0's /tmp),
// one frameworm-worker per worker host with --coordinator, --advertise=<its
// address>, --name=<its hostname> and a work dir on its own /tmp; a
// JobService stub and the CLI from the root namespace over the bridge.
// Every connection is mutual TLS (kTlsDir; the stub and the CLI as
// admin:test), as a real cluster's must be.
// Binaries come from $FRAMEWORM_BIN_DIR (default build/bin); when they lie
// under /tmp or /dev/shm (a checkout made with mktemp -d), that top
// directory is shared with every host (HostNetwork::Create's `shared`).
//
// The destructor SIGKILLs the daemons and every process on the hosts, then
// removes the hosts and (unless FRAMEWORM_KEEP_TEST_DIRS is set; then each
// host's /tmp/frameworm is copied there first) the log directory.
class MultiHostCluster {
 public:
  static constexpr int kCoordinatorPort = 7070;
  static constexpr const char* kStateDir = "/tmp/frameworm/state";   // host 0
  static constexpr const char* kWorkDir = "/tmp/frameworm/worker";  // workers

  static absl::StatusOr<std::unique_ptr<MultiHostCluster>> Start(
      const MultiHostOptions& o);
  ~MultiHostCluster();

  HostNetwork& net() { return *net_; }
  const std::string& dir() const { return dir_; }  // logs (root namespace)
  const std::string& coordinator_address() const { return address_; }
  v1::JobService::Stub& jobs() { return *stub_; }
  ChildProcess& coordinator() { return *coordinator_; }
  int workers() const { return options_.workers; }
  // The worker daemon of host `host` (1..workers()).
  ChildProcess& worker(int host) { return *workers_.at(host); }
  // Its --name: the hostname of that host.
  std::string WorkerName(int host) const;
  // The host of worker `name`, or -1.
  int HostOf(const std::string& name) const;

  // Starts (or restarts) the worker daemon of `host`; waits until it has
  // registered.
  absl::Status StartWorker(int host);
  // SIGKILL to the worker daemon of `host` alone (not its trainers), reaped.
  absl::Status KillWorker(int host);

  // frameworm-cli with --coordinator set, from the root namespace.
  RunResult Cli(const std::vector<std::string>& args,
                absl::Duration timeout = absl::Seconds(30));
  // Writes `yaml` to a file and submits it with the CLI; the job id.
  absl::StatusOr<std::string> Submit(const std::string& yaml);
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job_id);
  absl::StatusOr<v1::JobStatus> WaitFor(
      const std::string& job_id,
      const std::function<bool(const v1::JobStatus&)>& done,
      absl::Duration timeout);
  absl::StatusOr<v1::JobStatus> WaitForFinal(const std::string& job_id,
                                             absl::Duration timeout);
  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();
  absl::StatusOr<std::vector<v1::AggregatedStep>> Metrics(const std::string& job_id);
  absl::StatusOr<std::vector<v1::CheckpointRecord>> Checkpoints(
      const std::string& job_id);

 private:
  MultiHostCluster() = default;
  // The absolute path of binary `name` (resolved and checked by Start()).
  const std::string& Bin(const std::string& name) const { return bins_.at(name); }

  MultiHostOptions options_;
  std::map<std::string, std::string> bins_;
  std::string dir_;
  std::string address_;
  std::unique_ptr<HostNetwork> net_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::map<int, std::unique_ptr<ChildProcess>> workers_;
  std::map<int, int> worker_starts_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::string admin_tls_;  // the test's own TLS directory (root namespace)
  TlsFiles admin_files_;
  std::vector<std::string> job_ids_;
};

}  // namespace frameworm::e2e

#endif  // FRAMEWORM_TESTS_E2E_HOSTS_H_
