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
        # Each rank learns of a request when its own answer comes: let rank
        # 0's decide, so every rank acts after the same step.
        flags = torch.tensor([int(d.checkpoint), int(d.stop), int(d.memory_checkpoint)])
        torch.distributed.broadcast(flags, src=0)
        if flags[0]:
            save(...)
        elif flags[2] and rank == 0:
            reporter.save(step, state, memory=True)
        if flags[1]:
            break
    reporter.close()

`step` only queues the report: a thread sends what queued as one batch
(TrainerService.ReportSteps), at most one call every `report_every`
seconds (50 ms by default; the first report after a quiet spell, a full
batch of 64, and the reports up to a step that acts on a checkpoint or a
stop go at once: frameworm/pacing.py), so the training loop never waits
for the coordinator's commit and a fast loop is not woken at every step;
the Directive is from the newest answer (ranks learn of a request at
different steps: broadcast rank 0's decision, as above and as the built-in
trainer does). `close()` sends what is left (up to 10 s). Another thread
pings the coordinator about once a second while the Reporter is open, so
a hang names a rank whose process stopped or died. What a Python
program's reports cannot tell (the built-in trainer's can): how long a rank
waits in the collectives (stragglers are judged by step time alone, which
sees only slowness outside the synchronous step) and which collective each
rank is in (no flight recorder); when every silent rank still pings, the
hang's reason says the culprit is not known.

Checkpoints: rank 0 saves with `reporter.save(step, state)` (torch.save
into $FRAMEWORM_CHECKPOINT_DIR/ckpt-<step>.pt through a temporary file,
fsync, rename) or writes that file itself and calls
`reporter.register_checkpoint(step, path)`. Either way the file goes to
the coordinator (checksummed, in 1 MiB chunks) and into the job's catalog
(`save(step, state, memory=True)`: into the node's memory instead, which
the workers copy to a peer, without the upload; rank 0's Directive says
when one is due, `memory_checkpoint`, at the job's
`checkpoint.memory_every_n_steps` or, by default, as often as the saves
cost at most 2% of the step time: frameworm/cadence.py):
a restarted job starts with FRAMEWORM_RESUME_FROM naming the newest one,
fetched onto the rank's host if it is not there, and
`reporter.resume()` loads it (None on a fresh start). Retention
(`checkpoint.keep_last`) deletes the expired files here:

    reporter = frameworm.Reporter()
    state = reporter.resume()                  # None on a fresh start
    if state:
        model.load_state_dict(state["model"]); opt.load_state_dict(state["optimizer"])
    first = state["step"] + 1 if state else 1
    ...
        if flags[0] and dist.get_rank() == 0:
            reporter.save(step, {"model": model.state_dict(),
                                 "optimizer": opt.state_dict(), "step": step})

