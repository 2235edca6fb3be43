// Copies of checkpoints on workers (checkpoint_replication.h), through the
// Coordinator facade: who is told to hold what, in which order, and when
// copies are dropped.
#include "coordinator/checkpoint_replication.h"

#include <fstream>

#include "common/received_file.h"
#include "coordinator/coordinator_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

std::vector<v1::HoldCheckpoint> Holds(const std::vector<v1::CoordinatorMessage>& cmds) {
  std::vector<v1::HoldCheckpoint> out;
  for (const auto& c : cmds)
    if (c.has_hold()) out.push_back(c.hold());
  return out;
}
std::vector<v1::DropCheckpoint> Drops(const std::vector<v1::CoordinatorMessage>& cmds) {
  std::vector<v1::DropCheckpoint> out;
  for (const auto& c : cmds)
    if (c.has_drop()) out.push_back(c.drop());
  return out;
}

class ReplicationTest : public CoordinatorTest {
 protected:
  // A 2-node job on w0 (rank 0) and w1; w2 is spare. Returns its id.
  std::string StartJob(v1::JobSpec spec) {
    for (const char* w : {"w0", "w1", "w2"}) AddWorker(w, 1, {}, /*peer=*/true);
    const std::string id = Submit(spec);
    EXPECT_EQ(Starts("w0").size(), 1u);
    EXPECT_EQ(Starts("w1").size(), 1u);
    return id;
  }
  // Step `step` checkpointed, held by w0 and w1; their commands taken.
  void HeldByBoth(const std::string& id, int64_t step) {
    ASSERT_TRUE(Checkpoint(id, 1, step, CkptPath(id, step)).ok());
    Held("w0", id, step);
    Held("w1", id, step);
    Take("w0");
    Take("w1");
  }
  // A registration of `worker` (at <worker>.host) claiming to hold job
  // `id`'s checkpoint of `step`, showing `secret`.
  static v1::RegisterWorkerRequest Claim(const std::string& worker, const std::string& id,
                                         int64_t step, const std::string& secret) {
    v1::RegisterWorkerRequest req;
    req.set_name(worker);
    req.set_address(worker + ".host");
    req.set_slots(1);
    req.set_peer_endpoint(worker + ".host:7071");
    v1::CheckpointHeld* h = req.add_held();
    h->set_job_id(id);
    h->set_step(step);
    h->set_ok(true);
    h->set_secret(secret);
    return req;
  }
  // Rank `rank` of generation `gen` says no copy of job `id`'s checkpoint
  // at `path` loads.
  v1::BadCheckpoint Bad(const std::string& id, int64_t gen, int rank, const std::string& path,
                        const std::string& reason, bool coordinator_copy = false) {
    v1::BadCheckpoint bad;
    bad.mutable_ref()->set_job_id(id);
    bad.mutable_ref()->set_generation(gen);
    bad.mutable_ref()->set_token(TokenOf(id, gen, rank));
    bad.set_path(path);
    bad.set_reason(reason);
    bad.set_coordinator_copy(coordinator_copy);
    return bad;
  }
  void InGenerationTwoHeldByBoth(const v1::JobSpec& spec, std::string* id);
  void RestartedBeforeTheHolderReturns(std::string* id, std::string* secret);
  void ReattachRunning(const std::string& worker, const std::string& id, int64_t gen);
  std::vector<std::string> HoldersOf(const std::string& id, int64_t step) {
    auto list = coord_->ListCheckpoints(id);
    EXPECT_TRUE(list.ok());
    for (const auto& c : *list)
      if (c.step() == step) return {c.holders().begin(), c.holders().end()};
    return {};
  }
};

TEST_F(ReplicationTest, OnlyAWorkerAskedToHoldOrShowingTheSecretBecomesAHolder) {
  const std::string id = StartJob(Spec(2, 1));
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  auto w0 = Holds(Take("w0"));
  ASSERT_EQ(w0.size(), 1u);
  // w2 (no rank of the job, never asked) claims the copy before rank 0's
  // worker answers: it does not become a holder, so it is not a source the
  // replicas would show the secret to, and the replicas still start once
  // w0 answers.
  Held("w2", id, 10);
  Held("w2", id, 10, true, "a-guess");
  EXPECT_TRUE(HoldersOf(id, 10).empty());
  // Claims of steps or jobs without a record count for nothing either.
  Held("w0", id, 11);
  Held("w0", "job-999999", 10);
  EXPECT_TRUE(HoldersOf(id, 11).empty());
  Held("w0", id, 10);
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w0"));
  auto w1 = Holds(Take("w1"));
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_THAT(w1[0].sources(), ElementsAre("w0.host:7071"));
  // A worker that shows the record's secret counts without this
  // coordinator having asked it (it was asked before a restart).
  Held("w2", id, 10, true, w0[0].secret());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w0", "w2"));
}

// A worker that floods failed or unasked hold answers gets a bounded number
// of log lines (a burst, then a few a second, the rest counted).
TEST_F(ReplicationTest, AFloodOfHoldAnswersLogsABoundedNumberOfLines) {
  const std::string id = StartJob(Spec(2, 1));
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) Held("w2", id, 10, /*ok=*/i % 2 == 0);
  clock_.Advance(absl::Seconds(2));
  Held("w2", id, 10, /*ok=*/false);
  const std::string err = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (char c : err) lines += c == '\n';
  EXPECT_LE(lines, 31) << err.substr(0, 500);
  EXPECT_GE(lines, 2);
  EXPECT_NE(err.find("more such lines not logged)"), std::string::npos);
}

