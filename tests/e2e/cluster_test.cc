// End-to-end: real frameworm-coordinator, frameworm-worker and
// frameworm-train processes on 127.0.0.1, training the MLP/CNN on
// Fashion-MNIST, and the failures of docs/ARCHITECTURE.md's contract.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace frameworm::e2e {
namespace {

// A 2-node x 1-process job of the built-in trainer. `steps` sets the run's
// length; checkpoints every `every` steps.
// `memory_every`: checkpoint.memory_every_n_steps (0: none, so the tests
// of disk checkpoints see only those; -1: the automatic default).
std::string TrainJob(const std::string& name, int steps, int every,
                     const std::string& model = "cnn", int nodes = 2,
                     int nproc = 1, double heartbeat_timeout = 4, int memory_every = 0) {
  return absl::StrCat(R"(name: )", name, R"(
nodes: )", nodes, R"(
nproc_per_node: )", nproc, R"(
backend: gloo
max_restarts: 1
heartbeat_timeout: )", heartbeat_timeout, R"(
train:
  model: )", model, R"(
  dataset: fashion-mnist
  max_steps: )", steps, R"(
  batch_size: 32
  log_every: 10
checkpoint:
  every_n_steps: )", every, R"(
  keep_last: 2
)", memory_every >= 0 ? absl::StrCat("  memory_every_n_steps: ", memory_every, "\n") : "");
}

std::vector<v1::CheckpointRecord> Checkpoints(Cluster& c, const std::string& id) {
  grpc::ClientContext ctx;
  v1::ListCheckpointsRequest req;
  req.set_job_id(id);
  v1::ListCheckpointsResponse resp;
  EXPECT_TRUE(c.jobs().ListCheckpoints(&ctx, req, &resp).ok());
  return {resp.checkpoints().begin(), resp.checkpoints().end()};
}

std::vector<v1::AggregatedStep> Metrics(Cluster& c, const std::string& id) {
  return JobMetrics(c, id);
}

// Waits until the job has a checkpoint at or after `step`.
void WaitForCheckpoint(Cluster& c, const std::string& id, int64_t step) {
  auto st = c.WaitFor(
      id,
      [&](const v1::JobStatus& s) {
        for (const auto& ck : Checkpoints(c, id)) {
          if (ck.step() >= step) return true;
        }
        return IsFinal(s.state());
      },
      absl::Seconds(90));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_FALSE(IsFinal(st->state())) << "job ended before checkpoint " << step
                                     << ": " << st->ShortDebugString();
}

// The [step, value] pairs of `tag` in read_tfevents.py's JSON output.
std::vector<std::pair<int64_t, double>> ScalarsOf(const std::string& json, const std::string& tag) {
  std::vector<std::pair<int64_t, double>> out;
  size_t at = json.find("\"" + tag + "\": [");
  if (at == std::string::npos) return out;
  at = json.find('[', at) + 1;
  const size_t end = json.find("]]", at);
  while (at < end) {
    const size_t open = json.find('[', at);
    if (open == std::string::npos || open > end) break;
    char* rest = nullptr;
    const int64_t step = std::strtoll(json.c_str() + open + 1, &rest, 10);
    const double value = std::strtod(rest + 1, nullptr);
    out.emplace_back(step, value);
    at = json.find(']', open) + 1;
  }
  return out;
}

TEST(ClusterE2E, SubmitRunsTwoRanksToSuccessWithAggregatedMetrics) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(TrainJob("two-ranks", 40, 20, "mlp"));
  ASSERT_TRUE(id.ok()) << id.status();
  RunResult watch = (*c)->Cli({"watch", *id}, absl::Seconds(120));
  EXPECT_EQ(watch.exit_code, 0) << watch.output;
  auto st = (*c)->GetJob(*id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 0);
  EXPECT_EQ(st->workers_size(), 2);
  auto steps = Metrics(**c, *id);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back().step(), 40);
  for (const auto& s : steps) {
    EXPECT_EQ(s.ranks_reported(), 2) << s.ShortDebugString();
    EXPECT_GT(s.mean().at("loss"), 0.0);
    EXPECT_EQ(s.rank_step_seconds_size(), 2);
  }
  // The loss went down: the ranks trained a real model on real data.
  EXPECT_LT(steps.back().mean().at("loss"), steps.front().mean().at("loss"));
  auto cks = Checkpoints(**c, *id);
  ASSERT_EQ(cks.size(), 2u);
  EXPECT_EQ(cks.back().step(), 40);
  EXPECT_TRUE(std::ifstream(cks.back().path()).good()) << cks.back().path();
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_NE(logs.output.find("\"event\":\"done\""), std::string::npos) << logs.output;
  RunResult metrics = (*c)->Cli({"metrics", *id, "--csv"});
  EXPECT_EQ(metrics.exit_code, 0);
  EXPECT_NE(metrics.output.find("step,"), std::string::npos) << metrics.output;
  // The TensorBoard files, read by the tensorboard package's own reader:
  // one loss point per step, equal (as float32) to what metrics serves.
  const char* src = std::getenv("FRAMEWORM_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  RunResult tb = RunCommand({absl::StrCat(src, "/.venv/bin/python"),
                             absl::StrCat(src, "/tests/e2e/read_tfevents.py"), st->tensorboard_dir()},
                            {}, absl::Seconds(60));
  ASSERT_EQ(tb.exit_code, 0) << tb.output;
  std::map<int64_t, double> loss;
  for (const auto& [step, value] : ScalarsOf(tb.output, "loss")) loss[step] = value;
  ASSERT_EQ(loss.size(), steps.size()) << tb.output;
  for (const auto& s : steps) {
    ASSERT_TRUE(loss.count(s.step())) << "step " << s.step();
    EXPECT_EQ(static_cast<float>(loss[s.step()]), static_cast<float>(s.mean().at("loss")))
        << "step " << s.step();
  }
  EXPECT_EQ(ScalarsOf(tb.output, "samples_per_second").size(), steps.size());
}

