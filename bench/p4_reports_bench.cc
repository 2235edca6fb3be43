// P4: sustained ReportStep calls plus Session heartbeats against a real
// frameworm-coordinator process on 127.0.0.1.
//
// Set-up: start frameworm-coordinator (fresh --state-dir), K simulated
// workers (1 slot each, Session streams), a job with nodes = K running on
// them; the job id and generation come from the StartTask they receive, and
// each rank's FRAMEWORM_TOKEN (TaskSpec.token) from the StartTask of the
// worker running that rank; every report carries its rank's token in
// JobRef.token, as a real trainer's would.
// Load: `callers` closed-loop callers, each with one call in flight at a
// time (callback client API); caller i reports ranks i, i + callers, ...
// (mod K) in turn, each with that rank's next step, so every rank reports.
// With --batch=1 (the default) a call is one ReportStep; with --batch=N > 1
// it is one ReportSteps carrying N consecutive steps of one rank, as a
// trainer's StepReporter sends them. Meanwhile every session sends heartbeats, either every
// --heartbeat-interval-ms or back to back (--heartbeat-interval-ms=0).
// After --warmup-s, latencies and counts are taken for --duration-s; then
// the callers stop and everything shuts down. Prints one JSON line; exits 1
// when set-up fails or a report is refused.
//
// Figures: reports/s (steps accepted, N per call with --batch=N) and call
// latency p50/p90/p99/max (client-side, from issue to completion callback); heartbeats/s (client writes
// completed; HTTP/2 flow control keeps that within a window of what the
// server read; null when the backlog was not read within --drain-timeout-s,
// as with sessions flooding faster than the coordinator's pacing); CPU
// cores used by the coordinator and by this process.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "bench/p3_sim_cluster.h"

namespace fb = frameworm::bench;
namespace v1 = frameworm::v1;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "p4_reports_bench: %s\n", msg.c_str());
  return 1;
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Shared {
  v1::JobRef ref;  // job id and generation, no token
  int world = 0;
  std::vector<std::string> tokens;  // per rank, from its StartTask
  std::vector<std::atomic<int64_t>>* steps = nullptr;  // per rank
  int batch = 1;  // step reports per call (1: ReportStep; >1: ReportSteps)
  std::atomic<int64_t> measure_from_ns{INT64_MAX};     // since epoch
  std::atomic<int64_t> stop_at_ns{INT64_MAX};
  absl::Mutex mu;
  absl::CondVar cv;
  int finished ABSL_GUARDED_BY(mu) = 0;
  std::map<int, int64_t> errors ABSL_GUARDED_BY(mu);  // code -> count
  std::string first_error ABSL_GUARDED_BY(mu);
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

// One closed-loop caller: one call in flight at a time.
class Caller {
 public:
  // Reports ranks first_rank, first_rank + stride, ... (mod the world).
  Caller(Shared* shared, v1::TrainerService::Stub* stub, int first_rank,
         int stride)
      : shared_(shared), stub_(stub), rank_(first_rank), stride_(stride) {
    latencies_us_.reserve(1 << 16);
  }

  void Issue() {
    // The previous call completed; its context may go now.
    cur_ ^= 1;
    ctx_[cur_] = std::make_unique<grpc::ClientContext>();
    ctx_[cur_]->set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(10));
    batch_.Clear();
    const int64_t first = (*shared_->steps)[rank_].fetch_add(shared_->batch) + 1;
    for (int i = 0; i < shared_->batch; ++i) {
      v1::StepMetrics* r = batch_.add_reports();
      *r->mutable_ref() = shared_->ref;
      r->mutable_ref()->set_token(shared_->tokens[rank_]);
      r->set_rank(rank_);
      r->set_step(first + i);
      r->set_epoch(0);
      r->set_samples(32);
      r->set_step_seconds(0.01);
      (*r->mutable_values())["loss"] = 1.0 / (1 + r->step());
      (*r->mutable_values())["accuracy"] = 0.5;
    }
    rank_ = (rank_ + stride_) % shared_->world;
    start_ns_ = NowNs();
    auto done = [this](grpc::Status s) { OnDone(s); };
    if (shared_->batch == 1)
      stub_->async()->ReportStep(ctx_[cur_].get(), &batch_.reports(0), &resp_, done);
    else
      stub_->async()->ReportSteps(ctx_[cur_].get(), &batch_, &resp_, done);
  }

  const std::vector<uint32_t>& latencies_us() const { return latencies_us_; }
  int64_t ok_measured() const { return ok_measured_; }

 private:
  void OnDone(const grpc::Status& s) {
    const int64_t end = NowNs();
    if (s.ok()) {
      if (start_ns_ >= shared_->measure_from_ns.load() &&
          end <= shared_->stop_at_ns.load()) {
        latencies_us_.push_back(static_cast<uint32_t>((end - start_ns_) / 1000));
        ok_measured_ += batch_.reports_size();
      }
    } else {
      absl::MutexLock l(&shared_->mu);
      shared_->errors[s.error_code()]++;
      if (shared_->first_error.empty())
        shared_->first_error =
            absl::StrCat(shared_->batch == 1 ? "ReportStep" : "ReportSteps", " rank ",
                         batch_.reports(0).rank(), " step ", batch_.reports(0).step(), ": ",
                         s.error_code(), " ", s.error_message());
    }
    if (end < shared_->stop_at_ns.load() && s.ok()) {
      Issue();
      return;
    }
    absl::MutexLock l(&shared_->mu);
    shared_->finished++;
    shared_->cv.SignalAll();
  }

  Shared* const shared_;
  v1::TrainerService::Stub* const stub_;
  int rank_;  // the next report's rank
  const int stride_;
  std::unique_ptr<grpc::ClientContext> ctx_[2];
  int cur_ = 0;
  v1::StepReports batch_;  // one report when the call is ReportStep
  v1::ReportStepResponse resp_;
  int64_t start_ns_ = 0;
  std::vector<uint32_t> latencies_us_;
  int64_t ok_measured_ = 0;
};