TEST_F(ReplicationTest, ReplicasFetchFromRankZerosWorkerOnceItHoldsTheFile) {
  const std::string id = StartJob(Spec(2, 1));
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  // Rank 0's worker holds what it wrote; nobody fetches before it says so.
  auto w0 = Holds(Take("w0"));
  ASSERT_EQ(w0.size(), 1u);
  EXPECT_EQ(w0[0].path(), CkptPath(id, 10));
  EXPECT_EQ(w0[0].step(), 10);
  EXPECT_EQ(w0[0].checksum(), "crc32:0000abcd");
  EXPECT_TRUE(w0[0].sources().empty());
  EXPECT_TRUE(Holds(Take("w1")).empty());
  Held("w0", id, 10);
  // One replica (the default), on the job's other worker, not the spare.
  auto w1 = Holds(Take("w1"));
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_THAT(w1[0].sources(), ElementsAre("w0.host:7071"));
  EXPECT_GE(w0[0].secret().size(), 32u) << "a random secret per record";
  EXPECT_EQ(w1[0].secret(), w0[0].secret());
  EXPECT_TRUE(Holds(Take("w2")).empty());
  Held("w1", id, 10);
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w0", "w1"));
  auto listed = coord_->ListCheckpoints(id);
  ASSERT_TRUE(listed.ok());
  for (const auto& c : *listed) {
    EXPECT_TRUE(c.secret().empty());
    EXPECT_TRUE(c.ref().token().empty()) << "rank 0's token is not the reader's";
    EXPECT_EQ(c.ref().job_id(), id);
  }
  // A trainer cannot choose the secret (or the holders) of its checkpoint.
  v1::CheckpointRecord forged;
  forged.mutable_ref()->set_job_id(id);
  forged.mutable_ref()->set_generation(1);
  forged.mutable_ref()->set_token(TokenOf(id, 1, 0));
  forged.set_step(12);
  forged.set_path(CkptPath(id, 12));
  forged.set_bytes(4);
  forged.set_checksum("crc32:0000abcd");
  forged.set_secret("mine");
  forged.add_holders("w2");
  ASSERT_TRUE(coord_->ReportCheckpoint(forged).ok());
  EXPECT_TRUE(HoldersOf(id, 12).empty());
  auto hold12 = Holds(Take("w0"));
  ASSERT_EQ(hold12.size(), 1u);
  EXPECT_NE(hold12[0].secret(), "mine");
  // A failed copy is not a holder.
  ASSERT_TRUE(Checkpoint(id, 1, 20, CkptPath(id, 20)).ok());
  Held("w0", id, 20);
  Held("w1", id, 20, /*ok=*/false);
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0"));
}

TEST_F(ReplicationTest, ReplicasZeroCopiesNothingAndTwoUsesTheSpareToo) {
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_replicas(0);
  std::string id = StartJob(spec);
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  Held("w0", id, 10);
  EXPECT_TRUE(Holds(Take("w1")).empty());
  EXPECT_TRUE(Holds(Take("w2")).empty());
  ASSERT_TRUE(coord_->CancelJob(id).ok());

  spec.mutable_checkpoint()->set_replicas(2);
  id = Submit(spec);
  Take("w0");
  Take("w1");
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  Held("w0", id, 10);
  EXPECT_EQ(Holds(Take("w1")).size(), 1u);
  EXPECT_EQ(Holds(Take("w2")).size(), 1u);
}

TEST_F(ReplicationTest, ANewGenerationFetchesBeforeItStartsLiveHoldersFirst) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  spec.set_heartbeat_timeout_s(5);
  const std::string id = StartJob(spec);
  HeldByBoth(id, 10);
  // w0 goes silent: generation 2 runs on w1 (a holder) and w2 (not one).
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    Heartbeat("w2");
    coord_->Tick();
  }
  ASSERT_EQ(Job(id).generation(), 2);
  auto w2 = Take("w2");
  ASSERT_EQ(w2.size(), 2u);
  ASSERT_TRUE(w2[0].has_hold()) << "the fetch is queued before the start";
  EXPECT_THAT(w2[0].hold().sources(), ElementsAre("w1.host:7071", "w0.host:7071"));
  EXPECT_EQ(w2[0].hold().path(), CkptPath(id, 10));
  ASSERT_TRUE(w2[1].has_start());
  EXPECT_EQ(w2[1].start().task().resume_from(), CkptPath(id, 10));
  EXPECT_TRUE(Holds(Take("w1")).empty()) << "a holder fetches nothing";
}

// The same worker process re-registering without the hold and StartTask
// its old session took (lost in flight) gets both again, the hold first:
// its rank does not start without the checkpoint it resumes from.
TEST_F(ReplicationTest, AResentStartGoesWithItsPrefetchHold) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  spec.set_heartbeat_timeout_s(5);
  for (const char* w : {"w0", "w1"}) AddWorker(w, 1, {}, /*peer=*/true);
  AddWorker("w2", 1, {}, /*peer=*/true, "process-2");
  const std::string id = Submit(spec);
  Take("w0");
  Take("w1");
  HeldByBoth(id, 10);
  for (int i = 0; i < 7; ++i) {  // w0 silent: generation 2 on w1 and w2
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    Heartbeat("w2");
    coord_->Tick();
  }
  ASSERT_EQ(Job(id).generation(), 2);
  ASSERT_EQ(Take("w2").size(), 2u);  // the hold and the start, lost in flight
  AddWorker("w2", 1, {}, /*peer=*/true, "process-2");
  EXPECT_EQ(Job(id).generation(), 2);
  auto again = Take("w2");
  ASSERT_EQ(again.size(), 2u);
  ASSERT_TRUE(again[0].has_hold()) << "the fetch is queued before the start";
  EXPECT_EQ(again[0].hold().path(), CkptPath(id, 10));
  ASSERT_TRUE(again[1].has_start());
  EXPECT_EQ(again[1].start().task().resume_from(), CkptPath(id, 10));
}

