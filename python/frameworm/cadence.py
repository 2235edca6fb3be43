"""When rank 0 of a Python entrypoint takes its next in-memory checkpoint.

The job spec's `checkpoint.memory_every_n_steps` reaches each rank as
FRAMEWORM_MEMORY_CHECKPOINT_EVERY: a number N (one every N steps, at the
multiples of N) or "auto". Automatic is the built-in trainer's rule
(train/trainer.cc, MaybeMemoryCheckpoint): the first at the first step,
then each one `max(10, ceil(cost / (0.02 * mean_step)))` steps after the
last, where `cost` is how long the last in-memory save took and `mean_step`
a moving average (0.9 old, 0.1 new) of the step time: the saves then cost
at most about 2% of the training time, and never come more often than every
10 steps. Reporter.step() asks `due`; Reporter.save(..., memory=True)
tells `saved` what the save cost.

Pure Python, no clock of its own: the caller gives every duration.
"""
import math

BUDGET = 0.02        # of the step time
MIN_INTERVAL = 10    # steps, in automatic mode
MAX_EVERY = 10 ** 9  # the largest N (the coordinator refuses more)


def parse_every(text):
    """FRAMEWORM_MEMORY_CHECKPOINT_EVERY -> N (> 0) or 0 for automatic;
    None when unset or empty. Raises ValueError naming the variable for
    anything else."""
    if text is None or text == "":
        return None
    if text == "auto":
        return 0
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < 1 or n > MAX_EVERY:
        raise ValueError(f"FRAMEWORM_MEMORY_CHECKPOINT_EVERY={text!r} is not auto or a "
                         f"number of steps in [1, {MAX_EVERY}]")
    return n


class MemoryCadence:
    """The in-memory checkpoint schedule of one rank (see the module)."""

    def __init__(self, every):
        if every < 0 or every > MAX_EVERY:
            raise ValueError(f"memory checkpoint interval {every} is outside [0, {MAX_EVERY}]")
        self.every = int(every)
        self.mean_step_seconds = 0.0
        self.next_step = 0           # automatic: the next one is due at or after this step
        self.last_cost_seconds = None

    def observe_step(self, seconds):
        """One step took `seconds` (ignored unless finite and > 0)."""
        s = float(seconds)
        if not (s > 0 and math.isfinite(s)):
            return
        self.mean_step_seconds = s if self.mean_step_seconds == 0 else (
            0.9 * self.mean_step_seconds + 0.1 * s)

    def due(self, step):
        """True when an in-memory checkpoint is due after `step`."""
        step = int(step)
        if self.every > 0:
            return step > 0 and step % self.every == 0
        return step >= self.next_step

    def saved(self, step, cost_seconds):
        """An in-memory checkpoint of `step` took `cost_seconds`: in
        automatic mode, the next is due when it will have cost at most
        BUDGET of the steps in between."""
        cost = max(0.0, float(cost_seconds)) if math.isfinite(float(cost_seconds)) else 0.0
        self.last_cost_seconds = cost
        if self.every == 0:
            self.next_step = int(step) + self.interval()

    def interval(self):
        """Steps between in-memory checkpoints as things stand (None in
        automatic mode before the first save)."""
        if self.every > 0:
            return self.every
        if self.last_cost_seconds is None:
            return None
        budget = BUDGET * max(self.mean_step_seconds, 1e-6)
        return max(MIN_INTERVAL, math.ceil(self.last_cost_seconds / budget))
