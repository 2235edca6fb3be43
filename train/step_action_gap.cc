#include "train/step_action_gap.h"

#include <algorithm>
#include <cmath>

namespace frameworm {
namespace {

bool Positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

int64_t StepActionGap(double sync_seconds, double step_seconds, double share,
                      double max_delay_seconds) {
  constexpr double kMost = 1e6;
  if (!Positive(sync_seconds) || !Positive(step_seconds) || !Positive(share) ||
      !Positive(max_delay_seconds)) {
    return 1;
  }
  const double wanted = std::ceil(sync_seconds / (share * step_seconds));
  const double fits = std::floor(max_delay_seconds / step_seconds);
  return static_cast<int64_t>(std::max(1.0, std::min({wanted, fits, kMost})));
}

}  // namespace frameworm