// Job `*id` (2 nodes, on w0 and w1; w2 spare) with an in-memory checkpoint
// of step 10 held by w0 alone (`*secret`: its hold's), then a coordinator
// restart after which w2, then w1 without its rank, register first: the
// generation fails (uncounted: its ranks never reported) and could start
// again at once on w1 and w2, neither holding the checkpoint.
void ReplicationTest::RestartedBeforeTheHolderReturns(std::string* id, std::string* secret) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  *id = StartJob(spec);
  ASSERT_TRUE(MemoryCheckpoint(*id, 1, 10).ok());
  auto holds = Holds(Take("w0"));
  ASSERT_EQ(holds.size(), 1u);
  *secret = holds[0].secret();
  Held("w0", *id, 10);
  Take("w0");
  coord_.reset();
  Open();
  AddWorker("w2", 1, {}, /*peer=*/true);
  AddWorker("w1", 1, {}, /*peer=*/true);
  ASSERT_EQ(Job(*id).state(), v1::RESTARTING);
}

// After a coordinator restart the holders of an in-memory checkpoint are
// known only once they register: the next generation waits for one (at
// most the workers' time to re-register) instead of starting ranks that
// find no copy and drop the checkpoint; once the holder is back it starts,
// its non-holders fetching first.
TEST_F(ReplicationTest, AfterARestartAGenerationWaitsForItsCheckpointsHolder) {
  std::string id, secret;
  RestartedBeforeTheHolderReturns(&id, &secret);
  EXPECT_TRUE(Starts("w1").empty() && Starts("w2").empty()) << "started before the holder";
  auto reg = coord_->RegisterWorker(Claim("w0", id, 10, secret));
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_TRUE(coord_->AttachSession(reg->session_id).ok());
  sessions_["w0"] = reg->session_id;
  ASSERT_EQ(Job(id).state(), v1::RUNNING);
  ASSERT_EQ(Job(id).generation(), 2);
  EXPECT_EQ(Job(id).restarts(), 0);
  int started = 0;
  for (const char* w : {"w0", "w1", "w2"}) {
    auto cmds = Take(w);
    for (size_t i = 0; i < cmds.size(); ++i) {
      if (!cmds[i].has_start()) continue;
      ++started;
      EXPECT_EQ(cmds[i].start().task().resume_from(), MemoryPath(id, 10));
      if (std::string(w) != "w0") {
        ASSERT_GT(i, 0u) << w << " starts without fetching the checkpoint first";
        EXPECT_TRUE(cmds[i - 1].has_hold());
      }
    }
  }
  EXPECT_EQ(started, 2);
}

// No holder comes back: the generation starts once the workers' time to
// re-register is over (it does not wait for ever).
TEST_F(ReplicationTest, AGenerationWaitsForAHolderOnlyAsLongAsWorkersGetToReturn) {
  std::string id, secret;
  RestartedBeforeTheHolderReturns(&id, &secret);
  for (int i = 0; i < 14; ++i) {  // past reconnect_grace (2 s) + heartbeat timeout (10 s)
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    Heartbeat("w2");
    coord_->Tick();
  }
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_EQ(Starts("w1").size() + Starts("w2").size(), 2u);
}

TEST_F(ReplicationTest, ExpiredCheckpointsAreDroppedByEveryHolder) {
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_keep_last(1);
  const std::string id = StartJob(spec);
  HeldByBoth(id, 10);
  ASSERT_TRUE(Checkpoint(id, 1, 20, CkptPath(id, 20)).ok());
  for (const char* w : {"w0", "w1"}) {
    auto drops = Drops(Take(w));
    ASSERT_EQ(drops.size(), 1u) << w;
    EXPECT_EQ(drops[0].step(), 10);
    EXPECT_EQ(drops[0].job_id(), id);
  }
  EXPECT_TRUE(Drops(Take("w2")).empty());
}

TEST_F(ReplicationTest, AnExpiredJobIsDroppedWholeByItsHolders) {
  CoordinatorOptions o = Options();
  o.retain_finished = absl::Hours(1);
  SetOptions(o);
  Open();
  const std::string id = StartJob(Spec(2, 1));
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  Held("w0", id, 10);
  Held("w1", id, 10);
  ASSERT_TRUE(coord_->CancelJob(id).ok());
  Take("w0");
  Take("w1");
  clock_.Advance(absl::Hours(2));
  for (const char* w : {"w0", "w1", "w2"}) Heartbeat(w);
  coord_->Tick();
  ASSERT_FALSE(coord_->JobExists(id));
  for (const char* w : {"w0", "w1"}) {
    auto drops = Drops(Take(w));
    ASSERT_EQ(drops.size(), 1u) << w;
    EXPECT_EQ(drops[0].step(), -1);
  }
}

// A replica's fetch can outlast its record (keep_last expiry, a released
// memory checkpoint): the worker, told to drop nothing while it was not yet
// a holder, is told to drop the copy when it says it holds it; a copy of a
// job the coordinator no longer knows goes whole, as at the job's expiry.
TEST_F(ReplicationTest, ACopyOfAStepWithNoRecordIsDroppedWhenItsHolderSpeaks) {
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_keep_last(1);
  const std::string id = StartJob(spec);
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  Held("w0", id, 10);
  ASSERT_EQ(Holds(Take("w1")).size(), 1u);  // w1 starts fetching step 10
  ASSERT_TRUE(Checkpoint(id, 1, 20, CkptPath(id, 20)).ok());
  EXPECT_TRUE(Drops(Take("w1")).empty()) << "w1 was no holder when step 10 expired";
  EXPECT_EQ(Drops(Take("w0")).size(), 1u);
  Held("w1", id, 10);  // its fetch ends now
  auto drops = Drops(Take("w1"));
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].job_id(), id);
  EXPECT_EQ(drops[0].step(), 10);
  EXPECT_TRUE(HoldersOf(id, 10).empty());
  // A failed answer holds nothing to drop; a held step with a record stays.
  Held("w1", id, 30, /*ok=*/false);
  Held("w0", id, 20);
  Take("w1");
  Held("w1", id, 20);
  EXPECT_TRUE(Drops(Take("w1")).empty());
  EXPECT_TRUE(Drops(Take("w0")).empty());
  // Re-registering with a copy of a job that is gone: the job's copies go.
  auto reg = coord_->RegisterWorker(Claim("w2", "job-999999", 7, "s"));
  ASSERT_TRUE(reg.ok()) << reg.status();
  sessions_["w2"] = reg->session_id;
  ASSERT_TRUE(coord_->AttachSession(reg->session_id).ok());
  drops = Drops(Take("w2"));
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].job_id(), "job-999999");
  EXPECT_EQ(drops[0].step(), -1);
  // A worker flooding such claims and reading nothing: repeats are queued
  // once, distinct ones up to a bound, names that are no job id not at all.
  for (int i = 0; i < 3000; ++i) Held("w2", absl::StrCat("job-x", i % 2000), 1);
  Held("w2", std::string(100, 'j'), 1);
  Held("w2", "../etc", 1);
  drops = Drops(Take("w2"));
  EXPECT_EQ(drops.size(), WorkerRegistry::kMaxQueuedUnrecordedDrops);
  for (const auto& d : drops) EXPECT_EQ(d.job_id().rfind("job-x", 0), 0u) << d.job_id();
}

