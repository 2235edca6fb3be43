// Benchmark helpers shared by P3 (rendezvous) and P4 (reports): a real
// frameworm-coordinator child process, and N simulated workers that talk to
// it over real gRPC on 127.0.0.1 — RegisterWorker, then one Session stream
// each on the callback client API (ClientBidiReactor), so 1024 streams need
// no 1024 threads. The simulated workers never run what they are told to
// run; they record every StartTask they receive.
//
// Benchmarks only (not a test fixture): every wait is bounded and fails with
// a message naming what did not happen.
//
// Thread safety: CoordinatorProcess is not thread-safe (one owner).
// SimCluster: its public methods are called from one owning thread; the
// reactors it owns run on gRPC's callback threads and share state through
// SimCluster::mu_ and atomics.
#ifndef FRAMEWORM_BENCH_P3_SIM_CLUSTER_H_
#define FRAMEWORM_BENCH_P3_SIM_CLUSTER_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/e2e/process.h"

namespace frameworm::bench {

using SteadyTime = std::chrono::steady_clock::time_point;
inline double Seconds(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double>(b - a).count();
}

// A frameworm-coordinator child process on 127.0.0.1:<free port> with a
// fresh state directory (the e2e harness's ChildProcess underneath).
class CoordinatorProcess {
 public:
  struct Options {
    std::string binary;     // path of frameworm-coordinator
    // Must not exist yet or be empty; empty: a temporary directory that
    // the destructor removes.
    std::string state_dir;
    std::vector<std::string> extra_args;
  };
  // Starts the process and waits (up to 20 s) for its "listening on" line.
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const Options& options);
  ~CoordinatorProcess();  // Stop(), then removes a temporary state dir

  const std::string& address() const { return address_; }
  const std::string& state_dir() const { return state_dir_; }
  pid_t pid() const { return child_->pid(); }
  // User+system CPU seconds the process has used so far (from /proc).
  double CpuSeconds() const;
  // SIGTERM, then SIGKILL after 5 s; returns the exit status text.
  std::string Stop();

 private:
  CoordinatorProcess() = default;
  std::unique_ptr<e2e::ChildProcess> child_;
  std::string address_;
  std::string state_dir_;
  std::string temp_state_dir_;  // owned and removed, if we made it
  bool stopped_ = false;
};

// A gRPC channel of its own (not sharing a connection with other channels).
std::shared_ptr<grpc::Channel> PrivateChannel(const std::string& target,
                                              int index);

// Submits a job of `nodes` x 1 process running /bin/true (60 s heartbeat
// timeout) through the JobService at `target`, on a channel of its own;
// returns its id, or the call's error (with `what` in front).
absl::StatusOr<std::string> SubmitGangJob(const std::string& target,
                                          const std::string& name, int nodes,
                                          std::chrono::seconds deadline);

// What one simulated worker received in a StartTask.
struct ReceivedTask {
  bool received = false;
  SteadyTime at;
  frameworm::v1::TaskSpec task;
};

class SimCluster {
 public:
  struct Options {
    std::string target;      // coordinator host:port
    int workers = 1;         // simulated workers, 1 slot each
    int channels = 8;        // connections the workers are spread over
    double heartbeat_interval_s = 0.5;  // periodic heartbeats per session
    bool flood_heartbeats = false;  // P4: back-to-back heartbeats instead
  };
  explicit SimCluster(const Options& options);
  ~SimCluster();  // Shutdown()

  // All RegisterWorker calls at once; returns when every one answered.
  absl::Status RegisterAll(std::chrono::seconds timeout);
  // Opens every Session stream (heartbeat first, so it attaches), starts
  // the heartbeat thread, and waits until ListWorkers shows all alive.
  absl::Status OpenSessionsAndWaitAlive(std::chrono::seconds timeout);
  // Waits until every worker received a StartTask (or one failed).
  absl::Status WaitAllStarted(std::chrono::seconds timeout);

  // Snapshot of what each worker (index = worker) received.
  std::vector<ReceivedTask> Received() const;
  // Heartbeats whose write completed, over all sessions.
  int64_t heartbeats_sent() const { return heartbeats_.load(); }
  // Makes every session write `log` (its rank set from rank_of_worker)
  // after its current heartbeat and stop flooding. A stream is ordered, so
  // once the coordinator has written a session's chunk to the rank's log
  // file it has handled every heartbeat the session sent before it.
  void SendMarkers(const frameworm::v1::LogUpload& log,
                   const std::vector<int>& rank_of_worker);
  // Cancels every stream and waits (bounded) for them to end.
  void Shutdown();

  class Session;  // the reactor (p3_sim_cluster.cc)

 private:
  friend class Session;
  void OnStart(int worker, const frameworm::v1::TaskSpec& task, SteadyTime at);
  void OnSessionDone(int worker, const grpc::Status& status);
  void HeartbeatLoop();

  const Options options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<frameworm::v1::WorkerService::Stub>> stubs_;
  std::vector<std::string> session_ids_;
  std::vector<Session*> sessions_;  // owned; deleted after Shutdown
  std::thread heartbeat_thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> heartbeats_{0};

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled on every change under mu_
  std::vector<ReceivedTask> received_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_error_ ABSL_GUARDED_BY(mu_);
  // Written by the owning thread under mu_; read by it without.
  bool shut_down_ = false;
};

// Flag parsing for the bench mains: --name=value, values as strings.
absl::StatusOr<std::string> FlagValue(int argc, char** argv,
                                      const std::string& name,
                                      const std::string& default_value);
// OK when every argument is --name=value with a name in `known`; else
// INVALID_ARGUMENT "unknown argument '...' (flags: --a --b ...)".
absl::Status CheckKnownFlags(int argc, char** argv, const std::vector<std::string>& known);

}  // namespace frameworm::bench

#endif  // FRAMEWORM_BENCH_P3_SIM_CLUSTER_H_
