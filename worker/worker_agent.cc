#include "worker/worker_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <deque>
#include <optional>
#include <random>
#include <set>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/log_cap.h"
#include "common/node_address.h"
#include "common/printable.h"
#include "common/received_file.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "proto/rank_env_proto.h"
#include "rpc/rpc.h"
#include "worker/checkpoint_fetcher.h"
#include "worker/coordinator_values.h"
#include "worker/checkpoint_holdings.h"
#include "worker/fetch_journal.h"
#include "worker/holdings_file.h"
#include "worker/memory_dir_sweeper.h"
#include "worker/memory_dirs_file.h"
#include "worker/peer_service.h"
#include "worker/stack_dump.h"

namespace frameworm {
namespace {

v1::TaskState ToProto(TaskState s) {
  switch (s) {
    case TaskState::kRunning: return v1::TASK_RUNNING;
    case TaskState::kExited: return v1::TASK_EXITED;
    case TaskState::kKilled: return v1::TASK_KILLED;
    case TaskState::kStartFailed: return v1::TASK_START_FAILED;
  }
  return v1::TASK_STATE_UNSPECIFIED;
}

v1::TaskStatus ToProto(const TaskStatusInfo& s) {
  v1::TaskStatus p;
  p.mutable_ref()->set_job_id(s.key.job_id);
  p.mutable_ref()->set_generation(s.key.generation);
  p.set_rank(s.key.rank);
  p.set_state(ToProto(s.state));
  p.set_exit_code(s.exit_code);
  p.set_signal(s.signal);
  p.set_pid(s.pid);
  p.set_fenced(s.fenced);
  // Proto3 strings: valid UTF-8 or the coordinator drops the message (and
  // with it this worker's session); bounded.
  p.set_message(PrintableLine(s.message, 1024));
  p.set_stderr_tail(PrintableLine(s.stderr_tail, 512));
  return p;
}

HeldCheckpoint FromProto(const v1::HoldCheckpoint& h) {
  HeldCheckpoint out;
  out.job_id = h.job_id();
  out.step = h.step();
  out.path = h.path();
  out.bytes = h.bytes();
  out.checksum = h.checksum();
  out.secret = h.secret();
  out.sources.assign(h.sources().begin(), h.sources().end());
  return out;
}

TaskLaunch FromProto(const v1::TaskSpec& t) {
  TaskLaunch l;
  l.rank_env = RankEnvOf(t);
  l.argv.assign(t.argv().begin(), t.argv().end());
  for (const auto& [k, v] : t.env()) l.env[k] = v;
  // Bounded: a hostile or broken value (NaN, negative, years) means never.
  const double fence = t.fence_after_s();
  if (std::isfinite(fence) && fence > 0 && fence <= 7 * 24 * 3600) {
    l.fence_after = absl::Seconds(fence);
  }
  return l;
}

class WorkerAgentImpl final : public WorkerAgent {
 public:
  WorkerAgentImpl(const Options& o, ProcessLauncher& launcher)
      : options_(o),
        supervisor_({o.work_dir, o.coordinator, o.base_env, o.gpus}, RealClock::Real(),
                    launcher),
        stub_(v1::WorkerService::NewStub(MakeChannel(o.coordinator, o.tls ? &*o.tls : nullptr))),
        heartbeat_interval_(o.heartbeat_interval),
        backoff_(o.initial_backoff),
        journal_(o.work_dir + "/fetching"),
        fetcher_(
            [this](HeldCheckpoint& h, const std::atomic<bool>& stop) {
              if (absl::Status s = KeepLoopbackSourcesUnlessSecure(h);
                  !s.ok() || h.sources.empty()) {
                return s;  // refused, or already in place
              }
              // Noted first, so that a worker killed mid-fetch cleans up at
              // its next start (worker/fetch_journal.h); a note that cannot
              // be written costs only that. A copy written stays noted
              // until FetchesDone put it in the holdings file.
              std::error_code ec;
              std::filesystem::create_directories(options_.work_dir, ec);
              h.fetch_id = journal_.Started(h.path, h.bytes, h.checksum);
              absl::Status s = FetchCheckpointFrom(h, options_.tls ? &*options_.tls : nullptr,
                                                   options_.fetch_timeout, stop, &h.copied);
              if (s.ok() && h.copied) {
                journal_.Copied(h.fetch_id);
              } else {
                journal_.Ended(h.fetch_id);
              }
              return s;
            },
            [this] { Wake(); },
            // A rank waiting to resume from a path (deferred_ is the
            // loop's, as is every Enqueue).
            [this](const std::string& path) {
              for (const TaskLaunch& l : deferred_) {
                if (l.rank_env.resume_from == path) return true;
              }
              return false;
            }) {
    sweeper_ = MemoryDirSweeper(o.memory_sweep_quiet);
    // The memory directories of tasks started before a restart
    // (worker/memory_dirs_file.h): their quiet time starts now.
    absl::StatusOr<std::vector<WatchedMemoryDir>> watched = ReadMemoryDirsFile(MemoryDirsPath());
    if (!watched.ok()) {
      Event(absl::StrCat("frameworm-worker ", o.name, ": ", watched.status().message()));
    }
    for (const WatchedMemoryDir& d : watched.ok() ? *watched : std::vector<WatchedMemoryDir>{}) {
      (void)sweeper_.Launched(d.job_id, d.dir, absl::Now());
    }
    // What this worker held before a restart (worker/holdings_file.h).
    absl::StatusOr<std::vector<HeldCheckpoint>> kept = ReadHoldingsFile(HoldingsPath());
    if (!kept.ok()) Event(absl::StrCat("frameworm-worker ", o.name, ": ", kept.status().message()));
    for (const HeldCheckpoint& h : kept.ok() ? *kept : std::vector<HeldCheckpoint>{}) {
      (void)holdings_.Add(h);
    }
    // What the fetches it was killed in left (worker/fetch_journal.h):
    // partial files, and copies written but never held. (A holdings file
    // that could not be read holds nothing: its copies are kept then.)
    const std::set<std::filesystem::path> held = HeldPaths();
    for (const std::string& gone : journal_.Recover([&](const std::string& path) {
           return !kept.ok() || held.contains(std::filesystem::path(path).lexically_normal());
         })) {
      Event(absl::StrCat("frameworm-worker ", o.name, ": removed ", gone,
                         ", left by a fetch cut short when it last ran"));
    }
  }

