// Comparing the ranks' flight recorders (CompareCollectives), checking a
// ping's recorder (CheckCollectiveProgress), and what a hang's reason says
// with them (GenerationProgress::Hung).
#include "coordinator/collective_view.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/collective_report.h"
#include "coordinator/generation_progress.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

CollectiveOpView Op(int64_t seq, const std::string& what, int bucket, int64_t bytes,
                    const std::string& state, double age = 1.0) {
  CollectiveOpView o;
  o.seq = seq;
  o.op = what == "step action" ? "broadcast" : "allreduce";
  o.what = what;
  o.bucket = bucket;
  o.bytes = bytes;
  o.state = state;
  o.age_seconds = age;
  return o;
}

// A rank that finished #40 (the metrics) and issued nothing since; ranks
// that entered #41 (gradient bucket 0) long ago.
RankCollectives Behind(absl::Time at) {
  RankCollectives r;
  r.enqueued = 40;
  r.completed = 40;
  r.recent = {Op(39, "gradients", 0, 4 << 20, "completed"), Op(40, "metrics", -1, 16, "completed")};
  r.at = at;
  return r;
}
RankCollectives Waiting(absl::Time at, double age = 2.0) {
  RankCollectives r;
  r.enqueued = 41;
  r.completed = 40;
  r.recent = {Op(40, "metrics", -1, 16, "completed"), Op(41, "gradients", 0, 4 << 20, "started", age)};
  r.at = at;
  return r;
}

TEST(CollectiveViewTest, NamesTheRankThatNeverReachedTheCollectiveOthersWaitIn) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  RankCollectives a = Waiting(now - absl::Seconds(1)), b = Behind(now - absl::Seconds(3)),
                  c = Waiting(now, 2.5);
  auto v = CompareCollectives({&a, &b, &c}, now);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->seq, 41);
  EXPECT_EQ(v->behind, std::vector<int>({1}));
  EXPECT_FALSE(v->desynchronized);
  EXPECT_EQ(v->text,
            "flight recorder: rank 1 never reached collective #41 allreduce gradients bucket 0 "
            "(4.0 MiB), which ranks 0, 2 wait in for 3.0 s (last issued: rank 1: #40 allreduce "
            "metrics (16 B) completed at its ping 3.0 s ago)");
}

TEST(CollectiveViewTest, EveryRankInsideItOrNothingPendingOrTooFewRanks) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  RankCollectives a = Waiting(now), b = Waiting(now, 4.0);
  auto v = CompareCollectives({&a, &b}, now);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->behind.empty());
  EXPECT_EQ(v->text,
            "flight recorder: every rank entered collective #41 allreduce gradients bucket 0 "
            "(4.0 MiB) (4.0 s ago) and none completed it: a rank stopped inside it, or the "
            "network between them");
  // A stopped rank's last ping showed it inside #39, which the others have
  // long completed: it is behind #41, not inside #39.
  RankCollectives stale = Behind(now - absl::Seconds(5));
  stale.enqueued = 39;
  stale.completed = 38;
  stale.recent = {Op(39, "gradients", 0, 4 << 20, "started")};
  v = CompareCollectives({&a, &stale}, now);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->seq, 41);
  EXPECT_EQ(v->behind, std::vector<int>({1}));
  EXPECT_NE(v->text.find("rank 1: #39 allreduce gradients bucket 0 (4.0 MiB) started at its ping "
                         "5.0 s ago"),
            std::string::npos)
      << v->text;
  RankCollectives d = Behind(now), e = Behind(now);
  EXPECT_FALSE(CompareCollectives({&d, &e}, now).has_value());  // nobody waits in one
  EXPECT_FALSE(CompareCollectives({&a, nullptr}, now).has_value());
  EXPECT_FALSE(CompareCollectives({}, now).has_value());
}

TEST(CollectiveViewTest, RanksThatIssueDifferentCollectivesAreDesynchronized) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  RankCollectives a = Waiting(now), b = Waiting(now);
  b.recent.back() = Op(41, "step action", -1, 16, "started");
  auto v = CompareCollectives({&a, &b}, now);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->desynchronized);
  EXPECT_EQ(v->text,
            "flight recorder: the ranks disagree on collective #41 (rank 0 #41 allreduce gradients "
            "bucket 0 (4.0 MiB); rank 1 #41 broadcast step action (16 B)): their programs issue "
            "different collectives (desynchronized)");
}

v1::CollectiveProgress Good() {
  v1::CollectiveProgress c;
  c.set_enqueued(41);
  c.set_completed(40);
  v1::CollectiveOp* o = c.add_recent();
  o->set_seq(41);
  o->set_op("allreduce");
  o->set_what("gradients");
  o->set_bucket(0);
  o->set_bytes(4096);
  o->set_state("started");
  o->set_age_seconds(0.5);
  return c;
}

