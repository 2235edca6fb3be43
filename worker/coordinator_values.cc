#include "worker/coordinator_values.h"

#include <algorithm>
#include <cmath>

namespace frameworm {

absl::Duration KillGraceOf(double grace_s) {
  if (std::isnan(grace_s)) return kMaxKillGrace;
  if (grace_s <= 0) return absl::ZeroDuration();
  if (grace_s >= absl::ToDoubleSeconds(kMaxKillGrace)) return kMaxKillGrace;
  return absl::Seconds(grace_s);
}

std::optional<absl::Duration> HeartbeatIntervalOf(double interval_s) {
  if (!std::isfinite(interval_s) || interval_s <= 0) return std::nullopt;
  return std::clamp(absl::Seconds(interval_s), absl::Milliseconds(50), absl::Seconds(60));
}

}  // namespace frameworm