TEST(ClusterE2E, KilledTrainerRestartsFromNewestCheckpoint) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(TrainJob("kill-trainer", 200, 20));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 20);
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 1);
  EXPECT_EQ(st->generation(), 2);
  // Generation 2 resumed from a checkpoint: its first reported step is past
  // the first checkpoint, not step 1.
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  EXPECT_NE(logs.output.find("resum"), std::string::npos) << logs.output;
  EXPECT_EQ(Metrics(**c, *id).back().step(), 200);
  // What happened, as an operator reads it: the events (-f ends with the
  // job), the status's last cause, the coordinator's log.
  RunResult events = (*c)->Cli({"events", *id, "-f"}, absl::Seconds(30));
  EXPECT_EQ(events.exit_code, 0) << events.output;
  for (const std::string& line :
       {"job_submitted ", "job_scheduled ", "generation_started ", "checkpoint_saved ",
        "rank_failed ", "restart ",
        "restart 1 of 1: generation 2 on ", "job_finished ", "SUCCEEDED after 2 generations"}) {
    EXPECT_NE(events.output.find(line), std::string::npos) << line << "\n" << events.output;
  }
  EXPECT_LT(events.output.find("rank_failed "), events.output.find("restart "));
  RunResult status = (*c)->Cli({"status", *id});
  // Rank 1 killed by signal 9, unless rank 0's exit on the broken
  // collective reached the coordinator first.
  EXPECT_NE(status.output.find("last cause: job " + *id + " generation 1: rank "),
            std::string::npos)
      << status.output;
  const std::string coordinator_log = (*c)->coordinator().Output();
  EXPECT_NE(coordinator_log.find("event {\"seq\""), std::string::npos);
  EXPECT_NE(coordinator_log.find("\"kind\":\"rank_failed\",\"job_id\":\"" + *id + "\""),
            std::string::npos)
      << coordinator_log;
}

// The newest checkpoint's file on the host is damaged (a byte flipped)
// when the job restarts: the trainer loads the coordinator's copy instead
// (checked at upload) and resumes from that step, rather than failing every
// restart on the same file.
// Flips one byte in the middle of the file at `path`.
void FlipAByte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  ASSERT_GT(size, 1000);
  f.seekg(size / 2);
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x5a);
  f.seekp(size / 2);
  f.write(&b, 1);
}

TEST(ClusterE2E, ADamagedLocalCheckpointIsReplacedByTheCoordinatorsCopy) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(TrainJob("damaged", 200, 20));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 20);
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) ASSERT_EQ(kill(p, SIGSTOP), 0);  // no new checkpoint now
  absl::SleepFor(absl::Milliseconds(300));
  auto cks = Checkpoints(**c, *id);
  ASSERT_FALSE(cks.empty());
  const std::string path = cks.back().path();
  FlipAByte(path);
  for (pid_t p : pids) kill(p, SIGKILL);
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 1) << "the damaged file cost more than the one restart";
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  EXPECT_NE(logs.output.find("\"event\":\"resumed\",\"path\":\"" + path + "\""), std::string::npos)
      << logs.output.substr(0, 4000);
  EXPECT_NE(logs.output.find("is damaged"), std::string::npos) << logs.output.substr(0, 4000);
}

// A 2-rank job (max_restarts 2) with checkpoints at steps 20 and 40 or
// later, its trainers stopped (SIGSTOP: no new checkpoint): their pids, the
// newest record and the one before it, in `out`.
struct StoppedJob {
  std::unique_ptr<Cluster> cluster;
  std::string id;
  std::vector<pid_t> pids;
  v1::CheckpointRecord newest, before;
};
// `spec` (max_restarts 2, a disk checkpoint every 20 steps) on `cluster`.
void StopWithTwoCheckpoints(std::unique_ptr<Cluster> cluster, const std::string& spec,
                            StoppedJob* out) {
  out->cluster = std::move(cluster);
  auto id = out->cluster->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  out->id = *id;
  WaitForCheckpoint(*out->cluster, *id, 40);
  out->pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(out->pids.size(), 2u);
  for (pid_t p : out->pids) ASSERT_EQ(kill(p, SIGSTOP), 0);
  absl::SleepFor(absl::Milliseconds(300));
  auto cks = Checkpoints(*out->cluster, *id);
  ASSERT_GE(cks.size(), 2u);
  out->newest = cks.back();
  out->before = cks[cks.size() - 2];
}
// frameworm-train's job.
void StopWithTwoCheckpoints(const std::string& name, StoppedJob* out) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  std::string spec = TrainJob(name, 200, 20);
  spec.replace(spec.find("max_restarts: 1"), 15, "max_restarts: 2");
  StopWithTwoCheckpoints(std::move(*c), spec, out);
}

// No copy of the newest checkpoint loads (this host's and the coordinator's
// are both damaged): the rank reports it, the coordinator drops it, and the
// next generation resumes from the checkpoint before it.
TEST(ClusterE2E, ACheckpointWithNoGoodCopyIsDroppedAndTheJobResumesFromTheOneBefore) {
  StoppedJob job;
  ASSERT_NO_FATAL_FAILURE(StopWithTwoCheckpoints("no-good-copy", &job));
  Cluster& c = *job.cluster;
  const std::string& id = job.id;
  const std::vector<pid_t>& pids = job.pids;
  const v1::CheckpointRecord bad = job.newest, before = job.before;
  FlipAByte(bad.path());
  FlipAByte(absl::StrCat(c.state_on_host(), "/checkpoint-copies/", id, "/ckpt-", bad.step(),
                         ".pt"));
  for (pid_t p : pids) kill(p, SIGKILL);
  auto st = c.WaitForFinal(id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 2) << "the kill, then the generation that found no good copy";
  RunResult logs = c.Cli({"logs", id, "--rank", "0"});
  EXPECT_NE(logs.output.find("the job resumes from the checkpoint before it"), std::string::npos)
      << logs.output.substr(0, 4000);
  // The coordinator's damaged copy was caught as it was downloaded, by the
  // record's checksum, before any load.
  EXPECT_NE(logs.output.find("its record says " + bad.checksum()), std::string::npos)
      << logs.output.substr(0, 4000);
  EXPECT_NE(logs.output.find("\"event\":\"resumed\",\"path\":\"" + before.path() + "\""),
            std::string::npos)
      << logs.output.substr(0, 6000);
  for (const auto& r : Checkpoints(c, id)) {
    EXPECT_FALSE(r.path() == bad.path() && r.checksum() == bad.checksum())
        << "the bad record is still listed";
  }
}

// Removes the newest checkpoint's file, damages the coordinator's copy of
// it, kills the stopped trainers and checks what follows on the job.
void GoneFileAndDamagedCopy(StoppedJob& job) {
  Cluster& c = *job.cluster;
  const v1::CheckpointRecord& bad = job.newest;
  ASSERT_TRUE(std::filesystem::remove(bad.path()));
  FlipAByte(absl::StrCat(c.state_on_host(), "/checkpoint-copies/", job.id, "/ckpt-", bad.step(),
                         ".pt"));
  for (pid_t p : job.pids) kill(p, SIGKILL);
  auto st = c.WaitForFinal(job.id, absl::Seconds(180));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 2) << st->ShortDebugString();
  EXPECT_EQ(st->generation(), 4) << st->ShortDebugString();
  RunResult events = c.Cli({"events", job.id});
  EXPECT_NE(events.output.find(absl::StrCat("the coordinator's copy of the checkpoint of step ",
                                            bad.step(), " is damaged")),
            std::string::npos)
      << events.output;
  EXPECT_NE(events.output.find("checkpoint_bad"), std::string::npos) << events.output;
  for (const auto& r : Checkpoints(c, job.id)) {
    EXPECT_FALSE(r.path() == bad.path() && r.checksum() == bad.checksum())
        << "the bad record is still listed";
  }
}

