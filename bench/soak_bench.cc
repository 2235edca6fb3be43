// Soak: a real frameworm-coordinator process on 127.0.0.1 under a steady
// cluster-sized load for minutes, sampled every --sample-s (issue #8).
//
// Set-up: start frameworm-coordinator with a fresh --state-dir (a temporary
// one, or --state-dir=DIR, which must not exist or be empty; plaintext on
// loopback; the daemon's default flags plus any --coordinator-arg=FLAG);
// register --workers simulated workers (1 slot each) and open one
// WorkerService.Session stream per worker on the callback client API,
// spread over --session-channels connections (so 1000 workers need neither
// 1000 threads nor 1000 sockets; RLIMIT_NOFILE is raised to its hard limit
// anyway, for larger --*-channels). Every session
// heartbeats every `heartbeat_interval_s` the coordinator's
// RegisterWorkerResponse asks for (1 s by default, the real worker's
// default too; --heartbeat-interval-s overrides), the sessions' phases
// spread evenly over the interval like unsynchronised real workers. A
// simulated worker runs nothing: on StartTask it records the task (job id,
// generation, rank, FRAMEWORM_TOKEN) and answers TaskStatus RUNNING, as a
// real worker does once the trainer is up; a KillTask or a session that
// ends is an error. Then --jobs jobs of nodes = workers / jobs x 1 process
// (bench/p3_sim_cluster.cc SubmitGangJob: /bin/true, 60 s heartbeat
// timeout) are submitted, and the run waits until every worker received its
// StartTask.
//
// Load, for --duration-s: every rank of every job reports one step every
// --step-interval-ms (default 1000: a 1 s training step) through
// TrainerService.ReportStep with its own token, steps 1, 2, 3, ... and two
// metric values (loss, accuracy), like a trainer's per-step report. The
// ranks of one job report together (their steps are synchronised by the
// collective), the jobs' phases spread evenly over the interval; calls go
// over --report-channels connections. A rank has at most one report in
// flight; a report that falls due while the previous one is still running
// goes out when that one completes (counted as `late`).
//
// Samples: one before the load starts (sample 0), then one every
// --sample-s: coordinator RSS and peak RSS (VmRSS, VmHWM in
// /proc/<pid>/status), threads, open file descriptors (entries of
// /proc/<pid>/fd), database size (the SQLite files in the state dir: *.db,
// *-wal, *-shm, *-journal), the coordinator's log and the whole state dir;
// over the window since the previous sample: ReportStep latency
// p50/p99/max (client-side, issue -> completion callback, attributed to the
// window the call completed in), reports/s, refused or failed reports by
// gRPC code, late reports, heartbeats written, coordinator and load
// generator CPU (cores); and the jobs' states and newest aggregated step
// (ListJobs). To tell latency spikes apart, a probe thread also looks once
// a second at coordinator.db (in WAL mode only a checkpoint writes it: size
// or mtime changed), the coordinator's CPU and the whole machine's busy and
// iowait CPU (/proc/stat); each sample lists that window's checkpoint
// seconds (`checkpoint_s`) and its slow seconds (`slow_s`: seconds whose
// slowest report took >= 20 ms, as [t, max ms, reports over 10 ms, machine
// busy cores, iowait cores, coordinator cores]), and the summary counts
// slow seconds within 1 s of a checkpoint and on a saturated machine.
// The last sample is taken after the load stopped and every
// report in flight completed. Output: one JSON line per sample, then one
// summary JSON line (totals, the database size after the coordinator's
// clean shutdown, bytes per report). Exit status 1 when set-up fails, a
// report is refused or fails, a worker is told to kill a task, a session
// ends, a job is not RUNNING at the end, or the run is interrupted
// (SIGINT/SIGTERM); latency is measured, not judged (bench/soak.sh writes
// the verdicts).
//
// Everything it starts it stops: the sessions are cancelled, the
// coordinator gets SIGTERM (SIGKILL after 5 s; it also dies with this
// process), and a temporary state dir is removed (a --state-dir given is
// kept). Every wait is bounded.
//
// Threads: the main thread (set-up, samples), one heartbeat pacer, one
// report pacer, one probe thread, and gRPC's callback threads for the
// reactors.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/p3_sim_cluster.h"

namespace fb = frameworm::bench;
namespace v1 = frameworm::v1;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void OnSignal(int) { g_interrupted = 1; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "soak_bench: %s\n", msg.c_str());
  return 1;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Busy and iowait jiffies of the whole machine (first line of /proc/stat).
std::pair<int64_t, int64_t> MachineCpuJiffies() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  int64_t v[10] = {0};
  in >> cpu;
  for (int i = 0; i < 10 && in >> v[i]; ++i) {
  }
  // user nice system idle iowait irq softirq steal guest guest_nice; guest
  // time is already in user.
  const int64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  return {busy, v[4]};
}

// One probe per second of the load, taken at load start + t seconds.
struct SecondProbe {
  int t = 0;
  // coordinator.db: in WAL mode only a checkpoint writes to it.
  int64_t db_main = 0;
  int64_t db_mtime_ns = 0;
  double coordinator_cpu = 0;  // seconds used so far
  int64_t busy = 0, iowait = 0;  // machine jiffies so far
};

// A "Name:   123 kB" field of /proc/<pid>/status (its number), -1 if absent.
int64_t ProcStatusField(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, name + ":")) continue;
    int64_t v = -1;
    std::string rest = line.substr(name.size() + 1);
    std::string digits;
    for (char c : rest)
      if (c >= '0' && c <= '9') digits += c;
      else if (!digits.empty()) break;
    if (absl::SimpleAtoi(digits, &v)) return v;
    return -1;
  }
  return -1;
}

int64_t CountFds(pid_t pid) {
  std::error_code ec;
  int64_t n = 0;
  for (fs::directory_iterator it(absl::StrCat("/proc/", pid, "/fd"), ec), end;
       !ec && it != end; it.increment(ec))
    ++n;
  return ec ? -1 : n;
}

