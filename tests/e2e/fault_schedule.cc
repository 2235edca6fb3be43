#include "tests/e2e/fault_schedule.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace frameworm::e2e {
namespace {

// A uniform integer in [lo, hi] from raw draws (the same on every library).
int64_t Pick(std::mt19937_64& g, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(g() % static_cast<uint64_t>(hi - lo + 1));
}

Fault OneFault(std::mt19937_64& g, const RunShape& run) {
  Fault f;
  f.target = static_cast<FaultTarget>(Pick(g, 0, 2));
  f.stop = Pick(g, 0, 1) == 1;
  f.rank = static_cast<int>(Pick(g, 0, run.ranks - 1));
  f.moment = static_cast<FaultMoment>(Pick(g, 0, 2));
  const int64_t checkpoints = run.steps / run.checkpoint_every;
  switch (f.moment) {
    case FaultMoment::kMidRun:
      f.at_step = Pick(g, run.steps / 10, run.steps * 9 / 10);
      break;
    case FaultMoment::kCheckpoint:
      f.at_step = run.checkpoint_every * Pick(g, 1, std::max<int64_t>(1, checkpoints - 1));
      break;
    case FaultMoment::kLastStep:
      f.at_step = run.steps;
      break;
  }
  // A stopped daemon or trainer stays stopped past the heartbeat timeout
  // (a hang to detect) or briefly (a stall to ride out).
  f.stop_s = Pick(g, 0, 1) == 1 ? run.heartbeat_timeout_s + 1 : 1.5;
  f.down_s = static_cast<double>(Pick(g, 5, 20)) / 10;
  return f;
}

const char* TargetName(FaultTarget t) {
  switch (t) {
    case FaultTarget::kTrainer: return "trainer";
    case FaultTarget::kWorker: return "worker";
    case FaultTarget::kCoordinator: return "coordinator";
  }
  return "?";
}

const char* MomentName(FaultMoment m) {
  switch (m) {
    case FaultMoment::kMidRun: return "mid-run";
    case FaultMoment::kCheckpoint: return "checkpoint";
    case FaultMoment::kLastStep: return "last step";
  }
  return "?";
}

}  // namespace

std::vector<Fault> MakeFaultSchedule(uint64_t seed, const RunShape& run) {
  std::mt19937_64 g(seed);
  std::vector<Fault> faults = {OneFault(g, run)};
  if (Pick(g, 0, 2) == 0) {  // a third of the schedules: two faults close together
    Fault second = OneFault(g, run);
    second.at_step = faults[0].at_step;
    second.moment = faults[0].moment;
    second.gap_ms = static_cast<int>(Pick(g, 100, 1000));
    faults.push_back(second);
  }
  return faults;
}

std::string Describe(uint64_t seed, const std::vector<Fault>& faults) {
  std::vector<std::string> parts;
  for (const Fault& f : faults) {
    std::string who = f.target == FaultTarget::kCoordinator
                          ? "coordinator"
                          : absl::StrCat(TargetName(f.target), " of rank ", f.rank);
    std::string what = f.stop ? absl::StrCat("SIGSTOP ", who, " for ", f.stop_s, " s")
                              : absl::StrCat("SIGKILL ", who,
                                             f.target == FaultTarget::kTrainer
                                                 ? std::string()
                                                 : absl::StrCat(" (back after ", f.down_s, " s)"));
    parts.push_back(absl::StrCat(what, f.gap_ms > 0 ? absl::StrCat(" ", f.gap_ms, " ms later") : "",
                                 " at step ", f.at_step, " (", MomentName(f.moment), ")"));
  }
  return absl::StrCat("seed ", seed, ": ", absl::StrJoin(parts, "; then "));
}

}  // namespace frameworm::e2e