double Percentile(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * (v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k] / 1000.0;  // ms
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> known = {
      "workers", "callers", "channels", "duration-s", "warmup-s",
      "heartbeat-interval-ms", "coordinator", "state-dir", "drain-timeout-s",
      "batch"};
  if (absl::Status s = fb::CheckKnownFlags(argc, argv, known); !s.ok())
    return Fail(std::string(s.message()));
  auto flag = [&](const std::string& name, const std::string& def) {
    return *fb::FlagValue(argc, argv, name, def);
  };
  int workers, callers, channels, hb_ms, batch;
  double duration_s, warmup_s;
  if (!absl::SimpleAtoi(flag("workers", "8"), &workers) || workers < 1)
    return Fail("--workers must be a positive integer");
  if (!absl::SimpleAtoi(flag("callers", "32"), &callers) || callers < 1)
    return Fail("--callers must be a positive integer");
  // The coordinator takes at most 256 reports per ReportSteps call.
  if (!absl::SimpleAtoi(flag("batch", "1"), &batch) || batch < 1 || batch > 256)
    return Fail("--batch must be in [1, 256]");
  if (!absl::SimpleAtoi(flag("channels", "8"), &channels) || channels < 1)
    return Fail("--channels must be a positive integer");
  if (!absl::SimpleAtoi(flag("heartbeat-interval-ms", "1000"), &hb_ms) ||
      hb_ms < 0)
    return Fail("--heartbeat-interval-ms must be >= 0 (0: back to back)");
  if (!absl::SimpleAtod(flag("duration-s", "10"), &duration_s) ||
      duration_s <= 0 || duration_s > 600)
    return Fail("--duration-s must be in (0, 600]");
  if (!absl::SimpleAtod(flag("warmup-s", "1"), &warmup_s) || warmup_s < 0 ||
      warmup_s > 60)
    return Fail("--warmup-s must be in [0, 60]");
  // Sessions that send faster than the coordinator's pacing (10 heartbeats
  // per interval per session) leave a backlog in their streams that takes
  // long to drain; past this, heartbeats/s is reported as null.
  double drain_timeout_s;
  if (!absl::SimpleAtod(flag("drain-timeout-s", "60"), &drain_timeout_s) ||
      drain_timeout_s < 0 || drain_timeout_s > 600)
    return Fail("--drain-timeout-s must be in [0, 600]");
  const std::string coord_bin = flag(
      "coordinator",
      (fs::path(argv[0]).parent_path() / "frameworm-coordinator").string());
  std::string state_dir = flag("state-dir", "");

  auto coord = fb::CoordinatorProcess::Start(
      {coord_bin, state_dir, {"--heartbeat-timeout=60s"}});
  if (!coord.ok()) return Fail(coord.status().ToString());
  const std::string target = (*coord)->address();
  int rc = 0;
  std::string json;
  {
    fb::SimCluster cluster(
        {.target = target,
         .workers = workers,
         .channels = std::min(workers, 8),
         .heartbeat_interval_s = hb_ms == 0 ? 0.5 : hb_ms / 1000.0,
         .flood_heartbeats = hb_ms == 0});
    absl::Status s = cluster.RegisterAll(std::chrono::seconds(30));
    if (s.ok()) s = cluster.OpenSessionsAndWaitAlive(std::chrono::seconds(30));
    if (!s.ok()) return Fail(absl::StrCat("workers: ", s.ToString()));
    absl::StatusOr<std::string> job =
        fb::SubmitGangJob(target, "p4-reports", workers, std::chrono::seconds(30));
    if (!job.ok()) return Fail(job.status().ToString());
    s = cluster.WaitAllStarted(std::chrono::seconds(30));
    if (!s.ok()) return Fail(absl::StrCat("job start: ", s.ToString()));
    std::vector<fb::ReceivedTask> tasks = cluster.Received();

    Shared shared;
    shared.ref = tasks[0].task.ref();
    shared.world = tasks[0].task.world_size();
    if (shared.world != workers)
      return Fail(absl::StrCat("job start: world size ", shared.world,
                               ", not ", workers));
    shared.tokens.resize(shared.world);
    for (size_t w = 0; w < tasks.size(); ++w) {
      const v1::TaskSpec& t = tasks[w].task;
      const int r = t.rank();
      if (r < 0 || r >= shared.world || !shared.tokens[r].empty() ||
          t.token().empty() || t.ref().job_id() != shared.ref.job_id() ||
          t.ref().generation() != shared.ref.generation())
        return Fail(absl::StrCat(
            "job start: worker ", w, " got rank ", r, " of job ",
            t.ref().job_id(), " generation ", t.ref().generation(),
            t.token().empty() ? " without a token" : "",
            r >= 0 && r < shared.world && !shared.tokens[r].empty()
                ? " (rank already taken)" : ""));
      shared.tokens[r] = t.token();
    }
    std::vector<std::atomic<int64_t>> steps(shared.world);
    shared.steps = &steps;
    shared.batch = batch;

    std::vector<std::shared_ptr<grpc::Channel>> chans;
    std::vector<std::unique_ptr<v1::TrainerService::Stub>> stubs;
    for (int i = 0; i < channels; ++i) {
      chans.push_back(fb::PrivateChannel(target, 2000 + i));
      stubs.push_back(v1::TrainerService::NewStub(chans.back()));
    }
    std::vector<std::unique_ptr<Caller>> cs;
    for (int i = 0; i < callers; ++i)
      cs.push_back(std::make_unique<Caller>(&shared, stubs[i % channels].get(),
                                            i % shared.world, callers));
    const int64_t t_start = NowNs();
    shared.measure_from_ns = t_start + static_cast<int64_t>(warmup_s * 1e9);
    shared.stop_at_ns =
        shared.measure_from_ns.load() + static_cast<int64_t>(duration_s * 1e9);
    for (auto& c : cs) c->Issue();
    // Wait for the window to open, then take the start counters.
    while (NowNs() < shared.measure_from_ns.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int64_t hb0 = cluster.heartbeats_sent();
    const double scpu0 = (*coord)->CpuSeconds(), ccpu0 = ProcessCpuSeconds();
    while (NowNs() < shared.stop_at_ns.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int64_t hb1 = cluster.heartbeats_sent();
    const double scpu1 = (*coord)->CpuSeconds(), ccpu1 = ProcessCpuSeconds();
    // Drain: every session writes a log chunk after its heartbeats; when all
    // rank log files exist, the coordinator has handled every heartbeat.
    const int64_t t_end = NowNs();
    std::vector<int> rank_of_worker;
    for (const auto& t : tasks) rank_of_worker.push_back(t.task.rank());
    v1::LogUpload marker;
    *marker.mutable_ref() = shared.ref;
    marker.set_stream("stdout");
    marker.set_data("p4 heartbeat drain marker\n");
    cluster.SendMarkers(marker, rank_of_worker);
    double drain_s = -1;
    const int64_t drain_deadline = t_end + static_cast<int64_t>(drain_timeout_s * 1e9);
    while (drain_s < 0 && NowNs() < drain_deadline) {
      int present = 0;
      for (int r : rank_of_worker) {
        std::error_code ec;
        present += fs::file_size(fs::path((*coord)->state_dir()) / "logs" / shared.ref.job_id() /
                                     absl::StrCat("rank-", r, ".log"),
                                 ec) > 0 && !ec;
      }
      if (present == workers) drain_s = (NowNs() - t_end) / 1e9;
      else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // drain_s < 0: the backlog was still paced out at the deadline.
    {
      absl::MutexLock l(&shared.mu);
      const absl::Time deadline = absl::Now() + absl::Seconds(15);
      while (shared.finished < callers && absl::Now() < deadline)
        shared.cv.WaitWithTimeout(&shared.mu, absl::Milliseconds(100));
      if (shared.finished < callers)
        return Fail(absl::StrCat(callers - shared.finished,
                                 " callers did not finish within 15 s"));
      if (!shared.errors.empty()) rc = Fail(shared.first_error);
    }
    auto jobs = v1::JobService::NewStub(fb::PrivateChannel(target, 1000));
    grpc::ClientContext gctx;
    gctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GetJobRequest greq;
    greq.set_job_id(*job);
    v1::JobStatus status;
    grpc::Status gs = jobs->GetJob(&gctx, greq, &status);
    if (!gs.ok()) return Fail(absl::StrCat("GetJob: ", gs.error_message()));
    if (status.state() != v1::RUNNING)
      rc = Fail(absl::StrCat("job is ", v1::JobState_Name(status.state()),
                             " after the load: ", status.reason()));

    std::vector<uint32_t> lat;
    int64_t ok = 0;
    for (auto& c : cs) {
      lat.insert(lat.end(), c->latencies_us().begin(), c->latencies_us().end());
      ok += c->ok_measured();
    }
    const double p50 = Percentile(lat, 0.50), p90 = Percentile(lat, 0.90),
                 p99 = Percentile(lat, 0.99), pmax = Percentile(lat, 1.0);
    json = absl::StrCat(
        "{\"workers\":", workers, ",\"callers\":", callers,
        ",\"channels\":", channels, ",\"batch\":", batch,
        ",\"heartbeat_interval_ms\":", hb_ms,
        ",\"duration_s\":", duration_s, ",\"reports_ok\":", ok,
        ",\"reports_per_s\":", ok / duration_s, ",\"p50_ms\":", p50,
        ",\"p90_ms\":", p90, ",\"p99_ms\":", p99, ",\"max_ms\":", pmax,
        ",\"heartbeats_sent_per_s\":", (hb1 - hb0) / duration_s,
        ",\"heartbeat_drain_s\":", drain_s,
        ",\"heartbeats_per_s\":",
        drain_s < 0 ? std::string("null") : absl::StrCat((hb1 - hb0) / (duration_s + drain_s)),
        ",\"messages_per_s\":",
        drain_s < 0 ? std::string("null")
                    : absl::StrCat(ok / duration_s + (hb1 - hb0) / (duration_s + drain_s)),
        ",\"server_cpu_cores\":", (scpu1 - scpu0) / duration_s,
        ",\"client_cpu_cores\":", (ccpu1 - ccpu0) / duration_s,
        ",\"job_step\":", status.step(), ",\"job_state\":\"",
        v1::JobState_Name(status.state()), "\"}");
    cluster.Shutdown();
  }
  (*coord)->Stop();
  if (rc == 0) std::printf("%s\n", json.c_str());
  return rc;
}
