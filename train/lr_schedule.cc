#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace frameworm {

absl::Status CheckLrSchedule(const LrSchedule& s) {
  if (s.kind != "constant" && s.kind != "step" && s.kind != "cosine" && s.kind != "linear") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown learning-rate schedule '", s.kind, "'; known: constant, step, cosine, linear"));
  }
  if (s.kind == "step" && s.step_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the step schedule needs a step size > 0, not ", s.step_size));
  }
  if (!(s.gamma >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("schedule gamma must be >= 0, not ", s.gamma));
  }
  if (s.total_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule total steps must be >= 0, not ", s.total_steps));
  }
  if (!(s.min_lr >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("schedule min lr must be >= 0, not ", s.min_lr));
  }
  return absl::OkStatus();
}

double ScheduledLr(const LrSchedule& s, double base, int64_t step, int64_t warmup,
                   int64_t total) {
  if (warmup > 0 && step < warmup) {
    return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const int64_t after = step - std::max<int64_t>(0, warmup);
  if (s.kind == "step") {
    return base * std::pow(s.gamma, static_cast<double>(after / std::max<int64_t>(1, s.step_size)));
  }
  if (s.kind == "cosine" || s.kind == "linear") {
    const int64_t span = total - std::max<int64_t>(0, warmup);
    if (span <= 0 || after >= span) return s.min_lr;
    const double f = static_cast<double>(after) / static_cast<double>(span);
    if (s.kind == "linear") return base + (s.min_lr - base) * f;
    return s.min_lr + (base - s.min_lr) * (1 + std::cos(M_PI * f)) / 2;
  }
  return base;
}

}  // namespace frameworm
