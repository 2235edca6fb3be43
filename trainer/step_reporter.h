// frameworm-train's step reports, sent from a thread of their own so the
// training loop never waits for the coordinator (whose acknowledgement
// comes after a durable commit: about 3 ms on the bench machine, a tenth
// of the demo CNN's step and three times the MLP's).
//
// Submit() queues a report and returns at once with what the coordinator
// last answered (the checkpoint step it asks for) or a terminal error. The
// thread sends everything queued while its previous call was in flight as
// one ReportSteps batch (at most `max_batch`; one group commit on the
// coordinator), so reports keep their order. Calls start at most once per
// `min_interval` (50 ms by default) unless `max_batch` reports wait or
// Close flushes: a 1 ms step makes 20 calls a second, not 1000, and the
// training thread wakes the reporter only when the queue was empty. On a
// machine whose cores the ranks fill, every wake-up and call takes time
// from a rank's step. A directive from the coordinator (a checkpoint it
// asks for) therefore arrives up to `min_interval` later.
//
// Errors: ABORTED or PERMISSION_DENIED from the coordinator (this
// generation is over, or the rank is refused) is terminal: Submit returns
// it from then on and nothing more is sent. UNAVAILABLE or
// DEADLINE_EXCEEDED (the coordinator away: restarting, or the link down)
// puts the batch back in front of the queue, to be sent again when it
// answers, so a coordinator restart leaves no gap in the job's metrics. A
// batch that did arrive before the answer was lost is counted once: the
// coordinator ignores a rank's second report of a step. Any other failure
// (a report it refuses) drops that batch. After any failure the thread
// pauses 200 ms before the next call. When more than `max_queued` reports
// wait, the oldest are dropped (counted in dropped()); so are those still
// queued when Close's flush time runs out.
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
  StepReporter(ControlChannel* channel, size_t max_batch = 64, size_t max_queued = 4096,
               std::chrono::milliseconds min_interval = std::chrono::milliseconds(50));
  ~StepReporter() { Close(std::chrono::milliseconds(0)).IgnoreError(); }
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  // Queues `r`; the coordinator's latest directive, or the terminal error.
  absl::StatusOr<StepDirective> Submit(StepReport r);
  // The reports queued so far go in the next call without waiting out the
  // pause (a checkpoint or a stop was decided at this step: the
  // generation may end soon, and its last steps' reports with it).
  void SendNow();
  // Sends what is queued, waiting at most `flush` for it, then ends the
  // thread; idempotent. Returns the terminal error, if any.
  absl::Status Close(std::chrono::milliseconds flush);

  int64_t calls() const;    // ReportSteps calls made
  int64_t sent() const;     // reports in calls that succeeded
  int64_t requeued() const;  // reports put back after a transient failure (each time)
  int64_t dropped() const;   // reports dropped (refused, overflow, unsent at Close)

 private:
  void Run();
  // Drops the oldest reports past max_queued_. Needs mu_.
  void DropOverflowLocked();

  ControlChannel* const channel_;
  const size_t max_batch_;
  const size_t max_queued_;
  const std::chrono::milliseconds min_interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;     // queue changed, or closing
  std::condition_variable idle_;   // the queue drained (for Close)
  std::deque<StepReport> queue_;   // guarded by mu_
  bool in_flight_ = false;         // guarded by mu_
  bool idle_waiting_ = false;      // the thread waits for a first report; guarded by mu_
  bool flushing_ = false;          // Close wants the queue sent now; guarded by mu_
  bool send_now_ = false;          // SendNow: the next call without a pause; guarded by mu_
  bool closing_ = false;           // guarded by mu_
  StepDirective latest_;           // guarded by mu_
  absl::Status terminal_;          // guarded by mu_
  int64_t calls_ = 0, sent_ = 0, requeued_ = 0, dropped_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_STEP_REPORTER_H_