struct DirSizes {
  int64_t db = 0;       // *.db, *-wal, *-shm, *-journal
  int64_t db_main = 0;  // *.db only
  int64_t wal = 0;      // *-wal only
  int64_t log = 0;      // coordinator.log (the daemon's stdout+stderr)
  int64_t total = 0;    // every regular file
};

DirSizes StateDirSizes(const std::string& dir) {
  DirSizes d;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2) || e2) continue;
    const int64_t size = static_cast<int64_t>(it->file_size(e2));
    if (e2) continue;  // removed meanwhile
    const std::string name = it->path().filename().string();
    d.total += size;
    if (absl::EndsWith(name, ".db")) d.db_main += size;
    if (absl::EndsWith(name, "-wal")) d.wal += size;
    if (absl::EndsWith(name, ".db") || absl::EndsWith(name, "-wal") ||
        absl::EndsWith(name, "-shm") || absl::EndsWith(name, "-journal"))
      d.db += size;
    if (name == "coordinator.log") d.log += size;
  }
  return d;
}

double Percentile(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * (v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k] / 1000.0;  // ms
}

// Everything the reactors report to the main thread.
struct Shared {
  absl::Mutex mu;
  absl::CondVar cv;  // signalled on every change under mu
  // Sessions.
  std::vector<v1::TaskSpec> tasks ABSL_GUARDED_BY(mu);  // index = worker
  std::vector<bool> started ABSL_GUARDED_BY(mu);
  int started_count ABSL_GUARDED_BY(mu) = 0;
  int sessions_done ABSL_GUARDED_BY(mu) = 0;
  int64_t kills ABSL_GUARDED_BY(mu) = 0;
  int64_t session_errors ABSL_GUARDED_BY(mu) = 0;
  // Reports, for the current window.
  std::vector<uint32_t> window_lat_us ABSL_GUARDED_BY(mu);
  std::map<int, int64_t> window_errors ABSL_GUARDED_BY(mu);  // code -> n
  int64_t window_stop ABSL_GUARDED_BY(mu) = 0;   // responses with stop
  int64_t window_ckpt ABSL_GUARDED_BY(mu) = 0;   // checkpoint_at_step > 0
  int in_flight ABSL_GUARDED_BY(mu) = 0;
  std::string first_error ABSL_GUARDED_BY(mu);
  bool shutting_down ABSL_GUARDED_BY(mu) = false;

  std::atomic<int64_t> heartbeats{0};        // writes completed
  std::atomic<int64_t> heartbeats_skipped{0};  // previous one still queued
  std::atomic<int64_t> late{0};

  // Per second of the load (index: whole seconds from load_start_ns to a
  // report's completion): the slowest report, and reports over 10 ms.
  int64_t load_start_ns ABSL_GUARDED_BY(mu) = 0;
  std::vector<uint32_t> sec_max_us ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> sec_over10 ABSL_GUARDED_BY(mu);

  void Error(const std::string& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (first_error.empty()) first_error = e;
  }
};

// One simulated worker's Session stream.
class SimWorker final
    : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  SimWorker(Shared* shared, int index, std::string session_id)
      : shared_(shared), index_(index), session_id_(std::move(session_id)) {}

  void Start(v1::WorkerService::Stub* stub) {
    stub->async()->Session(&ctx_, this);
    StartRead(&in_);
    AddHold();  // writes come from the heartbeat thread; Close() removes it
    {
      absl::MutexLock l(&mu_);
      hb_queued_ = true;
      queue_.push_back(HeartbeatMessage());  // the first message attaches
      WriteNextLocked();
    }
    StartCall();
  }

  // Queues a heartbeat unless one is still queued or being written.
  void Heartbeat() {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    if (hb_queued_) {
      shared_->heartbeats_skipped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    hb_queued_ = true;
    queue_.push_back(HeartbeatMessage());
    if (!writing_) WriteNextLocked();
  }

  void Close() {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    closed_ = true;
    ctx_.TryCancel();
    RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock l(&mu_);
    writing_ = false;
    if (out_.has_heartbeat()) {
      hb_queued_ = false;
      if (ok) shared_->heartbeats.fetch_add(1, std::memory_order_relaxed);
    }
    if (!ok || closed_) return;
    if (!queue_.empty()) WriteNextLocked();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock l(&shared_->mu);
      if (!shared_->shutting_down) {
        ++shared_->session_errors;
        shared_->Error(absl::StrCat("session of worker ", index_,
                                    " ended (read failed)"));
        shared_->cv.SignalAll();
      }
      return;
    }
    if (in_.has_start()) {
      const v1::TaskSpec task = in_.start().task();
      {
        absl::MutexLock l(&shared_->mu);
        if (shared_->started[index_]) {
          shared_->Error(absl::StrCat("worker ", index_,
                                      " got a second StartTask"));
        } else {
          shared_->started[index_] = true;
          shared_->tasks[index_] = task;
          ++shared_->started_count;
        }
        shared_->cv.SignalAll();
      }
      // What a real worker says once the trainer runs.
      v1::WorkerMessage m;
      m.set_session_id(session_id_);
      v1::TaskStatus& st = *m.mutable_task_status();
      *st.mutable_ref() = task.ref();
      st.set_rank(task.rank());
      st.set_state(v1::TASK_RUNNING);
      st.set_pid(100000 + index_);
      absl::MutexLock l(&mu_);
      if (!closed_) {
        queue_.push_back(std::move(m));
        if (!writing_) WriteNextLocked();
      }
    } else if (in_.has_kill()) {
      absl::MutexLock l(&shared_->mu);
      ++shared_->kills;
      shared_->Error(absl::StrCat("worker ", index_, " told to kill job ",
                                  in_.kill().ref().job_id(), " rank ",
                                  in_.kill().rank()));
      shared_->cv.SignalAll();
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& s) override {
    absl::MutexLock l(&shared_->mu);
    ++shared_->sessions_done;
    if (!shared_->shutting_down) {
      ++shared_->session_errors;
      shared_->Error(absl::StrCat("session of worker ", index_, " ended: ",
                                  s.error_code(), " ", s.error_message()));
    }
    shared_->cv.SignalAll();
  }

 private:
  v1::WorkerMessage HeartbeatMessage() const {
    v1::WorkerMessage m;
    m.set_session_id(session_id_);
    m.mutable_heartbeat()->set_unix_ms(absl::ToUnixMillis(absl::Now()));
    return m;
  }
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    out_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&out_);
  }

  Shared* const shared_;
  const int index_;
  const std::string session_id_;
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;  // read chain only
  absl::Mutex mu_;
  std::deque<v1::WorkerMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::WorkerMessage out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool hb_queued_ ABSL_GUARDED_BY(mu_) = false;  // queued or being written
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// One rank's trainer: one ReportStep in flight at most.
class Reporter {
 public:
  Reporter(Shared* shared, v1::TrainerService::Stub* stub, v1::JobRef ref,
           int rank, double step_seconds)
      : shared_(shared), stub_(stub), rank_(rank), step_seconds_(step_seconds) {
    *req_.mutable_ref() = std::move(ref);
    req_.set_rank(rank_);
  }

