// The automatic cadence of in-memory checkpoints
// (TrainerOptions::memory_checkpoint_every = -1): how many steps from one
// to the next, so that they cost training about 2% of its time.
//
// MemoryCheckpointInterval returns max(10, ceil((blocked + background) /
// (0.02 x step))): `blocked` how long the snapshot held the training loop,
// `background` how long its copy and write then ran beside training (on a
// machine whose cores all train, that time is taken from the steps: P11,
// bench/p11_memory_cadence.sh, measured the extra time per save at about
// the background time), `step` the mean step time. Times that are not
// finite or are negative count as 0; a step that is not positive counts
// as 1 microsecond; the result is at most 1,000,000.
//
// Thread safety: a pure function.
#ifndef FRAMEWORM_TRAIN_MEMORY_CADENCE_H_
#define FRAMEWORM_TRAIN_MEMORY_CADENCE_H_

#include <cstdint>

namespace frameworm {

int64_t MemoryCheckpointInterval(double blocked_seconds, double background_seconds,
                                 double step_seconds);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_MEMORY_CADENCE_H_