// A report repeated (its answer lost, or a trainer looping) is recorded
// once: no second event, no second hold to rank 0's worker, its holders
// and secret unchanged; a different file for the step still replaces it.
TEST_F(ReplicationTest, ARepeatedCheckpointReportIsRecordedOnce) {
  const std::string id = StartJob(Spec(2, 1));
  HeldByBoth(id, 10);
  auto events = coord_->ListEvents(id, 0, 1000);
  ASSERT_TRUE(events.ok());
  const size_t before = events->size();
  for (int i = 0; i < 100; ++i) {
    auto again = Checkpoint(id, 1, 10, CkptPath(id, 10));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->empty());
  }
  events = coord_->ListEvents(id, 0, 1000);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), before);
  EXPECT_TRUE(Holds(Take("w0")).empty());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w0", "w1"));
  // Rewritten: another file.
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10), "crc32:0000abce").ok());
  EXPECT_EQ(Holds(Take("w0")).size(), 1u);
  EXPECT_TRUE(HoldersOf(id, 10).empty());
}

TEST(ReplicationRulesTest, NoHolderWithAnEndpointMeansNoPrefetch) {
  SimulatedClock clock;
  WorkerRegistry workers({}, clock);
  v1::RegisterWorkerRequest r;
  r.set_name("a");
  r.set_address("a.host");
  r.set_slots(1);
  ASSERT_TRUE(workers.Register(r).ok());
  r.set_name("b");
  ASSERT_TRUE(workers.Register(r).ok());
  v1::CheckpointRecord rec;
  rec.set_step(5);
  rec.add_holders("a");
  EXPECT_TRUE(PrefetchCommands(workers, rec, {"a", "b"}).empty());
  EXPECT_TRUE(ReplicaHolds(workers, rec, "a", {"a", "b"}, 1).empty());
  EXPECT_THAT(DropCommands("j", 5, {"a", "b"}).size(), 2u);
  r.set_peer_endpoint("bad endpoint");
  EXPECT_EQ(workers.Register(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.set_peer_endpoint("b.host:0");
  EXPECT_EQ(workers.Register(r).status().code(), absl::StatusCode::kInvalidArgument);
  // Other workers dial it with a hold's secret: no local socket target.
  for (const char* local : {"unix-abstract:evil:1", "unix:sock:1"}) {
    r.set_peer_endpoint(local);
    EXPECT_EQ(workers.Register(r).status().code(), absl::StatusCode::kInvalidArgument) << local;
  }
  r.set_peer_endpoint("[fe80::1%eth0]:7071");
  EXPECT_TRUE(workers.Register(r).ok());
}

}  // namespace
}  // namespace frameworm::coordinator

