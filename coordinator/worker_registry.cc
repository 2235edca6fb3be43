#include "coordinator/worker_registry.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/node_address.h"
#include "common/printable.h"
#include "common/received_file.h"
#include "common/token.h"

namespace frameworm::coordinator {

absl::StatusOr<std::string> WorkerRegistry::Register(
    const v1::RegisterWorkerRequest& req) {
  // The rule of certificate names (a worker's must match its certificate's
  // on TLS): names reach logs, events and every admin's terminal.
  if (!IsPlainName(req.name())) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker name '", PrintableLine(req.name(), 64),
                     "' is not 1 to 64 characters of A-Z a-z 0-9 . _ -"));
  }
  if (req.address().empty())
    return absl::InvalidArgumentError("worker address is required");
  if (req.address().size() > kMaxAddressBytes ||
      req.address().find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]_%") !=
          std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker address must be a host name or IP address of at most ", kMaxAddressBytes,
        " characters"));
  }
  if (!req.peer_endpoint().empty()) {
    const std::string& e = req.peer_endpoint();
    // Other workers dial it with a hold's secret: a TCP peer, never
    // "unix:..." or another gRPC target scheme.
    if (e.size() > kMaxAddressBytes + 8 || !IsNetworkEndpoint(e)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker peer endpoint '", PrintableLine(e, 80), "' is not HOST:PORT (at most ",
          kMaxAddressBytes + 8, " characters)"));
    }
  }
  if (req.slots() < 1 || req.slots() > kMaxSlots)
    return absl::InvalidArgumentError(absl::StrCat(
        "worker slots must be within 1..", kMaxSlots, ", got ", req.slots()));
  // Old generations' tasks may still be dying beside the current ones.
  if (req.ended_size() > kMaxSlots)
    return absl::InvalidArgumentError(absl::StrCat(
        "worker reports ", req.ended_size(), " ended tasks; at most ", kMaxSlots));
  if (req.running_size() > kMaxSlots)
    return absl::InvalidArgumentError(absl::StrCat(
        "worker reports ", req.running_size(), " running tasks; at most ", kMaxSlots));
  // A task's state is one the protocol declares: running ones say RUNNING,
  // ended ones how they ended (an unknown or unset state would be skipped
  // and its rank taken as accounted for).
  for (const v1::TaskStatus& t : req.running()) {
    if (t.state() != v1::TASK_RUNNING) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker reports a running task (job '", PrintableLine(t.ref().job_id(), 64), "' rank ",
          t.rank(), ") in state ", static_cast<int>(t.state()), ", not TASK_RUNNING"));
    }
  }
  for (const v1::TaskStatus& t : req.ended()) {
    if (t.state() != v1::TASK_EXITED && t.state() != v1::TASK_KILLED &&
        t.state() != v1::TASK_START_FAILED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker reports an ended task (job '", PrintableLine(t.ref().job_id(), 64), "' rank ",
          t.rank(), ") in state ", static_cast<int>(t.state()),
          "; ended tasks are TASK_EXITED, TASK_KILLED or TASK_START_FAILED"));
    }
  }
  if (req.held_size() > kMaxHeld)
    return absl::InvalidArgumentError(absl::StrCat(
        "worker reports ", req.held_size(), " held checkpoints; at most ", kMaxHeld));
  if (req.instance().size() > 128)
    return absl::InvalidArgumentError("worker instance must be at most 128 bytes");
  if (auto it = workers_.find(req.name()); it != workers_.end()) {
    const Worker& live = it->second;
    if (live.registered && live.attached && req.instance() != live.instance &&
        clock_.Now() - live.last_seen < options_.heartbeat_timeout) {
      return absl::AlreadyExistsError(absl::StrCat(
          "worker name '", req.name(), "' is held by a live worker (registered from ",
          live.address, "); pick another --name or stop that worker"));
    }
  }
  Worker& w = workers_[req.name()];
  if (!w.session_id.empty()) {
    sessions_.erase(w.session_id);
    notify_.erase(w.session_id);
  }
  w.name = req.name();
  w.address = req.address();
  w.peer_endpoint = req.peer_endpoint();
  w.instance = req.instance();
  w.slots = req.slots();
  w.registered = true;
  w.attached = false;
  w.last_seen = clock_.Now();
  // Unguessable: a session id is what the Session stream's messages carry.
  w.session_id = absl::StrCat("s", options_.session_prefix, "-", next_session_++, "-",
                              req.name(), "-", NewToken().substr(0, 32));
  sessions_[w.session_id] = w.name;
  if (!w.outbox.empty()) notify_.insert(w.session_id);  // kept for the new session
  return w.session_id;
}

