"""When a Reporter's sender thread makes its next report call.

The training loop only queues its step reports; one thread sends them
(TrainerService.ReportSteps). Calling again as soon as the previous call
returned made a call every step or two at fast step rates: each call wakes
this process's threads, takes the GIL from the training loop and costs the
coordinator a commit. The sender paces itself as the built-in trainer's
StepReporter does (trainer/trainer_channel.h): at most one call every
`min_interval` seconds (default 50 ms), except that
- the first report after a quiet spell goes at once (no call in the last
  `min_interval`), so a slow job's steps show without delay;
- a full batch (`max_batch` reports) goes at once;
- an urgent send (a checkpoint or a stop was agreed at this step, or
  close() is flushing) takes what is queued at once.
A report queued while the sender waits out the interval does not wake it.

Pure Python, no clock or lock of its own: the caller passes `now` and
holds its own lock around these calls.
"""

DEFAULT_INTERVAL = 0.05  # seconds
MAX_BATCH = 64           # reports per call


class SendPacer:
    """One sender's schedule (see the module)."""

    def __init__(self, min_interval=DEFAULT_INTERVAL, max_batch=MAX_BATCH):
        try:
            interval = float(min_interval)
        except (TypeError, ValueError):
            interval = float("nan")
        if not 0.0 <= interval <= 60.0:
            raise ValueError(f"report interval {min_interval!r} is not a number of seconds "
                             "in [0, 60]")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"report batch size {max_batch!r} is not a positive integer")
        self.min_interval = interval
        self.max_batch = max_batch
        self._last_call = None

    def wait(self, queued, now, urgent=False):
        """Seconds the sender waits before its next call with `queued`
        reports queued: 0.0 to send now, None when nothing is queued (wait
        until a report wakes it)."""
        if queued <= 0:
            return None
        if urgent or queued >= self.max_batch or self._last_call is None:
            return 0.0
        return max(0.0, self._last_call + self.min_interval - now)

    def called(self, now):
        """The sender started a call at `now`."""
        self._last_call = now

    def wakes_sender(self, queued_before):
        """Whether queueing one more report, with `queued_before` already
        queued, must wake the sender: when it was idle (nothing queued) or
        the batch is now full; otherwise it is in a call or waiting out the
        interval and takes the report then."""
        return queued_before == 0 or queued_before + 1 >= self.max_batch