// Two faults at once: the newest checkpoint's file is gone from the host
// and the coordinator's copy of it is damaged. Each rank downloads that
// copy, finds it is not the record's bytes and reports it with
// coordinator_copy: the coordinator checks its copy, removes it and keeps
// the record for its holders (checkpoint_copy_bad; that generation is not
// counted). Their claims are stale here (the file is gone), so the next
// generation finds no copy anywhere, the record is dropped and the job
// resumes from the checkpoint before it: restarts 2 (the kill, then the
// generation that found nothing), generation 4.
TEST(ClusterE2E, AGoneFileAndADamagedCoordinatorCopyCostTheNewestCheckpointOnly) {
  StoppedJob job;
  ASSERT_NO_FATAL_FAILURE(StopWithTwoCheckpoints("gone-and-damaged", &job));
  ASSERT_NO_FATAL_FAILURE(GoneFileAndDamagedCopy(job));
  Cluster& c = *job.cluster;
  // The first rank to tell says so (the other may be stopped before it
  // tells: its generation ends with the first failure).
  RunResult logs = c.Cli({"logs", job.id, "--rank", "0"});
  RunResult logs1 = c.Cli({"logs", job.id, "--rank", "1"});
  EXPECT_NE((logs.output + logs1.output).find("the coordinator removed its damaged copy"),
            std::string::npos)
      << logs.output.substr(0, 6000);
  EXPECT_NE(logs.output.find("\"event\":\"resumed\",\"path\":\"" + job.before.path() + "\""),
            std::string::npos)
      << logs.output.substr(0, 6000);
}

// The same two faults under a torchrun-style Python program: its
// reporter.resume() reports the coordinator's copy as the damaged one (a
// report without that would drop the record at once: restarts 1), and the
// job goes on from the checkpoint before it.
TEST(ClusterE2E, APythonEntrypointReportsTheCoordinatorsDamagedCopyAsSuch) {
  auto started = StartWithPythonPackage();
  ASSERT_TRUE(started.ok()) << started.status();
  const auto& [src, python, site] = started->package;
  const std::string spec = absl::StrCat(
      "name: py-gone-and-damaged\nnodes: 2\nmax_restarts: 2\nheartbeat_timeout: 6\n"
      "checkpoint:\n  every_n_steps: 20\n  keep_last: 2\n"
      "env:\n  PYTHONPATH: ", site, "\n"
      "entrypoint: [\"", python, "\", \"", src, "/tests/e2e/python_resume.py\", \"200\"]\n");
  StoppedJob job;
  ASSERT_NO_FATAL_FAILURE(StopWithTwoCheckpoints(std::move(started->cluster), spec, &job));
  ASSERT_NO_FATAL_FAILURE(GoneFileAndDamagedCopy(job));
  RunResult logs = job.cluster->Cli({"logs", job.id, "--rank", "0"});
  RunResult logs1 = job.cluster->Cli({"logs", job.id, "--rank", "1"});
  EXPECT_NE((logs.output + logs1.output).find("its record says " + job.newest.checksum()),
            std::string::npos)
      << logs.output.substr(0, 6000);
  EXPECT_NE(logs.output.find(absl::StrCat("resumed from step ", job.before.step(), "\n")),
            std::string::npos)
      << logs.output.substr(0, 6000);
  EXPECT_NE(logs.output.find("done at step 200"), std::string::npos) << logs.output.substr(0, 6000);
}

// In-memory checkpoints (checkpoint.memory_every_n_steps) between the disk
// ones: a trainer killed between two disk checkpoints resumes from the
// newest in-memory one, which its worker kept (not from the older disk one).
// The in-memory checkpoint files (ckpt-*) under the cluster's memory root,
// on every node (rank 0's and the replicas).
std::vector<std::string> MemoryFiles(Cluster& c) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(c.dir() + "/shm", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && it->path().filename().string().rfind("ckpt-", 0) == 0) {
      out.push_back(it->path().string());
    }
  }
  return out;
}

TEST(ClusterE2E, AKilledTrainerResumesFromItsWorkersMemoryCheckpoint) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  std::string spec = TrainJob("memory", 300, 100, "cnn", 2, 1, 4, /*memory_every=*/5);
  auto id = (*c)->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  v1::CheckpointRecord newest;
  auto st = (*c)->WaitFor(
      *id,
      [&](const v1::JobStatus& s) {
        for (const auto& ck : Checkpoints(**c, *id)) {
          if (ck.memory() && ck.step() >= 25 && ck.holders_size() >= 1) newest = ck;
        }
        return newest.step() >= 25 || IsFinal(s.state());
      },
      absl::Seconds(90));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_FALSE(IsFinal(st->state())) << st->ShortDebugString();
  ASSERT_LT(newest.step(), 100) << "the job ran past its first disk checkpoint";
  EXPECT_EQ(newest.path().rfind((*c)->dir() + "/shm/", 0), 0u) << newest.path();
  ASSERT_FALSE(MemoryFiles(**c).empty()) << "no in-memory checkpoint file under " << (*c)->dir();
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) kill(p, SIGKILL);
  auto done = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), v1::SUCCEEDED) << done->ShortDebugString();
  EXPECT_EQ(done->restarts(), 1);
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  const size_t at = logs.output.find("\"event\":\"resumed\",\"path\":\"" + (*c)->dir() + "/shm/");
  ASSERT_NE(at, std::string::npos) << "did not resume from an in-memory checkpoint:\n"
                                   << logs.output.substr(0, 6000);
  // From the newest one the coordinator listed before the kill, or a newer
  // one reported meanwhile.
  const size_t name = logs.output.find("/ckpt-", at);
  int64_t resumed = -1;
  ASSERT_NE(name, std::string::npos);
  ASSERT_TRUE(absl::SimpleAtoi(
      logs.output.substr(name + 6, logs.output.find(".pt", name) - name - 6), &resumed));
  EXPECT_GE(resumed, newest.step()) << logs.output.substr(at, 200);
  // The job ended: its in-memory checkpoints are deleted, on rank 0's node
  // and where they were replicated (within 10 s).
  std::vector<std::string> left;
  for (int i = 0; i < 150; ++i) {
    left = MemoryFiles(**c);
    if (left.empty()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(left.empty()) << absl::StrJoin(left, "\n");
}

TEST(ClusterE2E, KilledWorkerIsDetectedAndJobRestartsElsewhere) {
  ClusterOptions o;
  o.workers = 3;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const double timeout_s = 3;
  auto id = (*c)->Submit(TrainJob("kill-worker", 200, 20, "cnn", 2, 1, timeout_s));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 20);
  auto before = (*c)->GetJob(*id);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->workers_size(), 2);
  // Kill the worker that holds node rank 1 (w0, w1 or w2).
  const std::string victim = before->workers(1);
  int index = victim.back() - '0';
  absl::Time killed = absl::Now();
  (*c)->worker(index).Signal(SIGKILL);
  auto restarted = (*c)->WaitFor(
      *id, [](const v1::JobStatus& s) { return s.generation() >= 2 || IsFinal(s.state()); },
      absl::Seconds(30));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  absl::Duration detection = absl::Now() - killed;
  EXPECT_LE(detection, absl::Seconds(timeout_s + 1)) << detection;
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 1);
  for (const auto& w : st->workers()) EXPECT_NE(w, victim);
}

