// The fault-injection suite (issue #8): a short 2-node CNN job on
// Fashion-MNIST runs undisturbed once, then once per seeded fault schedule
// (fault_schedule.h: SIGKILL or SIGSTOP of a trainer, a worker or the
// coordinator, mid-run, while a checkpoint is written, at the last step;
// one fault or two close together), each on a fresh cluster of three
// single-slot workers. Every schedule must end:
//  - SUCCEEDED, with the undisturbed run's test accuracy within 0.3 points;
//  - with every recorded checkpoint complete (header, length and CRC-32
//    as recorded);
//  - with no process of the job left and no shared-memory segment of
//    frameworm left in /dev/shm;
//  - within 2 x the undisturbed wall time plus, per fault, the heartbeat
//    timeout and the time it holds its target (a SIGSTOP's stop, a killed
//    daemon's time down), measured on the monotonic clock;
//  - with no restart at all when only the coordinator was hit.
// Seeds: FRAMEWORM_FAULT_SEEDS ("1,2,5" or "1-40"); default 1-3 (CI).
// FRAMEWORM_FAULT_RESULTS=FILE appends one JSON line per schedule
// (bench/faults.sh counts them).
#include <signal.h>
#include <sys/types.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/fault_schedule.h"
#include "train/checkpoint_file.h"

namespace frameworm::e2e {
namespace {

constexpr RunShape kRun{.steps = 150, .checkpoint_every = 25, .ranks = 2,
                        .heartbeat_timeout_s = 4};

std::string JobSpecYaml() {
  return absl::StrCat("name: faults\nnodes: 2\nnproc_per_node: 1\nbackend: gloo\n",
                      "max_restarts: 20\nheartbeat_timeout: ", kRun.heartbeat_timeout_s,
                      "\ntrain:\n  model: cnn\n  dataset: fashion-mnist\n  max_steps: ",
                      kRun.steps, "\n  batch_size: 32\n  log_every: 10\ncheckpoint:\n",
                      "  every_n_steps: ", kRun.checkpoint_every, "\n  keep_last: 2\n");
}

std::vector<uint64_t> Seeds() {
  const char* env = std::getenv("FRAMEWORM_FAULT_SEEDS");
  // 127: the coordinator stopped for 5 s at the last step (final statuses
  // and log tails written into its connection were lost before receipts).
  std::string text = env && *env ? env : "1-3,127";
  std::vector<uint64_t> seeds;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> lo_hi = absl::StrSplit(part, '-');
    uint64_t lo = 0, hi = 0;
    if (!absl::SimpleAtoi(lo_hi[0], &lo)) continue;
    hi = lo;
    if (lo_hi.size() == 2 && !absl::SimpleAtoi(lo_hi[1], &hi)) continue;
    for (uint64_t s = lo; s <= hi && seeds.size() < 1000; ++s) seeds.push_back(s);
  }
  return seeds;
}

std::set<std::string> ShmSegments() {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("frameworm", 0) == 0) out.insert(name);
  }
  return out;
}

// "" when every recorded checkpoint is complete, else what is wrong.
std::string CheckCheckpoints(Cluster& c, const std::string& id) {
  grpc::ClientContext ctx;
  v1::ListCheckpointsRequest req;
  req.set_job_id(id);
  v1::ListCheckpointsResponse resp;
  if (grpc::Status s = c.jobs().ListCheckpoints(&ctx, req, &resp); !s.ok())
    return "ListCheckpoints: " + s.error_message();
  int disk = 0;
  for (const v1::CheckpointRecord& r : resp.checkpoints()) disk += r.memory() ? 0 : 1;
  if (disk == 0) return "no disk checkpoint recorded";
  for (const v1::CheckpointRecord& r : resp.checkpoints()) {
    // In-memory records end with the job: their files are being released
    // while this runs (each was checked when it was loaded, if it was).
    if (r.memory()) continue;
    absl::StatusOr<std::string> payload = ReadCheckpointFile(r.path());  // loads
    if (!payload.ok()) return std::string(payload.status().message());
    // The recorded checksum is the whole file's (header and payload).
    std::ifstream in(r.path(), std::ios::binary);
    const std::string whole((std::istreambuf_iterator<char>(in)), {});
    const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(whole.data()),
                            static_cast<uInt>(whole.size()));
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08lx", crc);
    if (r.checksum() != absl::StrCat("crc32:", hex))
      return absl::StrCat(r.path(), ": recorded ", r.checksum(), ", file crc32:", hex);
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(r.path(), ec);
    if (ec) return absl::StrCat(r.path(), ": ", ec.message());
    if (static_cast<int64_t>(size) != r.bytes())
      return absl::StrCat(r.path(), ": recorded ", r.bytes(), " bytes, the file has ", size);
  }
  return "";
}