namespace frameworm::coordinator {
namespace {

TEST_F(ReplicationTest, ARestartedCoordinatorLearnsTheHoldersFromTheWorkers) {
  const std::string id = StartJob(Spec(2, 1));
  ASSERT_TRUE(Checkpoint(id, 1, 10, CkptPath(id, 10)).ok());
  auto holds = Holds(Take("w0"));
  ASSERT_EQ(holds.size(), 1u);
  const std::string secret = holds[0].secret();
  ASSERT_FALSE(secret.empty());
  Held("w0", id, 10);
  Held("w1", id, 10);
  Take("w0");
  Take("w1");
  Open();  // a restart: holders are not stored, the record's secret is
  EXPECT_TRUE(HoldersOf(id, 10).empty());
  // A claim without the hold's secret, or with another one (even as the
  // first claim after the restart), does not count.
  for (const std::string wrong : {"", "a-guess"}) {
    ASSERT_TRUE(coord_->RegisterWorker(Claim("w1", id, 10, wrong)).ok());
    EXPECT_TRUE(HoldersOf(id, 10).empty()) << wrong;
  }
  ASSERT_TRUE(coord_->RegisterWorker(Claim("w1", id, 10, secret)).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w1"));
  ASSERT_TRUE(coord_->RegisterWorker(Claim("w0", id, 10, "a-guess")).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w1"));
  v1::RegisterWorkerRequest req = Claim("w0", id, 10, secret);
  ASSERT_TRUE(coord_->RegisterWorker(req).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w1", "w0"));
  for (int i = 0; i < 1025; ++i) *req.add_held() = req.held(0);
  EXPECT_EQ(coord_->RegisterWorker(req).status().code(), absl::StatusCode::kInvalidArgument);
}

// A registration lists every copy its worker holds: a holder that comes
// back without one (an empty work dir, a fresh /dev/shm) holds it no more,
// so no rank is sent to fetch from it and no replica names it as a source.
TEST_F(ReplicationTest, AHolderThatReRegistersWithoutTheCopyIsNoLongerAHolder) {
  const std::string id = StartJob(Spec(2, 1));
  HeldByBoth(id, 10);
  HeldByBoth(id, 20);
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w0", "w1"));
  v1::RegisterWorkerRequest req = Claim("w1", id, 20, "");
  req.clear_held();
  v1::CheckpointHeld* h = req.add_held();  // step 20 only, as asked before
  h->set_job_id(id);
  h->set_step(20);
  h->set_ok(true);
  ASSERT_TRUE(coord_->RegisterWorker(req).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w0"));
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0", "w1"));
  req.clear_held();
  ASSERT_TRUE(coord_->RegisterWorker(req).ok());
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0"));
}

// A record stored by an older coordinator has no secret: after the upgrade
// the first holder that shows one gives it, and later claims must match.
TEST_F(ReplicationTest, ARecordStoredWithoutASecretAdoptsTheFirstHolders) {
  const std::string id = StartJob(Spec(2, 1));
  HeldByBoth(id, 10);
  auto rows = store_.LoadCheckpoints(id);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  CheckpointRow old = (*rows)[0];
  EXPECT_FALSE(old.secret.empty()) << "stored with the record";
  old.secret.clear();
  ASSERT_TRUE(store_.AddCheckpoint(old).ok());
  Open();
  ASSERT_TRUE(coord_->RegisterWorker(Claim("w1", id, 10, "the-secret")).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w1"));
  ASSERT_TRUE(coord_->RegisterWorker(Claim("w0", id, 10, "a-guess")).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w1"));
  ASSERT_TRUE(coord_->RegisterWorker(Claim("w0", id, 10, "the-secret")).ok());
  EXPECT_THAT(HoldersOf(id, 10), ElementsAre("w1", "w0"));
}

}  // namespace
}  // namespace frameworm::coordinator

namespace frameworm::coordinator {
namespace {

TEST_F(ReplicationTest, ABadCheckpointIsDroppedAndTheNextGenerationResumesFromTheOneBefore) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  const std::string id = StartJob(spec);
  HeldByBoth(id, 10);
  HeldByBoth(id, 20);
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 2);
  Take("w0");
  Take("w1");
  v1::BadCheckpoint bad = Bad(id, 2, 1, CkptPath(id, 10), "checksum mismatch");
  EXPECT_EQ(coord_->ReportBadCheckpoint(bad).status().code(), absl::StatusCode::kInvalidArgument)
      << "only what this generation resumed from";
  bad.set_path(CkptPath(id, 20));
  v1::BadCheckpoint stale = bad;
  stale.mutable_ref()->set_generation(1);
  stale.mutable_ref()->set_token(TokenOf(id, 1, 1));
  EXPECT_EQ(coord_->ReportBadCheckpoint(stale).status().code(), absl::StatusCode::kAborted);
  v1::BadCheckpoint tokenless = bad;
  tokenless.mutable_ref()->clear_token();
  EXPECT_EQ(coord_->ReportBadCheckpoint(tokenless).status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(coord_->ReportBadCheckpoint(bad).ok());
  bad.mutable_ref()->set_token(TokenOf(id, 2, 0));
  EXPECT_TRUE(coord_->ReportBadCheckpoint(bad).ok()) << "rank 0 tells too: nothing more happens";
  auto list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step(), 10);
  for (const char* w : {"w0", "w1"}) {
    auto drops = Drops(Take(w));
    ASSERT_EQ(drops.size(), 1u) << w;
    EXPECT_EQ(drops[0].step(), 20);
  }
  TaskState("w1", id, 2, 1, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 3);
  // Copies existed and did not load: generation 2's end counts.
  EXPECT_EQ(Job(id).restarts(), 2);
  for (const char* w : {"w0", "w1"}) {
    auto starts = Starts(w);
    ASSERT_EQ(starts.size(), 1u) << w;
    EXPECT_EQ(starts[0].resume_from(), CkptPath(id, 10));
  }
}

// Step `step` of job `id`, generation 1: a copy ("data") uploaded to the
// coordinator and its record reported with that copy's checksum.
void UploadedAndReported(Coordinator& coord, const std::string& id,
                         int64_t step, const std::string& token, const std::string& path) {
  v1::JobRef ref;
  ref.set_job_id(id);
  ref.set_generation(1);
  ref.set_token(token);
  auto up = coord.BeginCheckpointUpload(ref, step, 4);
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->Append("data").ok());
  ASSERT_TRUE((*up)->Commit(Crc32Text(0xadf3f363u)).ok());  // crc32("data")
  v1::CheckpointRecord r;
  *r.mutable_ref() = ref;
  r.set_step(step);
  r.set_path(path);
  r.set_bytes(4);
  r.set_checksum(Crc32Text(0xadf3f363u));
  ASSERT_TRUE(coord.ReportCheckpoint(r).ok());
}

// A 2-node job whose step 20 was uploaded, reported and held by w0 and
// w1, then restarted once (rank 0 failed): generation 2 resumes from it.
// The job's id in `id`.
void ReplicationTest::InGenerationTwoHeldByBoth(const v1::JobSpec& spec, std::string* id) {
  *id = StartJob(spec);
  UploadedAndReported(*coord_, *id, 20, TokenOf(*id, 1, 0), CkptPath(*id, 20));
  Held("w0", *id, 20);
  Held("w1", *id, 20);
  TaskState("w0", *id, 1, 0, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(*id).generation(), 2);
  ASSERT_EQ(Job(*id).restarts(), 1);
}

// After a coordinator restart: `worker` registers again with its rank of
// job `id`'s generation `gen` running (w0 rank 0, w1 rank 1).
void ReplicationTest::ReattachRunning(const std::string& worker, const std::string& id,
                                      int64_t gen) {
  v1::TaskStatus running;
  running.mutable_ref()->set_job_id(id);
  running.mutable_ref()->set_generation(gen);
  running.set_rank(worker == "w0" ? 0 : 1);
  running.set_state(v1::TASK_RUNNING);
  AddWorker(worker, 1, {running}, /*peer=*/true);
}

// The coordinator's copy is damaged (a rank on a host without the file
// downloaded other bytes than the record's) while workers hold good
// copies: the coordinator checks its copy, removes it, keeps the record
// and its holders (no drop sent), and the next generation resumes from the
// same step without using up a restart. A copy that matches its record is
// not removed on a rank's word, and the verdict holds for the generation
// (no second read). Another rank of the generation that then finds no copy
// (NOT_FOUND, reported without coordinator_copy) gets the same answer.
TEST_F(ReplicationTest, ADamagedCoordinatorCopyIsRemovedAndTheHoldersKeepTheCheckpoint) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(3);
  std::string id;
  ASSERT_NO_FATAL_FAILURE(InGenerationTwoHeldByBoth(spec, &id));
  v1::BadCheckpoint bad = Bad(id, 2, 1, CkptPath(id, 20), "crc32:0bad0bad is not the record's",
                              /*coordinator_copy=*/true);
  const std::string copy = absl::StrCat(dir_, "/checkpoint-copies/", id, "/ckpt-20.pt");
  ASSERT_TRUE(std::filesystem::exists(copy));
  auto intact = coord_->ReportBadCheckpoint(bad);
  EXPECT_EQ(intact.status().code(), absl::StatusCode::kFailedPrecondition) << intact.status();
  EXPECT_NE(intact.status().message().find("matches its record"), std::string::npos)
      << intact.status();
  EXPECT_TRUE(std::filesystem::exists(copy));
  std::ofstream(copy, std::ios::trunc) << "dxta";  // damaged on the coordinator's disk
  EXPECT_EQ(coord_->ReportBadCheckpoint(bad).status().code(), absl::StatusCode::kFailedPrecondition)
      << "generation 2's verdict stands";
  EXPECT_TRUE(std::filesystem::exists(copy));
  TaskState("w1", id, 2, 1, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 3);
  ASSERT_EQ(Job(id).restarts(), 2);
  Take("w0");
  Take("w1");
  bad = Bad(id, 3, 1, CkptPath(id, 20), "crc32:0bad0bad is not the record's",
            /*coordinator_copy=*/true);
  auto kept = coord_->ReportBadCheckpoint(bad);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept);
  EXPECT_FALSE(std::filesystem::exists(copy));
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0", "w1"));
  auto events = coord_->ListEvents(id, 0, 1000);
  ASSERT_TRUE(events.ok());
  bool told = false;
  for (const auto& e : *events) {
    told = told || (e.kind() == "checkpoint_copy_bad" &&
                    e.message().find("fetches the checkpoint from w0, w1") != std::string::npos);
  }
  EXPECT_TRUE(told);
  const size_t events_before = events->size();
  // Rank 0 tells too, with the flag or having found no copy at all: the
  // record stays, no second event, no drop.
  for (bool flag : {true, false}) {
    kept = coord_->ReportBadCheckpoint(Bad(id, 3, 0, CkptPath(id, 20), "no copy", flag));
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_TRUE(*kept) << flag;
  }
  EXPECT_EQ(coord_->ListEvents(id, 0, 1000)->size(), events_before);
  for (const char* w : {"w0", "w1"}) EXPECT_TRUE(Drops(Take(w)).empty()) << w;
  TaskState("w1", id, 3, 1, v1::TASK_EXITED, 1);
  v1::JobStatus st = Job(id);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 4);
  EXPECT_EQ(st.restarts(), 2) << "the damaged copy was not the job's fault";
  for (const char* w : {"w0", "w1"}) {
    auto starts = Starts(w);
    ASSERT_EQ(starts.size(), 1u) << w;
    EXPECT_EQ(starts[0].resume_from(), CkptPath(id, 20)) << w;
  }
  // Generation 4: with the copy gone, a report of no copy (the holders'
  // were not there either) drops the record as before, counted.
  ASSERT_TRUE(coord_->ReportBadCheckpoint(Bad(id, 4, 1, CkptPath(id, 20), "no copy")).ok());
  EXPECT_TRUE(coord_->ListCheckpoints(id)->empty());
  EXPECT_EQ(Drops(Take("w0")).size(), 1u);
}

// A coordinator restarted after one rank's report removed its damaged copy
// (the verdict in memory is gone): the copy's damage mark tells the
// restarted one, so the other rank, which then finds no copy at all, is
// answered kept, its holders are not told to drop theirs, and the
// generation's end is not counted.
TEST_F(ReplicationTest, ADamagedCopysVerdictSurvivesACoordinatorRestart) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  const std::string id = StartJob(spec);
  UploadedAndReported(*coord_, id, 20, TokenOf(id, 1, 0), CkptPath(id, 20));
  auto holds = Holds(Take("w0"));
  ASSERT_EQ(holds.size(), 1u);
  const std::string secret = holds[0].secret();
  Held("w0", id, 20);
  Held("w1", id, 20);
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 2);
  const std::string t0 = TokenOf(id, 2, 0);
  const std::string copy = absl::StrCat(dir_, "/checkpoint-copies/", id, "/ckpt-20.pt");
  std::ofstream(copy, std::ios::trunc) << "dxta";
  auto kept = coord_->ReportBadCheckpoint(
      Bad(id, 2, 1, CkptPath(id, 20), "not the record's", /*coordinator_copy=*/true));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept);
  EXPECT_FALSE(std::filesystem::exists(copy));
  std::string marked;
  std::getline(std::ifstream(copy + ".damaged"), marked);
  ASSERT_EQ(marked, "2");
  // A restart whose reload does not see the mark (moved away meanwhile, so
  // the reports below read it); the generation runs on.
  std::filesystem::rename(copy + ".damaged", copy + ".away");
  Open();
  std::filesystem::rename(copy + ".away", copy + ".damaged");
  for (const char* w : {"w0", "w1"}) {
    ReattachRunning(w, id, 2);
    Held(w, id, 20, true, secret);
  }
  ASSERT_EQ(Job(id).state(), v1::RUNNING) << Job(id).reason();
  ASSERT_THAT(HoldersOf(id, 20), ElementsAre("w0", "w1"));
  Take("w0");
  Take("w1");
  v1::BadCheckpoint none = Bad(id, 2, 0, CkptPath(id, 20), "NOT_FOUND: no copy");
  none.mutable_ref()->set_token(t0);
  // A mark that cannot be read now: UNAVAILABLE, nothing dropped.
  absl::StatusOr<bool> unread = false;
  WithoutFreeDescriptors([&] { unread = coord_->ReportBadCheckpoint(none); });
  EXPECT_EQ(unread.status().code(), absl::StatusCode::kUnavailable) << unread.status();
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0", "w1"));
  kept = coord_->ReportBadCheckpoint(none);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept) << "the holders' copies were dropped after the restart";
  for (const char* w : {"w0", "w1"}) EXPECT_TRUE(Drops(Take(w)).empty()) << w;
  TaskState("w1", id, 2, 1, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 3);
  EXPECT_EQ(Job(id).restarts(), 1) << "the damaged copy's generation was counted";
  EXPECT_EQ(Starts("w0").at(0).resume_from(), CkptPath(id, 20));
}