// A node that freezes (worker and trainer stopped, connections left open:
// nothing resets) is caught by the heartbeat timeout alone.
TEST(ClusterE2E, FrozenNodeIsDetectedByHeartbeatTimeout) {
  ClusterOptions o;
  o.workers = 3;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const double timeout_s = 3;
  auto id = (*c)->Submit(TrainJob("frozen-node", 200, 20, "cnn", 2, 1, timeout_s));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 20);
  auto before = (*c)->GetJob(*id);
  ASSERT_TRUE(before.ok());
  const std::string victim = before->workers(1);
  pid_t trainer = 0;
  for (pid_t p : TrainerPidsWithJobId(*id)) {
    if (EnvOf(p, "NODE_RANK") == "1") trainer = p;
  }
  ASSERT_NE(trainer, 0);
  absl::Time frozen = absl::Now();
  (*c)->worker(victim.back() - '0').Signal(SIGSTOP);
  ASSERT_EQ(kill(trainer, SIGSTOP), 0);
  auto restarted = (*c)->WaitFor(
      *id, [](const v1::JobStatus& s) { return s.generation() >= 2 || IsFinal(s.state()); },
      absl::Seconds(30));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  absl::Duration detection = absl::Now() - frozen;
  // Not an instant failure (no connection reset): the timeout ran, measured
  // from the last heartbeat or report, which can precede the freeze by up
  // to a heartbeat interval.
  EXPECT_GE(detection, absl::Seconds(timeout_s - 1)) << detection;
  EXPECT_LE(detection, absl::Seconds(timeout_s + 1.5)) << detection;
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  for (const auto& w : st->workers()) EXPECT_NE(w, victim);
  kill(trainer, SIGKILL);
}

// Issue #8's schedule: a trainer is stopped, 1 s later the coordinator is
// killed and 2 s after that restarted. The reloaded generation is timed from
// the reload, so the hang is caught within the heartbeat timeout (it used to
// go unnoticed until Gloo's own timeout, minutes later).
TEST(ClusterE2E, HangAcrossACoordinatorRestartIsCaught) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  constexpr int kTimeout = 4;
  auto id = (*c)->Submit(TrainJob("hung-restart", 150, 20, "cnn", 2, 1, kTimeout));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 20);
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE((*c)->RestartCoordinator(absl::Seconds(2)).ok());
  const absl::Time reloaded = absl::Now();
  auto restarted = (*c)->WaitFor(
      *id, [](const v1::JobStatus& s) { return s.generation() >= 2 || IsFinal(s.state()); },
      absl::Seconds(40));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_LE(absl::Now() - reloaded, absl::Seconds(kTimeout + 10)) << restarted->reason();
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_GE(st->restarts(), 1);
}

TEST(ClusterE2E, StoppedTrainerIsTreatedAsHungAndRestarted) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(TrainJob("hung-rank", 150, 20, "cnn", 2, 1, 3));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 20);
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
  auto restarted = (*c)->WaitFor(
      *id, [](const v1::JobStatus& s) { return s.generation() >= 2 || IsFinal(s.state()); },
      absl::Seconds(30));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  // The stopped process of generation 1 is killed, not left behind.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (kill(pids[0], 0) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_NE(kill(pids[0], 0), 0) << "stopped trainer " << pids[0] << " survived";
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 1);
}

TEST(ClusterE2E, CoordinatorRestartMidRunLosesNothing) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(TrainJob("coordinator-restart", 200, 20));
  ASSERT_TRUE(id.ok()) << id.status();
  WaitForCheckpoint(**c, *id, 40);
  auto cks_before = Checkpoints(**c, *id);
  auto steps_before = Metrics(**c, *id);
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  // A user following the logs across the restart.
  auto follower = ChildProcess::Start((*c)->CliArgv({"logs", *id, "-f"}), {},
                                      (*c)->dir() + "/logs-follow.out");
  ASSERT_TRUE(follower.ok()) << follower.status();
  {
    auto line = (*follower)->WaitForLine("[rank 0] ", absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status() << ": " << (*follower)->Output().substr(0, 2000);
  }
  ASSERT_TRUE((*c)->RestartCoordinator().ok());
  // The trainers kept running across the restart.
  for (pid_t p : pids) EXPECT_EQ(kill(p, 0), 0);
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 0);
  // It reconnected and ended with the job, having printed every line of
  // every rank once: what `logs` prints now, with its notice in between.
  std::optional<RunResult> followed = (*follower)->Wait(absl::Seconds(30));
  ASSERT_TRUE(followed.has_value()) << "logs -f did not end with the job";
  EXPECT_EQ(followed->exit_code, 0) << followed->output.substr(0, 2000);
  std::string printed = followed->output;
  const std::string notice = "frameworm-cli: logs: the coordinator is unavailable";
  EXPECT_NE(printed.find(notice), std::string::npos) << printed.substr(0, 2000);
  for (size_t at; (at = printed.find(notice)) != std::string::npos;) {
    printed.erase(at, printed.find('\n', at) + 1 - at);
  }
  const RunResult all = (*c)->Cli({"logs", *id});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  // Ranks interleave as they arrived: compare each rank's lines in order.
  auto by_rank = [](const std::string& out) {
    std::map<std::string, std::vector<std::string>> lines;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
      const size_t end = line.find("] ");
      lines[std::string(line.substr(0, end))].emplace_back(line);
    }
    return lines;
  };
  auto followed_lines = by_rank(printed);
  const auto all_lines = by_rank(all.output);
  EXPECT_FALSE(followed_lines["[rank 0"].empty());  // rank 0 logs each step
  EXPECT_TRUE(followed_lines == all_lines)
      << printed.size() << " bytes followed, " << all.output.size() << " in the log";
  // Every acknowledged checkpoint record and metric is still there.
  auto cks_after = Checkpoints(**c, *id);
  std::set<int64_t> after_steps;
  for (const auto& ck : cks_after) after_steps.insert(ck.step());
  EXPECT_EQ(cks_after.back().step(), 200);
  auto steps_after = Metrics(**c, *id);
  std::set<int64_t> metric_steps;
  for (const auto& s : steps_after) metric_steps.insert(s.step());
  for (const auto& s : steps_before) EXPECT_TRUE(metric_steps.count(s.step())) << s.step();
  EXPECT_GE(cks_before.size(), 1u);
  // And no gap: the reports the trainers made while the coordinator was
  // away were sent again once it answered, every step from both ranks.
  std::map<int64_t, int> reported;
  for (const auto& s : steps_after) reported[s.step()] = s.ranks_reported();
  for (int64_t step = 1; step <= 200; ++step) {
    EXPECT_EQ(reported[step], 2) << "step " << step << " of " << steps_after.size() << " aggregated steps";
  }
}

