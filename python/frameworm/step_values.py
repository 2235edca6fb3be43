"""The metrics of one step report, checked as the coordinator checks them
(coordinator/job_scheduler.cc CheckStepReport), so that a report is never
refused for one bad metric: the coordinator refuses a whole report, and
with it every report sent after it in the same batch.

checked_values(values) takes a dict of metric name -> number and returns
name -> float, leaving out values that are not finite or beyond +-1e200
(a diverged loss: the step is still reported). ValueError names the
problem for what is a bug in the caller: more than 64 metrics, a name that
is not a string of 1 to 64 characters, or one holding a control character
(below U+0020, U+007F, U+0080..U+009F).
"""
import math

MAX_METRICS = 64
MAX_NAME = 64
MAX_ABS = 1e200


def _has_control(name):
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name)


def checked_values(values):
    if len(values) > MAX_METRICS:
        raise ValueError(f"a step report has at most {MAX_METRICS} metrics, got {len(values)}")
    out = {}
    for name, v in values.items():
        if not isinstance(name, str) or not 1 <= len(name.encode("utf-8")) <= MAX_NAME:
            shown = name[:80] if isinstance(name, str) else repr(name)[:80]
            raise ValueError(f"metric name {shown!r} must be a string of 1 to {MAX_NAME} bytes")
        if _has_control(name):
            raise ValueError(f"metric name {name!r} holds a control character")
        v = float(v)
        if math.isfinite(v) and abs(v) <= MAX_ABS:
            out[name] = v
    return out