struct Outcome {
  v1::JobStatus status;
  double accuracy = -1;
  absl::Duration wall;
  int faults_applied = 0;
  std::string error;  // set-up trouble, not a verdict
};

// Runs the job on a fresh cluster, applying `faults` (none: undisturbed).
Outcome RunJob(const std::vector<Fault>& faults) {
  Outcome out;
  ClusterOptions o;
  o.workers = 3;
  auto c = Cluster::Start(o);
  if (!c.ok()) {
    out.error = std::string(c.status().message());
    return out;
  }
  Cluster& cl = **c;
  auto id = cl.Submit(JobSpecYaml());
  if (!id.ok()) {
    out.error = std::string(id.status().message());
    return out;
  }
  const absl::Time start = absl::Now();
  // Elapsed time on the monotonic clock: a step of the system clock during
  // the run (seen once in a clean clone: 51.8 s of "wall" in an 11.8 s
  // test) is no slowness of the job.
  const auto started = std::chrono::steady_clock::now();
  // Deferred actions (SIGCONT, restarts), run as their time comes.
  std::vector<std::pair<absl::Time, std::function<void()>>> later;
  auto run_due = [&](bool all) {
    for (size_t i = 0; i < later.size();) {
      if (all || absl::Now() >= later[i].first) {
        auto action = std::move(later[i].second);
        later.erase(later.begin() + static_cast<long>(i));
        action();
      } else {
        ++i;
      }
    }
  };
  std::set<int> restarted;  // workers started again
  v1::JobStatus st;
  // A short deadline: deferred actions stay on time while the coordinator
  // is stopped.
  // Unanswered for 3 s: a new channel (Cluster::Redial).
  absl::Time answered = absl::Now();
  auto poll = [&]() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::GetJobRequest req;
    req.set_job_id(*id);
    v1::JobStatus s;
    if (cl.jobs().GetJob(&ctx, req, &s).ok()) {
      st = s;
      answered = absl::Now();
    } else if (absl::Now() - answered > absl::Seconds(3)) {
      cl.Redial();
      answered = absl::Now();
    }
    run_due(false);
  };
  for (const Fault& f : faults) {
    while (st.step() < f.at_step && !IsFinal(st.state()) &&
           absl::Now() - start < absl::Seconds(240)) {
      poll();
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (IsFinal(st.state())) break;
    absl::SleepFor(absl::Milliseconds(f.gap_ms));
    const int sig = f.stop ? SIGSTOP : SIGKILL;
    if (f.target == FaultTarget::kTrainer) {
      for (pid_t p : TrainerPidsWithJobId(*id)) {
        if (EnvOf(p, "RANK") != std::to_string(f.rank)) continue;
        ::kill(p, sig);
        ++out.faults_applied;
        if (f.stop)
          later.emplace_back(absl::Now() + absl::Seconds(f.stop_s), [p] { ::kill(p, SIGCONT); });
      }
    } else if (f.target == FaultTarget::kWorker) {
      poll();
      if (st.workers_size() <= f.rank) continue;
      const int w = st.workers(f.rank).back() - '0';
      cl.worker(w).Signal(sig);
      ++out.faults_applied;
      if (f.stop) {
        later.emplace_back(absl::Now() + absl::Seconds(f.stop_s),
                           [&cl, w] { cl.worker(w).Signal(SIGCONT); });
      } else {
        // Not waiting for it to register: a SIGCONT due meanwhile (a
        // stopped coordinator's) must not wait behind it.
        later.emplace_back(absl::Now() + absl::Seconds(f.down_s), [&cl, w, &out, &restarted] {
          if (absl::Status s = cl.RestartWorker(w, /*wait_registered=*/false); !s.ok()) {
            out.error = std::string(s.message());
          } else {
            restarted.insert(w);
          }
        });
      }
    } else {
      ++out.faults_applied;
      if (f.stop) {
        cl.coordinator().Signal(SIGSTOP);
        later.emplace_back(absl::Now() + absl::Seconds(f.stop_s),
                           [&cl] { cl.coordinator().Signal(SIGCONT); });
      } else {
        // Dead for down_s, then back on the same address and state.
        if (absl::Status s = cl.RestartCoordinator(absl::Seconds(f.down_s)); !s.ok())
          out.error = std::string(s.message());
      }
    }
  }
  // Not WaitFor: its predicate runs only when GetJob answers, and a stopped
  // coordinator answers nothing until its SIGCONT is sent from here.
  while (!IsFinal(st.state()) && absl::Now() - start < absl::Seconds(300)) {
    poll();
    absl::SleepFor(absl::Milliseconds(100));
  }
  run_due(true);
  out.wall = absl::FromChrono(std::chrono::steady_clock::now() - started);
  if (!IsFinal(st.state())) {
    out.error = absl::StrCat("not final after 300 s: ", st.ShortDebugString());
    return out;
  }
  out.status = st;
  out.accuracy = FinalAccuracy(cl, *id);
  if (std::string bad = CheckCheckpoints(cl, *id); !bad.empty()) out.error = "checkpoint: " + bad;
  for (int w : restarted) {
    if (auto line = cl.worker(w).WaitForLine("registered", absl::Seconds(30)); !line.ok())
      out.error = absl::StrCat("restarted worker w", w, " never registered: ", line.status().message());
  }
  if (!Eventually([&] { return PidsWithJobId(*id).empty(); }, absl::Seconds(15)))
    out.error = absl::StrCat("processes of ", *id, " left: ", PidsWithJobId(*id).size());
  return out;
}