// The same restart with no report after it (the other rank had the file
// and simply fails): the generation whose rank found the copy damaged
// still ends uncounted, from the damage mark read at reload.
TEST_F(ReplicationTest, ADamagedCopysGenerationStaysUncountedAcrossARestart) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  std::string id;
  ASSERT_NO_FATAL_FAILURE(InGenerationTwoHeldByBoth(spec, &id));
  std::ofstream(absl::StrCat(dir_, "/checkpoint-copies/", id, "/ckpt-20.pt"), std::ios::trunc)
      << "dxta";
  auto kept = coord_->ReportBadCheckpoint(
      Bad(id, 2, 1, CkptPath(id, 20), "not the record's", /*coordinator_copy=*/true));
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(*kept);
  Open();  // a restart: the verdict in memory is gone
  for (const char* w : {"w0", "w1"}) ReattachRunning(w, id, 2);
  TaskState("w1", id, 2, 1, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 3) << Job(id).reason();
  EXPECT_EQ(Job(id).restarts(), 1) << "the damaged copy's generation was counted after a restart";
}

// A copy the coordinator cannot read now (here: no file descriptor left)
// is no verdict: UNAVAILABLE, nothing removed, the record and holders
// stay, and a later report (descriptors back) is judged on the bytes.
TEST_F(ReplicationTest, ACopyThatCannotBeReadIsNotJudgedDamaged) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  const std::string id = StartJob(spec);
  UploadedAndReported(*coord_, id, 20, TokenOf(id, 1, 0), CkptPath(id, 20));
  Held("w0", id, 20);
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 2);
  const std::string copy = absl::StrCat(dir_, "/checkpoint-copies/", id, "/ckpt-20.pt");
  std::ofstream(copy, std::ios::trunc) << "dxta";  // the record's size, other bytes
  const v1::BadCheckpoint bad =
      Bad(id, 2, 1, CkptPath(id, 20), "not the record's", /*coordinator_copy=*/true);
  absl::StatusOr<bool> unread = false;
  WithoutFreeDescriptors([&] { unread = coord_->ReportBadCheckpoint(bad); });
  EXPECT_EQ(unread.status().code(), absl::StatusCode::kUnavailable) << unread.status();
  EXPECT_TRUE(std::filesystem::exists(copy));
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0"));
  auto kept = coord_->ReportBadCheckpoint(bad);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept);
  EXPECT_FALSE(std::filesystem::exists(copy));
}

