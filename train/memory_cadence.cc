#include "train/memory_cadence.h"

#include <algorithm>
#include <cmath>

namespace frameworm {
namespace {

double NonNegative(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

}  // namespace

int64_t MemoryCheckpointInterval(double blocked_seconds, double background_seconds,
                                 double step_seconds) {
  const double step = std::isfinite(step_seconds) && step_seconds > 0 ? step_seconds : 1e-6;
  const double steps =
      std::ceil((NonNegative(blocked_seconds) + NonNegative(background_seconds)) / (0.02 * step));
  return static_cast<int64_t>(std::clamp(steps, 10.0, 1e6));
}

}  // namespace frameworm
