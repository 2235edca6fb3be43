// Seeded fault schedules for the fault-injection suite (fault_test.cc):
// which process gets which signal at which moment of a short training run.
// The schedule is a pure function of the seed (std::mt19937_64 and integer
// arithmetic only), so a failing seed replays the same faults at the same
// moments of the run (steps, not wall-clock times).
//
// Kinds: SIGKILL or SIGSTOP (continued after `stop_s`) of a trainer, of
// the worker running a rank, or of the coordinator (a killed daemon is
// started again after `down_s`).
// Moments: at a step of the run (a fraction of it), just after a checkpoint
// step (while the checkpoint is written), at the last step (during the
// final evaluation and the end of the job).
// A schedule holds one fault, or two close together (the second `gap_ms`
// after the first).
#ifndef FRAMEWORM_TESTS_E2E_FAULT_SCHEDULE_H_
#define FRAMEWORM_TESTS_E2E_FAULT_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace frameworm::e2e {

enum class FaultTarget { kTrainer, kWorker, kCoordinator };
enum class FaultMoment { kMidRun, kCheckpoint, kLastStep };

struct Fault {
  FaultTarget target = FaultTarget::kTrainer;
  bool stop = false;        // SIGSTOP (then SIGCONT) instead of SIGKILL
  int rank = 0;             // whose trainer or worker
  FaultMoment moment = FaultMoment::kMidRun;
  int64_t at_step = 0;      // wait until the job reports this step
  int gap_ms = 0;           // after the previous fault (the second one)
  double stop_s = 0;        // SIGSTOP: how long before SIGCONT
  double down_s = 0;        // SIGKILL of a daemon: how long before restart
};

struct RunShape {
  int64_t steps = 150;
  int64_t checkpoint_every = 25;
  int ranks = 2;
  double heartbeat_timeout_s = 4;
};

std::vector<Fault> MakeFaultSchedule(uint64_t seed, const RunShape& run);
// One line, e.g. "seed 7: SIGKILL worker of rank 1 at step 50 (checkpoint)".
std::string Describe(uint64_t seed, const std::vector<Fault>& faults);

}  // namespace frameworm::e2e

#endif  // FRAMEWORM_TESTS_E2E_FAULT_SCHEDULE_H_
