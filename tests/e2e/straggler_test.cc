// End-to-end: a real straggler. One trainer of a 2-rank CNN job is slowed
// from outside (stopped and continued every 40 ms, so its own work takes
// about twice as long); with synchronous DDP both ranks then report the
// same step time, and only the busy time (step - wait + data) tells which
// one the other waits for. It must be flagged, and only it; the job's
// undisturbed steps before flag nobody.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace frameworm::e2e {
namespace {

std::vector<v1::AggregatedStep> Steps(Cluster& c, const std::string& id) {
  return JobMetrics(c, id);
}

TEST(StragglerE2E, ARankSlowedFromOutsideIsFlaggedAndOnlyIt) {
  auto c = Cluster::Start({});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = (*c)->Submit(R"(name: straggler
nodes: 2
nproc_per_node: 1
backend: gloo
heartbeat_timeout: 30
train:
  model: cnn
  dataset: fashion-mnist
  max_steps: 5000
  batch_size: 32
)");
  ASSERT_TRUE(id.ok()) << id.status();
  auto warm = (*c)->WaitFor(*id, [](const v1::JobStatus& s) { return s.step() >= 60 || IsFinal(s.state()); },
                            absl::Seconds(120));
  ASSERT_TRUE(warm.ok()) << warm.status();
  ASSERT_EQ(warm->state(), v1::RUNNING) << warm->ShortDebugString();
  int undisturbed_flags = 0;
  int64_t last_undisturbed = 0;
  for (const auto& s : Steps(**c, *id)) {
    undisturbed_flags += s.stragglers_size();
    last_undisturbed = std::max(last_undisturbed, s.step());
    ASSERT_EQ(s.rank_wait_seconds_size(), 2) << "the trainers report their wait time";
  }
  EXPECT_EQ(undisturbed_flags, 0) << "an undisturbed run flagged a straggler";

  pid_t slow = 0;
  for (pid_t p : TrainerPidsWithJobId(*id)) {
    if (EnvOf(p, "RANK") == "1") slow = p;
  }
  ASSERT_GT(slow, 0);
  // 40 ms stopped, 40 ms running, for 10 s (bounded: 125 cycles).
  for (int i = 0; i < 125; ++i) {
    if (kill(slow, SIGSTOP) != 0) break;
    usleep(40000);
    kill(slow, SIGCONT);
    usleep(40000);
  }
  kill(slow, SIGCONT);
  std::set<int> flagged;
  int flagged_steps = 0, slowed_steps = 0;
  for (const auto& s : Steps(**c, *id)) {
    if (s.step() <= last_undisturbed) continue;
    ++slowed_steps;
    if (s.stragglers_size() > 0) ++flagged_steps;
    for (int r : s.stragglers()) flagged.insert(r);
  }
  std::cout << "slowed steps: " << slowed_steps << ", flagged: " << flagged_steps << std::endl;
  EXPECT_EQ(flagged, std::set<int>{1}) << "over " << slowed_steps << " steps";
  EXPECT_GT(flagged_steps, slowed_steps / 2) << flagged_steps << " of " << slowed_steps;
  RunResult events = (*c)->Cli({"events", *id});
  EXPECT_NE(events.output.find("rank 1 flagged as straggler"), std::string::npos) << events.output;
  EXPECT_EQ(events.output.find("rank 0 flagged"), std::string::npos) << events.output;
  RunResult cancel = (*c)->Cli({"cancel", *id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.output;
}

}  // namespace
}  // namespace frameworm::e2e