  // The next step is due (report pacer thread).
  void Due() {
    {
      absl::MutexLock l(&mu_);
      if (stopped_) return;
      if (in_flight_) {
        behind_ = true;
        shared_->late.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      in_flight_ = true;
    }
    Issue();
  }

  // No report is started after this; one in flight still completes.
  void Stop() {
    absl::MutexLock l(&mu_);
    stopped_ = true;
  }

 private:
  // Only the thread that set in_flight_ gets here: it owns req_ and ctx_.
  // `first`: a new call (counted in Shared::in_flight); else the late
  // step that replaces the call just completed (already counted).
  void Issue(bool first = true) {
    if (first) {
      absl::MutexLock l(&shared_->mu);
      ++shared_->in_flight;
    }
    cur_ ^= 1;  // the previous call's context may still be on the stack
    ctx_[cur_] = std::make_unique<grpc::ClientContext>();
    ctx_[cur_]->set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(10));
    ++step_;
    req_.set_step(step_);
    req_.set_epoch(static_cast<int>(step_ / 1000));
    req_.set_samples(32);
    req_.set_step_seconds(step_seconds_);
    (*req_.mutable_values())["loss"] = 2.0 / (1 + 0.01 * step_);
    (*req_.mutable_values())["accuracy"] = 1.0 - 1.0 / (2 + 0.01 * step_);
    start_ns_ = NowNs();
    stub_->async()->ReportStep(ctx_[cur_].get(), &req_, &resp_,
                               [this](grpc::Status s) { OnDone(s); });
  }

  void OnDone(const grpc::Status& s) {
    const int64_t end = NowNs();
    {
      absl::MutexLock l(&shared_->mu);
      if (s.ok()) {
        shared_->window_lat_us.push_back(
            static_cast<uint32_t>(std::min<int64_t>((end - start_ns_) / 1000,
                                                    UINT32_MAX)));
        if (resp_.stop()) ++shared_->window_stop;
        if (resp_.checkpoint_at_step() > 0) ++shared_->window_ckpt;
        const int64_t sec = (end - shared_->load_start_ns) / 1'000'000'000;
        if (sec >= 0 && sec < static_cast<int64_t>(shared_->sec_max_us.size())) {
          const uint32_t us = shared_->window_lat_us.back();
          shared_->sec_max_us[sec] = std::max(shared_->sec_max_us[sec], us);
          if (us > 10'000) ++shared_->sec_over10[sec];
        }
      } else {
        shared_->window_errors[s.error_code()]++;
        shared_->Error(absl::StrCat("ReportStep job ", req_.ref().job_id(),
                                    " rank ", rank_, " step ", step_, ": ",
                                    s.error_code(), " ", s.error_message()));
      }
    }
    bool again;
    {
      absl::MutexLock l(&mu_);
      again = behind_ && !stopped_;
      behind_ = false;
      in_flight_ = again;  // the late step goes out now
    }
    if (again) {
      Issue(false);
      return;
    }
    // Last touch of this object: the owner may delete it once in_flight is 0.
    absl::MutexLock l(&shared_->mu);
    --shared_->in_flight;
    shared_->cv.SignalAll();
  }

  Shared* const shared_;
  v1::TrainerService::Stub* const stub_;
  const int rank_;
  const double step_seconds_;
  std::unique_ptr<grpc::ClientContext> ctx_[2];
  int cur_ = 0;
  v1::StepMetrics req_;
  v1::ReportStepResponse resp_;
  int64_t step_ = 0;
  int64_t start_ns_ = 0;
  absl::Mutex mu_;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool behind_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Calls fire(i) for i in [0, n) once per `interval`, item i at phase
// i * interval / n, from `start` until `stop` is set or `end` passes.
void Pace(int n, std::chrono::nanoseconds interval, int64_t start_ns,
          int64_t end_ns, const std::atomic<bool>& stop,
          const std::function<void(int)>& fire) {
  const int64_t iv = interval.count();
  int64_t c = 0;  // firings so far
  auto due = [&](int64_t k) {
    return start_ns + (k / n) * iv + (k % n) * iv / n;
  };
  while (!stop.load() && !g_interrupted) {
    const int64_t now = NowNs();
    if (now >= end_ns) return;
    while (due(c) <= now) fire(static_cast<int>(c++ % n));
    const int64_t wait = std::min<int64_t>(due(c) - NowNs(), 5'000'000);
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
  }
}

struct JobCounts {
  bool ok = false;
  std::string error;
  std::map<std::string, int> states;  // state name -> jobs
  int64_t min_step = 0, max_step = 0, sum_step = 0;
  std::vector<std::string> not_running;  // "id: STATE reason"
};

JobCounts ListJobsNow(v1::JobService::Stub* jobs) {
  JobCounts out;
  std::string token;
  bool first = true;
  for (int page = 0; page < 100; ++page) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ListJobsRequest req;
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs->ListJobs(&ctx, req, &resp);
    if (!s.ok()) {
      out.error = absl::StrCat("ListJobs: ", s.error_code(), " ", s.error_message());
      return out;
    }
    for (const auto& j : resp.jobs()) {
      out.states[v1::JobState_Name(j.state())]++;
      if (j.state() != v1::RUNNING && out.not_running.size() < 5)
        out.not_running.push_back(absl::StrCat(
            j.job_id(), ": ", v1::JobState_Name(j.state()), " ", j.reason()));
      out.min_step = first ? j.step() : std::min(out.min_step, j.step());
      out.max_step = first ? j.step() : std::max(out.max_step, j.step());
      out.sum_step += j.step();
      first = false;
    }
    token = resp.next_page_token();
    if (token.empty()) {
      out.ok = true;
      return out;
    }
  }
  out.error = "ListJobs: more than 100 pages";
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += absl::StrFormat("\\u%04x", c);
    else out += c;
  }
  return out + "\"";
}