  ~WorkerAgentImpl() override {
    CloseSession();
    if (peer_server_) peer_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  absl::Status StartPeerServer() {
    if (options_.peer_listen.empty()) return absl::OkStatus();
    ServerOptions so;
    so.listen = options_.peer_listen;
    so.tls = options_.tls;
    so.max_receive_bytes = 64 << 10;  // FetchCheckpointRequest is a few hundred bytes
    absl::StatusOr<StartedServer> started = StartServer(so, {&peer_service_});
    if (!started.ok()) return started.status();
    peer_server_ = std::move(started->server);
    const bool v6 = options_.advertise.find(':') != std::string::npos;
    peer_endpoint_ = v6 ? absl::StrCat("[", options_.advertise, "]:", started->port)
                        : absl::StrCat(options_.advertise, ":", started->port);
    return absl::OkStatus();
  }
  std::string peer_endpoint() const override { return peer_endpoint_; }

  void Shutdown() override {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
  }
  void Wake() override {
    absl::MutexLock l(&mu_);
    woken_ = true;
  }
  Snapshot Observe() const override {
    absl::MutexLock l(&mu_);
    return observed_;
  }

  void Run() override {
    bool killing = false;
    for (;;) {
      const absl::Time now = absl::Now();
      bool shutdown;
      std::deque<v1::CoordinatorMessage> commands;
      bool broken;
      {
        absl::MutexLock l(&mu_);
        shutdown = shutdown_;
        commands.swap(commands_);
        broken = session_broken_;
        woken_ = false;
      }
      if (shutdown && !killing) {
        killing = true;
        supervisor_.KillAll(options_.shutdown_grace);
      }
      if (broken && connected_) Disconnect("session stream ended");
      if (!connected_ && !killing && now >= next_attempt_) TryConnect();
      if (!connected_ && cut_off_since_) Fence(now - *cut_off_since_);

      for (const auto& c : commands) {
        if (!killing || c.has_receipt()) Apply(c);  // receipts count while draining too
      }
      FetchesDone();
      StartDeferred(killing);
      for (const TaskStatusInfo& s : supervisor_.Poll()) Report(s);

      if (connected_) {
        if (now >= next_heartbeat_) SendHeartbeat();
        FlushStatuses();
        FlushHeld();
        TailLogs(killing);
      }
      CapLogs();
      ForgetDelivered();
      SweepMemoryDirs(now);

      if (killing && supervisor_.running_count() == 0 && deferred_.empty()) {
        if (connected_) {
          FlushStatuses();
          TailLogs(true);
          // Half-close and give the coordinator a moment to read what was
          // sent before the stream is torn down.
          if (stream_->WritesDone()) {
            absl::MutexLock l(&mu_);
            auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              return session_broken_;
            };
            mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(1));
          }
        }
        CloseSession();
        return;
      }

      {
        Snapshot seen{supervisor_.Running(), connected_, options_.slots};
        absl::MutexLock l(&mu_);
        observed_ = std::move(seen);
      }
      absl::Time wake = now + options_.log_poll_interval;
      if (connected_) wake = std::min(wake, next_heartbeat_);
      if (!connected_ && !killing) wake = std::min(wake, next_attempt_);
      if (auto d = supervisor_.NextDeadline()) wake = std::min(wake, *d);
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return woken_ || shutdown_ || !commands_.empty() || session_broken_;
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
    }
  }

