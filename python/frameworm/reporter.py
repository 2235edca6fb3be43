"""Progress reports from a torchrun-style program running as a Frameworm job.

A job's `entrypoint` gets torchrun's variables and Frameworm's own
(FRAMEWORM_COORDINATOR, FRAMEWORM_JOB_ID, FRAMEWORM_GENERATION,
FRAMEWORM_TOKEN, FRAMEWORM_TLS_DIR). With a Reporter the program tells the
coordinator each step it completes, so the job's status, metrics, straggler
view and hang detection see it, and it learns when the coordinator asks for
a checkpoint or a stop:

    reporter = frameworm.Reporter()            # a no-op outside a job
    for step in range(1, steps + 1):
        ...                                     # forward, backward, optimizer step
        d = reporter.step(step, loss=loss.item(), samples=len(x), step_seconds=dt)
        if d.checkpoint:                        # every rank is asked after the same step
            save(...)
        if d.stop:
            break
    reporter.close()

A thread pings the coordinator about once a second while the Reporter is
open, so a hang names a rank whose process stopped or died. What a Python
program's reports cannot tell (the built-in trainer's can): how long a rank
waits in the collectives (stragglers are judged by step time alone, which
sees only slowness outside the synchronous step) and which collective each
rank is in (no flight recorder); when every silent rank still pings, the
hang's reason says the culprit is not known.

Errors: `step` raises FramewormError("ABORTED", ...) when this generation is
no longer the job's current one (the program should exit); a coordinator
that cannot be reached is retried at the next step, training goes on.
"""
import os
import threading

import grpc

from frameworm.client import FramewormError, _COORDINATOR_TLS_NAME
from frameworm.v1 import common_pb2, trainer_service_pb2_grpc


class Directive:
    """What the coordinator asked after a step."""

    __slots__ = ("checkpoint", "checkpoint_at_step", "stop")

    def __init__(self, checkpoint_at_step=0, stop=False, step=0):
        self.checkpoint_at_step = checkpoint_at_step
        # True when the checkpoint every rank takes is due after this step.
        self.checkpoint = checkpoint_at_step > 0 and step >= checkpoint_at_step
        self.stop = stop

    def __repr__(self):
        return (f"Directive(checkpoint_at_step={self.checkpoint_at_step}, "
                f"checkpoint={self.checkpoint}, stop={self.stop})")


class Reporter:
    """Reports this rank's steps to its job's coordinator (see the module)."""

    def __init__(self, ping_every=1.0, timeout=10.0, environ=None):
        env = os.environ if environ is None else environ
        self.coordinator = env.get("FRAMEWORM_COORDINATOR", "")
        self.job_id = env.get("FRAMEWORM_JOB_ID", "")
        self.enabled = bool(self.coordinator and self.job_id)
        self.rank = int(env.get("RANK", "0"))
        self.timeout = timeout
        self._last_step = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = None
        if not self.enabled:
            return
        try:
            generation = int(env.get("FRAMEWORM_GENERATION", "0"))
        except ValueError:
            raise FramewormError("INVALID_ARGUMENT", "FRAMEWORM_GENERATION is not a number") from None
        self._ref = common_pb2.JobRef(job_id=self.job_id, generation=generation,
                                      token=env.get("FRAMEWORM_TOKEN", ""))
        tls_dir = env.get("FRAMEWORM_TLS_DIR", "")
        if tls_dir:
            def read(name):
                with open(os.path.join(tls_dir, name), "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(read("ca.crt"), read("tls.key"), read("tls.crt"))
            self._channel = grpc.secure_channel(
                self.coordinator, creds,
                options=[("grpc.ssl_target_name_override", _COORDINATOR_TLS_NAME)])
        else:
            self._channel = grpc.insecure_channel(self.coordinator)
        self._stub = trainer_service_pb2_grpc.TrainerServiceStub(self._channel)
        if ping_every and ping_every > 0:
            self._thread = threading.Thread(target=self._ping_loop, args=(ping_every,),
                                            name="frameworm-ping", daemon=True)
            self._thread.start()

    def step(self, step, loss=None, samples=0, step_seconds=0.0, epoch=0, total_steps=0,
             **values):
        """Reports that this rank completed `step` (1-based); `loss` and any
        other keyword become the step's metrics (finite numbers only: others
        are left out). Returns a Directive."""
        if not self.enabled:
            return Directive()
        m = common_pb2.StepMetrics(ref=self._ref, rank=self.rank, step=int(step), epoch=int(epoch),
                                   samples=int(samples), step_seconds=max(0.0, float(step_seconds)),
                                   total_steps=int(total_steps))
        if loss is not None:
            values["loss"] = loss
        for k, v in values.items():
            v = float(v)
            if v == v and v not in (float("inf"), float("-inf")):
                m.values[k] = v
        with self._lock:
            self._last_step = int(step)
        try:
            resp = self._stub.ReportStep(m, timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE or e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Directive(step=int(step))
            raise FramewormError(e.code().name, e.details()) from None
        return Directive(resp.checkpoint_at_step, resp.stop, int(step))

    def _ping_loop(self, every):
        while not self._closed.wait(every):
            with self._lock:
                step = self._last_step
            m = common_pb2.StepMetrics(ref=self._ref, rank=self.rank, step=step,
                                       progress_only=True, ping=True)
            try:
                self._stub.ReportStep(m, timeout=self.timeout)
            except grpc.RpcError:
                pass  # best effort, as the built-in trainer's pings

    def close(self):
        """Stops the pings; idempotent."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.enabled:
            self._channel.close()
            self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
