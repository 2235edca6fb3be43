// Durations the coordinator sends a worker (KillTask.grace_s,
// RegisterWorkerResponse.heartbeat_interval_s), made safe before use: a
// worker trusts no peer's numbers blindly (NaN, infinities, negatives and
// years included).
//
// Thread safety: pure functions.
#ifndef FRAMEWORM_WORKER_COORDINATOR_VALUES_H_
#define FRAMEWORM_WORKER_COORDINATOR_VALUES_H_

#include <optional>

#include "absl/time/time.h"

namespace frameworm {

// The longest SIGTERM-to-SIGKILL grace a worker gives a task.
inline constexpr absl::Duration kMaxKillGrace = absl::Hours(1);
// KillTask.grace_s as a duration within [0, kMaxKillGrace]: <= 0 is 0
// (SIGKILL at once), NaN and too long are kMaxKillGrace, so a task that
// ignores SIGTERM is always killed in the end.
absl::Duration KillGraceOf(double grace_s);

// RegisterWorkerResponse.heartbeat_interval_s within [50 ms, 60 s];
// nullopt (keep the current interval) when it is not a positive finite
// number.
std::optional<absl::Duration> HeartbeatIntervalOf(double interval_s);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_COORDINATOR_VALUES_H_
