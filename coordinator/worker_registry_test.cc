#include "coordinator/worker_registry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

class WorkerRegistryTest : public ::testing::Test {
 protected:
  WorkerRegistryTest() : registry_(Options(), clock_) {}
  static WorkerRegistry::Options Options() {
    WorkerRegistry::Options o;
    o.heartbeat_interval_s = 1;
    o.heartbeat_timeout = absl::Seconds(10);
    o.kill_grace_s = 2.5;
    o.session_prefix = "boot";
    return o;
  }
  static v1::RegisterWorkerRequest Req(const std::string& name, int slots) {
    v1::RegisterWorkerRequest r;
    r.set_name(name);
    r.set_address(name + ":9000");
    r.set_slots(slots);
    return r;
  }
  static v1::CoordinatorMessage Start(const std::string& job) {
    v1::CoordinatorMessage m;
    m.mutable_start()->mutable_task()->mutable_ref()->set_job_id(job);
    return m;
  }

  SimulatedClock clock_;
  WorkerRegistry registry_;
};

TEST_F(WorkerRegistryTest, RegisterValidatesAndReplacesTheSession) {
  EXPECT_EQ(registry_.Register(Req("", 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Register(Req("a/b", 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Names reach logs and terminals: no control characters, no 8 MB names.
  for (const std::string bad : {std::string("w\nevent {forged}"), std::string("w\x1b[2J"),
                                std::string(65, 'w'), std::string("w 1")}) {
    auto r = registry_.Register(Req(bad, 1));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_LT(r.status().message().size(), 200u);
  }
  EXPECT_EQ(registry_.Register(Req("w0", 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::RegisterWorkerRequest no_addr = Req("w0", 1);
  no_addr.clear_address();
  EXPECT_EQ(registry_.Register(no_addr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry_.All().empty());

  absl::StatusOr<std::string> s1 = registry_.Register(Req("w0", 2));
  ASSERT_TRUE(s1.ok());
  EXPECT_NE(s1->find("boot"), std::string::npos);
  ASSERT_TRUE(registry_.Attach(*s1).ok());
  absl::StatusOr<std::string> s2 = registry_.Register(Req("w0", 4));
  ASSERT_TRUE(s2.ok());
  EXPECT_NE(*s1, *s2);
  // One lookup, one error, for every call on a replaced session.
  for (const absl::Status& s :
       {registry_.Attach(*s1), registry_.Hear(*s1).status(),
        registry_.Take(*s1).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_NE(s.message().find("register the worker again"), std::string::npos);
  }
  // A hostile session id is quoted cut short and printable.
  absl::Status odd = registry_.Attach(std::string(1 << 20, 's') + "\n\x1b[2J");
  EXPECT_EQ(odd.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(odd.message().size(), 200u);
  EXPECT_EQ(odd.message().find('\x1b'), std::string::npos);
  registry_.Detach(*s1);  // ignored
  ASSERT_EQ(registry_.All().size(), 1u);
  EXPECT_EQ(registry_.Find("w0")->slots, 4);
  EXPECT_FALSE(registry_.Find("w0")->attached);  // the new session is not yet
  // One stream per session: a second is refused while the first is live.
  ASSERT_TRUE(registry_.Attach(*s2).ok());
  absl::Status again = registry_.Attach(*s2);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("already has a live stream"), std::string::npos) << again;
  EXPECT_TRUE(registry_.Find("w0")->attached);
  registry_.Detach(*s2);
  EXPECT_TRUE(registry_.Attach(*s2).ok()) << "once the first ended";
}

TEST_F(WorkerRegistryTest, NamesOfTheCertificateRuleAreTaken) {
  EXPECT_TRUE(registry_.Register(Req("node-1.rack_2", 1)).ok());
  EXPECT_TRUE(registry_.Register(Req(std::string(64, 'w'), 1)).ok());
  EXPECT_EQ(registry_.All().size(), 2u);
}

TEST_F(WorkerRegistryTest, OutboxIsPerSessionInOrderAndNotifies) {
  const std::string s = *registry_.Register(Req("w0", 1));
  registry_.Send("w0", Start("a"));
  v1::JobRef ref;
  ref.set_job_id("b");
  ref.set_generation(3);
  registry_.SendKill("w0", ref, -1);
  registry_.Send("nobody", Start("c"));  // unknown: dropped
  EXPECT_EQ(registry_.TakeSessionsToNotify(), std::set<std::string>{s});
  EXPECT_TRUE(registry_.TakeSessionsToNotify().empty());
  auto cmds = registry_.Take(s);
  ASSERT_TRUE(cmds.ok());
  ASSERT_EQ(cmds->size(), 2u);
  EXPECT_EQ((*cmds)[0].start().task().ref().job_id(), "a");
  EXPECT_EQ((*cmds)[1].kill().ref().generation(), 3);
  EXPECT_EQ((*cmds)[1].kill().rank(), -1);
  EXPECT_DOUBLE_EQ((*cmds)[1].kill().grace_s(), 2.5);
  EXPECT_TRUE(registry_.Take(s)->empty());
  // What the old session did not take waits for the new one; reconcile
  // keeps the starts it still wants.
  registry_.Send("w0", Start("d"));
  registry_.Send("w0", Start("e"));
  registry_.SendKill("w0", ref, -1);
  const std::string s2 = *registry_.Register(Req("w0", 1));
  EXPECT_EQ(registry_.TakeSessionsToNotify(), std::set<std::string>{s2});
  EXPECT_EQ(registry_.KeepPendingStarts(
                "w0", [](const v1::TaskSpec& t) { return t.ref().job_id() == "e"; }),
            (std::set<std::pair<std::string, int>>{{"e", 0}}));
  auto kept = registry_.Take(s2);
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 2u);
  EXPECT_EQ((*kept)[0].start().task().ref().job_id(), "e");
  EXPECT_TRUE((*kept)[1].has_kill());
}

// Receipts are coalesced per task and stream and bounded per worker: a
// worker that sends chunks for ever-new jobs and never reads its stream
// cannot grow the outbox; other commands still queue.
TEST_F(WorkerRegistryTest, ReceiptsAreCoalescedAndBounded) {
  const std::string s = *registry_.Register(Req("w0", 1));
  auto receipt = [](const std::string& job, const std::string& stream, int64_t end, bool final) {
    v1::CoordinatorMessage m;
    m.mutable_receipt()->mutable_ref()->set_job_id(job);
    m.mutable_receipt()->mutable_ref()->set_generation(1);
    m.mutable_receipt()->set_stream(stream);
    m.mutable_receipt()->set_log_offset(end);
    m.mutable_receipt()->set_final_status(final);
    return m;
  };
  registry_.SendReceipt("w0", receipt("a", "stdout", 10, false));
  registry_.SendReceipt("w0", receipt("a", "stdout", 30, false));  // covers the first
  registry_.SendReceipt("w0", receipt("a", "stdout", 20, false));  // older: changes nothing
  registry_.SendReceipt("w0", receipt("a", "stderr", 5, false));
  registry_.SendReceipt("w0", receipt("a", "", 0, true));
  registry_.Send("w0", Start("x"));
  registry_.SendReceipt("w0", Start("not a receipt"));  // ignored
  auto cmds = registry_.Take(s);
  ASSERT_TRUE(cmds.ok());
  ASSERT_EQ(cmds->size(), 4u);
  EXPECT_EQ((*cmds)[0].receipt().log_offset(), 30);
  EXPECT_EQ((*cmds)[1].receipt().stream(), "stderr");
  EXPECT_TRUE((*cmds)[2].receipt().final_status());
  EXPECT_TRUE((*cmds)[3].has_start());
  for (int i = 0; i < 5000; ++i) registry_.SendReceipt("w0", receipt("job-" + std::to_string(i), "stdout", 1, false));
  registry_.Send("w0", Start("y"));
  cmds = registry_.Take(s);
  ASSERT_TRUE(cmds.ok());
  ASSERT_EQ(cmds->size(), WorkerRegistry::kMaxQueuedReceipts + 1);
  EXPECT_TRUE(cmds->back().has_start());
  // Taken, they no longer count.
  registry_.SendReceipt("w0", receipt("b", "stdout", 1, false));
  EXPECT_EQ(registry_.Take(s)->size(), 1u);
}

TEST_F(WorkerRegistryTest, KillsAndReceiptsEchoOnlyWhatAWorkerMatchesAndAreBounded) {
  const std::string s = *registry_.Register(Req("w0", 1));
  // What a worker sent in a stale status: a long token, an id no job has.
  v1::JobRef ref;
  ref.set_job_id("job-000001");
  ref.set_generation(3);
  ref.set_token(std::string(1 << 20, 't'));
  registry_.SendKill("w0", ref, 0);
  registry_.SendKill("w0", ref, 0);  // the same kill is queued once
  registry_.SendKill("w0", ref, 1);
  v1::CoordinatorMessage r;
  *r.mutable_receipt()->mutable_ref() = ref;
  registry_.SendReceipt("w0", r);
  v1::JobRef bad = ref;
  for (const std::string& id : {std::string(1 << 20, 'j'), std::string("../x"), std::string()}) {
    bad.set_job_id(id);
    registry_.SendKill("w0", bad, 0);  // no worker runs such a task: nothing sent
    *r.mutable_receipt()->mutable_ref() = bad;
    registry_.SendReceipt("w0", r);
  }
  auto cmds = registry_.Take(s);
  ASSERT_TRUE(cmds.ok());
  ASSERT_EQ(cmds->size(), 3u);
  for (int i = 0; i < 2; ++i) {
    const v1::KillTask& k = (*cmds)[i].kill();
    EXPECT_EQ(k.ref().job_id(), "job-000001");
    EXPECT_EQ(k.ref().generation(), 3);
    EXPECT_TRUE(k.ref().token().empty());
    EXPECT_EQ(k.rank(), i);
    EXPECT_EQ(k.grace_s(), 2.5);
  }
  EXPECT_TRUE((*cmds)[2].receipt().ref().token().empty());
  EXPECT_EQ((*cmds)[2].receipt().ref().job_id(), "job-000001");
  // A worker that keeps reporting stale tasks and never reads its stream:
  // at most kMaxQueuedKills kills wait.
  for (int i = 0; i < 5000; ++i) {
    ref.set_job_id("job-" + std::to_string(i));
    registry_.SendKill("w0", ref, 0);
  }
  registry_.Send("w0", Start("y"));
  cmds = registry_.Take(s);
  ASSERT_TRUE(cmds.ok());
  ASSERT_EQ(cmds->size(), WorkerRegistry::kMaxQueuedKills + 1);
  EXPECT_TRUE(cmds->back().has_start());
}

TEST_F(WorkerRegistryTest, HoldsSentAreRememberedUntilDroppedAndBounded) {
  ASSERT_TRUE(registry_.Register(Req("w0", 1)).ok());
  auto hold = [](const std::string& job, int64_t step) {
    v1::CoordinatorMessage m;
    m.mutable_hold()->set_job_id(job);
    m.mutable_hold()->set_step(step);
    return m;
  };
  auto drop = [](const std::string& job, int64_t step) {
    v1::CoordinatorMessage m;
    m.mutable_drop()->set_job_id(job);
    m.mutable_drop()->set_step(step);
    return m;
  };
  registry_.Send("w0", hold("a", 10));
  registry_.Send("w0", hold("a", 20));
  registry_.Send("w0", hold("b", 10));
  registry_.Send("nobody", hold("a", 30));
  EXPECT_TRUE(registry_.SentHold("w0", "a", 10));
  EXPECT_FALSE(registry_.SentHold("w0", "a", 30));
  EXPECT_FALSE(registry_.SentHold("w1", "a", 10));
  registry_.Send("w0", drop("a", 10));
  EXPECT_FALSE(registry_.SentHold("w0", "a", 10));
  EXPECT_TRUE(registry_.SentHold("w0", "a", 20));
  registry_.Send("w0", hold("a", 30));
  registry_.Send("w0", drop("a", -1));  // every step of the job
  EXPECT_FALSE(registry_.SentHold("w0", "a", 20));
  EXPECT_FALSE(registry_.SentHold("w0", "a", 30));
  EXPECT_TRUE(registry_.SentHold("w0", "b", 10));
  for (int i = 0; i < 10000; ++i) registry_.Send("w0", hold("c", i));
  EXPECT_EQ(registry_.Find("w0")->holds_sent.size(), WorkerRegistry::kMaxHoldsSent);
  EXPECT_TRUE(registry_.SentHold("w0", "c", 9999));
}

TEST_F(WorkerRegistryTest, SchedulableWhileAttachedAndFresh) {
  const std::string s = *registry_.Register(Req("w0", 1));
  const WorkerRegistry::Worker* w = registry_.Find("w0");
  EXPECT_FALSE(registry_.Schedulable(*w));  // not attached yet
  ASSERT_TRUE(registry_.Attach(s).ok());
  EXPECT_TRUE(registry_.Schedulable(*w));
  // Quiet for three heartbeat intervals: still; a moment more: not.
  clock_.Advance(absl::Seconds(3));
  EXPECT_TRUE(registry_.Schedulable(*w));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(registry_.Schedulable(*w));
  absl::StatusOr<WorkerRegistry::Heard> heard = registry_.Hear(s);
  ASSERT_TRUE(heard.ok());
  EXPECT_EQ(heard->worker, w);
  EXPECT_TRUE(heard->became_schedulable);
  EXPECT_EQ(registry_.LastSeen("w0"), clock_.Now());
  EXPECT_FALSE(registry_.Hear(s)->became_schedulable);  // already was
  registry_.Detach(s);
  EXPECT_FALSE(registry_.Schedulable(*w));
}

TEST_F(WorkerRegistryTest, SilentDetachedWorkersAreForgotten) {
  const std::string gone = *registry_.Register(Req("gone", 1));
  ASSERT_TRUE(registry_.Attach(gone).ok());
  registry_.Detach(gone);
  const std::string busy = *registry_.Register(Req("busy", 1));  // detached, kept
  const std::string live = *registry_.Register(Req("live", 1));
  ASSERT_TRUE(registry_.Attach(live).ok());
  clock_.Advance(absl::Hours(2));
  const absl::Time cutoff = clock_.Now() - absl::Hours(1);
  EXPECT_EQ(registry_.ForgetSilentSince(cutoff, {"busy"}), std::vector<std::string>{"gone"});
  EXPECT_EQ(registry_.Find("gone"), nullptr);
  EXPECT_NE(registry_.Find("busy"), nullptr);
  EXPECT_NE(registry_.Find("live"), nullptr);  // attached: kept however quiet
  EXPECT_EQ(registry_.Hear(gone).status().code(), absl::StatusCode::kNotFound);
  // It may come back, as a new worker.
  const std::string back = *registry_.Register(Req("gone", 1));
  EXPECT_TRUE(registry_.Attach(back).ok());
  EXPECT_EQ(registry_.All().size(), 3u);
}

TEST_F(WorkerRegistryTest, ExpectedWorkersWaitForRegistration) {
  const absl::Time deadline = clock_.Now() + absl::Seconds(5);
  registry_.Expect("w0", deadline);
  EXPECT_EQ(registry_.LastSeen("w0"), deadline);
  EXPECT_FALSE(registry_.Schedulable(*registry_.Find("w0")));
  registry_.Expect("w0", deadline + absl::Seconds(60));  // known: unchanged
  EXPECT_EQ(registry_.LastSeen("w0"), deadline);
  EXPECT_EQ(registry_.LastSeen("nobody"), absl::InfinitePast());
  const std::string s = *registry_.Register(Req("w0", 1));
  ASSERT_TRUE(registry_.Attach(s).ok());
  EXPECT_TRUE(registry_.Schedulable(*registry_.Find("w0")));
}

}  // namespace
TEST_F(WorkerRegistryTest, LiveWorkersNameCannotBeTakenOver) {
  v1::RegisterWorkerRequest a = Req("w0", 1);
  a.set_instance("process-a");
  absl::StatusOr<std::string> s1 = registry_.Register(a);
  ASSERT_TRUE(s1.ok());
  ASSERT_TRUE(registry_.Attach(*s1).ok());
  v1::RegisterWorkerRequest b = Req("w0", 64);
  b.set_address("10.6.6.6");
  b.set_instance("process-b");
  absl::StatusOr<std::string> taken = registry_.Register(b);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(taken.status().message().find("w0:9000"), std::string::npos) << taken.status();
  EXPECT_EQ(registry_.Find("w0")->address, "w0:9000");  // the live one kept it
  EXPECT_TRUE(registry_.Hear(*s1).ok());
  // The same process re-registering (a reconnect) is the same worker.
  absl::StatusOr<std::string> again = registry_.Register(a);
  ASSERT_TRUE(again.ok()) << again.status();
  // Once the live session is gone (stream closed), another process may.
  registry_.Detach(*again);
  EXPECT_TRUE(registry_.Register(b).ok());
  // ... and once the holder has been silent for the heartbeat timeout.
  ASSERT_TRUE(registry_.Attach(*registry_.Register(b)).ok());
  clock_.Advance(absl::Seconds(11));
  EXPECT_TRUE(registry_.Register(a).ok());
}

TEST_F(WorkerRegistryTest, DeclaredSlotsAddressAndInstanceAreBounded) {
  for (int slots : {0, -1, WorkerRegistry::kMaxSlots + 1, 2147483647}) {
    EXPECT_EQ(registry_.Register(Req("w0", slots)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << slots;
  }
  EXPECT_TRUE(registry_.Register(Req("w0", WorkerRegistry::kMaxSlots)).ok());
  for (const std::string& addr : {std::string(300, 'a'), std::string("a b"),
                                  std::string("x;rm -rf /"), std::string("h\n")}) {
    v1::RegisterWorkerRequest r = Req("w1", 1);
    r.set_address(addr);
    EXPECT_EQ(registry_.Register(r).status().code(), absl::StatusCode::kInvalidArgument)
        << addr;
  }
  v1::RegisterWorkerRequest r = Req("w1", 1);
  r.set_instance(std::string(129, 'i'));
  EXPECT_EQ(registry_.Register(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Req("w1", 1);
  for (int i = 0; i <= WorkerRegistry::kMaxSlots; ++i) r.add_running();
  EXPECT_EQ(registry_.Register(r).status().code(), absl::StatusCode::kInvalidArgument);
}

// A task the worker lists is in a state the protocol declares: a running
// one RUNNING, an ended one how it ended. Unset (0) or unknown states were
// skipped while their rank counted as reported.
TEST_F(WorkerRegistryTest, ListedTasksCarryADeclaredState) {
  for (int state : {0, 2, 7}) {
    v1::RegisterWorkerRequest r = Req("w0", 1);
    r.add_running()->set_state(static_cast<v1::TaskState>(state));
    absl::StatusOr<std::string> s = registry_.Register(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << state;
    EXPECT_NE(s.status().message().find("not TASK_RUNNING"), std::string::npos) << s.status();
  }
  for (int state : {0, 1, 9}) {
    v1::RegisterWorkerRequest r = Req("w0", 1);
    r.add_ended()->set_state(static_cast<v1::TaskState>(state));
    absl::StatusOr<std::string> s = registry_.Register(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << state;
    EXPECT_NE(s.status().message().find("ended tasks are TASK_EXITED"), std::string::npos)
        << s.status();
  }
  v1::RegisterWorkerRequest r = Req("w0", 1);
  r.add_running()->set_state(v1::TASK_RUNNING);
  r.add_ended()->set_state(v1::TASK_KILLED);
  EXPECT_TRUE(registry_.Register(r).ok());
}

}  // namespace frameworm::coordinator