class FaultSuite : public ::testing::TestWithParam<uint64_t> {
 protected:
  static void SetUpTestSuite() {
    shm_before_ = new std::set<std::string>(ShmSegments());
    baseline_ = new Outcome(RunJob({}));
  }
  static void TearDownTestSuite() {
    delete baseline_;
    delete shm_before_;
  }
  static Outcome* baseline_;
  static std::set<std::string>* shm_before_;
};
Outcome* FaultSuite::baseline_ = nullptr;
std::set<std::string>* FaultSuite::shm_before_ = nullptr;

// `text` as a JSON string literal, quotes included (the results file is read
// by bench/faults.sh; errors and reasons may hold quotes, backslashes and
// control characters).
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {  // control characters, and bytes that may not be UTF-8
      out += absl::StrFormat("\\u%04x", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

TEST_P(FaultSuite, EndsSucceededWithTheUndisturbedAccuracyAndNothingLeft) {
  ASSERT_TRUE(baseline_->error.empty()) << "undisturbed run: " << baseline_->error;
  ASSERT_EQ(baseline_->status.state(), v1::SUCCEEDED) << baseline_->status.ShortDebugString();
  ASSERT_GT(baseline_->accuracy, 0.5);
  const uint64_t seed = GetParam();
  const std::vector<Fault> faults = MakeFaultSchedule(seed, kRun);
  const std::string what = Describe(seed, faults);
  Outcome o = RunJob(faults);
  // A fault costs at least the time it holds its target: a 5 s SIGSTOP of
  // the coordinator after a 4.4 s undisturbed run took 13.0 s, over the
  // 12.7 s that 2 x 4.4 s + one heartbeat timeout allowed.
  absl::Duration limit = 2 * baseline_->wall;
  for (const Fault& f : faults) {
    limit += absl::Seconds(kRun.heartbeat_timeout_s) + absl::Seconds(f.stop_s + f.down_s);
  }
  std::set<std::string> leaked;
  for (const std::string& s : ShmSegments())
    if (!shm_before_->count(s)) leaked.insert(s);
  const bool ok = o.error.empty() && o.status.state() == v1::SUCCEEDED &&
                  std::abs(o.accuracy - baseline_->accuracy) <= 0.003 && leaked.empty() &&
                  o.wall <= limit;
  if (const char* path = std::getenv("FRAMEWORM_FAULT_RESULTS")) {
    std::ofstream(path, std::ios::app)
        << "{\"seed\":" << seed << ",\"ok\":" << (ok ? "true" : "false") << ",\"state\":\""
        << v1::JobState_Name(o.status.state()) << "\",\"restarts\":" << o.status.restarts()
        << ",\"faults\":" << faults.size() << ",\"applied\":" << o.faults_applied
        << ",\"accuracy\":" << o.accuracy << ",\"baseline_accuracy\":" << baseline_->accuracy
        << ",\"wall_s\":" << absl::ToDoubleSeconds(o.wall)
        << ",\"baseline_wall_s\":" << absl::ToDoubleSeconds(baseline_->wall)
        << ",\"limit_s\":" << absl::ToDoubleSeconds(limit) << ",\"schedule\":" << JsonString(what)
        << ",\"error\":" << JsonString(o.error) << ",\"reason\":" << JsonString(o.status.reason())
        << "}\n";
  }
  EXPECT_TRUE(o.error.empty()) << what << ": " << o.error;
  EXPECT_EQ(o.status.state(), v1::SUCCEEDED) << what << ": " << o.status.reason();
  EXPECT_NEAR(o.accuracy, baseline_->accuracy, 0.003) << what;
  EXPECT_TRUE(leaked.empty()) << what << ": " << *leaked.begin();
  EXPECT_LE(o.wall, limit) << what << " (undisturbed " << baseline_->wall << ")";
  // The coordinator's own faults (killed and restarted, or stopped) cost
  // the job nothing: trainers train on and find it again.
  bool only_coordinator = true;
  for (const Fault& f : faults) only_coordinator &= f.target == FaultTarget::kCoordinator;
  if (only_coordinator) EXPECT_EQ(o.status.restarts(), 0) << what << ": " << o.status.reason();
  std::cout << what << ": " << v1::JobState_Name(o.status.state()) << ", " << o.status.restarts()
            << " restart(s), accuracy " << o.accuracy << " (undisturbed " << baseline_->accuracy
            << "), " << o.wall << " (limit " << limit << ")"
            << (o.status.reason().empty() ? "" : "; last reason: " + o.status.reason()) << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Seeds, FaultSuite, ::testing::ValuesIn(Seeds()),
                         [](const ::testing::TestParamInfo<uint64_t>& i) {
                           return absl::StrCat("seed", i.param);
                         });

TEST(FaultScheduleTest, TheSameSeedGivesTheSameScheduleAndSeedsCoverEveryKind) {
  EXPECT_EQ(Describe(7, MakeFaultSchedule(7, kRun)), Describe(7, MakeFaultSchedule(7, kRun)));
  std::set<std::string> kinds;
  int pairs = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    for (const Fault& f : MakeFaultSchedule(seed, kRun)) {
      kinds.insert(absl::StrCat(static_cast<int>(f.target), f.stop, static_cast<int>(f.moment)));
      EXPECT_GE(f.at_step, 1);
      EXPECT_LE(f.at_step, kRun.steps);
      EXPECT_TRUE(f.rank == 0 || f.rank == 1);
    }
    pairs += MakeFaultSchedule(seed, kRun).size() == 2;
  }
  EXPECT_EQ(kinds.size(), 18u);  // 3 targets x {kill, stop} x 3 moments
  EXPECT_GT(pairs, 5);
}

}  // namespace
}  // namespace frameworm::e2e
