// Injected time. Domain state machines take a Clock& and never read the
// system clock themselves, so their tests drive time by hand and never sleep.
//
// Thread safety: RealClock is stateless and thread-safe. SimulatedClock is
// thread-safe (one mutex); Advance() is meant to be called by the test.
#ifndef FRAMEWORM_COMMON_CLOCK_H_
#define FRAMEWORM_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace frameworm {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The system's wall clock. Process-wide instance from Real().
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  static RealClock& Real();
};

// A clock that moves only when told to.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_CLOCK_H_
