// A thread beside the training loop that pings the coordinator about once
// a second (StepReport.ping): the process lives, its last completed step,
// how long its training thread has been blocked in the collectives, and
// its flight recorder's newest collectives (which the coordinator compares
// across ranks when a generation stalls). When a generation hangs, the coordinator names the rank
// that is not waiting there (stopped, dead, or busy elsewhere) as the one
// the others wait for. Pings never count as progress.
//
// Thread safety: construct and Stop from one thread; `probe` runs on the
// pinger's thread and must be thread-safe. A ping that fails is dropped.
#ifndef FRAMEWORM_TRAINER_LIVENESS_PINGER_H_
#define FRAMEWORM_TRAINER_LIVENESS_PINGER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "trainer/control_channel.h"

namespace frameworm {

class LivenessPinger {
 public:
  // Fills in the ping: step (the last completed one), waiting_seconds
  // (blocked in the collectives now), collectives (the flight recorder's
  // newest). rank, progress_only and ping are set by the pinger.
  using Probe = std::function<void(StepReport&)>;
  // `channel` (not owned; null: no thread) must outlive Stop().
  LivenessPinger(ControlChannel* channel, int rank, Probe probe,
                 std::chrono::milliseconds every = std::chrono::milliseconds(1000));
  ~LivenessPinger() { Stop(); }
  LivenessPinger(const LivenessPinger&) = delete;
  LivenessPinger& operator=(const LivenessPinger&) = delete;
  // Ends the thread (at once, not after the next ping); idempotent.
  void Stop();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_LIVENESS_PINGER_H_