// The same for a torchrun-style Python program reporting with
// frameworm.Reporter: its ranks train on across the restart, and what they
// reported while the coordinator was away arrives once it is back.
TEST(ClusterE2E, APythonEntrypointsReportsSurviveACoordinatorRestart) {
  auto started = StartWithPythonPackage();
  ASSERT_TRUE(started.ok()) << started.status();
  auto& c = started->cluster;
  const auto& [src, python, site] = started->package;
  constexpr int kSteps = 300;  // about 25 ms each
  auto id = c->Submit(absl::StrCat(
      "name: py-coordinator-restart\nnodes: 2\nmax_restarts: 1\n"
      "checkpoint:\n  every_n_steps: 100\n"
      "env:\n  PYTHONPATH: ", site, "\n"
      "entrypoint: [\"", python, "\", \"", src, "/tests/e2e/torchrun_reporting.py\", \"", kSteps,
      "\"]\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = c->WaitFor(*id, [](const v1::JobStatus& s) { return s.step() >= 40 || IsFinal(s.state()); },
                          absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->state(), v1::RUNNING) << st->ShortDebugString();
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_TRUE(c->RestartCoordinator(absl::Seconds(1)).ok());
  for (pid_t p : pids) EXPECT_EQ(kill(p, 0), 0);
  st = c->WaitForFinal(*id, absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 0);
  std::map<int64_t, int> reported;
  for (const auto& s : Metrics(*c, *id)) reported[s.step()] = s.ranks_reported();
  for (int64_t step = 1; step <= kSteps; ++step) EXPECT_EQ(reported[step], 2) << "step " << step;
  RunResult logs = c->Cli({"logs", *id, "--rank", "1"});
  EXPECT_NE(logs.output.find("done at step 300"), std::string::npos) << logs.output;
  // checkpoint.every_n_steps reaches such a program as its Directive: it
  // was asked for the multiples, and its rank 0 saved when asked (at that
  // step, or at the step its answer came).
  RunResult rank0 = c->Cli({"logs", *id, "--rank", "0"});
  for (const char* asked : {"checkpoint asked for step 100 taken", "checkpoint asked for step 200 taken"}) {
    EXPECT_NE(rank0.output.find(asked), std::string::npos) << asked << "\n" << rank0.output.substr(0, 4000);
  }
  int disk = 0;
  for (const auto& r : Checkpoints(*c, *id)) disk += r.memory() ? 0 : 1;
  EXPECT_GE(disk, 2) << "every_n_steps 100 over 300 steps";
}

// The coordinator down for longer than the job's heartbeat timeout: the
// workers cannot tell that from a partition and fence (kill) their
// trainers, but the coordinator never declared them lost, so once it is
// back the job resumes from its newest checkpoint in a new generation that
// is not counted: with max_restarts 0 it still succeeds.
TEST(ClusterE2E, ACoordinatorDownLongerThanTheHeartbeatTimeoutCostsNoRestart) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  std::string spec = TrainJob("long-outage", 600, 100, "cnn", 2, 1, /*heartbeat_timeout=*/3,
                              /*memory_every=*/10);
  spec.replace(spec.find("max_restarts: 1"), 15, "max_restarts: 0");
  auto id = (*c)->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = (*c)->WaitFor(*id, [](const v1::JobStatus& s) { return s.step() >= 40 || IsFinal(s.state()); },
                          absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->state(), v1::RUNNING) << st->ShortDebugString();
  std::vector<pid_t> pids = TrainerPidsWithJobId(*id);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_TRUE((*c)->RestartCoordinator(absl::Seconds(10)).ok());  // > 3 s + the fence's notice
  for (pid_t p : pids) EXPECT_NE(kill(p, 0), 0) << "generation 1's trainer " << p << " was not fenced";
  st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  EXPECT_EQ(st->restarts(), 0) << st->ShortDebugString();
  EXPECT_GE(st->generation(), 2) << st->ShortDebugString();
  EXPECT_NE(st->last_cause().find("while the coordinator was stopped or restarting"),
            std::string::npos)
      << st->ShortDebugString();
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  EXPECT_NE(logs.output.find("\"event\":\"resumed\""), std::string::npos)
      << logs.output.substr(0, 4000);
}

TEST(ClusterE2E, CancelLeavesNoTrainerBehind) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(TrainJob("cancel", 100000, 1000));
  ASSERT_TRUE(id.ok()) << id.status();
  auto running = (*c)->WaitFor(
      *id, [&](const v1::JobStatus& s) { return s.step() > 0 || IsFinal(s.state()); },
      absl::Seconds(60));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_EQ(TrainerPidsWithJobId(*id).size(), 2u);
  RunResult r = (*c)->Cli({"cancel", *id});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(30));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::CANCELLED);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!PidsWithJobId(*id).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(PidsWithJobId(*id).empty());
}

