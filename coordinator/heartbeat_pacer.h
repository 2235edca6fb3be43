// HeartbeatPacer: how fast one worker session's heartbeats are read. A
// worker sends one heartbeat per interval; a session may send
// `per_interval` (default 10) within any interval's worth of time (a token
// bucket refilled at per_interval / interval, holding at most per_interval).
// Beyond that, Admit says how long to wait before reading the stream again:
// the service then stops reading it for that long, so HTTP/2 flow control
// holds the sender back and a heartbeat flood cannot take the coordinator's
// CPU from step reports and other workers. The same bucket paces a
// session's other messages, with budgets of their own (service.cc).
//
// Pure logic: time comes in as arguments. Thread safety: none (one per
// session, used by its read chain only).
#ifndef FRAMEWORM_COORDINATOR_HEARTBEAT_PACER_H_
#define FRAMEWORM_COORDINATOR_HEARTBEAT_PACER_H_

#include <algorithm>

#include "absl/time/time.h"

namespace frameworm::coordinator {

class HeartbeatPacer {
 public:
  // interval <= 0 or per_interval < 1: never waits.
  explicit HeartbeatPacer(absl::Duration interval, int per_interval = 10)
      : interval_(interval), capacity_(per_interval), tokens_(per_interval) {}

  // Counts a heartbeat received at `now` (`cost` tokens of it: a message
  // that weighs more than one); returns how long to wait before the next
  // read (zero: at once). Times that go backwards count as `now` equal to
  // the last one.
  absl::Duration Admit(absl::Time now, double cost = 1) {
    if (interval_ <= absl::ZeroDuration() || capacity_ < 1) return absl::ZeroDuration();
    const double rate = capacity_ / absl::ToDoubleSeconds(interval_);  // per second
    if (last_ != absl::InfinitePast() && now > last_) {
      tokens_ = std::min<double>(capacity_, tokens_ + absl::ToDoubleSeconds(now - last_) * rate);
    }
    if (now > last_ || last_ == absl::InfinitePast()) last_ = now;
    tokens_ -= cost;
    if (tokens_ >= 0) return absl::ZeroDuration();
    return absl::Seconds(-tokens_ / rate);
  }

 private:
  const absl::Duration interval_;
  const int capacity_;
  double tokens_;
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_HEARTBEAT_PACER_H_
