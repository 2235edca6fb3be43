// frameworm-train's step reports, sent from a thread of their own so the
// training loop never waits for the coordinator (whose acknowledgement
// comes after a durable commit: about 3 ms on the bench machine, a tenth
// of the demo CNN's step and three times the MLP's).
//
// Submit() queues a report and returns at once with what the coordinator
// last answered (the checkpoint step it asks for) or a terminal error. The
// thread sends everything queued while its previous call was in flight as
// one ReportSteps batch (at most `max_batch`; one group commit on the
// coordinator), so reports keep their order and a fast trainer sends one
// call per round trip, not one per step.
//
// Errors: ABORTED or PERMISSION_DENIED from the coordinator (this
// generation is over, or the rank is refused) is terminal: Submit returns
// it from then on and nothing more is sent. Any other failure (the
// coordinator away: UNAVAILABLE; a report it refuses) drops that batch, as
// a failed synchronous report was dropped, and the thread pauses 200 ms
// before the next call. When more than `max_queued` reports wait, the
// oldest are dropped (counted in dropped()).
//
// Thread safety: Submit and Close from one thread (the training thread);
// the channel (not owned) is used by the reporter's thread only until
// Close returns, and must outlive it.
#ifndef FRAMEWORM_TRAINER_STEP_REPORTER_H_
#define FRAMEWORM_TRAINER_STEP_REPORTER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/control_channel.h"

namespace frameworm {

class StepReporter {
 public:
  StepReporter(ControlChannel* channel, size_t max_batch = 64, size_t max_queued = 4096);
  ~StepReporter() { Close(std::chrono::milliseconds(0)).IgnoreError(); }
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  // Queues `r`; the coordinator's latest directive, or the terminal error.
  absl::StatusOr<StepDirective> Submit(StepReport r);
  // Sends what is queued, waiting at most `flush` for it, then ends the
  // thread; idempotent. Returns the terminal error, if any.
  absl::Status Close(std::chrono::milliseconds flush);

  int64_t calls() const;    // ReportSteps calls made
  int64_t sent() const;     // reports in calls that succeeded
  int64_t dropped() const;  // reports dropped (failed calls, overflow)

 private:
  void Run();

  ControlChannel* const channel_;
  const size_t max_batch_;
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;     // queue changed, or closing
  std::condition_variable idle_;   // the queue drained (for Close)
  std::deque<StepReport> queue_;   // guarded by mu_
  bool in_flight_ = false;         // guarded by mu_
  bool closing_ = false;           // guarded by mu_
  StepDirective latest_;           // guarded by mu_
  absl::Status terminal_;          // guarded by mu_
  int64_t calls_ = 0, sent_ = 0, dropped_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_STEP_REPORTER_H_