// The same with no worker holding the checkpoint: nothing else has it, so
// its record is dropped as for any checkpoint that does not load.
TEST_F(ReplicationTest, ADamagedCoordinatorCopyWithNoHolderDropsTheCheckpoint) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(2);
  const std::string id = StartJob(spec);
  HeldByBoth(id, 10);
  UploadedAndReported(*coord_, id, 20, TokenOf(id, 1, 0), CkptPath(id, 20));
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 2);
  Take("w0");
  Take("w1");
  std::ofstream(absl::StrCat(dir_, "/checkpoint-copies/", id, "/ckpt-20.pt"), std::ios::trunc)
      << "dat";
  v1::BadCheckpoint bad =
      Bad(id, 2, 1, CkptPath(id, 20), "3 bytes of 4", /*coordinator_copy=*/true);
  auto kept = coord_->ReportBadCheckpoint(bad);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(*kept);
  auto list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step(), 10);
  TaskState("w1", id, 2, 1, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 3);
  EXPECT_EQ(Job(id).restarts(), 2) << "a damaged copy with no other: counted, as a bad file";
  EXPECT_EQ(Starts("w0").at(0).resume_from(), CkptPath(id, 10));
}

// A checkpoint with no copy anywhere (no holder, none on the coordinator:
// an in-memory checkpoint whose holders are gone) is the catalog's
// staleness, not the job's fault: the generation that found nothing to
// load ends without using up a restart.
TEST_F(ReplicationTest, ACheckpointWithNoCopyLeftCostsNoRestart) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  const std::string id = StartJob(spec);
  HeldByBoth(id, 10);
  ASSERT_TRUE(Checkpoint(id, 1, 20, CkptPath(id, 20)).ok());  // nobody holds it
  Take("w0");
  Take("w1");
  TaskState("w0", id, 1, 0, v1::TASK_EXITED, 1);
  ASSERT_EQ(Job(id).generation(), 2);
  ASSERT_EQ(Job(id).restarts(), 1);
  Take("w0");
  Take("w1");
  v1::BadCheckpoint bad =
      Bad(id, 2, 0, CkptPath(id, 20), "not on this host, no copy on the coordinator");
  ASSERT_TRUE(coord_->ReportBadCheckpoint(bad).ok());
  TaskState("w0", id, 2, 0, v1::TASK_EXITED, 1);
  v1::JobStatus st = Job(id);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 3);
  EXPECT_EQ(st.restarts(), 1) << "the generation that found no copy is not counted";
  auto starts = Starts("w0");
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].resume_from(), CkptPath(id, 10));
}

