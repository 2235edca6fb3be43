#include "worker/worker_agent.h"

#include <signal.h>

#include <cmath>
#include <deque>
#include <optional>
#include <random>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/log_cap.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "proto/rank_env_proto.h"
#include "rpc/rpc.h"

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
  p.set_message(s.message);
  p.set_stderr_tail(s.stderr_tail);
  return p;
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
        backoff_(o.initial_backoff) {}

  ~WorkerAgentImpl() override { CloseSession(); }

  void Shutdown() override {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
  }
  void Wake() override {
    absl::MutexLock l(&mu_);
    woken_ = true;
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

      if (!killing) {
        for (const auto& c : commands) Apply(c);
      }
      for (const TaskStatusInfo& s : supervisor_.Poll()) Report(s);

      if (connected_) {
        if (now >= next_heartbeat_) SendHeartbeat();
        FlushStatuses();
        TailLogs(killing);
      }
      CapLogs();
      ForgetDelivered();

      if (killing && supervisor_.running_count() == 0) {
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
    int64_t offset[2] = {0, 0};  // stdout, stderr
  };

  void Event(const std::string& line) {
    if (options_.on_event) options_.on_event(line);
  }

  void Apply(const v1::CoordinatorMessage& c) {
    if (c.has_start()) {
      TaskLaunch l = FromProto(c.start().task());
      TaskStatusInfo st = supervisor_.Start(l);
      logs_.try_emplace(l.key());
      Report(st);
    } else if (c.has_kill()) {
      const v1::KillTask& k = c.kill();
      supervisor_.Kill(k.ref().job_id(), k.ref().generation(), k.rank(),
                       absl::Seconds(k.grace_s()));
    }
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
      if (f.written_at && now - *f.written_at >= 2 * heartbeat_interval_) {
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
        if (size < st.offset[i]) st.offset[i] = 0;  // truncated
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
        const bool backlog_fits = size - st.offset[i] <= options_.max_log_bytes;
        absl::StatusOr<int64_t> first =
            CapLog(path, options_.max_log_bytes, backlog_fits ? st.offset[i] : INT64_MAX);
        if (!first.ok()) {
          if (!cap_warned_) Event(std::string(first.status().message()));
          cap_warned_ = true;
          continue;
        }
        st.offset[i] = std::max(st.offset[i], *first);
      }
    }
  }

  // Drops tasks whose final status is delivered and whose logs are sent.
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
          if (!ec && static_cast<int64_t>(size) > lit->second.offset[i]) {
            drained = false;
          }
        }
      }
      if (!drained) {
        ++it;
        continue;
      }
      if (lit != logs_.end()) logs_.erase(lit);
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
    for (const TaskStatusInfo& s : supervisor_.Running()) {
      *req.add_running() = ToProto(s);
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
    if (resp.heartbeat_interval_s() > 0) {
      heartbeat_interval_ = absl::Seconds(resp.heartbeat_interval_s());
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

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool session_broken_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::CoordinatorMessage> commands_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<WorkerAgent> WorkerAgent::Create(const Options& options,
                                                 ProcessLauncher& launcher) {
  return std::make_unique<WorkerAgentImpl>(options, launcher);
}

}  // namespace frameworm