 private:
  struct Final {
    TaskStatusInfo status;
    std::optional<absl::Time> written_at;  // on the current session
    bool delivered = false;
  };
  struct LogState {
    int64_t offset[2] = {0, 0};  // stdout, stderr: sent up to here
    int64_t receipted[2] = {0, 0};  // stored by the coordinator up to here
  };
  // Where a stream's bytes are safe: receipted, or (a coordinator without
  // receipts) sent.
  int64_t Safe(const LogState& st, int i) const { return receipts_ ? st.receipted[i] : st.offset[i]; }

  void Event(const std::string& line) {
    if (options_.on_event) options_.on_event(line);
  }

  void Apply(const v1::CoordinatorMessage& c) {
    if (c.has_start()) {
      TaskLaunch l = FromProto(c.start().task());
      if (!l.rank_env.memory_checkpoint_dir.empty()) WatchMemoryDir(l);
      // Started once its checkpoint is here, and once a GPU that a task
      // being killed holds (the generation before, on this node) is free.
      if (!Startable(l)) {
        const bool fetching =
            !l.rank_env.resume_from.empty() && fetcher_.Pending(l.rank_env.resume_from);
        Event(absl::StrCat("frameworm-worker ", options_.name, ": rank ", l.key().rank, " of job ",
                           l.key().job_id, " generation ", l.key().generation, " waits to start: ",
                           fetching ? "for its checkpoint's fetch"
                                    : "for the GPU a task being killed holds"));
        deferred_.push_back(std::move(l));
        return;
      }
      Launch(l);
    } else if (c.has_kill()) {
      const v1::KillTask& k = c.kill();
      DropDeferred(k.ref().job_id(), k.ref().generation(), k.rank());
      supervisor_.Kill(k.ref().job_id(), k.ref().generation(), k.rank(), KillGraceOf(k.grace_s()));
    } else if (c.has_dump()) {
      DumpTaskStacks(c.dump());
    } else if (c.has_receipt()) {
      Receipted(c.receipt());
    } else if (c.has_hold()) {
      Hold(FromProto(c.hold()));
    } else if (c.has_drop()) {
      const bool whole_job = c.drop().step() < 0;
      const std::vector<HeldCheckpoint> gone = holdings_.Remove(c.drop().job_id(), c.drop().step());
      const std::set<std::filesystem::path> still_held = HeldPaths();
      for (const HeldCheckpoint& h : gone) {
        if (whole_job && !h.copied) continue;  // a rank's own file stays
        // Nor does a file another hold (another job's, another step's)
        // still names.
        if (still_held.contains(std::filesystem::path(h.path).lexically_normal())) continue;
        std::error_code ec;
        std::filesystem::remove(h.path, ec);
      }
      if (!gone.empty()) PersistHoldings();  // a drop of nothing held writes nothing
    }
  }

  // The coordinator has a final status or log bytes: a final is not resent,
  // a task is forgotten once its logs are receipted to their end. A receipt
  // for more than was sent counts only what was sent.
  void Receipted(const v1::Receipt& r) {
    const TaskKey key{r.ref().job_id(), r.ref().generation(), r.rank()};
    if (r.final_status()) {
      for (Final& f : finals_) {
        if (f.status.key == key) f.delivered = true;
      }
    }
    const int i = r.stream() == "stdout" ? 0 : r.stream() == "stderr" ? 1 : -1;
    auto it = logs_.find(key);
    if (i < 0 || it == logs_.end()) return;
    LogState& st = it->second;
    st.receipted[i] = std::max(st.receipted[i], std::min(r.log_offset(), st.offset[i]));
  }

  // The stacks of the matching running tasks, appended to their stderr
  // logs (uploaded with the rest); synchronous, so a KillTask right behind
  // finds them taken. Each task's dump may take up to 5 s (a process stuck
  // in the kernel): a heartbeat due goes out between them, so dumping the
  // stacks of many ranks does not get this worker declared lost.
  void DumpTaskStacks(const v1::DumpStacks& d) {
    for (const TaskStatusInfo& t : supervisor_.Running()) {
      if (t.key.job_id != d.ref().job_id() || t.key.generation != d.ref().generation() ||
          (d.rank() >= 0 && t.key.rank != d.rank()) || t.pid <= 0) {
        continue;
      }
      const std::string text = DumpStacks(t.key, t.pid, d.why().substr(0, 256));
      const int fd = ::open(supervisor_.StderrPath(t.key).c_str(),
                            O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0) {
        size_t done = 0;
        while (done < text.size()) {
          const ssize_t k = ::write(fd, text.data() + done, text.size() - done);
          if (k <= 0) break;
          done += static_cast<size_t>(k);
        }
        ::close(fd);
      }
      Event(absl::StrCat("stacks of ", t.key.job_id, " rank ", t.key.rank, " written to its log (",
                         text.size(), " bytes)"));
      if (connected_ && absl::Now() >= next_heartbeat_) SendHeartbeat();
    }
  }