// An in-memory checkpoint held only by the worker that was lost (rank 0's
// node, before its replica was made): it is still listed as the holder,
// but a silent holder serves no rank, so the generation that found no
// copy is not counted either, and the job, whose one restart the loss used
// up, goes on from the disk checkpoint before it.
TEST_F(ReplicationTest, ACheckpointHeldOnlyByALostWorkerCostsNoRestart) {
  v1::JobSpec spec = Spec(2, 1);
  spec.set_max_restarts(1);
  spec.set_heartbeat_timeout_s(5);
  const std::string id = StartJob(spec);
  HeldByBoth(id, 10);
  const std::string mem = MemoryPath(id, 20);
  ASSERT_TRUE(MemoryCheckpoint(id, 1, 20).ok());
  Held("w0", id, 20);
  Take("w0");
  Take("w1");
  // w0 goes silent past the job's heartbeat timeout; w1 and w2 do not.
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w1");
    Heartbeat("w2");
    coord_->Tick();
  }
  v1::JobStatus st = Job(id);
  ASSERT_EQ(st.generation(), 2) << st.reason();
  ASSERT_EQ(st.restarts(), 1);
  EXPECT_THAT(HoldersOf(id, 20), ElementsAre("w0"));
  std::string rank0;
  for (const char* w : {"w1", "w2"}) {
    for (const auto& t : Starts(w)) {
      EXPECT_EQ(t.resume_from(), mem);
      if (t.rank() == 0) rank0 = w;
    }
  }
  ASSERT_FALSE(rank0.empty());
  auto told = coord_->ReportBadCheckpoint(
      Bad(id, 2, 0, mem, "not on this host; its holder w0 did not answer"));
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_FALSE(*told) << "dropped, not kept for its holder";
  EXPECT_TRUE(HoldersOf(id, 20).empty()) << "the record is gone";
  TaskState(rank0, id, 2, 0, v1::TASK_EXITED, 1);
  st = Job(id);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 3);
  EXPECT_EQ(st.restarts(), 1) << "the generation that found no copy is not counted";
  auto starts = Starts(rank0);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].resume_from(), CkptPath(id, 10));
}

}  // namespace
}  // namespace frameworm::coordinator

namespace frameworm::coordinator {
namespace {

// In-memory checkpoints: their own directory, their own retention (the
// newest two), no copy on the coordinator, released when the job ends.
TEST_F(ReplicationTest, MemoryCheckpointsAreKeptTwoDeepAndReleasedWhenTheJobEnds) {
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_checkpoint()->set_keep_last(1);
  const std::string id = StartJob(spec);
  const std::string mem =
      absl::StrCat("/dev/shm/frameworm/", id, "-", Job(id).submitted_unix_ms());
  auto report = [&](int64_t step, const std::string& path, bool memory) {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(id);
    r.mutable_ref()->set_generation(1);
    r.mutable_ref()->set_token(TokenOf(id, 1, 0));
    r.set_step(step);
    r.set_path(path);
    r.set_bytes(3);
    r.set_checksum("crc32:0000abcd");
    r.set_memory(memory);
    return coord_->ReportCheckpoint(r);
  };
  // A memory record must be in the job's memory directory, and a disk one
  // must not claim to be there.
  EXPECT_EQ(report(5, CkptPath(id, 5), true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report(5, mem + "/ckpt-5.pt", false).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(report(10, CkptPath(id, 10), false).ok());
  for (int step : {12, 14, 16}) ASSERT_TRUE(report(step, absl::StrCat(mem, "/ckpt-", step, ".pt"), true).ok());
  auto list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  std::vector<std::pair<int64_t, bool>> kept;
  for (const auto& c : *list) kept.emplace_back(c.step(), c.memory());
  EXPECT_THAT(kept, ElementsAre(std::pair<int64_t, bool>{10, false},
                                std::pair<int64_t, bool>{14, true},
                                std::pair<int64_t, bool>{16, true}));
  // A restarted coordinator tells them apart again by their directory.
  // (Listed before the workers re-register without their ranks, which ends
  // the job, as the ranks had reported steps: a lost rank counts; an ended
  // job's memory records are not listed.)
  ASSERT_TRUE(Step(id, 1, 0, 16).ok());
  ASSERT_TRUE(Step(id, 1, 1, 16).ok());
  Open();
  ASSERT_FALSE(IsFinal(Job(id).state())) << v1::JobState_Name(Job(id).state());
  list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  kept.clear();
  for (const auto& c : *list) kept.emplace_back(c.step(), c.memory());
  EXPECT_THAT(kept, ElementsAre(std::pair<int64_t, bool>{10, false},
                                std::pair<int64_t, bool>{14, true},
                                std::pair<int64_t, bool>{16, true}));
  for (const char* w : {"w0", "w1", "w2"}) AddWorker(w, 1, {}, /*peer=*/true);
  ASSERT_TRUE(IsFinal(Job(id).state())) << v1::JobState_Name(Job(id).state());
  list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE((*list)[0].memory());
  // Holds the coordinator sent before its restart: the answers show their
  // secret (the restarted coordinator has it from its store).
  std::string s16;
  auto rows = store_.LoadCheckpoints(id);
  ASSERT_TRUE(rows.ok());
  for (const CheckpointRow& r : *rows)
    if (r.step == 16) s16 = r.secret;
  ASSERT_FALSE(s16.empty());
  Held("w0", id, 16, true, s16);
  Held("w1", id, 16, true, s16);
  Take("w0");
  Take("w1");
  // The job has ended (its workers came back without their ranks).
  (void)coord_->CancelJob(id);
  ASSERT_TRUE(IsFinal(Job(id).state()));
  Take("w0");
  Take("w1");
  clock_.Advance(absl::Seconds(11));
  for (const char* w : {"w0", "w1", "w2"}) Heartbeat(w);
  coord_->Tick();
  for (const char* w : {"w0", "w1"}) {
    auto drops = Drops(Take(w));
    ASSERT_EQ(drops.size(), 1u) << w;
    EXPECT_EQ(drops[0].step(), 16);
  }
  list = coord_->ListCheckpoints(id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step(), 10) << "the disk checkpoint stays";
}

}  // namespace
}  // namespace frameworm::coordinator