Errors: `step` raises FramewormError("ABORTED", ...) once the coordinator
said this generation is no longer the job's current one (the program
should exit), and PERMISSION_DENIED for a refused rank (also a token the
coordinator no longer knows: a generation more than 4 back, or one from
before it restarted); both end the program's reporting. Reports the
coordinator could not take because it was away (UNAVAILABLE,
DEADLINE_EXCEEDED: restarting, or the link down) are sent again once it
answers (`requeued` counts them), so a coordinator restart leaves no gap in
the job's metrics; at most 4,096 wait (then the oldest are dropped), and
what still waits when close()'s flush time runs out is dropped. A report
the coordinator refuses is dropped. Training goes on either way. The
channel reconnects at most 2 s apart (frameworm/client.py's channel
options, as the daemons'), and after 2 s without an answer the sender
dials a new one (`redials` counts them), as the built-in trainer's channel
does: a restarted coordinator's old channel can stay stuck.
"""
import collections
import os
import re
import stat
import threading
import time
import zlib

import grpc

from frameworm.cadence import MemoryCadence, parse_every
from frameworm.client import FramewormError, _insecure_channel, _secure_channel
from frameworm.pacing import DEFAULT_INTERVAL, MAX_BATCH, SendPacer
from frameworm.step_values import checked_values
from frameworm.text import cut_utf8
from frameworm.v1 import common_pb2, trainer_service_pb2, trainer_service_pb2_grpc

_CHUNK = 1 << 20  # the coordinator takes at most 1 MiB of data per chunk
# A coordinator unanswering for longer gets a new channel (at most one per
# this long), as the built-in trainer's channel does: a restarted
# coordinator's channel can stay stuck on a connection attempt to the old one.
_REDIAL_AFTER = 2.0
_MAX_STALE = 2  # replaced channels kept open for calls still on them
MAX_QUEUED = 4096  # reports waiting to be sent; past it the oldest are dropped
# Answers that mean the coordinator is away (restarting, the link down): the
# reports are sent again, not dropped, and the channel may be redialled.
_AWAY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Directive:
    """What the coordinator asked after a step."""

    __slots__ = ("checkpoint", "checkpoint_at_step", "stop", "memory_checkpoint")

    def __init__(self, checkpoint_at_step=0, stop=False, checkpoint=False,
                 memory_checkpoint=False):
        # The step the coordinator asked a checkpoint after (0: none).
        self.checkpoint_at_step = checkpoint_at_step
        # True once per request: the first step this rank reports at or
        # past checkpoint_at_step after learning of it.
        self.checkpoint = checkpoint
        self.stop = stop
        # Rank 0 only, in a job that takes in-memory checkpoints: one is due
        # after this step (frameworm/cadence.py; never when `checkpoint` is
        # set: that step's disk checkpoint serves). It stays due until
        # save(..., memory=True) takes one.
        self.memory_checkpoint = memory_checkpoint

    def __repr__(self):
        return (f"Directive(checkpoint_at_step={self.checkpoint_at_step}, "
                f"checkpoint={self.checkpoint}, stop={self.stop}, "
                f"memory_checkpoint={self.memory_checkpoint})")


class _NotReported(Exception):
    """An error of resume() that is not the checkpoint's fault (raised as is,
    never reported as a bad checkpoint)."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class Reporter:
    """Reports this rank's steps to its job's coordinator (see the module)."""

    def __init__(self, ping_every=1.0, timeout=10.0, environ=None, report_every=DEFAULT_INTERVAL):
        """report_every: at least this many seconds between two report calls
        (0: a call as soon as the previous one returned); ValueError outside
        [0, 60]."""
        env = os.environ if environ is None else environ
        try:
            self._pacer = SendPacer(report_every, MAX_BATCH)
        except ValueError as e:
            raise FramewormError("INVALID_ARGUMENT", str(e)) from None
        self.coordinator = env.get("FRAMEWORM_COORDINATOR", "")
        self.job_id = env.get("FRAMEWORM_JOB_ID", "")
        self.enabled = bool(self.coordinator and self.job_id)
        self.rank = int(env.get("RANK", "0"))
        # Where rank 0 writes the checkpoints it reports, and the one this
        # generation resumes from ("": none).
        self.checkpoint_dir = env.get("FRAMEWORM_CHECKPOINT_DIR", "")
        # In-memory checkpoints (a tmpfs outside this process; "": the job
        # takes none): save(..., memory=True).
        self.memory_checkpoint_dir = env.get("FRAMEWORM_MEMORY_CHECKPOINT_DIR", "")
        # Their cadence: N (every N steps), 0 (automatic) or None (none).
        self.memory_checkpoint_every = None
        self._cadence = None
        self._last_step_at = None
        if self.memory_checkpoint_dir:
            try:
                every = parse_every(env.get("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"))
            except ValueError as e:
                raise FramewormError("INVALID_ARGUMENT", str(e)) from None
            self.memory_checkpoint_every = 0 if every is None else every
            self._cadence = MemoryCadence(self.memory_checkpoint_every)
        self.resume_from = env.get("FRAMEWORM_RESUME_FROM", "")
        self.timeout = timeout
        self._last_step = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue = collections.deque()   # guarded by _lock
        self._in_flight = False              # guarded by _lock
        self._urgent = False                 # send what is queued at once; guarded by _lock
        self._stopped = False                # a stop was returned; guarded by _lock
        self.calls = 0                       # report calls made (ReportSteps or ReportStep)
        self.requeued = 0                    # reports put back after the coordinator was away
        self._latest = (0, False)            # (checkpoint_at_step, stop); guarded by _lock
        self._acted = 0                      # the last checkpoint_at_step said due; guarded by _lock
        self._terminal = None                # FramewormError; guarded by _lock
        self._batched = True
        self._closed = threading.Event()
        self._thread = None
        self._sender = None
        if not self.enabled:
            return
        try:
            generation = int(env.get("FRAMEWORM_GENERATION", "0"))
        except ValueError:
            raise FramewormError("INVALID_ARGUMENT", "FRAMEWORM_GENERATION is not a number") from None
        self._ref = common_pb2.JobRef(job_id=self.job_id, generation=generation,
                                      token=env.get("FRAMEWORM_TOKEN", ""))
        self._tls_dir = env.get("FRAMEWORM_TLS_DIR", "")
        self._channel = self._dial()
        self._stub = trainer_service_pb2_grpc.TrainerServiceStub(self._channel)
        self._stale = []                     # replaced channels, oldest first
        self._last_ok = self._last_dial = time.monotonic()
        self.redials = 0                     # channels replaced (see _note)
        self._sender = threading.Thread(target=self._send_loop, name="frameworm-report", daemon=True)
        self._sender.start()
        if ping_every and ping_every > 0:
            self._thread = threading.Thread(target=self._ping_loop, args=(ping_every,),
                                            name="frameworm-ping", daemon=True)
            self._thread.start()

    def step(self, step, loss=None, samples=0, step_seconds=0.0, epoch=0, total_steps=0,
             **values):
        """Reports that this rank completed `step` (1-based); `loss` and any
        other keyword become the step's metrics (finite numbers within
        +-1e200 only: others are left out). ValueError for more than 64
        metrics or a name the coordinator refuses (step_values.py), checked
        whether or not the reporter is enabled. Returns a Directive."""
        if loss is not None:
            values["loss"] = loss
        values = checked_values(values)
        if not self.enabled:
            return Directive()
        memory = False
        if self._cadence is not None and self.rank == 0:
            now = time.monotonic()
            seconds = float(step_seconds) if step_seconds else 0.0
            if not seconds > 0 and self._last_step_at is not None:
                seconds = now - self._last_step_at  # the time between reports
            self._last_step_at = now
            self._cadence.observe_step(seconds)
            memory = self._cadence.due(step)
        m = common_pb2.StepMetrics(ref=self._ref, rank=self.rank, step=int(step), epoch=int(epoch),
                                   samples=int(samples), step_seconds=max(0.0, float(step_seconds)),
                                   total_steps=int(total_steps))
        for k, v in values.items():
            m.values[k] = v
        with self._lock:
            if self._terminal is not None:
                raise self._terminal
            self._last_step = int(step)
            queued_before = len(self._queue)
            self._queue.append(m)
            self._drop_overflow()
            at, stop = self._latest
            due = at > self._acted and int(step) >= at
            if due:
                self._acted = at
            # The program acts on this step: the coordinator hears of it now.
            urgent = due or (stop and not self._stopped)
            self._stopped = self._stopped or stop
            if urgent:
                self._urgent = True
            if urgent or self._pacer.wakes_sender(queued_before):
                self._changed.notify()
        return Directive(at, stop, due, memory and not due)

    def checkpoint_path(self, step, memory=False):
        """$FRAMEWORM_CHECKPOINT_DIR/ckpt-<step>.pt (memory: in
        $FRAMEWORM_MEMORY_CHECKPOINT_DIR): the only name the coordinator
        takes for the checkpoint of `step`."""
        var = "FRAMEWORM_MEMORY_CHECKPOINT_DIR" if memory else "FRAMEWORM_CHECKPOINT_DIR"
        d = self.memory_checkpoint_dir if memory else self.checkpoint_dir
        if not d:
            raise FramewormError("FAILED_PRECONDITION",
                                 f"no checkpoint directory: {var} is not set (not in a Frameworm "
                                 "job, a job without in-memory checkpoints, or a coordinator older "
                                 "than this client)")
        step = int(step)
        if step < 0:
            raise FramewormError("INVALID_ARGUMENT", f"checkpoint step {step} is negative")
        return os.path.join(d, f"ckpt-{step}.pt")

    def _private_dir(self, d):
        """Creates `d` (and its parent) for this user only; refuses one that
        others could write to or that is not this user's (a shared tmpfs)."""
        for x in (os.path.dirname(d), d):
            os.makedirs(x, mode=0o700, exist_ok=True)
            st = os.lstat(x)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise FramewormError("FAILED_PRECONDITION",
                                     f"{x} is not a directory of this user's alone: in-memory "
                                     "checkpoints are not written there")

    def save(self, step, state, memory=False):
        """Rank 0: torch.save(state) as the checkpoint of `step` (a temporary
        file, fsynced, renamed: a crash never leaves a torn file) and
        register_checkpoint it. Returns the expired paths it deleted.
        memory=True: into the job's in-memory directory (a tmpfs outside this
        process, which survives its crash; the workers copy it to a peer, so
        it survives the loss of a node), reported without an upload; cheap
        enough to take every few steps. Its cost sets when the next is due
        (Directive.memory_checkpoint), also when it fails; an in-memory one
        the coordinator did not record is deleted before the error is
        raised."""
        started = time.perf_counter()
        try:
            return self._save(step, state, memory)
        finally:
            # A failed one counts too: a full tmpfs or a coordinator away
            # must not make every step try again.
            if memory and self._cadence is not None:
                self._cadence.saved(step, time.perf_counter() - started)

    def _save(self, step, state, memory):
        import torch

        path = self.checkpoint_path(step, memory)
        d = os.path.dirname(path)
        if memory:
            self._private_dir(d)
        else:
            os.makedirs(d, exist_ok=True)
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            return self.register_checkpoint(step, path, memory)
        except Exception:
            if memory:  # not in the catalog: nothing would resume from it or expire it
                try:
                    os.remove(path)
                except OSError:
                    pass
            raise

    def register_checkpoint(self, step, path, memory=False):
        """Rank 0: tells the coordinator that the complete file `path`
        (checkpoint_path(step)) is the checkpoint of `step`: uploads a copy
        (so a rank on a host without the file can resume from it), then
        records it. Returns the paths retention expired, which it deletes
        from the checkpoint directory. Raises FramewormError: INVALID_ARGUMENT
        for another path, NOT_FOUND for a missing file, the coordinator's
        error otherwise (the checkpoint is then not in the catalog). Outside
        a job: nothing, []."""
        if not self.enabled:
            return []
        want = self.checkpoint_path(step, memory)
        if os.path.abspath(path) != os.path.abspath(want):
            raise FramewormError("INVALID_ARGUMENT",
                                 f"checkpoint path {path!r} is not the checkpoint of step {int(step)} "
                                 f"(expected {want!r})")
        if not os.path.isfile(want):
            raise FramewormError("NOT_FOUND", f"no checkpoint file at {want!r}")
        size = os.path.getsize(want)
        crc = 0  # of what chunks() sent: the file's once it ran

        def chunks():
            nonlocal crc
            with open(want, "rb") as f:
                sent = 0
                first = True
                while first or sent < size:
                    data = f.read(min(_CHUNK, size - sent))
                    sent += len(data)
                    crc = zlib.crc32(data, crc)
                    c = trainer_service_pb2.CheckpointChunk(data=data)
                    if first:
                        c.ref.CopyFrom(self._ref)
                        c.step = int(step)
                        c.total_bytes = size
                        first = False
                    if sent >= size:
                        c.checksum = f"crc32:{crc:08x}"
                    yield c
                    if not data:
                        break

        transfer = max(self.timeout, 60.0 + size / (10 << 20))  # at least 10 MiB/s
        try:
            if memory:  # in-memory ones stay in memory (the workers copy them): CRC only
                for _ in chunks():
                    pass
            else:  # one read of the file: checksummed as it is sent
                self._stub.UploadCheckpoint(chunks(), timeout=transfer)
            rec = common_pb2.CheckpointRecord(ref=self._ref, step=int(step), path=want, bytes=size,
                                              checksum=f"crc32:{crc:08x}", memory=bool(memory))
            resp = self._stub.ReportCheckpoint(rec, timeout=self.timeout)
        except grpc.RpcError as e:
            raise FramewormError(e.code().name, e.details()) from None
        expired = list(resp.expired)
        mine = {os.path.abspath(d) for d in (self.checkpoint_dir, self.memory_checkpoint_dir) if d}
        for old in expired:
            name = os.path.basename(old)
            if (os.path.dirname(os.path.abspath(old)) in mine
                    and re.fullmatch(r"ckpt-\d+\.pt", name)):
                try:
                    os.remove(old)
                except FileNotFoundError:
                    pass
        return expired

    def resume(self, map_location="cpu", weights_only=True):
        """torch.load of the checkpoint this generation resumes from
        (FRAMEWORM_RESUME_FROM), or None on a fresh start. A file that does
        not load is reported to the coordinator (the next generation resumes
        from the checkpoint before it) and the error raised."""
        if not self.resume_from:
            return None
        import torch

        path, fetched, damaged = self.resume_from, None, False
        try:
            if not os.path.exists(path) and self.enabled:
                # Its worker could not fetch it from a holder: the coordinator's
                # copy. None left (NOT_FOUND), or bytes that are not the
                # record's (DATA_LOSS): reported below as a file that does not
                # load, as frameworm-train does; another error is raised as is.
                try:
                    path = fetched = self.download_checkpoint(self.resume_from)
                except OSError as e:  # this host cannot write it: not the copy's fault
                    raise _NotReported(e) from None
                except FramewormError as e:
                    if e.code not in ("DATA_LOSS", "NOT_FOUND"):
                        raise _NotReported(e) from None
                    # The coordinator's copy is damaged: it checks and
                    # removes it, and keeps the record while workers hold it.
                    damaged = e.code == "DATA_LOSS"
                    raise
            return torch.load(path, map_location=map_location, weights_only=weights_only)
        except _NotReported as e:
            raise e.error from None
        except Exception as e:  # a torn or foreign file: say so, then fail
            if self.enabled:
                try:
                    self._stub.ReportBadCheckpoint(
                        trainer_service_pb2.BadCheckpoint(ref=self._ref, path=self.resume_from,
                                                          reason=cut_utf8(str(e), 512),
                                                          coordinator_copy=damaged),
                        timeout=self.timeout)
                except grpc.RpcError:
                    pass
            raise
        finally:
            if fetched is not None:
                os.remove(fetched)

    def download_checkpoint(self, path):
        """The coordinator's copy of the job's checkpoint `path` (a path the
        job reported), in a new private file whose name it returns (the
        caller removes it). Raises FramewormError: the coordinator's error,
        or DATA_LOSS when fewer or more bytes came than it announced, or
        bytes whose CRC-32 is not the record's (sent with the first chunk)."""
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=".frameworm-resume-", suffix=".pt")
        try:
            total, got, want, crc = None, 0, "", 0
            with os.fdopen(fd, "wb") as f:
                stream = self._stub.DownloadCheckpoint(
                    trainer_service_pb2.DownloadCheckpointRequest(ref=self._ref, path=path),
                    timeout=max(self.timeout, 600.0))
                for chunk in stream:
                    if total is None:
                        total, want = chunk.total_bytes, chunk.checksum
                    got += len(chunk.data)
                    crc = zlib.crc32(chunk.data, crc)
                    f.write(chunk.data)
            if total is None or got != total:
                raise FramewormError("DATA_LOSS", f"the coordinator's copy of {path} came with {got} "
                                                  f"bytes, not the {total} it announced")
            if want and f"crc32:{crc:08x}" != want:
                raise FramewormError("DATA_LOSS", f"the coordinator's copy of {path} is "
                                                  f"crc32:{crc:08x}, its record says {want}")
            return tmp
        except grpc.RpcError as e:
            os.remove(tmp)
            raise FramewormError(e.code().name, e.details()) from None
        except BaseException:
            os.remove(tmp)
            raise

    def _drop_overflow(self):
        """Past MAX_QUEUED waiting reports the oldest go. Needs _lock."""
        while len(self._queue) > MAX_QUEUED:
            self._queue.popleft()

    def _dial(self):
        if self._tls_dir:
            return _secure_channel(self.coordinator, self._tls_dir)
        return _insecure_channel(self.coordinator)  # the worker's choice: no TLS directory

    def _note(self, error):
        """The sender, after each report call (error None: answered): a
        coordinator that has not answered for over _REDIAL_AFTER seconds
        gets a new channel, at most once per _REDIAL_AFTER; the replaced
        one stays open for calls still on it until _MAX_STALE newer ones
        replaced it."""
        now = time.monotonic()
        if error is None or error.code() not in _AWAY:
            self._last_ok = now
            return
        if now - self._last_ok < _REDIAL_AFTER or now - self._last_dial < _REDIAL_AFTER:
            return
        self._last_dial = now
        self._stale.append(self._channel)
        self._channel = self._dial()
        self._stub = trainer_service_pb2_grpc.TrainerServiceStub(self._channel)
        self.redials += 1
        while len(self._stale) > _MAX_STALE:
            self._stale.pop(0).close()

    def _send_loop(self):
        while True:
            with self._lock:
                while True:
                    # close() set _urgent before _closed: its flush is not paced.
                    wait = self._pacer.wait(len(self._queue), time.monotonic(), self._urgent)
                    if wait == 0.0 or (wait is None and self._closed.is_set()):
                        break
                    self._changed.wait(wait)
                if not self._queue:
                    return
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
                if not self._queue:
                    self._urgent = False
                self._in_flight = True
                self.calls += 1
                self._pacer.called(time.monotonic())
            resp, error = None, None
            try:
                if self._batched:
                    try:
                        resp = self._stub.ReportSteps(
                            trainer_service_pb2.StepReports(reports=batch), timeout=self.timeout)
                    except grpc.RpcError as e:
                        if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                            raise
                        self._batched = False  # an older coordinator
                if not self._batched:
                    for m in batch:
                        resp = self._stub.ReportStep(m, timeout=self.timeout)
            except grpc.RpcError as e:
                error = e
            self._note(error)
            with self._lock:
                self._in_flight = False
                if resp is not None and error is None:
                    self._latest = (resp.checkpoint_at_step, resp.stop)
                elif error is not None and error.code() in (grpc.StatusCode.ABORTED,
                                                            grpc.StatusCode.PERMISSION_DENIED):
                    self._terminal = FramewormError(error.code().name, error.details())
                    self._queue.clear()
                elif error is not None and error.code() in _AWAY:
                    # The coordinator away: the batch goes back in front of
                    # what was queued since, to be sent again (a report that
                    # did arrive counts once: the coordinator ignores a
                    # rank's second report of a step); past the bound the
                    # oldest go.
                    self._queue.extendleft(reversed(batch))
                    self.requeued += len(batch)
                    self._drop_overflow()
                self._changed.notify_all()
            if error is not None and self._terminal is None:
                time.sleep(0.2)  # the coordinator away or refusing: do not spin on it

    def _ping_loop(self, every):
        while not self._closed.wait(every):
            with self._lock:
                step = self._last_step
            m = common_pb2.StepMetrics(ref=self._ref, rank=self.rank, step=step,
                                       progress_only=True, ping=True)
            try:
                self._stub.ReportStep(m, timeout=self.timeout)
            except (grpc.RpcError, ValueError):
                pass  # best effort, as the built-in trainer's pings (ValueError: a channel closed)

    def close(self, flush=10.0):
        """Sends what is queued (waiting at most `flush` seconds), stops the
        threads; idempotent."""
        if self._sender is not None:
            deadline = time.monotonic() + flush
            with self._lock:
                self._urgent = True  # no pacing: send what is queued now
                self._changed.notify_all()
                while ((self._queue or self._in_flight) and self._terminal is None
                       and time.monotonic() < deadline):
                    self._changed.wait(max(0.0, deadline - time.monotonic()))
                self._queue.clear()
                self._closed.set()
                self._changed.notify_all()
            self._sender.join()
            self._sender = None
        self._closed.set()  # also stops the pings (no sender outside a job)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.enabled:
            for ch in self._stale:
                ch.close()
            self._stale = []
            self._channel.close()
            self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