TEST(CollectiveReportTest, AcceptsARecorderAndRefusesEachBadField) {
  ASSERT_TRUE(CheckCollectiveProgress(Good()).ok());
  ASSERT_TRUE(CheckCollectiveProgress(v1::CollectiveProgress()).ok());  // none yet
  const RankCollectives r = ToRankCollectives(Good());
  EXPECT_EQ(r.enqueued, 41);
  ASSERT_EQ(r.recent.size(), 1u);
  EXPECT_EQ(DescribeCollective(r.recent[0]), "#41 allreduce gradients bucket 0 (4.0 KiB)");
  struct Case {
    const char* name;
    std::function<void(v1::CollectiveProgress&)> spoil;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"completed beyond enqueued", [](auto& c) { c.set_completed(42); }, "completed <= enqueued"},
      {"negative", [](auto& c) { c.set_enqueued(-1); }, "completed <= enqueued"},
      {"huge", [](auto& c) { c.set_enqueued(std::numeric_limits<int64_t>::max()); }, "2^62"},
      {"too many", [](auto& c) {
         c.set_enqueued(100);
         for (int i = 0; i < 16; ++i) *c.add_recent() = c.recent(0);
       }, "at most 16"},
      {"seq beyond enqueued", [](auto& c) { c.mutable_recent(0)->set_seq(42); }, "out of order"},
      {"seq zero", [](auto& c) { c.mutable_recent(0)->set_seq(0); }, "out of order"},
      {"repeated seq", [](auto& c) { *c.add_recent() = c.recent(0); }, "out of order"},
      {"empty op", [](auto& c) { c.mutable_recent(0)->set_op(""); }, "printable"},
      {"long what", [](auto& c) { c.mutable_recent(0)->set_what(std::string(33, 'x')); },
       "printable"},
      {"control byte", [](auto& c) { c.mutable_recent(0)->set_what("a\nb"); }, "printable"},
      {"state", [](auto& c) { c.mutable_recent(0)->set_state("done"); }, "state must be"},
      {"bucket", [](auto& c) { c.mutable_recent(0)->set_bucket(-2); }, "out of range"},
      {"bytes", [](auto& c) { c.mutable_recent(0)->set_bytes(-5); }, "out of range"},
      {"nan age", [](auto& c) { c.mutable_recent(0)->set_age_seconds(std::nan("")); }, "finite"},
      {"negative seconds", [](auto& c) { c.mutable_recent(0)->set_seconds(-1); }, "finite"},
      {"huge age", [](auto& c) { c.mutable_recent(0)->set_age_seconds(1e300); }, "finite"},
  };
  for (const Case& k : cases) {
    v1::CollectiveProgress c = Good();
    k.spoil(c);
    absl::Status s = CheckCollectiveProgress(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.name;
    EXPECT_NE(s.message().find(k.says), std::string::npos) << k.name << ": " << s;
  }
}

// The recorders outrank the pings: rank 0 was stopped inside the gradient
// collective #41 it had entered (its last ping is stale, so the pings
// would name it), rank 1 still pings, busy outside the collectives, and
// never issued #41, which rank 2 waits in. Without rank 1, #41 cannot
// complete whatever rank 0 does: rank 1 is named.
TEST(CollectiveViewTest, AHangNamesTheRankTheRecordersShowBehind) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(3, clock.Now());
  for (int r = 0; r < 3; ++r) p.Step(r, 7, 0, clock.Now());
  p.Ping(0, clock.Now(), 0.1, true, Waiting(clock.Now(), 0.1));
  for (int s = 1; s <= 11; ++s) {
    clock.Advance(absl::Seconds(1));
    p.Ping(1, clock.Now(), 0, true, Behind(clock.Now()));
    p.Ping(2, clock.Now(), s, true, Waiting(clock.Now(), s));
  }
  int rank = -1;
  auto hung = p.Hung(clock.Now(), absl::Seconds(10), std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 1) << *hung;
  EXPECT_NE(hung->find("rank 2 (11.0 s) waits for it"), std::string::npos) << *hung;
  EXPECT_NE(hung->find("its process still pings (busy outside the collectives)"), std::string::npos)
      << *hung;
  EXPECT_NE(hung->find("flight recorder: rank 1 never reached collective #41 allreduce gradients "
                       "bucket 0 (4.0 MiB), which ranks 0, 2 wait in for 11.1 s"),
            std::string::npos)
      << *hung;
  ASSERT_NE(p.collectives(2), nullptr);
  EXPECT_EQ(p.collectives(2)->enqueued, 41);
  EXPECT_EQ(p.CompareRecorders(clock.Now())->behind, std::vector<int>({1}));
  // Without the recorders the pings name rank 0, the stale one.
  GenerationProgress q;
  q.Start(3, clock.Now());
  for (int r = 0; r < 3; ++r) q.Step(r, 7, 0, clock.Now());
  q.Ping(0, clock.Now(), 0.1);
  for (int s = 1; s <= 11; ++s) {
    clock.Advance(absl::Seconds(1));
    q.Ping(1, clock.Now(), 0);
    q.Ping(2, clock.Now(), s);
  }
  hung = q.Hung(clock.Now(), absl::Seconds(10), std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 0) << *hung;
}

// A program that pings without measuring its waits (a Python entrypoint):
// a stopped rank (no pings) is named; when every silent rank still pings,
// the reason says the culprit is not known.
TEST(CollectiveViewTest, PingsThatDoNotMeasureWaitsNameOnlyAStoppedRank) {
  SimulatedClock clock;
  GenerationProgress p;
  p.Start(2, clock.Now());
  p.Step(0, 5, 0, clock.Now());
  p.Step(1, 5, 0, clock.Now());
  p.Ping(1, clock.Now(), 0, false);
  for (int s = 1; s <= 11; ++s) {
    clock.Advance(absl::Seconds(1));
    p.Ping(0, clock.Now(), 0, false);
  }
  int rank = -1;
  auto hung = p.Hung(clock.Now(), absl::Seconds(10), std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 1) << *hung;
  EXPECT_NE(hung->find("rank 1 hung"), std::string::npos) << *hung;
  EXPECT_NE(hung->find("its process sends no sign of life (stopped or gone)"), std::string::npos)
      << *hung;
  p.Ping(1, clock.Now(), 0, false);  // both alive: not known
  hung = p.Hung(clock.Now(), absl::Seconds(10), std::nullopt, &rank);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(rank, 0) << *hung;
  EXPECT_NE(hung->find("which rank the others wait for is not known"), std::string::npos) << *hung;
}

}  // namespace
}  // namespace frameworm::coordinator