void WorkerRegistry::Expect(const std::string& name, absl::Time deadline) {
  Worker& w = workers_[name];
  if (!w.name.empty()) return;
  w.name = name;
  w.last_seen = deadline;
}

absl::StatusOr<WorkerRegistry::Worker*> WorkerRegistry::BySession(
    const std::string& session_id) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end())
    return absl::NotFoundError(absl::StrCat("unknown session '", PrintableLine(session_id, 80),
                                            "': register the worker again"));
  return &workers_[it->second];
}

absl::Status WorkerRegistry::Attach(const std::string& session_id) {
  absl::StatusOr<Worker*> w = BySession(session_id);
  if (!w.ok()) return w.status();
  // One stream per session: a second would share the first's outbox and
  // get its own pacing, and its end would mark the live one detached.
  if ((*w)->attached) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session '", PrintableLine(session_id, 64),
        "' already has a live stream; a worker opens one per registration"));
  }
  (*w)->attached = true;
  (*w)->last_seen = clock_.Now();
  notify_.insert(session_id);
  return absl::OkStatus();
}

void WorkerRegistry::Detach(const std::string& session_id) {
  absl::StatusOr<Worker*> w = BySession(session_id);
  if (w.ok()) (*w)->attached = false;
}

absl::StatusOr<WorkerRegistry::Heard> WorkerRegistry::Hear(
    const std::string& session_id) {
  absl::StatusOr<Worker*> w = BySession(session_id);
  if (!w.ok()) return w.status();
  const bool was = Schedulable(**w);
  (*w)->last_seen = clock_.Now();
  return Heard{*w, !was && Schedulable(**w)};
}

absl::StatusOr<std::vector<v1::CoordinatorMessage>> WorkerRegistry::Take(
    const std::string& session_id) {
  absl::StatusOr<Worker*> w = BySession(session_id);
  if (!w.ok()) return w.status();
  std::deque<v1::CoordinatorMessage>& box = (*w)->outbox;
  std::vector<v1::CoordinatorMessage> out(std::make_move_iterator(box.begin()),
                                          std::make_move_iterator(box.end()));
  box.clear();
  return out;
}

namespace {

// The part of a ref a worker matches tasks on; false when the job id is
// one no worker can run.
bool TaskRef(const v1::JobRef& in, v1::JobRef* out) {
  if (!CheckJobIdComponent(in.job_id()).ok()) return false;
  out->set_job_id(in.job_id());
  out->set_generation(in.generation());
  return true;
}

}  // namespace

void WorkerRegistry::Send(const std::string& worker,
                          v1::CoordinatorMessage msg) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  auto& sent = it->second.holds_sent;
  if (msg.has_hold()) {
    sent.emplace(msg.hold().job_id(), msg.hold().step());
    while (sent.size() > kMaxHoldsSent) sent.erase(sent.begin());
  } else if (msg.has_drop()) {
    const v1::DropCheckpoint& d = msg.drop();
    for (auto h = sent.lower_bound({d.job_id(), std::numeric_limits<int64_t>::min()});
         h != sent.end() && h->first == d.job_id();) {
      h = d.step() < 0 || h->second == d.step() ? sent.erase(h) : std::next(h);
    }
  }
  it->second.outbox.push_back(std::move(msg));
  if (!it->second.session_id.empty()) notify_.insert(it->second.session_id);
}

bool WorkerRegistry::SentHold(const std::string& worker, const std::string& job_id,
                              int64_t step) const {
  auto it = workers_.find(worker);
  return it != workers_.end() && it->second.holds_sent.count({job_id, step}) > 0;
}

void WorkerRegistry::SendReceipt(const std::string& worker, v1::CoordinatorMessage msg) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !msg.has_receipt()) return;
  v1::JobRef ref;
  if (!TaskRef(msg.receipt().ref(), &ref)) return;
  *msg.mutable_receipt()->mutable_ref() = std::move(ref);
  const v1::Receipt& r = msg.receipt();
  size_t queued = 0;
  for (v1::CoordinatorMessage& q : it->second.outbox) {
    if (!q.has_receipt()) continue;
    ++queued;
    const v1::Receipt& o = q.receipt();
    if (o.ref().job_id() == r.ref().job_id() && o.ref().generation() == r.ref().generation() &&
        o.rank() == r.rank() && o.final_status() == r.final_status() && o.stream() == r.stream()) {
      if (r.log_offset() >= o.log_offset()) q = std::move(msg);  // the newer end covers it
      return;
    }
  }
  if (queued >= kMaxQueuedReceipts) return;
  Send(worker, std::move(msg));
}

