// Workers and their sessions: registration, the one session lookup, the
// liveness every message refreshes, and each worker's outbox of commands
// (StartTask, KillTask) waiting for its Session stream.
//
// Sessions: each (re)registration replaces the worker's session with a new
// id; calls naming an unknown or replaced session get NOT_FOUND "unknown
// session '<id>': register the worker again". Commands the old session
// had not taken stay queued for the new one (a short network drop costs
// no restart); the registration's reconciliation keeps the StartTasks of
// current generations and drops the rest (KeepPendingStarts).
//
// Liveness: a worker is schedulable while it is registered, its session is
// attached and it was heard from within min(heartbeat timeout, three
// heartbeat intervals): one that has gone quiet gets no new work even
// before its jobs' timeouts fail them. Workers known only from state
// reloaded after a coordinator restart (Expect) are not schedulable until
// they register.
//
// Notifications: Send records the session that got a command;
// TakeSessionsToNotify hands the owner that set (it pokes the transport
// outside its lock).
//
// Forgetting: a worker detached and silent since before a cutoff (and not
// kept by a running job) is dropped by ForgetSilentSince, so a cluster
// whose workers come and go does not grow without bound.
//
// Ownership: owns every Worker; pointers returned stay valid until the next
// ForgetSilentSince.
// Thread safety: not thread-safe; owned by the Coordinator under its mutex.
// Errors: Register: INVALID_ARGUMENT for a bad name or address or slots
// < 1; session calls: NOT_FOUND as above.
#ifndef FRAMEWORM_COORDINATOR_WORKER_REGISTRY_H_
#define FRAMEWORM_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/worker_limits.h"
#include "frameworm/v1/worker_service.pb.h"

namespace frameworm::coordinator {

class WorkerRegistry {
 public:
  struct Options {
    double heartbeat_interval_s = 1.0;
    absl::Duration heartbeat_timeout = absl::Seconds(10);
    double kill_grace_s = 3.0;  // KillTask: SIGTERM, SIGKILL after this
    // Distinguishes this coordinator process's session ids from those of
    // an earlier one (they must never match after a restart).
    std::string session_prefix;
  };
  // Limits on what a worker may declare.
  static constexpr int kMaxSlots = kMaxWorkerSlots;
  // Held checkpoints a registration may list (a worker holds fewer:
  // worker/checkpoint_holdings.h).
  static constexpr int kMaxHeld = 1024;
  static constexpr size_t kMaxAddressBytes = 255;
  struct Worker {
    std::string name;
    std::string address;
    std::string peer_endpoint;  // its PeerService, "host:port"; empty: none
    std::string instance;  // RegisterWorkerRequest.instance
    int slots = 0;
    std::string session_id;
    bool registered = false;  // false: known only from reloaded state
    bool attached = false;
    absl::Time last_seen;
    std::deque<v1::CoordinatorMessage> outbox;
    // The (job, step) of every HoldCheckpoint sent to it and not dropped
    // since (at most kMaxHoldsSent, the oldest key forgotten first): only
    // these may its answers make it a holder of (SentHold).
    std::set<std::pair<std::string, int64_t>> holds_sent;
  };
  // What a message on a session tells: who sent it and whether it made a
  // quiet worker schedulable again.
  struct Heard {
    const Worker* worker = nullptr;
    bool became_schedulable = false;
  };

  // `clock` is not owned and must outlive the registry.
  WorkerRegistry(const Options& options, Clock& clock)
      : options_(options), clock_(clock) {}

  // (Re)registers the worker under a new session; returns the session id.
  // INVALID_ARGUMENT: a bad name (not IsPlainName: 1 to 64 of [A-Za-z0-9._-]),
  // address (empty, over kMaxAddressBytes, or
  // not a host), peer endpoint (not HOST:PORT), slots outside 1..kMaxSlots, or more than kMaxSlots
  // running tasks. ALREADY_EXISTS: the name belongs to a live session (attached
  // and heard within the heartbeat timeout) of another worker process
  // (another `instance`); the live worker keeps it.
  absl::StatusOr<std::string> Register(const v1::RegisterWorkerRequest& req);
  // A worker of reloaded state, given until `deadline` to register (its
  // last_seen); nothing changes for a worker already known.
  void Expect(const std::string& name, absl::Time deadline);

  // The session's stream opened (refreshes liveness). FAILED_PRECONDITION
  // while the session has a live stream already (one stream per session).
  absl::Status Attach(const std::string& session_id);
  // The session's stream closed; unknown sessions are ignored.
  void Detach(const std::string& session_id);
  // A message arrived on the session: refreshes liveness.
  absl::StatusOr<Heard> Hear(const std::string& session_id);
  // The session's queued commands, oldest first (and removes them).
  absl::StatusOr<std::vector<v1::CoordinatorMessage>> Take(
      const std::string& session_id);

