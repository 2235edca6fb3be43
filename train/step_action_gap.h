// How far apart a DistributedTrainer's step-action broadcasts may be
// (TrainerOptions::step_action_sync_share): rank 0 picks the gap and sends
// it with each broadcast, so every rank knows the step of the next one.
//
// StepActionGap returns the fewest steps whose time keeps one broadcast
// (sync_seconds, its measured cost) within `share` of them, but no more
// than fit in max_delay_seconds (the longest an action may wait), and at
// least 1: ceil(sync / (share x step)) capped at floor(max_delay / step).
// A time or share that is not a positive finite number gives 1 (a
// broadcast every step); the result is at most 1,000,000.
//
// Thread safety: a pure function.
#ifndef FRAMEWORM_TRAIN_STEP_ACTION_GAP_H_
#define FRAMEWORM_TRAIN_STEP_ACTION_GAP_H_

#include <cstdint>

namespace frameworm {

int64_t StepActionGap(double sync_seconds, double step_seconds, double share,
                      double max_delay_seconds);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_STEP_ACTION_GAP_H_