std::string StatesJson(const std::map<std::string, int>& m) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : m) parts.push_back(absl::StrCat("\"", k, "\":", v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string ErrorsJson(const std::map<int, int64_t>& m) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : m) parts.push_back(absl::StrCat("\"", k, "\":", v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> known = {
      "workers", "jobs", "duration-s", "sample-s", "step-interval-ms",
      "heartbeat-interval-s", "session-channels", "report-channels",
      "coordinator", "state-dir", "coordinator-arg"};
  if (absl::Status s = fb::CheckKnownFlags(argc, argv, known); !s.ok())
    return Fail(std::string(s.message()));
  auto flag = [&](const std::string& name, const std::string& def) {
    return *fb::FlagValue(argc, argv, name, def);
  };
  int workers, jobs, step_ms, session_channels, report_channels;
  double duration_s, sample_s, hb_override_s;
  if (!absl::SimpleAtoi(flag("workers", "1000"), &workers) || workers < 1 ||
      workers > 5000)
    return Fail("--workers must be in [1, 5000]");
  if (!absl::SimpleAtoi(flag("jobs", "100"), &jobs) || jobs < 1 || jobs > workers)
    return Fail("--jobs must be in [1, workers]");
  if (workers % jobs != 0)
    return Fail("--workers must be a multiple of --jobs (nodes = workers / jobs)");
  if (!absl::SimpleAtod(flag("duration-s", "600"), &duration_s) ||
      duration_s <= 0 || duration_s > 7200)
    return Fail("--duration-s must be in (0, 7200]");
  if (!absl::SimpleAtod(flag("sample-s", "60"), &sample_s) || sample_s < 1 ||
      sample_s > duration_s)
    return Fail("--sample-s must be in [1, duration-s]");
  if (!absl::SimpleAtoi(flag("step-interval-ms", "1000"), &step_ms) ||
      step_ms < 10 || step_ms > 60000)
    return Fail("--step-interval-ms must be in [10, 60000]");
  if (!absl::SimpleAtod(flag("heartbeat-interval-s", "0"), &hb_override_s) ||
      hb_override_s < 0 || hb_override_s > 60)
    return Fail("--heartbeat-interval-s must be in [0, 60] (0: as the coordinator says)");
  if (!absl::SimpleAtoi(flag("session-channels", "8"), &session_channels) ||
      session_channels < 1 || session_channels > workers)
    return Fail("--session-channels must be in [1, workers]");
  // Each worker's Session stream stays open; a connection carries at most
  // 256 open calls (rpc/rpc.h max_streams_per_connection).
  if ((workers + session_channels - 1) / session_channels > 256)
    return Fail("--session-channels must be at least workers / 256 (a connection carries at "
                "most 256 open sessions)");
  if (!absl::SimpleAtoi(flag("report-channels", "8"), &report_channels) ||
      report_channels < 1 || report_channels > workers)
    return Fail("--report-channels must be in [1, workers]");
  const std::string coord_bin = flag(
      "coordinator",
      (fs::path(argv[0]).parent_path() / "frameworm-coordinator").string());
  const std::string state_dir_flag = flag("state-dir", "");
  // Extra frameworm-coordinator flags, one per --coordinator-arg= (e.g.
  // --coordinator-arg=--metric-history=100); none by default.
  std::vector<std::string> coord_args;
  for (int i = 1; i < argc; ++i)
    if (absl::StartsWith(argv[i], "--coordinator-arg="))
      coord_args.push_back(argv[i] + std::string("--coordinator-arg=").size());
  const int nodes = workers / jobs;
  const int nsamples = static_cast<int>(std::ceil(duration_s / sample_s - 1e-9));

  // Sockets: 2 x channels here, as many in the coordinator; the child
  // inherits the raised limit.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto coord_or = fb::CoordinatorProcess::Start({coord_bin, state_dir_flag, coord_args});
  if (!coord_or.ok()) return Fail(coord_or.status().ToString());
  std::unique_ptr<fb::CoordinatorProcess> coord = std::move(*coord_or);
  const std::string target = coord->address();
  const pid_t cpid = coord->pid();
  const std::string state_dir = coord->state_dir();

  Shared shared;
  {
    absl::MutexLock l(&shared.mu);
    shared.tasks.resize(workers);
    shared.started.assign(workers, false);
  }
  std::vector<std::shared_ptr<grpc::Channel>> wchans;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> wstubs;
  for (int i = 0; i < session_channels; ++i) {
    wchans.push_back(fb::PrivateChannel(target, i));
    wstubs.push_back(v1::WorkerService::NewStub(wchans.back()));
  }
  auto admin = v1::JobService::NewStub(fb::PrivateChannel(target, 3000));
  std::vector<SimWorker*> sessions;  // owned; deleted once all are done
  std::vector<std::unique_ptr<Reporter>> reporters;
  std::thread hb_thread, report_thread, probe_thread;
  std::atomic<bool> stop_hb{false}, stop_reports{false}, stop_probes{false};
  int rc = 0;
  std::string setup_error;
  double hb_interval_s = 0;
  double register_s = 0, attach_s = 0, start_s = 0;
  DirSizes after_stop;
  std::string stop_status;
  // Ends the run from any point: stops the pacers and reporters, closes
  // the sessions, stops the coordinator (the state dir goes with `coord`).
  auto teardown = [&]() {
    stop_probes = true;
    if (probe_thread.joinable()) probe_thread.join();
    stop_reports = true;
    if (report_thread.joinable()) report_thread.join();
    for (auto& r : reporters) r->Stop();
    {
      absl::MutexLock l(&shared.mu);
      const absl::Time deadline = absl::Now() + absl::Seconds(15);
      while (shared.in_flight > 0 && absl::Now() < deadline)
        shared.cv.WaitWithTimeout(&shared.mu, absl::Milliseconds(100));
      if (shared.in_flight > 0) {
        std::fprintf(stderr, "soak_bench: %d reports still in flight; leaking them\n",
                     shared.in_flight);
        for (auto& r : reporters) r.release();
      }
      shared.shutting_down = true;
    }
    reporters.clear();
    stop_hb = true;
    if (hb_thread.joinable()) hb_thread.join();
    for (SimWorker* s : sessions) s->Close();
    {
      absl::MutexLock l(&shared.mu);
      const int n = static_cast<int>(sessions.size());
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (shared.sessions_done < n && absl::Now() < deadline)
        shared.cv.WaitWithTimeout(&shared.mu, absl::Milliseconds(100));
      if (shared.sessions_done < n) {
        std::fprintf(stderr, "soak_bench: %d of %d sessions did not end; leaking them\n",
                     n - shared.sessions_done, n);
        sessions.clear();
      }
    }
    for (SimWorker* s : sessions) delete s;
    sessions.clear();
    stop_status = coord->Stop();
    after_stop = StateDirSizes(state_dir);
  };

  // ---------------------------------------------------------------- set-up
  const int64_t t_setup = NowNs();
  {
    struct Call {
      grpc::ClientContext ctx;
      v1::RegisterWorkerRequest req;
      v1::RegisterWorkerResponse resp;
    };
    std::vector<std::unique_ptr<Call>> calls(workers);
    absl::Mutex mu;
    absl::CondVar cv;
    int answered = 0;
    std::string error;
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(60);
    for (int i = 0; i < workers; ++i) {
      calls[i] = std::make_unique<Call>();
      Call& c = *calls[i];
      c.ctx.set_deadline(deadline);
      c.req.set_name(absl::StrFormat("soak-%05d", i));
      c.req.set_address("127.0.0.1");
      c.req.set_slots(1);
      c.req.set_instance(absl::StrCat("soak-", getpid(), "-", i));
      wstubs[i % session_channels]->async()->RegisterWorker(
          &c.ctx, &c.req, &c.resp, [&, i](grpc::Status s) {
            absl::MutexLock l(&mu);
            if (!s.ok() && error.empty())
              error = absl::StrCat("RegisterWorker of soak-", i, ": ",
                                   s.error_message());
            ++answered;
            cv.SignalAll();
          });
    }
    {
      absl::MutexLock l(&mu);
      while (answered < workers) cv.Wait(&mu);  // every call has a deadline
    }
    if (!error.empty()) setup_error = error;
    register_s = (NowNs() - t_setup) / 1e9;
    if (setup_error.empty()) {
      hb_interval_s = hb_override_s > 0 ? hb_override_s
                                        : calls[0]->resp.heartbeat_interval_s();
      if (hb_interval_s <= 0) hb_interval_s = 1.0;  // the worker's default
      for (int i = 0; i < workers; ++i) {
        sessions.push_back(new SimWorker(&shared, i, calls[i]->resp.session_id()));
        sessions.back()->Start(wstubs[i % session_channels].get());
      }
      // The first heartbeat went with Start(); the next one an interval on.
      const int64_t hb_start =
          NowNs() + static_cast<int64_t>(hb_interval_s * 1e9);
      hb_thread = std::thread([&] {
        Pace(workers,
             std::chrono::nanoseconds(static_cast<int64_t>(hb_interval_s * 1e9)),
             hb_start, INT64_MAX, stop_hb,
             [&](int i) { sessions[i]->Heartbeat(); });
      });
    }
  }
  // Every worker alive.
  for (int attempt = 0; setup_error.empty(); ++attempt) {
    int alive = 0;
    std::string token;
    for (int page = 0; page < 100; ++page) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::ListWorkersRequest req;
      req.set_page_token(token);
      v1::ListWorkersResponse resp;
      grpc::Status s = admin->ListWorkers(&ctx, req, &resp);
      if (!s.ok()) {
        setup_error = absl::StrCat("ListWorkers: ", s.error_message());
        break;
      }
      for (const auto& w : resp.workers()) alive += w.alive() ? 1 : 0;
      token = resp.next_page_token();
      if (token.empty()) break;
    }
    if (!setup_error.empty()) break;
    if (alive == workers) break;
    {
      absl::MutexLock l(&shared.mu);
      if (!shared.first_error.empty()) setup_error = shared.first_error;
    }
    if (attempt >= 6000 || g_interrupted)  // 60 s
      setup_error = absl::StrCat(alive, " of ", workers, " workers alive after 60 s");
    if (!setup_error.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  attach_s = (NowNs() - t_setup) / 1e9 - register_s;
  std::vector<std::string> job_ids;
  for (int j = 0; setup_error.empty() && j < jobs; ++j) {
    auto id = fb::SubmitGangJob(target, absl::StrFormat("soak-%03d", j), nodes,
                                std::chrono::seconds(30));
    if (!id.ok()) setup_error = id.status().ToString();
    else job_ids.push_back(*id);
  }
  // Every worker has its StartTask; every job has ranks 0..nodes-1.
  std::map<std::string, std::vector<v1::TaskSpec>> by_job;
  if (setup_error.empty()) {
    absl::MutexLock l(&shared.mu);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (shared.started_count < workers && shared.first_error.empty() &&
           absl::Now() < deadline && !g_interrupted)
      shared.cv.WaitWithTimeout(&shared.mu, absl::Milliseconds(100));
    if (!shared.first_error.empty()) setup_error = shared.first_error;
    else if (shared.started_count < workers)
      setup_error = absl::StrCat(shared.started_count, " of ", workers,
                                 " workers received StartTask within 60 s");
    else
      for (const auto& t : shared.tasks) by_job[t.ref().job_id()].push_back(t);
  }
  start_s = (NowNs() - t_setup) / 1e9 - register_s - attach_s;
  if (setup_error.empty()) {
    if (static_cast<int>(by_job.size()) != jobs)
      setup_error = absl::StrCat("StartTasks name ", by_job.size(), " jobs, not ", jobs);
    for (auto& [id, ts] : by_job) {
      if (!setup_error.empty()) break;
      std::sort(ts.begin(), ts.end(), [](const v1::TaskSpec& a, const v1::TaskSpec& b) {
        return a.rank() < b.rank();
      });
      for (int r = 0; r < static_cast<int>(ts.size()); ++r) {
        if (ts.size() != static_cast<size_t>(nodes) || ts[r].rank() != r ||
            ts[r].world_size() != nodes || ts[r].token().empty() ||
            ts[r].ref().generation() != ts[0].ref().generation()) {
          setup_error = absl::StrCat("job ", id, ": ", ts.size(), " tasks; rank ",
                                     ts[r].rank(), " world ", ts[r].world_size(),
                                     " generation ", ts[r].ref().generation(),
                                     ts[r].token().empty() ? " without a token" : "");
          break;
        }
      }
    }
  }
  if (!setup_error.empty()) {
    teardown();
    return Fail(absl::StrCat("set-up: ", setup_error));
  }

  // ------------------------------------------------------------------ load
  std::vector<std::shared_ptr<grpc::Channel>> rchans;
  std::vector<std::unique_ptr<v1::TrainerService::Stub>> rstubs;
  for (int i = 0; i < report_channels; ++i) {
    rchans.push_back(fb::PrivateChannel(target, 2000 + i));
    rstubs.push_back(v1::TrainerService::NewStub(rchans.back()));
  }
  std::vector<std::vector<Reporter*>> job_reporters;
  for (const auto& [id, ts] : by_job) {
    job_reporters.emplace_back();
    for (const auto& t : ts) {
      v1::JobRef ref = t.ref();
      ref.set_token(t.token());
      reporters.push_back(std::make_unique<Reporter>(
          &shared, rstubs[reporters.size() % report_channels].get(), ref,
          t.rank(), step_ms / 1000.0));
      job_reporters.back().push_back(reporters.back().get());
    }
  }

  struct Sample {
    int index;
    double t_s;
    int64_t rss_kb, hwm_kb, threads, fds;
    DirSizes dir;
    int64_t reports_ok;
    std::map<int, int64_t> errors;
  };
  std::vector<Sample> samples;
  // Per-second probes (probe_thread) and what the samples made of them.
  absl::Mutex probes_mu;
  std::vector<SecondProbe> probes ABSL_GUARDED_BY(probes_mu);
  size_t probes_seen = 1;  // probes[0] is the baseline at the load's start
  int64_t load_start = 0;
  int checkpoint_seconds = 0, slow_seconds = 0, slow_near_checkpoint = 0,
      slow_machine_busy = 0;
  std::vector<int> all_checkpoint_s;
  std::vector<std::pair<int, uint32_t>> all_slow_s;  // (t, max us)
  std::vector<double> all_slow_busy;
  int64_t total_ok = 0, total_failed = 0, total_stop = 0, total_ckpt = 0;
  std::map<int, int64_t> total_errors;
  std::vector<uint32_t> all_lat;
  all_lat.reserve(static_cast<size_t>(workers * (duration_s * 1000.0 / step_ms) * 1.05));
  double max_window_p99 = 0;
  int64_t prev_hb = shared.heartbeats.load(), prev_late = 0, prev_hb_skipped = 0;
  double prev_ccpu = coord->CpuSeconds(), prev_lcpu = ProcessCpuSeconds();
  std::string last_jobs_error;
  JobCounts last_jobs;

  const int64_t t0 = NowNs();
  int64_t prev_t = t0;
  // One sample: /proc, the state dir, the window's reports; JSON to stdout.
  auto take_sample = [&](int index) {
    const int64_t now = NowNs();
    Sample s;
    s.index = index;
    s.t_s = (now - t0) / 1e9;
    s.rss_kb = ProcStatusField(cpid, "VmRSS");
    s.hwm_kb = ProcStatusField(cpid, "VmHWM");
    s.threads = ProcStatusField(cpid, "Threads");
    s.fds = CountFds(cpid);
    s.dir = StateDirSizes(state_dir);
    const double ccpu = coord->CpuSeconds(), lcpu = ProcessCpuSeconds();
    const int64_t hb = shared.heartbeats.load(), late = shared.late.load(),
                  hb_skipped = shared.heartbeats_skipped.load();
    // This window's seconds: coordinator.db written (a WAL checkpoint ran)
    // and seconds whose slowest report took >= 20 ms, with the machine's
    // and the coordinator's CPU in that second.
    std::string ckpt_json = "[", slow_json = "[";
    {
      std::vector<SecondProbe> ps;
      {
        absl::MutexLock l(&probes_mu);
        ps = probes;
      }
      std::vector<uint32_t> sec_max, sec_over;
      {
        absl::MutexLock l(&shared.mu);
        sec_max = shared.sec_max_us;
        sec_over = shared.sec_over10;
      }
      const double tck = static_cast<double>(sysconf(_SC_CLK_TCK));
      for (; index > 0 && probes_seen < ps.size(); ++probes_seen) {
        const SecondProbe& a = ps[probes_seen - 1];
        const SecondProbe& b = ps[probes_seen];
        const bool ckpt = b.db_main != a.db_main || b.db_mtime_ns != a.db_mtime_ns;
        if (ckpt) {
          ++checkpoint_seconds;
          all_checkpoint_s.push_back(b.t);
          absl::StrAppend(&ckpt_json, ckpt_json.size() > 1 ? "," : "", b.t);
        }
        const size_t bucket = static_cast<size_t>(b.t - 1);
        if (bucket >= sec_max.size() || sec_max[bucket] < 20'000) continue;
        const double busy = (b.busy - a.busy) / tck, iow = (b.iowait - a.iowait) / tck;
        ++slow_seconds;
        all_slow_s.push_back({b.t, sec_max[bucket]});
        all_slow_busy.push_back(busy);
        absl::StrAppend(&slow_json, slow_json.size() > 1 ? "," : "",
                        absl::StrFormat("[%d,%.1f,%u,%.2f,%.2f,%.2f]", b.t,
                                        sec_max[bucket] / 1000.0, sec_over[bucket],
                                        busy, iow, b.coordinator_cpu - a.coordinator_cpu));
      }
    }
    ckpt_json += "]";
    slow_json += "]";
    std::vector<uint32_t> lat;
    int64_t wstop, wckpt;
    {
      absl::MutexLock l(&shared.mu);
      lat.swap(shared.window_lat_us);
      s.errors.swap(shared.window_errors);
      wstop = shared.window_stop;
      wckpt = shared.window_ckpt;
      shared.window_stop = shared.window_ckpt = 0;
    }
    const double window_s = std::max(1e-9, (now - prev_t) / 1e9);
    JobCounts jc = ListJobsNow(admin.get());
    if (!jc.ok) last_jobs_error = jc.error;
    last_jobs = jc;
    s.reports_ok = static_cast<int64_t>(lat.size());
    int64_t failed = 0;
    for (const auto& [code, n] : s.errors) {
      failed += n;
      total_errors[code] += n;
    }
    total_ok += s.reports_ok;
    total_failed += failed;
    total_stop += wstop;
    total_ckpt += wckpt;
    all_lat.insert(all_lat.end(), lat.begin(), lat.end());
    const double p50 = Percentile(lat, 0.50), p99 = Percentile(lat, 0.99),
                 pmax = Percentile(lat, 1.0);
    if (index > 0) max_window_p99 = std::max(max_window_p99, p99);
    std::printf(
        "{\"sample\":%d,\"t_s\":%.1f,\"window_s\":%.2f,\"rss_kb\":%lld,"
        "\"rss_hwm_kb\":%lld,\"threads\":%lld,\"fds\":%lld,\"db_bytes\":%lld,"
        "\"db_main_bytes\":%lld,\"wal_bytes\":%lld,\"log_bytes\":%lld,"
        "\"state_dir_bytes\":%lld,\"reports_ok\":%lld,\"reports_per_s\":%.1f,"
        "\"failed\":%lld,\"errors\":%s,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
        "\"max_ms\":%.3f,\"late\":%lld,\"stop_responses\":%lld,"
        "\"checkpoint_requests\":%lld,\"heartbeats\":%lld,"
        "\"heartbeats_per_s\":%.1f,\"heartbeats_skipped\":%lld,"
        "\"coordinator_cpu_cores\":%.3f,\"load_generator_cpu_cores\":%.3f,"
        "\"job_states\":%s,\"min_job_step\":%lld,\"max_job_step\":%lld,"
        "\"sum_job_steps\":%lld,\"checkpoint_s\":%s,\"slow_s\":%s}\n",
        index, s.t_s, index == 0 ? 0.0 : window_s, (long long)s.rss_kb,
        (long long)s.hwm_kb, (long long)s.threads, (long long)s.fds,
        (long long)s.dir.db, (long long)s.dir.db_main, (long long)s.dir.wal,
        (long long)s.dir.log, (long long)s.dir.total, (long long)s.reports_ok,
        index == 0 ? 0.0 : s.reports_ok / window_s, (long long)failed,
        ErrorsJson(s.errors).c_str(), p50, p99, pmax,
        (long long)(late - prev_late), (long long)wstop, (long long)wckpt,
        (long long)(hb - prev_hb), index == 0 ? 0.0 : (hb - prev_hb) / window_s,
        (long long)(hb_skipped - prev_hb_skipped),
        index == 0 ? 0.0 : (ccpu - prev_ccpu) / window_s,
        index == 0 ? 0.0 : (lcpu - prev_lcpu) / window_s, StatesJson(jc.states).c_str(),
        (long long)jc.min_step, (long long)jc.max_step, (long long)jc.sum_step,
        ckpt_json.c_str(), slow_json.c_str());
    std::fflush(stdout);
    prev_t = now;
    prev_hb = hb;
    prev_late = late;
    prev_hb_skipped = hb_skipped;
    prev_ccpu = ccpu;
    prev_lcpu = lcpu;
    samples.push_back(std::move(s));
  };

  take_sample(0);  // after set-up, before the first report
  load_start = NowNs();
  {
    absl::MutexLock l(&shared.mu);
    shared.load_start_ns = load_start;
    shared.sec_max_us.assign(static_cast<size_t>(duration_s) + 30, 0);
    shared.sec_over10.assign(static_cast<size_t>(duration_s) + 30, 0);
  }
  probe_thread = std::thread([&] {
    const fs::path db = fs::path(state_dir) / "coordinator.db";
    for (int t = 0; t <= static_cast<int>(duration_s) + 20 && !stop_probes; ++t) {
      const int64_t at = load_start + t * 1'000'000'000LL;
      while (NowNs() < at && !stop_probes)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (stop_probes) return;
      SecondProbe p;
      p.t = t;
      struct stat st{};
      if (stat(db.c_str(), &st) == 0) {
        p.db_main = st.st_size;
        p.db_mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
      }
      p.coordinator_cpu = coord->CpuSeconds();
      std::tie(p.busy, p.iowait) = MachineCpuJiffies();
      absl::MutexLock l(&probes_mu);
      probes.push_back(p);
    }
  });
  const int64_t load_end = load_start + static_cast<int64_t>(duration_s * 1e9);
  report_thread = std::thread([&] {
    Pace(static_cast<int>(job_reporters.size()),
         std::chrono::milliseconds(step_ms), load_start, load_end, stop_reports,
         [&](int j) {
           for (Reporter* r : job_reporters[j]) r->Due();
         });
  });
  bool interrupted = false;
  for (int k = 1; k <= nsamples; ++k) {
    const int64_t at =
        std::min(load_end, load_start + static_cast<int64_t>(k * sample_s * 1e9));
    while (NowNs() < at && !g_interrupted)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (g_interrupted) {
      interrupted = true;
      break;
    }
    if (k == nsamples) {
      // Stop the load, let every report in flight complete, then sample.
      stop_reports = true;
      report_thread.join();
      for (auto& r : reporters) r->Stop();
      absl::MutexLock l(&shared.mu);
      const absl::Time deadline = absl::Now() + absl::Seconds(15);
      while (shared.in_flight > 0 && absl::Now() < deadline)
        shared.cv.WaitWithTimeout(&shared.mu, absl::Milliseconds(10));
    }
    take_sample(k);
  }
  const double load_s = (NowNs() - load_start) / 1e9;
  std::string first_error;
  int64_t kills, session_errors;
  {
    absl::MutexLock l(&shared.mu);
    first_error = shared.first_error;
    kills = shared.kills;
    session_errors = shared.session_errors;
  }
  const JobCounts end_jobs = last_jobs;
  teardown();

  // --------------------------------------------------------------- summary
  const double p50 = Percentile(all_lat, 0.50), p99 = Percentile(all_lat, 0.99),
               p999 = Percentile(all_lat, 0.999), pmax = Percentile(all_lat, 1.0);
  const Sample& first = samples.front();
  const Sample& last = samples.back();
  // Growth of the live SQLite files per report accepted, over the load.
  const double db_per_report =
      total_ok > 0 ? static_cast<double>(last.dir.db - first.dir.db) / total_ok : 0;
  const double db_main_per_report =
      total_ok > 0 ? static_cast<double>(after_stop.db_main - first.dir.db_main) / total_ok
                   : 0;
  const int64_t steps_stored = end_jobs.sum_step;
  // Slow seconds (slowest report >= 20 ms) next to a WAL checkpoint (the
  // same second or one either side), or with the machine's 2 cores busy.
  for (size_t i = 0; i < all_slow_s.size(); ++i) {
    const int t = all_slow_s[i].first;
    bool near = false;
    for (int c : all_checkpoint_s) near |= std::abs(c - t) <= 1;
    slow_near_checkpoint += near ? 1 : 0;
    slow_machine_busy += all_slow_busy[i] >= 0.9 * std::thread::hardware_concurrency();
  }
  std::printf(
      "{\"summary\":true,\"workers\":%d,\"jobs\":%d,\"ranks_per_job\":%d,"
      "\"duration_s\":%.1f,\"load_s\":%.1f,\"sample_s\":%.1f,\"samples\":%d,"
      "\"step_interval_ms\":%d,\"heartbeat_interval_s\":%.3f,"
      "\"session_channels\":%d,\"report_channels\":%d,"
      "\"register_s\":%.3f,\"attach_s\":%.3f,\"start_s\":%.3f,"
      "\"reports_ok\":%lld,\"reports_per_s\":%.1f,\"failed\":%lld,\"errors\":%s,"
      "\"late\":%lld,\"stop_responses\":%lld,\"checkpoint_requests\":%lld,"
      "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,"
      "\"max_window_p99_ms\":%.3f,\"heartbeats\":%lld,\"heartbeats_skipped\":%lld,"
      "\"kills\":%lld,\"session_errors\":%lld,"
      "\"rss_kb_first\":%lld,\"rss_kb_last\":%lld,\"fds_first\":%lld,"
      "\"fds_last\":%lld,\"db_bytes_first\":%lld,\"db_bytes_last\":%lld,"
      "\"db_bytes_per_report\":%.1f,\"db_main_bytes_after_stop\":%lld,"
      "\"db_main_bytes_per_report_after_stop\":%.1f,\"steps_stored\":%lld,"
      "\"db_main_bytes_per_step_after_stop\":%.1f,\"log_bytes_last\":%lld,"
      "\"job_states\":%s,\"not_running\":%s,\"coordinator_exit\":%s,"
      "\"checkpoint_seconds\":%d,\"slow_seconds\":%d,"
      "\"slow_seconds_near_checkpoint\":%d,\"slow_seconds_machine_busy\":%d,"
      "\"coordinator_args\":%s,\"state_dir\":%s,\"interrupted\":%s,"
      "\"first_error\":%s}\n",
      workers, jobs, nodes, duration_s, load_s, sample_s,
      static_cast<int>(samples.size()), step_ms, hb_interval_s, session_channels,
      report_channels, register_s, attach_s, start_s, (long long)total_ok,
      total_ok / std::max(1e-9, load_s), (long long)total_failed,
      ErrorsJson(total_errors).c_str(), (long long)shared.late.load(),
      (long long)total_stop, (long long)total_ckpt, p50, p99, p999, pmax,
      max_window_p99, (long long)shared.heartbeats.load(),
      (long long)shared.heartbeats_skipped.load(), (long long)kills,
      (long long)session_errors, (long long)first.rss_kb, (long long)last.rss_kb,
      (long long)first.fds, (long long)last.fds, (long long)first.dir.db,
      (long long)last.dir.db, db_per_report, (long long)after_stop.db_main,
      db_main_per_report, (long long)steps_stored,
      steps_stored > 0
          ? static_cast<double>(after_stop.db_main - first.dir.db_main) / steps_stored
          : 0.0,
      (long long)last.dir.log, StatesJson(end_jobs.states).c_str(),
      JsonString(absl::StrJoin(end_jobs.not_running, "; ")).c_str(),
      JsonString(stop_status).c_str(), checkpoint_seconds, slow_seconds,
      slow_near_checkpoint, slow_machine_busy,
      JsonString(absl::StrJoin(coord_args, " ")).c_str(),
      JsonString(state_dir_flag.empty() ? "(temporary, removed)" : state_dir).c_str(),
      interrupted ? "true" : "false", JsonString(first_error).c_str());
  std::fflush(stdout);

  if (interrupted) rc = Fail("interrupted");
  if (total_failed > 0)
    rc = Fail(absl::StrCat(total_failed, " reports refused or failed; first: ",
                           first_error));
  if (kills > 0 || session_errors > 0)
    rc = Fail(absl::StrCat(kills, " KillTasks, ", session_errors,
                           " sessions ended; first: ", first_error));
  if (!last_jobs_error.empty()) rc = Fail(last_jobs_error);
  if (end_jobs.states.size() != 1 || end_jobs.states.count("RUNNING") != 1 ||
      end_jobs.states.at("RUNNING") != jobs)
    rc = Fail(absl::StrCat("not every job RUNNING at the end: ",
                           absl::StrJoin(end_jobs.not_running, "; ")));
  coord.reset();  // removes a temporary state dir
  return rc;
}