  // Queues a command for the worker; unknown workers are ignored. A
  // HoldCheckpoint is remembered in holds_sent, a DropCheckpoint forgets
  // its holds there.
  void Send(const std::string& worker, v1::CoordinatorMessage msg);
  static constexpr size_t kMaxHoldsSent = 4096;
  // Whether `worker` was sent a HoldCheckpoint of (job_id, step) that no
  // DropCheckpoint took back.
  bool SentHold(const std::string& worker, const std::string& job_id, int64_t step) const;
  // Receipts and kills name a task by what a worker matches on: the ref's
  // job id (when it is a plausible one, CheckJobIdComponent; else nothing
  // is sent, as no worker runs such a task) and generation; its token and
  // anything else the worker sent are not echoed.
  //
  // Queues a Receipt (worker_service.proto), coalesced: a queued receipt
  // for the same task and stream (or the same task's final status) takes
  // the newer one's place, and at most kMaxQueuedReceipts stay queued per
  // worker; one more is dropped. So a worker that sends chunks and never
  // reads its stream cannot grow the outbox; it resends what was not
  // receipted on its next session.
  static constexpr size_t kMaxQueuedReceipts = 1024;
  void SendReceipt(const std::string& worker, v1::CoordinatorMessage msg);
  // Queues KillTask for one rank (-1: every rank of `ref` on the worker),
  // unless the same kill is queued already; at most kMaxQueuedKills stay
  // queued (a worker that reports stale tasks and never reads its stream
  // cannot grow the outbox; a task still running is reported, and so
  // killed, again).
  static constexpr size_t kMaxQueuedKills = 1024;
  void SendKill(const std::string& worker, const v1::JobRef& ref, int rank);
  // Queues DropCheckpoint of the job's `step` (-1: every step) for a copy
  // the worker claims without a record, unless the same drop is queued
  // already; at most kMaxQueuedUnrecordedDrops such drops stay queued (a
  // worker that floods claims and never reads its stream cannot grow the
  // outbox; it claims again at its next registration). Drops of records'
  // holders go through Send and are never dropped.
  static constexpr size_t kMaxQueuedUnrecordedDrops = 1024;
  void SendUnrecordedDrop(const std::string& worker, const std::string& job_id, int64_t step);
  // DumpStacks for `rank` of `ref` (-1: every rank there); `why` is cut to
  // 256 bytes. At most kMaxQueuedDumps stay queued for a worker (more are
  // dropped: a worker that does not read its stream cannot grow the
  // outbox, and one that does dumps them one after another).
  static constexpr size_t kMaxQueuedDumps = 64;
  void SendDumpStacks(const std::string& worker, const v1::JobRef& ref, int rank,
                      const std::string& why);
  std::set<std::string> TakeSessionsToNotify();
  // The worker's queued StartTask commands: those `keep` accepts stay, the
  // others are dropped (other commands are untouched). Returns the kept
  // tasks' (job id, rank).
  std::set<std::pair<std::string, int>> KeepPendingStarts(
      const std::string& worker, const std::function<bool(const v1::TaskSpec&)>& keep);

  bool Schedulable(const Worker& w) const;
  // Schedulable, and heard from after `since` or within the last 1.5
  // heartbeat intervals: a worker a failure implicated is placed again only
  // then (Schedulable alone tolerates three missed intervals).
  bool HeardLately(const Worker& w, absl::Time since) const;
  const Worker* Find(const std::string& name) const;
  // Every worker, by name.
  std::vector<const Worker*> All() const;
  // Drops every worker that is not attached, was last heard before
  // `cutoff` and is not in `keep`; returns their names.
  std::vector<std::string> ForgetSilentSince(absl::Time cutoff,
                                             const std::set<std::string>& keep);
  // The coordinator was stalled for `gap`: every worker's last_seen moves
  // on by `gap`, never past now (its silence was the coordinator's).
  void ForgiveStall(absl::Duration gap);
  // When the worker was last heard from; InfinitePast for an unknown one.
  absl::Time LastSeen(const std::string& name) const;
  double heartbeat_interval_s() const { return options_.heartbeat_interval_s; }

 private:
  absl::StatusOr<Worker*> BySession(const std::string& session_id);

  const Options options_;
  Clock& clock_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::string> sessions_;  // session id -> worker
  int64_t next_session_ = 1;
  std::set<std::string> notify_;  // sessions with new commands
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_WORKER_REGISTRY_H_