  void Launch(const TaskLaunch& l) {
    TaskStatusInfo st = supervisor_.Start(l);
    // Its output files are tailed, capped and at the end deleted by this
    // key: never for a job id Start refused (a path outside the work dir).
    if (CheckJobIdComponent(l.key().job_id).ok()) logs_.try_emplace(l.key());
    Report(st);
  }

  // A hold: a file already here is registered at once (its size checked);
  // one with sources is fetched first.
  void Hold(const HeldCheckpoint& h) {
    if (absl::Status s = CheckHold(h); !s.ok()) return AnswerHold(h, s);
    if (h.sources.empty()) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(h.path, ec);
      if (ec || static_cast<int64_t>(size) != h.bytes) {
        return AnswerHold(h, absl::NotFoundError(absl::StrCat(
                                 "no file of ", h.bytes, " bytes at ", h.path, " on this node")));
      }
      absl::Status added = holdings_.Add(h);
      if (added.ok()) PersistHoldings();
      return AnswerHold(h, added);
    }
    if (std::optional<HeldCheckpoint> have = holdings_.Find(h.job_id, h.step);
        have && have->path == h.path && have->checksum == h.checksum) {
      // Held already: the answer shows this hold's secret, so peers must be
      // served with it too (a restarted coordinator's, say).
      if (have->secret != h.secret) {
        have->secret = h.secret;
        if (absl::Status s = holdings_.Add(*have); !s.ok()) return AnswerHold(h, s);
        PersistHoldings();
      }
      return AnswerHold(h, absl::OkStatus());
    }
    // Queued even when a fetch of that path is pending: this hold is
    // answered by its own turn (with its own secret), which finds the copy
    // in place when the earlier one wrote it (checkpoint_fetcher.h).
    if (absl::Status s = fetcher_.Enqueue(h); !s.ok()) AnswerHold(h, s);
  }

  void FetchesDone() {
    for (auto& [h, s] : fetcher_.TakeDone()) {
      const bool wrote = s.ok() && h.copied;  // this fetch wrote the file
      // A copy this worker fetched stays its own to delete, even when a
      // later hold found it already in place.
      if (std::optional<HeldCheckpoint> have = holdings_.Find(h.job_id, h.step);
          have && have->path == h.path && have->copied) {
        h.copied = true;
      }
      if (s.ok()) s = holdings_.Add(h);
      // Un-noted once the holdings file lists the copy (or it is given
      // up); a file that could not be written keeps the note, so a kill
      // before a later write succeeds still deletes the unlisted copy.
      const bool listed = s.ok() && PersistHoldings();
      if (wrote && !s.ok() && !HeldAt(h.path)) {  // fetched, then not held (full)
        std::error_code ec;
        std::filesystem::remove(h.path, ec);
      }
      if (!s.ok() || listed) journal_.Ended(h.fetch_id);
      // `wrote`, not h.copied: a hold that found an earlier hold's copy in
      // place may have no source left (those off loopback are dropped
      // without TLS).
      Event(s.ok() ? absl::StrCat("frameworm-worker ", options_.name, ": holds ", h.job_id,
                                  "'s checkpoint of step ", h.step, " (", h.bytes, " bytes, ",
                                  wrote && !h.sources.empty()
                                      ? "fetched from " + h.sources.front()
                                      : std::string("already on this node"),
                                  ")")
                   : absl::StrCat("frameworm-worker ", options_.name, ": ", s.message()));
      AnswerHold(h, s);
    }
  }

