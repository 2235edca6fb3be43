#include "bench/p3_sim_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace frameworm::bench {

namespace v1 = frameworm::v1;
namespace fs = std::filesystem;

// ------------------------------------------------------ CoordinatorProcess

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const Options& o) {
  std::unique_ptr<CoordinatorProcess> p(new CoordinatorProcess());
  std::string state_dir = o.state_dir;
  if (state_dir.empty()) {
    state_dir = p->temp_state_dir_ = e2e::MakeTempDir("frameworm-bench");
    if (state_dir.empty()) return absl::InternalError("mkdtemp failed");
  }
  p->state_dir_ = state_dir;
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot create ", state_dir, ": ", ec.message()));
  std::vector<std::string> args = {o.binary, "--listen=127.0.0.1:0",
                                   absl::StrCat("--state-dir=", state_dir)};
  for (const auto& a : o.extra_args) args.push_back(a);
  const std::string log = (fs::path(state_dir) / "coordinator.log").string();
  auto child = e2e::ChildProcess::Start(args, {}, log);
  if (!child.ok()) return child.status();
  p->child_ = std::move(*child);
  auto line = p->child_->WaitForLine("listening on ", absl::Seconds(20));
  if (!line.ok()) return line.status();
  p->address_ = std::string(absl::StripAsciiWhitespace(
      line->substr(line->find("listening on ") + 13)));
  return p;
}

CoordinatorProcess::~CoordinatorProcess() {
  Stop();
  if (!temp_state_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(temp_state_dir_, ec);
  }
}

