// The worker daemon's gRPC glue: registers with the coordinator, keeps one
// WorkerService.Session stream open, applies StartTask/KillTask to the
// Supervisor it owns, and reports heartbeats, task statuses and log tails.
//
// Session behaviour:
//  - RegisterWorker(name, address, slots, running tasks), then Session: the
//    first message is a Heartbeat (binds the stream to session_id), then
//    the final statuses not yet delivered, then every --heartbeat-interval a
//    Heartbeat; a TaskStatus on every change (RUNNING on start,
//    EXITED/KILLED/START_FAILED at the end); LogUpload chunks (at most
//    log_chunk_bytes each, with file offsets) of new stdout/stderr data;
//    each file on the node is capped at max_log_bytes.
//  - When the stream breaks or registration fails: trainers keep running,
//    reconnect after an exponential backoff (initial_backoff doubling up to
//    max_backoff), re-register with the running tasks, resend final
//    statuses. With a coordinator that sends Receipts
//    (RegisterWorkerResponse.receipts), a final status counts as delivered
//    when receipted (or carried by a RegisterWorker), and log bytes past a
//    stream's receipted offset are sent again on the next session (the
//    coordinator skips what it has); a task is forgotten once its final and
//    all its log bytes are receipted. Without receipts, a final counts as
//    delivered once the session that carried it has stayed up for two more
//    heartbeat intervals, and log bytes once written. Until delivered a
//    final is resent on every new session (the coordinator must treat a
//    repeated final status as a no-op).
//  - Checkpoint copies (docs/ARCHITECTURE.md, data path 4): HoldCheckpoint
//    without sources registers a file already on this node; with sources it
//    is fetched (CheckpointFetcher, off the loop) into place; either way a
//    CheckpointHeld answer goes up. A StartTask whose resume path is being
//    fetched waits for the fetch (a KillTask meanwhile ends it as KILLED
//    without starting it). DropCheckpoint deletes the held files. Holds are
//    served to peers (PeerService) from this node's files. The in-memory
//    checkpoint directories of the tasks it started (before a restart too:
//    `<work-dir>/memory-dirs`, worker/memory_dirs_file.h) are swept once
//    their job has left the node (Options::memory_sweep_quiet).
//  - Shutdown(): every trainer gets SIGTERM, then SIGKILL after
//    shutdown_grace; their final statuses are sent when connected; Run()
//    returns once no trainer is left.
//
// Thread safety: Run() is called once, on the thread that then owns the
// supervisor and the stream's write side; a reader thread per session feeds
// commands to it through a queue guarded by mu_. Shutdown() and Wake() are
// thread-safe.
#ifndef FRAMEWORM_WORKER_WORKER_AGENT_H_
#define FRAMEWORM_WORKER_WORKER_AGENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/tls.h"
#include "worker/process_launcher.h"
#include "worker/supervisor.h"

namespace frameworm {

class WorkerAgent {
 public:
  struct Options {
    std::string coordinator = "127.0.0.1:7070";
    std::string name;
    std::string advertise = "127.0.0.1";
    int slots = 1;
    // GPU slots handed to tasks one each (Supervisor::Options::gpus).
    std::vector<std::string> gpus;
    std::string work_dir;
    std::map<std::string, std::string> base_env;  // trainers' starting env
    // Mutual TLS to the coordinator and peers (rpc/tls.h); unset: plaintext.
    std::optional<TlsFiles> tls;
    // --insecure: without `tls`, checkpoint copies may be fetched in
    // plaintext from peers off loopback. Otherwise a hold's sources off
    // loopback are not dialled (its fetch fails with an error naming one,
    // unless a loopback source is left).
    bool insecure = false;
    absl::Duration heartbeat_interval = absl::Seconds(1);
    absl::Duration register_timeout = absl::Seconds(2);
    absl::Duration initial_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(2);
    absl::Duration shutdown_grace = absl::Seconds(5);
    absl::Duration log_poll_interval = absl::Milliseconds(200);
    size_t log_chunk_bytes = 64 << 10;
    // A task's stdout/stderr file on this node keeps at most about this
    // much (common/log_cap.h): bytes already uploaded go first; a backlog
    // larger than this (a long disconnection) loses its oldest bytes.
    // 0: unbounded.
    int64_t max_log_bytes = int64_t{64} << 20;
    // Where to serve PeerService (checkpoint copies for other workers,
    // worker/peer_service.h), "host:port" (port 0: any free one), with
    // `tls` when set; registered as "<advertise>:<bound port>". Empty: this
    // worker serves none (it still fetches).
    std::string peer_listen;
    // One fetch of a checkpoint copy from one peer takes at most this long.
    absl::Duration fetch_timeout = absl::Minutes(10);
    // The in-memory checkpoint directory of a job no task of which has run
    // or waited here, and into which no fetch has been pending, for this
    // long while connected to the coordinator loses the checkpoint files
    // in it this long unchanged that no hold names
    // (worker/memory_dir_sweeper.h; one line says what went).
    absl::Duration memory_sweep_quiet = absl::Minutes(1);
    // Called with one human-readable line on registration, re-registration,
    // loss of the coordinator and each checkpoint copy (main prints them).
    std::function<void(const std::string&)> on_event;
  };

  // `launcher` is not owned and must outlive the agent. UNAVAILABLE when
  // options.peer_listen cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerAgent>> Create(const Options& options,
                                                             ProcessLauncher& launcher);
  // The PeerService endpoint registered with the coordinator; empty: none.
  virtual std::string peer_endpoint() const = 0;
  virtual ~WorkerAgent() = default;

  // Runs until Shutdown() and every trainer is gone.
  virtual void Run() = 0;
  virtual void Shutdown() = 0;
  // Makes the loop look at its processes now (e.g. on SIGCHLD).
  virtual void Wake() = 0;
  // What the worker's /metrics shows: the tasks running as of the loop's
  // last pass, whether it is connected to the coordinator, its slots.
  // Thread-safe.
  struct Snapshot {
    std::vector<TaskStatusInfo> running;
    bool connected = false;
    int slots = 0;
  };
  virtual Snapshot Observe() const = 0;
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_WORKER_AGENT_H_
