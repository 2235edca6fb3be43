// Learning-rate schedules, stepped once per optimizer step, as PyTorch's
// schedulers stepped after every optimizer.step():
//
//   constant  lr
//   step      lr x gamma^floor(s / step_size)            (StepLR)
//   cosine    min_lr + (lr - min_lr) (1 + cos(pi s / T)) / 2, min_lr once
//             s >= T                                      (CosineAnnealingLR,
//             T_max = T, eta_min = min_lr; closed form)
//   linear    lr + (min_lr - lr) min(1, s / T)            (LinearLR to min_lr)
//
// where s counts the steps after warmup (0 at the first one) and T =
// total_steps - warmup_steps. total_steps 0 means the run's planned steps
// (max_steps, else epochs x steps per epoch), which Trainer::train knows.
// Warmup (TrainerOptions::warmup_steps, linear from lr/warmup) comes
// first: step k < warmup has lr x (k + 1) / warmup.
//
// Thread safety: plain data and a pure function.
#ifndef FRAMEWORM_TRAIN_LR_SCHEDULE_H_
#define FRAMEWORM_TRAIN_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace frameworm {

struct LrSchedule {
  std::string kind = "constant";  // constant | step | cosine | linear
  int64_t step_size = 0;          // step: decay every this many steps (> 0)
  double gamma = 0.1;             // step: the factor
  int64_t total_steps = 0;        // cosine, linear: 0: the run's planned steps
  double min_lr = 0;              // cosine, linear: the final learning rate
};

// Errors: INVALID_ARGUMENT naming the field (an unknown kind, step_size
// <= 0 for step, a negative gamma, total_steps or min_lr).
absl::Status CheckLrSchedule(const LrSchedule& s);

// The learning rate of a group whose base rate is `base` at optimizer step
// `step` (0-based), with `warmup` warmup steps and a schedule spanning
// `total` steps (cosine/linear; <= warmup: min_lr after warmup).
double ScheduledLr(const LrSchedule& s, double base, int64_t step, int64_t warmup,
                   int64_t total);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_LR_SCHEDULE_H_