double CoordinatorProcess::CpuSeconds() const {
  std::ifstream in(absl::StrCat("/proc/", pid(), "/stat"));
  std::string all((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  size_t rp = all.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream fields(all.substr(rp + 2));
  std::string f;
  long long utime = 0, stime = 0;
  // Field 3 (state) is the first after ')'; utime is field 14, stime 15.
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoll(f);
    if (i == 15) stime = std::stoll(f);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

std::string CoordinatorProcess::Stop() {
  if (!child_ || stopped_) return "not running";
  stopped_ = true;
  child_->Signal(SIGTERM);
  auto r = child_->Wait(absl::Seconds(5));
  if (!r) {
    child_->Signal(SIGKILL);
    child_->Wait(absl::Seconds(5));
    return "killed after 5 s";
  }
  return r->signal != 0 ? absl::StrCat("signal ", r->signal)
                        : absl::StrCat("exit ", r->exit_code);
}

std::shared_ptr<grpc::Channel> PrivateChannel(const std::string& target,
                                              int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("frameworm.bench.channel_index", index);
  args.SetMaxReceiveMessageSize(16 << 20);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::StatusOr<std::string> SubmitGangJob(const std::string& target,
                                          const std::string& name, int nodes,
                                          std::chrono::seconds deadline) {
  auto jobs = v1::JobService::NewStub(PrivateChannel(target, 1000));
  v1::SubmitJobRequest req;
  v1::JobSpec& spec = *req.mutable_spec();
  spec.set_name(name);
  spec.add_entrypoint("/bin/true");
  spec.set_nodes_min(nodes);
  spec.set_nodes_max(nodes);
  spec.set_nproc_per_node(1);
  spec.set_heartbeat_timeout_s(60);
  v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  grpc::Status gs = jobs->SubmitJob(&ctx, req, &resp);
  if (!gs.ok())
    return absl::UnavailableError(
        absl::StrCat("SubmitJob: ", gs.error_message()));
  return resp.job_id();
}

// ----------------------------------------------------------------- Session

class SimCluster::Session final
    : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  Session(SimCluster* cluster, int index, std::string session_id)
      : cluster_(cluster), index_(index), session_id_(std::move(session_id)) {}

  void Start(v1::WorkerService::Stub* stub) {
    stub->async()->Session(&ctx_, this);
    StartRead(&in_);
    AddHold();  // heartbeats are written from the heartbeat thread
    {
      absl::MutexLock l(&mu_);
      WriteHeartbeatLocked();  // first message attaches the session
    }
    StartCall();
  }

  // Writes a heartbeat unless one is in flight or the stream is closing.
  void Heartbeat() {
    absl::MutexLock l(&mu_);
    if (writing_ || closed_) return;
    WriteHeartbeatLocked();
  }

  void SendMarker(const v1::LogUpload& log) {
    absl::MutexLock l(&mu_);
    if (closed_ || marker_) return;
    marker_ = std::make_unique<v1::WorkerMessage>();
    marker_->set_session_id(session_id_);
    *marker_->mutable_log() = log;
    if (!writing_) WriteMarkerLocked();
  }

  void Close() {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    closed_ = true;
    ctx_.TryCancel();
    RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    if (ok) cluster_->heartbeats_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock l(&mu_);
    writing_ = false;
    if (!ok || closed_) return;
    if (marker_ && !marker_sent_) {
      WriteMarkerLocked();
    } else if (!marker_ && cluster_->options_.flood_heartbeats) {
      WriteHeartbeatLocked();
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (in_.has_start())
      cluster_->OnStart(index_, in_.start().task(),
                        std::chrono::steady_clock::now());
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& s) override {
    cluster_->OnSessionDone(index_, s);
  }

 private:
  void WriteMarkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    out_ = *marker_;
    marker_sent_ = true;
    writing_ = true;
    StartWrite(&out_);
  }
  void WriteHeartbeatLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    out_.Clear();
    out_.set_session_id(session_id_);
    out_.mutable_heartbeat()->set_unix_ms(absl::ToUnixMillis(absl::Now()));
    writing_ = true;
    StartWrite(&out_);
  }

  SimCluster* const cluster_;
  const int index_;
  const std::string session_id_;
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;  // read chain only
  absl::Mutex mu_;
  v1::WorkerMessage out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<v1::WorkerMessage> marker_ ABSL_GUARDED_BY(mu_);
  bool marker_sent_ ABSL_GUARDED_BY(mu_) = false;
};

// -------------------------------------------------------------- SimCluster

SimCluster::SimCluster(const Options& options) : options_(options) {
  for (int i = 0; i < std::max(1, options_.channels); ++i) {
    channels_.push_back(PrivateChannel(options_.target, i));
    stubs_.push_back(v1::WorkerService::NewStub(channels_.back()));
  }
  absl::MutexLock l(&mu_);
  received_.resize(options_.workers);
}

SimCluster::~SimCluster() {
  Shutdown();
  for (Session* s : sessions_) delete s;
}

absl::Status SimCluster::RegisterAll(std::chrono::seconds timeout) {
  struct Call {
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest req;
    v1::RegisterWorkerResponse resp;
  };
  const int n = options_.workers;
  std::vector<std::unique_ptr<Call>> calls(n);
  absl::Mutex mu;
  absl::CondVar cv;
  int answered = 0;
  std::string error;
  const auto deadline = std::chrono::system_clock::now() + timeout;
  for (int i = 0; i < n; ++i) {
    calls[i] = std::make_unique<Call>();
    Call& c = *calls[i];
    c.ctx.set_deadline(deadline);
    c.req.set_name(absl::StrFormat("sim-%05d", i));
    c.req.set_address("127.0.0.1");
    c.req.set_slots(1);
    stubs_[i % stubs_.size()]->async()->RegisterWorker(
        &c.ctx, &c.req, &c.resp, [&, i](grpc::Status s) {
          absl::MutexLock l(&mu);
          if (!s.ok() && error.empty())
            error = absl::StrCat("RegisterWorker of sim-", i, ": ",
                                 s.error_message());
          ++answered;
          cv.SignalAll();
        });
  }
  absl::MutexLock l(&mu);
  // Every call answers by its deadline at the latest.
  while (answered < n) cv.Wait(&mu);
  if (!error.empty()) return absl::InternalError(error);
  session_ids_.clear();
  for (auto& c : calls) session_ids_.push_back(c->resp.session_id());
  return absl::OkStatus();
}

absl::Status SimCluster::OpenSessionsAndWaitAlive(std::chrono::seconds timeout) {
  const int n = options_.workers;
  if (static_cast<int>(session_ids_.size()) != n)
    return absl::FailedPreconditionError("RegisterAll first");
  for (int i = 0; i < n; ++i) {
    sessions_.push_back(new Session(this, i, session_ids_[i]));
    sessions_.back()->Start(stubs_[i % stubs_.size()].get());
  }
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  auto jobs = v1::JobService::NewStub(channels_[0]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (!first_error_.empty()) return absl::InternalError(first_error_);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListWorkersResponse resp;
    grpc::Status s = jobs->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp);
    if (!s.ok())
      return absl::InternalError(absl::StrCat("ListWorkers: ", s.error_message()));
    int alive = 0;
    for (const auto& w : resp.workers()) alive += w.alive() ? 1 : 0;
    if (alive == n) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline)
      return absl::DeadlineExceededError(
          absl::StrCat(alive, " of ", n, " workers alive after the timeout"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::Status SimCluster::WaitAllStarted(std::chrono::seconds timeout) {
  const int n = options_.workers;
  absl::MutexLock l(&mu_);
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  while (started_ < n && first_error_.empty() && absl::Now() < deadline)
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  if (!first_error_.empty()) return absl::InternalError(first_error_);
  if (started_ < n)
    return absl::DeadlineExceededError(absl::StrCat(
        started_, " of ", n, " workers received StartTask before the timeout"));
  return absl::OkStatus();
}

std::vector<ReceivedTask> SimCluster::Received() const {
  absl::MutexLock l(&mu_);
  return received_;
}

void SimCluster::OnStart(int worker, const v1::TaskSpec& task, SteadyTime at) {
  absl::MutexLock l(&mu_);
  ReceivedTask& r = received_[worker];
  if (r.received) {
    if (first_error_.empty())
      first_error_ = absl::StrCat("worker ", worker, " got a second StartTask");
    return;
  }
  r.received = true;
  r.at = at;
  r.task = task;
  ++started_;
  cv_.SignalAll();
}

void SimCluster::OnSessionDone(int worker, const grpc::Status& status) {
  absl::MutexLock l(&mu_);
  ++done_;
  cv_.SignalAll();
  if (!shut_down_ && first_error_.empty())
    first_error_ = absl::StrCat("session of worker ", worker, " ended: ",
                                status.error_code(), " ",
                                status.error_message());
}

void SimCluster::HeartbeatLoop() {
  const auto interval = std::chrono::duration<double>(
      options_.heartbeat_interval_s);
  while (!stop_.load()) {
    const auto next = std::chrono::steady_clock::now() + interval;
    for (Session* s : sessions_) {
      if (stop_.load()) break;
      s->Heartbeat();  // no-op while a (flood) write is in flight
    }
    while (!stop_.load() && std::chrono::steady_clock::now() < next)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void SimCluster::SendMarkers(const v1::LogUpload& log,
                             const std::vector<int>& rank_of_worker) {
  for (size_t i = 0; i < sessions_.size(); ++i) {
    v1::LogUpload l = log;
    l.set_rank(rank_of_worker[i]);
    sessions_[i]->SendMarker(l);
  }
}

void SimCluster::Shutdown() {
  if (shut_down_) return;
  {
    absl::MutexLock l(&mu_);
    shut_down_ = true;
  }
  stop_.store(true);
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  for (Session* s : sessions_) s->Close();
  const int n = static_cast<int>(sessions_.size());
  absl::MutexLock l(&mu_);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (done_ < n && absl::Now() < deadline)
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  if (done_ < n) {
    std::fprintf(stderr, "bench: %d of %d sessions did not end; leaking them\n",
                 n - done_, n);
    sessions_.clear();  // must not delete reactors gRPC may still call
  }
}

absl::StatusOr<std::string> FlagValue(int argc, char** argv,
                                      const std::string& name,
                                      const std::string& default_value) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (int i = 1; i < argc; ++i)
    if (absl::StartsWith(argv[i], prefix)) return std::string(argv[i] + prefix.size());
  return default_value;
}

absl::Status CheckKnownFlags(int argc, char** argv, const std::vector<std::string>& known) {
  for (int i = 1; i < argc; ++i) {
    bool ok = false;
    for (const auto& k : known) ok |= absl::StartsWith(argv[i], absl::StrCat("--", k, "="));
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown argument '", argv[i], "' (flags: --", absl::StrJoin(known, " --"), ")"));
  }
  return absl::OkStatus();
}

}  // namespace frameworm::bench