  // Without TLS, and without --insecure, a hold's sources off loopback are
  // not dialled: the hold's secret and the copy would cross the network in
  // plaintext. An error names one when no source is left and the copy is
  // not already in place.
  absl::Status KeepLoopbackSourcesUnlessSecure(HeldCheckpoint& h) const {
    if (options_.tls || options_.insecure) return absl::OkStatus();
    std::vector<std::string> kept;
    std::string refused;
    for (std::string& source : h.sources) {
      if (IsLoopbackHost(HostOfEndpoint(source))) {
        kept.push_back(std::move(source));
      } else if (refused.empty()) {
        refused = source;
      }
    }
    h.sources = std::move(kept);
    if (!h.sources.empty() || refused.empty() || FileMatches(h.path, h.bytes, h.checksum)) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "not fetching ", h.job_id, "'s checkpoint of step ", h.step, " from ",
        PrintableLine(refused, 256),
        " in plaintext: this worker has no --tls-dir (use mutual TLS, or add --insecure on a "
        "network only your cluster reaches)"));
  }

  std::string HoldingsPath() const { return options_.work_dir + "/holdings"; }
  // The holdings as they are now, for the next start; a failure is an
  // event (the copies are still held, only a restart would forget them).
  bool PersistHoldings() {
    return WriteStateFile([&] { return WriteHoldingsFile(HoldingsPath(), holdings_.All()); });
  }
  // Writes a state file of the work dir (made if missing) with `write`;
  // its failure is an event.
  bool WriteStateFile(const std::function<absl::Status()>& write) {
    std::error_code ec;
    std::filesystem::create_directories(options_.work_dir, ec);
    if (absl::Status s = write(); !s.ok()) {
      Event(absl::StrCat("frameworm-worker ", options_.name, ": ", s.message()));
      return false;
    }
    return true;
  }
  // Watches the memory directory of a task being started (MemoryDirSweeper),
  // noting it in the work dir when it is new (worker/memory_dirs_file.h).
  void WatchMemoryDir(const TaskLaunch& l) {
    const MemoryDirSweeper::Launch watched =
        sweeper_.Launched(l.key().job_id, l.rank_env.memory_checkpoint_dir, absl::Now());
    if (watched == MemoryDirSweeper::Launch::kChanged) PersistMemoryDirs();
    if (watched == MemoryDirSweeper::Launch::kRefused &&
        sweeper_.size() >= MemoryDirSweeper::kMaxDirs && !sweeper_full_said_) {
      sweeper_full_said_ = true;
      Event(absl::StrCat("frameworm-worker ", options_.name, ": ", MemoryDirSweeper::kMaxDirs,
                         " in-memory checkpoint directories are watched already; those of "
                         "jobs started from now on are not swept"));
    }
  }
  std::string MemoryDirsPath() const { return options_.work_dir + "/memory-dirs"; }
  // A failure is an event: the dirs are still swept, only a restart would
  // forget them.
  void PersistMemoryDirs() {
    WriteStateFile([&] { return WriteMemoryDirsFile(MemoryDirsPath(), sweeper_.Watched()); });
  }
  // What a job that left this node left in its memory directory
  // (MemoryDirSweeper). While the coordinator is away, or was away two
  // heartbeats ago (a hold it sent may be on its way), every job counts as
  // busy: a snapshot it recorded must not go before its hold comes.
  void SweepMemoryDirs(absl::Time now) {
    if (now < next_sweep_) return;
    next_sweep_ = now + std::min(options_.memory_sweep_quiet / 2, absl::Seconds(5));
    const std::vector<TaskStatusInfo> running = supervisor_.Running();
    auto busy = [&](const std::string& job_id, const std::string& dir) {
      if (!connected_ || now - connected_since_ < 2 * heartbeat_interval_) return true;
      for (const TaskStatusInfo& t : running) {
        if (t.key.job_id == job_id) return true;
      }
      for (const TaskLaunch& l : deferred_) {
        if (l.key().job_id == job_id) return true;
      }
      return fetcher_.PendingUnder(dir);
    };
    const std::set<std::filesystem::path> held = HeldPaths();
    const size_t before = sweeper_.size();
    const std::vector<std::string> removed =
        sweeper_.Sweep(now, busy, [&](const std::string& path) {
          return held.contains(std::filesystem::path(path).lexically_normal());
        });
    if (sweeper_.size() != before) PersistMemoryDirs();
    if (removed.empty()) return;
    std::string listed;
    for (size_t i = 0; i < removed.size() && i < 3; ++i) {
      absl::StrAppend(&listed, i ? ", " : "", PrintableLine(removed[i], 256));
    }
    if (removed.size() > 3) absl::StrAppend(&listed, " and ", removed.size() - 3, " more");
    Event(absl::StrCat("frameworm-worker ", options_.name,
                       ": removed what no hold names from the in-memory checkpoint directories "
                       "of jobs no longer on this node: ",
                       listed));
  }

  // The paths of the held copies (of any job and step), normalized.
  std::set<std::filesystem::path> HeldPaths() const {
    std::set<std::filesystem::path> held;
    for (const HeldCheckpoint& h : holdings_.All()) {
      held.insert(std::filesystem::path(h.path).lexically_normal());
    }
    return held;
  }
  // Whether a held copy (of any job and step) lies at `path`.
  bool HeldAt(const std::string& path) const {
    return HeldPaths().contains(std::filesystem::path(path).lexically_normal());
  }

  void AnswerHold(const HeldCheckpoint& h, const absl::Status& s) {
    v1::CheckpointHeld a;
    a.set_job_id(h.job_id.substr(0, 64));
    a.set_step(h.step);
    a.set_ok(s.ok());
    if (!s.ok()) a.set_error(PrintableLine(s.message(), 512));
    // Shows the coordinator it was asked (one restarted since did not ask).
    if (s.ok()) a.set_secret(h.secret);
    held_out_.push_back(std::move(a));
  }

  void FlushHeld() {
    while (connected_ && !held_out_.empty()) {
      v1::WorkerMessage m;
      *m.mutable_held() = held_out_.front();
      if (!Write(m)) return;
      held_out_.pop_front();
    }
  }

  // Starts the deferred tasks whose checkpoint is no longer being fetched
  // (fetched or not: a rank that still lacks the file downloads the
  // coordinator's copy itself); on shutdown, ends them all as KILLED.
  void StartDeferred(bool killing) {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (killing) {
        ReportNotStarted(it->key());
        it = deferred_.erase(it);
      } else if (Startable(*it)) {
        Launch(*it);
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }

  bool Startable(const TaskLaunch& l) const {
    if (!l.rank_env.resume_from.empty() && fetcher_.Pending(l.rank_env.resume_from)) return false;
    return !supervisor_.GpuFreedSoon();
  }

  // KillTask's match (KillTask: generation <= `generation`, 0 any; rank -1 any).
  void DropDeferred(const std::string& job_id, int64_t generation, int rank) {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      const TaskKey k = it->key();
      if (k.job_id == job_id && (generation == 0 || k.generation <= generation) &&
          (rank < 0 || k.rank == rank)) {
        ReportNotStarted(k);
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void ReportNotStarted(const TaskKey& k) {
    TaskStatusInfo st;
    st.key = k;
    st.state = TaskState::kKilled;
    st.signal = SIGKILL;
    st.message = "killed before it started, while waiting for its checkpoint to be fetched "
                 "or for a GPU its previous generation held";
    Report(st);
  }

  void Report(const TaskStatusInfo& s) {
    outgoing_.push_back(s);
    if (s.final()) finals_.push_back({s, std::nullopt, false});
  }

  bool Write(v1::WorkerMessage& m) {
    if (!connected_) return false;
    m.set_session_id(session_id_);
    if (!stream_->Write(m)) {
      Disconnect("write failed");
      return false;
    }
    return true;
  }

  void SendHeartbeat() {
    v1::WorkerMessage m;
    const absl::Time now = absl::Now();
    m.mutable_heartbeat()->set_unix_ms(absl::ToUnixMillis(now));
    if (!Write(m)) return;
    next_heartbeat_ = now + heartbeat_interval_;
    for (Final& f : finals_) {
      if (!receipts_ && f.written_at && now - *f.written_at >= 2 * heartbeat_interval_) {
        f.delivered = true;
      }
    }
  }

  void FlushStatuses() {
    while (connected_ && !outgoing_.empty()) {
      v1::WorkerMessage m;
      *m.mutable_task_status() = ToProto(outgoing_.front());
      if (!Write(m)) return;
      const TaskStatusInfo& s = outgoing_.front();
      if (s.final()) {
        for (Final& f : finals_) {
          if (f.status.key == s.key && !f.written_at) f.written_at = absl::Now();
        }
      }
      outgoing_.pop_front();
    }
  }

  // Sends new log data. Returns with everything read when `drain`.
  void TailLogs(bool drain) {
    for (auto& [key, st] : logs_) {
      for (int i = 0; i < 2 && connected_; ++i) {
        const std::string path =
            i == 0 ? supervisor_.StdoutPath(key) : supervisor_.StderrPath(key);
        std::ifstream f(path, std::ios::binary);
        if (!f) continue;
        f.seekg(0, std::ios::end);
        int64_t size = f.tellg();
        if (size < st.offset[i]) st.offset[i] = st.receipted[i] = 0;  // truncated
        int chunks = drain ? 1 << 20 : 4;
        while (connected_ && st.offset[i] < size && chunks-- > 0) {
          int64_t n = std::min<int64_t>(size - st.offset[i],
                                        options_.log_chunk_bytes);
          std::string data(n, '\0');
          f.seekg(st.offset[i]);
          f.read(data.data(), n);
          data.resize(f.gcount());
          if (data.empty()) break;
          v1::WorkerMessage m;
          v1::LogUpload* up = m.mutable_log();
          up->mutable_ref()->set_job_id(key.job_id);
          up->mutable_ref()->set_generation(key.generation);
          up->set_rank(key.rank);
          up->set_stream(i == 0 ? "stdout" : "stderr");
          up->set_offset(st.offset[i]);
          up->set_data(std::move(data));
          int64_t len = up->data().size();
          if (!Write(m)) return;
          st.offset[i] += len;
        }
      }
    }
  }

  // Keeps every task's log files within max_log_bytes: uploaded bytes are
  // dropped first; a backlog over the cap loses its oldest bytes (the
  // upload skips them).
  void CapLogs() {
    if (options_.max_log_bytes <= 0) return;
    for (auto& [key, st] : logs_) {
      for (int i = 0; i < 2; ++i) {
        const std::string path =
            i == 0 ? supervisor_.StdoutPath(key) : supervisor_.StderrPath(key);
        std::error_code ec;
        const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
        if (ec || size <= options_.max_log_bytes) continue;
        const int64_t safe = Safe(st, i);
        const bool backlog_fits = size - safe <= options_.max_log_bytes;
        absl::StatusOr<int64_t> first =
            CapLog(path, options_.max_log_bytes, backlog_fits ? safe : INT64_MAX);
        if (!first.ok()) {
          if (!cap_warned_) Event(std::string(first.status().message()));
          cap_warned_ = true;
          continue;
        }
        st.offset[i] = std::max(st.offset[i], *first);
        st.receipted[i] = std::max(st.receipted[i], *first);
      }
    }
  }

  // Drops tasks whose final status is delivered and whose logs are sent
  // (receipted, when the coordinator receipts), with their log files.
  void ForgetDelivered() {
    for (auto it = finals_.begin(); it != finals_.end();) {
      if (!it->delivered) {
        ++it;
        continue;
      }
      const TaskKey key = it->status.key;
      auto lit = logs_.find(key);
      bool drained = true;
      if (lit != logs_.end()) {
        for (int i = 0; i < 2; ++i) {
          std::error_code ec;
          auto size = std::filesystem::file_size(
              i == 0 ? supervisor_.StdoutPath(key) : supervisor_.StderrPath(key),
              ec);
          if (!ec && static_cast<int64_t>(size) > Safe(lit->second, i)) {
            drained = false;
          }
        }
      }
      if (!drained) {
        ++it;
        continue;
      }
      if (lit != logs_.end()) {
        logs_.erase(lit);
        // Uploaded whole: the node's copies go, then their generation's and
        // job's directories once empty (a node runs tasks for months).
        std::error_code ec;
        const std::filesystem::path out = supervisor_.StdoutPath(key);
        std::filesystem::remove(out, ec);
        std::filesystem::remove(supervisor_.StderrPath(key), ec);
        std::filesystem::remove(out.parent_path(), ec);                // fails unless empty
        std::filesystem::remove(out.parent_path().parent_path(), ec);  // likewise
      }
      supervisor_.Forget(key);
      it = finals_.erase(it);
    }
  }

  void TryConnect() {
    v1::RegisterWorkerRequest req;
    req.set_name(options_.name);
    req.set_address(options_.advertise);
    req.set_slots(options_.slots);
    req.set_instance(instance_);
    req.set_peer_endpoint(peer_endpoint_);
    for (const HeldCheckpoint& h : holdings_.All()) {
      v1::CheckpointHeld* held = req.add_held();
      held->set_job_id(h.job_id);
      held->set_step(h.step);
      held->set_ok(true);
      held->set_secret(h.secret);
    }
    for (const TaskStatusInfo& s : supervisor_.Running()) {
      *req.add_running() = ToProto(s);
    }
    // A task that waits to start (its checkpoint's fetch, a GPU) is this
    // worker's too: a coordinator restarted meanwhile must not take its rank
    // for lost. No pid yet (0).
    for (const TaskLaunch& l : deferred_) {
      TaskStatusInfo waiting;
      waiting.key = l.key();
      waiting.state = TaskState::kRunning;
      waiting.message = "waiting to start";
      *req.add_running() = ToProto(waiting);
    }
    for (const Final& f : finals_) {
      if (!f.delivered) *req.add_ended() = ToProto(f.status);
    }
    v1::RegisterWorkerResponse resp;
    grpc::ClientContext rctx;
    rctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.register_timeout));
    grpc::Status s = stub_->RegisterWorker(&rctx, req, &resp);
    if (!s.ok()) {
      if (last_error_.empty()) {  // once per outage
        last_error_ = s.error_message();
        Event(absl::StrCat("frameworm-worker ", options_.name,
                           ": cannot register with ", options_.coordinator,
                           ": ", s.error_message(), "; retrying"));
      }
      next_attempt_ = absl::Now() + backoff_;
      backoff_ = std::min(backoff_ * 2, options_.max_backoff);
      // Redial from scratch: a connection attempt begun while the network
      // was down can outlive the outage (seen after a link flap, where it
      // left no time for the TLS handshake).
      stub_ = v1::WorkerService::NewStub(
          MakeChannel(options_.coordinator, options_.tls ? &*options_.tls : nullptr));
      return;
    }
    last_error_.clear();
    session_id_ = resp.session_id();
    receipts_ = resp.receipts();
    if (auto interval = HeartbeatIntervalOf(resp.heartbeat_interval_s())) {
      heartbeat_interval_ = *interval;
    }
    ctx_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Session(ctx_.get());
    {
      absl::MutexLock l(&mu_);
      session_broken_ = false;
    }
    auto* stream = stream_.get();
    reader_ = std::thread([this, stream] {
      v1::CoordinatorMessage m;
      while (stream->Read(&m)) {
        absl::MutexLock l(&mu_);
        commands_.push_back(m);
      }
      absl::MutexLock l(&mu_);
      session_broken_ = true;
    });
    connected_ = true;
    connected_since_ = absl::Now();
    cut_off_since_.reset();
    backoff_ = options_.initial_backoff;
    Event(absl::StrCat("frameworm-worker ", options_.name,
                       registered_once_ ? " re-registered with "
                                        : " registered with ",
                       options_.coordinator,
                       registered_once_
                           ? absl::StrCat(" (", req.running_size(),
                                          " running tasks)")
                           : ""));
    registered_once_ = true;
    // First a heartbeat, then what the coordinator may have missed.
    next_heartbeat_ = absl::Now();
    SendHeartbeat();
    outgoing_.clear();  // running and ended tasks went with RegisterWorker
    for (Final& f : finals_) f.delivered = true;
    FlushStatuses();
  }

  void CloseSession() {
    if (!stream_) return;
    ctx_->TryCancel();
    if (reader_.joinable()) reader_.join();
    stream_->Finish().IgnoreError();
    stream_.reset();
    ctx_.reset();
    connected_ = false;
  }

  void Disconnect(const std::string& why) {
    if (!connected_) return;
    cut_off_since_ = absl::Now();
    CloseSession();
    for (Final& f : finals_) f.written_at.reset();
    // What was sent but not receipted may not have arrived: the next
    // session sends it again (the coordinator skips what it has).
    if (receipts_) {
      for (auto& [key, st] : logs_) {
        for (int i = 0; i < 2; ++i) st.offset[i] = std::min(st.offset[i], st.receipted[i]);
      }
    }
    Event(absl::StrCat("frameworm-worker ", options_.name, ": lost ",
                       options_.coordinator, " (", why, "); reconnecting"));
    next_attempt_ = absl::Now() + backoff_;
    backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  }

  // Kills the tasks whose fence_after the time without the coordinator has
  // reached: by then their generation is over, whatever they still do.
  void Fence(absl::Duration cut_off) {
    for (const TaskKey& k : supervisor_.Fence(cut_off)) {
      Event(absl::StrCat("frameworm-worker ", options_.name, ": fenced job ", k.job_id,
                         " generation ", k.generation, " rank ", k.rank, " (cut off from ",
                         options_.coordinator, " for ", absl::FormatDuration(cut_off), ")"));
    }
  }

  // This process's RegisterWorkerRequest.instance: 128 random bits.
  static std::string NewInstance() {
    std::random_device rd;
    return absl::StrFormat("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  }

  const Options options_;
  const std::string instance_ = NewInstance();
  Supervisor supervisor_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;

  // Owned by the Run() thread.
  absl::Duration heartbeat_interval_;
  absl::Duration backoff_;
  absl::Time next_attempt_ = absl::InfinitePast();
  absl::Time next_heartbeat_ = absl::InfinitePast();
  bool connected_ = false;
  bool cap_warned_ = false;  // a log cap failed (said once)
  // Since when the session is lost (reset on registration); unset before
  // the first registration (no task can run then).
  std::optional<absl::Time> cut_off_since_;
  bool registered_once_ = false;
  bool receipts_ = false;  // the coordinator receipts finals and log chunks
  std::string last_error_;
  std::string session_id_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage,
                                           v1::CoordinatorMessage>>
      stream_;
  std::thread reader_;
  std::deque<TaskStatusInfo> outgoing_;
  std::vector<Final> finals_;
  std::map<TaskKey, LogState> logs_;
  std::vector<TaskLaunch> deferred_;  // waiting for their checkpoint's fetch
  MemoryDirSweeper sweeper_{absl::Minutes(1)};  // options_.memory_sweep_quiet (constructor)
  absl::Time next_sweep_ = absl::InfinitePast();
  bool sweeper_full_said_ = false;
  absl::Time connected_since_ = absl::InfinitePast();
  std::deque<v1::CheckpointHeld> held_out_;

  CheckpointHoldings holdings_;  // thread-safe: also read by the peer server
  PeerServiceImpl peer_service_{holdings_};
  std::unique_ptr<grpc::Server> peer_server_;
  std::string peer_endpoint_;

  mutable absl::Mutex mu_;
  Snapshot observed_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool session_broken_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::CoordinatorMessage> commands_ ABSL_GUARDED_BY(mu_);
  // Thread-safe: the fetcher's thread notes, the loop un-notes; built
  // before fetcher_, whose thread uses it.
  FetchJournal journal_;
  // Last: its thread calls Wake() (mu_) and reads options_ and journal_, so
  // it goes first.
  CheckpointFetcher fetcher_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerAgent>> WorkerAgent::Create(const Options& options,
                                                                 ProcessLauncher& launcher) {
  auto agent = std::make_unique<WorkerAgentImpl>(options, launcher);
  if (absl::Status s = agent->StartPeerServer(); !s.ok()) return s;
  return agent;
}

}  // namespace frameworm