void WorkerRegistry::SendKill(const std::string& worker, const v1::JobRef& ref,
                              int rank) {
  auto it = workers_.find(worker);
  v1::CoordinatorMessage msg;
  if (it == workers_.end() || !TaskRef(ref, msg.mutable_kill()->mutable_ref())) return;
  size_t queued = 0;
  for (const v1::CoordinatorMessage& q : it->second.outbox) {
    if (!q.has_kill()) continue;
    ++queued;
    const v1::KillTask& k = q.kill();
    if (k.ref().job_id() == ref.job_id() && k.ref().generation() == ref.generation() &&
        k.rank() == rank) {
      return;  // queued already
    }
  }
  if (queued >= kMaxQueuedKills) return;
  msg.mutable_kill()->set_rank(rank);
  msg.mutable_kill()->set_grace_s(options_.kill_grace_s);
  Send(worker, std::move(msg));
}

void WorkerRegistry::SendUnrecordedDrop(const std::string& worker, const std::string& job_id,
                                        int64_t step) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  size_t queued = 0;
  for (const v1::CoordinatorMessage& q : it->second.outbox) {
    if (!q.has_drop()) continue;
    ++queued;
    if (q.drop().job_id() == job_id && (q.drop().step() == step || q.drop().step() < 0)) return;
  }
  if (queued >= kMaxQueuedUnrecordedDrops) return;
  v1::CoordinatorMessage msg;
  msg.mutable_drop()->set_job_id(job_id);
  msg.mutable_drop()->set_step(step);
  Send(worker, std::move(msg));
}

void WorkerRegistry::SendDumpStacks(const std::string& worker, const v1::JobRef& ref, int rank,
                                    const std::string& why) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  size_t queued = 0;
  for (const v1::CoordinatorMessage& q : it->second.outbox) queued += q.has_dump();
  if (queued >= kMaxQueuedDumps) return;
  v1::CoordinatorMessage msg;
  *msg.mutable_dump()->mutable_ref() = ref;
  msg.mutable_dump()->mutable_ref()->clear_token();
  msg.mutable_dump()->set_rank(rank);
  msg.mutable_dump()->set_why(PrintableLine(why, 256));
  Send(worker, std::move(msg));
}

std::set<std::string> WorkerRegistry::TakeSessionsToNotify() {
  return std::exchange(notify_, {});
}

bool WorkerRegistry::Schedulable(const Worker& w) const {
  const absl::Duration fresh =
      std::min(options_.heartbeat_timeout,
               absl::Seconds(3 * options_.heartbeat_interval_s));
  return w.registered && w.attached && clock_.Now() - w.last_seen <= fresh;
}

bool WorkerRegistry::HeardLately(const Worker& w, absl::Time since) const {
  return Schedulable(w) &&
         (w.last_seen > since ||
          clock_.Now() - w.last_seen <= absl::Seconds(1.5 * options_.heartbeat_interval_s));
}

const WorkerRegistry::Worker* WorkerRegistry::Find(
    const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<const WorkerRegistry::Worker*> WorkerRegistry::All() const {
  std::vector<const Worker*> out;
  out.reserve(workers_.size());
  for (const auto& [name, w] : workers_) out.push_back(&w);
  return out;
}

void WorkerRegistry::ForgiveStall(absl::Duration gap) {
  const absl::Time now = clock_.Now();
  for (auto& [name, w] : workers_) w.last_seen = std::min(now, w.last_seen + gap);
}

absl::Time WorkerRegistry::LastSeen(const std::string& name) const {
  const Worker* w = Find(name);
  return w == nullptr ? absl::InfinitePast() : w->last_seen;
}

std::vector<std::string> WorkerRegistry::ForgetSilentSince(absl::Time cutoff,
                                                           const std::set<std::string>& keep) {
  std::vector<std::string> gone;
  for (auto it = workers_.begin(); it != workers_.end();) {
    const Worker& w = it->second;
    if (w.attached || w.last_seen >= cutoff || keep.count(w.name) > 0) {
      ++it;
      continue;
    }
    if (!w.session_id.empty()) {
      sessions_.erase(w.session_id);
      notify_.erase(w.session_id);
    }
    gone.push_back(w.name);
    it = workers_.erase(it);
  }
  return gone;
}

std::set<std::pair<std::string, int>> WorkerRegistry::KeepPendingStarts(
    const std::string& worker, const std::function<bool(const v1::TaskSpec&)>& keep) {
  std::set<std::pair<std::string, int>> kept;
  auto it = workers_.find(worker);
  if (it == workers_.end()) return kept;
  std::deque<v1::CoordinatorMessage>& box = it->second.outbox;
  for (auto m = box.begin(); m != box.end();) {
    if (!m->has_start()) {
      ++m;
    } else if (keep(m->start().task())) {
      kept.insert({m->start().task().ref().job_id(), m->start().task().rank()});
      ++m;
    } else {
      m = box.erase(m);
    }
  }
  return kept;
}

}  // namespace frameworm::coordinator