// Two 1-GPU jobs on a worker declared with 2 GPUs (no GPU needed: the
// worker only hands out the ids) see different CUDA_VISIBLE_DEVICES.
TEST(ClusterE2E, JobsOnOneWorkerGetTheirOwnGpuSlots) {
  ClusterOptions o;
  o.workers = 1;
  o.slots_per_worker = 2;
  o.worker_flags = {"--gpus=0,1"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string job = "nodes: 1\nmax_restarts: 0\nentrypoint: [\"sleep\", \"60\"]\n";
  auto a = (*c)->Submit("name: gpu-a\n" + job);
  auto b = (*c)->Submit("name: gpu-b\n" + job);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  std::set<std::string> seen;
  for (const auto& id : {*a, *b}) {
    auto running = (*c)->WaitFor(
        id, [](const v1::JobStatus& s) { return s.state() != v1::PENDING; },
        absl::Seconds(30));
    ASSERT_TRUE(running.ok()) << running.status();
    ASSERT_EQ(running->state(), v1::RUNNING) << running->ShortDebugString();
    std::vector<pid_t> pids;
    ASSERT_TRUE(Eventually([&] { return (pids = TrainerPidsWithJobId(id)).size() == 1; },
                           absl::Seconds(10)));
    seen.insert(EnvOf(pids[0], "CUDA_VISIBLE_DEVICES"));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1"}));
  for (const auto& id : {*a, *b}) EXPECT_EQ((*c)->Cli({"cancel", id}).exit_code, 0);
}

// A worker's own secrets do not reach trainers: they inherit the documented
// allow-list plus what the operator passes with --pass-env.
TEST(ClusterE2E, TrainersInheritOnlyTheAllowListOfTheWorkersEnvironment) {
  ClusterOptions o;
  o.workers = 1;
  o.worker_env = {{"WORKER_SECRET", "s3cr3t"}, {"HF_HOME", "/models"}};
  o.worker_flags = {"--pass-env=HF_HOME"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit("name: env\nnodes: 1\nmax_restarts: 0\nentrypoint: [\"sleep\", \"60\"]\n");
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<pid_t> pids;
  ASSERT_TRUE(Eventually([&] { return (pids = TrainerPidsWithJobId(*id)).size() == 1; },
                         absl::Seconds(30)));
  EXPECT_EQ(EnvOf(pids[0], "WORKER_SECRET"), "");
  EXPECT_EQ(EnvOf(pids[0], "HF_HOME"), "/models");
  // The worker's key neither: its trainers get the cluster CA alone.
  const std::string tls = EnvOf(pids[0], "FRAMEWORM_TLS_DIR");
  EXPECT_NE(tls.find("/trainer-tls"), std::string::npos) << tls;
  EXPECT_TRUE(std::filesystem::exists(tls + "/ca.crt")) << tls;
  EXPECT_FALSE(std::filesystem::exists(tls + "/tls.key")) << tls;
  EXPECT_NE(EnvOf(pids[0], "PATH"), "");
  EXPECT_EQ((*c)->Cli({"cancel", *id}).exit_code, 0);
}

// A worker started as root with --user runs its jobs as that user, which
// can read neither the worker's key (its TLS directory stays root's) nor
// its memory, and hands them the cluster CA alone.
TEST(ClusterE2E, JobsOfAWorkerWithUserRunAsItWithoutTheWorkersKey) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (frameworm-worker --user)";
  passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no user 'nobody' here";
  const uid_t uid = nobody->pw_uid;
  const gid_t gid = nobody->pw_gid;
  ClusterOptions o;
  o.workers = 0;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  // The binaries and the job's directories where the user reaches them.
  const std::string top = MakeTempDir("fw-user");
  ASSERT_FALSE(top.empty());
  ASSERT_EQ(::chmod(top.c_str(), 0755), 0);
  for (const char* name : {"frameworm-worker", "frameworm-task-shim"}) {
    std::filesystem::copy_file(Cluster::Bin(name), top + "/" + name);
    ASSERT_EQ(::chmod((top + "/" + name).c_str(), 0755), 0);
  }
  const std::string out = top + "/out";
  std::filesystem::create_directories(out);
  ASSERT_EQ(::chown(out.c_str(), uid, gid), 0);
  auto tls = (*c)->TlsDir("worker", "wu");
  ASSERT_TRUE(tls.ok()) << tls.status();
  auto worker = ChildProcess::Start(
      {top + "/frameworm-worker", "--coordinator=" + (*c)->coordinator_address(), "--name=wu",
       "--slots=1", "--work-dir=" + out + "/work", "--tls-dir=" + *tls,
       absl::StrCat("--user=", uid, ":", gid),  // UID:GID, as in a container
       "--heartbeat-interval=0.5"},
      {}, top + "/worker.log");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto registered = (*worker)->WaitForLine("registered", absl::Seconds(30));
  ASSERT_TRUE(registered.ok()) << (*worker)->Output();
  const pid_t worker_pid = (*worker)->pid();
  std::ofstream(top + "/job.sh")
      << "id -u > " << out << "/uid\n"
      << "if cat " << *tls << "/tls.key > /dev/null 2>&1; then echo readable; else echo unreadable;"
      << " fi > " << out << "/key\n"
      << "if cat /proc/" << worker_pid << "/environ > /dev/null 2>&1; then echo readable;"
      << " else echo unreadable; fi > " << out << "/memory\n"
      << "ls \"$FRAMEWORM_TLS_DIR\" > " << out << "/tls\n";
  ASSERT_EQ(::chmod((top + "/job.sh").c_str(), 0755), 0);
  auto id = (*c)->Submit(absl::StrCat("name: as-user\nnodes: 1\nmax_restarts: 0\nentrypoint: [\"sh\", \"",
                                      top, "/job.sh\"]\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(60));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->reason() << "\n" << (*worker)->Output();
  auto read = [&](const std::string& name) {
    std::ifstream in(out + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read("uid"), absl::StrCat(uid, "\n"));
  EXPECT_EQ(read("key"), "unreadable\n");
  EXPECT_EQ(read("memory"), "unreadable\n");
  EXPECT_EQ(read("tls"), "ca.crt\n");
  (*worker)->Signal(SIGTERM);
  (*worker)->Wait(absl::Seconds(10));
  std::filesystem::remove_all(top);
}

// Started as root with --user, a worker whose key that user can read
// refuses to start: its jobs could read the key.
TEST(ClusterE2E, AWorkerWithUserRefusesAKeyTheUserCanRead) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (frameworm-worker --user)";
  if (::getpwnam("nobody") == nullptr) GTEST_SKIP() << "no user 'nobody' here";
  ClusterOptions o;
  o.workers = 0;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string top = MakeTempDir("fw-user-key");
  ASSERT_FALSE(top.empty());
  ASSERT_EQ(::chmod(top.c_str(), 0755), 0);
  auto tls = (*c)->TlsDir("worker", "wk");
  ASSERT_TRUE(tls.ok()) << tls.status();
  // A copy of the directory that the user may read (the key's mode stays
  // 0600, so the worker's own check at load passes; the owner is the user).
  const std::string shared = top + "/tls";
  std::filesystem::copy(*tls, shared);
  passwd* nobody = ::getpwnam("nobody");
  ASSERT_EQ(::chmod(shared.c_str(), 0755), 0);
  for (const char* f : {"", "/ca.crt", "/tls.crt", "/tls.key"}) {
    ASSERT_EQ(::chown((shared + f).c_str(), nobody->pw_uid, nobody->pw_gid), 0) << f;
  }
  auto worker = ChildProcess::Start(
      {Cluster::Bin("frameworm-worker"), "--coordinator=" + (*c)->coordinator_address(),
       "--name=wk", "--work-dir=" + top + "/work", "--tls-dir=" + shared, "--user=nobody"},
      {}, top + "/worker.log");
  ASSERT_TRUE(worker.ok()) << worker.status();
  (*worker)->Wait(absl::Seconds(20));
  EXPECT_NE((*worker)->Output().find("--user nobody can read " + shared + "/tls.key"),
            std::string::npos)
      << (*worker)->Output();
  std::filesystem::remove_all(top);
}

TEST(ClusterE2E, TwoJobsShareTwoWorkersWithTwoSlotsEach) {
  ClusterOptions o;
  o.slots_per_worker = 2;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto a = (*c)->Submit(TrainJob("job-a", 30, 15, "mlp"));
  auto b = (*c)->Submit(TrainJob("job-b", 30, 15, "mlp"));
  ASSERT_TRUE(a.ok() && b.ok());
  auto both = (*c)->WaitFor(
      *b,
      [&](const v1::JobStatus& s) {
        auto sa = (*c)->GetJob(*a);
        return (s.state() == v1::RUNNING && sa.ok() && sa->state() == v1::RUNNING) ||
               IsFinal(s.state());
      },
      absl::Seconds(60));
  ASSERT_TRUE(both.ok()) << both.status();
  for (const auto& id : {*a, *b}) {
    auto st = (*c)->WaitForFinal(id, absl::Seconds(120));
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  }
}

// A torchrun-style program (Python DDP reading MASTER_ADDR, RANK, ...) runs
// unchanged as a job's entrypoint.
TEST(ClusterE2E, TorchrunStyleProgramRunsUnchanged) {
  const char* src = std::getenv("FRAMEWORM_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const std::string python = absl::StrCat(src, "/.venv/bin/python");
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python;
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(absl::StrCat(
      "name: torchrun-program\nnodes: 2\nentrypoint: [\"", python, "\", \"", src,
      "/bench/peer_ddp.py\", \"--model\", \"mlp\", \"--max-steps\", \"20\"]\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  EXPECT_NE(logs.output.find("\"world_size\": 2"), std::string::npos) << logs.output;
}

// A user's own model: defined and exported in Python (TorchScript and a
// tensor file), trained as a 2-node job with the built-in trainer, its
// checkpoint downloaded with frameworm-cli and read back into the Python
// model, which gives the validation loss the job reported.
TEST(ClusterE2E, AUsersTorchScriptModelTrainsAsAJobAndItsWeightsComeBack) {
  const char* src = std::getenv("FRAMEWORM_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const std::string python = absl::StrCat(src, "/.venv/bin/python");
  const std::string models = absl::StrCat(src, "/trainer/testdata/pymodels.py");
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string d = (*c)->dir() + "/mine";
  RunResult exported = RunCommand({python, models, "export", d, "classify"}, {}, absl::Seconds(120));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto id = (*c)->Submit(absl::StrCat("name: own-model\nnodes: 2\nbackend: gloo\ntrain:\n  model: ", d,
                                      "/model.pt\n  data: ", d,
                                      "/data.pt\n  epochs: 3\n  batch_size: 32\n  lr: 0.1\n"
                                      "  clip_grad_norm: 1.0\n  lr_schedule: cosine\n"
                                      "checkpoint:\n  every_n_steps: 10\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  const size_t done = logs.output.rfind("{\"event\":\"done\"");
  ASSERT_NE(done, std::string::npos) << logs.output;
  const std::string done_line = logs.output.substr(done, logs.output.find('\n', done) - done);
  EXPECT_NE(done_line.find("\"val_accuracy\""), std::string::npos) << done_line;
  const double val_loss = std::atof(done_line.c_str() + done_line.find("\"val_loss\":") + 11);
  const std::string file = d + "/downloaded.pt";
  RunResult got = (*c)->Cli({"download", *id, file});
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_NE(got.output.find("checkpoint of step 27 of " + *id), std::string::npos) << got.output;
  RunResult back = RunCommand({python, models, "from_checkpoint", file, d + "/data.pt", "classify"},
                              {}, absl::Seconds(120));
  ASSERT_EQ(back.exit_code, 0) << back.output;
  const size_t at = back.output.find("\"val_loss\": ");
  ASSERT_NE(at, std::string::npos) << back.output;
  EXPECT_NEAR(std::atof(back.output.c_str() + at + 12), val_loss, 1e-5 * std::abs(val_loss))
      << back.output << " vs " << done_line;
}

// The Python client, installed with pip from the checkout as a user would,
// submits a job as a dict over mutual TLS (a user certificate), watches it
// to the end and reads its metrics and events.
TEST(ClusterE2E, ThePythonClientSubmitsWatchesAndReadsMetrics) {
  auto started = StartWithPythonPackage();
  ASSERT_TRUE(started.ok()) << started.status();
  auto& c = started->cluster;
  const auto& [src, python, site] = started->package;
  auto tls = c->TlsDir("user", "alice");
  ASSERT_TRUE(tls.ok()) << tls.status();
  RunResult run = RunCommand({python, absl::StrCat(src, "/tests/e2e/python_client_check.py"),
                              c->coordinator_address(), *tls},
                             {{"PYTHONPATH", site}}, absl::Seconds(240));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string& o = run.output;
  EXPECT_NE(o.find("\"state\": \"SUCCEEDED\""), std::string::npos) << o;
  std::string steps;
  for (int i = 1; i <= 30; ++i) absl::StrAppend(&steps, i == 1 ? "" : ", ", i);
  EXPECT_NE(o.find("\"steps\": [" + steps + "]"), std::string::npos) << o;
  EXPECT_NE(o.find("\"ranks\": [2]"), std::string::npos) << o;
  EXPECT_NE(o.find("\"times_ordered\": true"), std::string::npos) << o;
  EXPECT_NE(o.find("\"listed\": true"), std::string::npos) << o;
  EXPECT_NE(o.find("\"events_after_last\": 0"), std::string::npos) << o;
  EXPECT_NE(o.find("\"int64_as_int\": true"), std::string::npos) << o;
  EXPECT_NE(o.find("\"bad_spec\": \"INVALID_ARGUMENT: "), std::string::npos) << o;
  EXPECT_NE(o.find("nodez"), std::string::npos) << o;
  EXPECT_NE(o.find("\"cancel_ended\": \"FAILED_PRECONDITION\""), std::string::npos) << o;
  EXPECT_NE(o.find("\"plaintext_remote\": \"INVALID_ARGUMENT\""), std::string::npos) << o;
  EXPECT_NE(o.find("\"bad_port\": \"INVALID_ARGUMENT: coordinator address '127.0.0.1:99999' is "
                   "not HOST:PORT (the port must be 1..65535)\""),
            std::string::npos)
      << o;
  // A watch whose coordinator stays away gives up after reconnect_for (2 s),
  // not at once.
  EXPECT_NE(o.find("\"watch_gone\": \"UNAVAILABLE\""), std::string::npos) << o;
  EXPECT_EQ(o.find("\"watch_gone_after_s\": 0."), std::string::npos) << o;
  EXPECT_EQ(o.find("\"watch_gone_after_s\": 1."), std::string::npos) << o;
  // A Reporter whose coordinator does not answer redials once after 2 s
  // (not sooner, not twice within the next 0.5 s) and step() never waits.
  EXPECT_NE(o.find("\"away_redials\": 1"), std::string::npos) << o;
  EXPECT_NE(o.find("\"away_requeued\": true"), std::string::npos) << o;
  EXPECT_NE(o.find("\"away_step_fast\": true"), std::string::npos) << o;
  EXPECT_EQ(o.find("\"away_redial_after_s\": 0."), std::string::npos) << o;
  EXPECT_EQ(o.find("\"away_redial_after_s\": 1."), std::string::npos) << o;
  EXPECT_NE(o.find("\"job_finished\""), std::string::npos) << o;
  // The newest checkpoint (step 30) came back whole and reads as the MLP's
  // state dict; a step the job never saved is NOT_FOUND and leaves nothing.
  EXPECT_NE(o.find("\"checkpoint_step\": 30"), std::string::npos) << o;
  EXPECT_NE(o.find("\"checkpoint_tensors\": [\"1.bias\", \"1.weight\", \"3.bias\""),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("\"missing_step\": \"NOT_FOUND: job job-"), std::string::npos) << o;
  EXPECT_NE(o.find("has no checkpoint of step 7; it has: 10, 20, 30"), std::string::npos) << o;
  EXPECT_NE(o.find("\"left_in_dir\": [\"ck.pt\"]"), std::string::npos) << o;
  // The job is the user's: its owner is the certificate's.
  auto st = c->GetJob(o.substr(o.find("job-"), 10));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->spec().owner(), "user:alice");
}

TEST(ClusterE2E, BadSpecsAreRefusedAndNothingIsStored) {
  ClusterOptions o;
  o.workers = 0;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  struct Case {
    std::string yaml, expect;
  } cases[] = {
      {"name: x\nnodes: [1, 2\n", "malformed YAML"},
      {"name: x\nnprocs_per_node: 2\n", "nprocs_per_node"},
      {"name: x\nnproc_per_node: -2\n", "nproc_per_node"},
  };
  for (const auto& k : cases) {
    std::string path = absl::StrCat((*c)->dir(), "/bad.yaml");
    std::ofstream(path) << k.yaml;
    RunResult r = (*c)->Cli({"submit", path});
    EXPECT_NE(r.exit_code, 0) << k.yaml;
    EXPECT_NE(r.output.find(k.expect), std::string::npos) << r.output;
  }
  // A spec that bypasses the CLI's parser is refused by the coordinator.
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("raw");
  req.mutable_spec()->set_nproc_per_node(-1);
  v1::SubmitJobResponse resp;
  grpc::Status s = (*c)->jobs().SubmitJob(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("nproc_per_node"), std::string::npos);
  RunResult list = (*c)->Cli({"list", "--json"});
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_EQ(list.output.find("\"jobId\""), std::string::npos) << list.output;
  EXPECT_EQ(list.output.find("job_id"), std::string::npos) << list.output;
}

// The coordinator's state dir on a small tmpfs: below --min-free-state new
// jobs are refused with a reason; on a disk so full that SQLite cannot
// commit, too; nothing acknowledged is lost and the database still opens.
TEST(ClusterE2E, AFullStateDirRefusesNewJobsAndLosesNothing) {
  ClusterOptions o;
  o.workers = 0;
  o.state_tmpfs_mib = 16;
  o.coordinator_flags = {"--min-free-state=8388608"};  // 8 MiB
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string spec = "name: s\nnodes: 1\nentrypoint: [\"sleep\", \"1\"]\n";
  auto first = (*c)->Submit(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string state = (*c)->state_on_host();
  auto fill = [&](int64_t mib, const std::string& name) {
    std::ofstream f(state + "/" + name, std::ios::binary);
    const std::string block(1 << 20, 'f');
    for (int64_t i = 0; i < mib && f; ++i) f.write(block.data(), block.size());
  };
  fill(10, "filler-1");  // about 6 MiB left: under the 8 MiB floor
  const std::string path = (*c)->dir() + "/s.yaml";
  std::ofstream(path) << spec;
  RunResult refused = (*c)->Cli({"submit", path});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("MiB free, under --min-free-state (8 MiB): new jobs are refused"),
            std::string::npos)
      << refused.output;

  // With no floor, fill the disk to the last byte: SQLite cannot commit.
  ASSERT_TRUE((*c)->RestartCoordinatorWithFlags({"--min-free-state=0"}).ok());
  fill(64, "filler-2");  // stops at ENOSPC
  std::vector<std::string> acknowledged = {*first};
  bool full = false;
  for (int i = 0; i < 50 && !full; ++i) {  // pages SQLite had in hand go first
    RunResult r = (*c)->Cli({"submit", path});
    if (r.exit_code == 0) {
      std::string id(absl::StripAsciiWhitespace(r.output));
      acknowledged.push_back(id.substr(id.rfind('\n') + 1));
      continue;
    }
    full = true;
    EXPECT_NE(r.output.find("is full: new jobs are refused until space is freed"),
              std::string::npos)
        << r.output;
  }
  EXPECT_TRUE(full) << "the disk never filled";
  EXPECT_EQ((*c)->Cli({"list"}).exit_code, 0);  // still serving

  // Space back, a restart: every acknowledged job is there, new ones go in.
  std::filesystem::remove(state + "/filler-1");
  std::filesystem::remove(state + "/filler-2");
  ASSERT_TRUE((*c)->RestartCoordinatorWithFlags({"--min-free-state=8388608"}).ok());
  RunResult list = (*c)->Cli({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  for (const std::string& id : acknowledged)
    EXPECT_NE(list.output.find(id), std::string::npos) << id << "\n" << list.output;
  auto after = (*c)->Submit(spec);
  EXPECT_TRUE(after.ok()) << after.status();
}

}  // namespace
}  // namespace frameworm::e2e
