"""A torchrun-style program (Python DDP over Gloo, reading MASTER_ADDR,
RANK, ...) that reports its steps to its Frameworm job with
frameworm.Reporter; the diagnosis e2e stops one rank of it. It checkpoints
when the coordinator asks (rank 0: reporter.save), 5 steps later in
memory (save(..., memory=True)), and resumes from reporter.resume() when
restarted; the restarted generation takes in-memory checkpoints when rank
0's Directive says one is due (memory_checkpoint: the automatic cadence).

usage: torchrun_reporting.py STEPS
"""
import os
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

import frameworm


def expect_error(code, fn, *args):
    try:
        fn(*args)
    except frameworm.FramewormError as e:
        assert e.code == code, f"{fn.__name__}{args}: {e.code} {e}, not {code}"
        return
    raise AssertionError(f"{fn.__name__}{args} did not fail with {code}")


def stage(name):
    """A progress line (not read by the test's wait, which looks for
    "checkpoint error checks "): a check that never ends shows where."""
    print(f"checkpoint checks stage: {name}", flush=True)


def check_checkpoint_errors(reporter, step):
    """Rank 0, after registering the checkpoint of `step`: the failure paths
    of the checkpoint calls, against the real coordinator."""
    stage("bad paths")
    expect_error("INVALID_ARGUMENT", reporter.checkpoint_path, -1)
    expect_error("INVALID_ARGUMENT", reporter.register_checkpoint, step, "/tmp/elsewhere.pt")
    missing = step + 1000000
    expect_error("NOT_FOUND", reporter.register_checkpoint, missing, reporter.checkpoint_path(missing))
    assert reporter.memory_checkpoint_dir, "the job takes in-memory checkpoints"
    assert reporter.memory_checkpoint_every == 0, "automatic cadence by default"
    env = dict(os.environ, FRAMEWORM_MEMORY_CHECKPOINT_EVERY="often")
    expect_error("INVALID_ARGUMENT", frameworm.Reporter, 1.0, 10.0, env)
    expect_error("INVALID_ARGUMENT", frameworm.Reporter, 1.0, 10.0, None, -0.5)  # report_every
    # An in-memory save the coordinator cannot record (it is away): the
    # error is raised, the file deleted, and the next one is not due at
    # once (the failed save counts for the cadence).
    stage("a coordinator away")
    env = dict(os.environ, FRAMEWORM_COORDINATOR="127.0.0.1:1")
    away = frameworm.Reporter(environ=env, ping_every=0, timeout=2.0)
    assert away.step(step).memory_checkpoint, "the first is due at once"
    expect_error("UNAVAILABLE", away.save, step, {"step": step}, True)
    assert not os.path.exists(away.checkpoint_path(step, True)), "an unrecorded file stayed"
    assert not away.step(step + 1).memory_checkpoint, "due again right after a failed save"
    away.close(flush=1.0)
    stage("outside a job")
    outside = frameworm.Reporter(environ={})
    expect_error("FAILED_PRECONDITION", outside.checkpoint_path, 1)
    expect_error("FAILED_PRECONDITION", outside.checkpoint_path, 1, True)
    assert outside.register_checkpoint(1, "/x") == [] and outside.resume() is None
    # An in-memory directory that others may write to is refused before
    # anything is written or reported.
    stage("a shared memory directory")
    shared = tempfile.mkdtemp(prefix="frameworm-shared-")
    os.chmod(shared, 0o777)
    env = dict(os.environ, FRAMEWORM_MEMORY_CHECKPOINT_DIR=os.path.join(shared, "job"))
    with frameworm.Reporter(environ=env, ping_every=0) as other:
        expect_error("FAILED_PRECONDITION", other.save, step, {"step": step}, True)
    assert not os.path.exists(os.path.join(shared, "job")), "wrote into a shared directory"
    os.rmdir(shared)
    stage("downloads")
    # A path the job never reported: the coordinator refuses its download.
    expect_error("NOT_FOUND", reporter.download_checkpoint, reporter.checkpoint_path(missing))
    # The coordinator's copy of the one just registered is the same bytes.
    path = reporter.checkpoint_path(step)
    copy = reporter.download_checkpoint(path)
    same = open(copy, "rb").read() == open(path, "rb").read()
    os.remove(copy)
    assert same, "the coordinator's copy differs"
    stage("a torn resume file")
    # A resume file that does not load raises (and is reported).
    bad = os.path.join(reporter.checkpoint_dir, "not-a-checkpoint.pt")
    with open(bad, "wb") as f:
        f.write(b"torn")
    env = dict(os.environ, FRAMEWORM_RESUME_FROM=bad)
    with frameworm.Reporter(environ=env, ping_every=0) as other:
        try:
            other.resume()
            raise AssertionError("a torn file loaded")
        except AssertionError:
            raise
        except Exception:
            pass
    os.remove(bad)
    print("checkpoint error checks passed", flush=True)


def start_checkpoint_checks(reporter, step):
    """Runs check_checkpoint_errors beside the training loop: its calls,
    files and Reporters (one flushes for a second into a coordinator that
    is away) take about 1 s here but took over 5 s in one CI run, and a
    rank 0 that stops stepping past the job's heartbeat_timeout (6 s) is
    restarted as hung before the checks end.
    A failed check is printed; the test reads the line."""
    def run():
        began = time.monotonic()
        try:
            check_checkpoint_errors(reporter, step)
        except BaseException as e:  # printed, never raised: the loop goes on
            print(f"checkpoint error checks FAILED: {e!r}", flush=True)
        print(f"checkpoint error checks took {time.monotonic() - began:.2f} s", flush=True)
    checks = threading.Thread(target=run, name="checkpoint-checks", daemon=True)
    checks.start()
    return checks


def check_pacing(reporter, since, calls_then, steps):
    """Over `steps` steps of ~25 ms the Reporter made at most one report
    call per 50 ms (frameworm/pacing.py), plus the first and one urgent
    send for the checkpoint the test asks meanwhile; one call per step
    without the pacing. Printed, not raised: the test reads the line."""
    seconds = time.monotonic() - since
    calls = reporter.calls - calls_then
    bound = int(seconds / 0.05) + 3
    verdict = "passed" if calls <= bound else "FAILED"
    print(f"report pacing checks {verdict}: {calls} calls for {steps} steps in {seconds:.2f} s "
          f"(at most {bound})", flush=True)


def main():
    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    with frameworm.Reporter() as reporter:
        assert reporter.enabled, "FRAMEWORM_COORDINATOR and FRAMEWORM_JOB_ID are set in a job"
        state = reporter.resume()  # every rank loads the same file, fetched onto its host
        first = 1
        if state is not None:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            first = state["step"] + 1
            print(f"resumed from step {state['step']}", flush=True)
        model = torch.nn.parallel.DistributedDataParallel(net)
        memory_at = -1
        checks = None  # rank 0's checkpoint checks, when running
        paced_from = None  # (time, calls) at the first step: the pacing check
        for step in range(first, steps + 1):
            t0 = time.perf_counter()
            x = torch.randn(32, 64)
            y = torch.randint(0, 10, (32,))
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)  # a step of ~25 ms, like a small real model's
            d = reporter.step(step, loss=loss.item(), samples=32,
                              step_seconds=time.perf_counter() - t0, total_steps=steps)
            if step == first:
                paced_from = (time.monotonic(), reporter.calls)
            elif step == first + 100:
                check_pacing(reporter, *paced_from, 100)
            # Rank 0's answer decides, so every rank acts after the same step.
            if d.memory_checkpoint and dist.get_rank() != 0:
                print(f"rank {dist.get_rank()} was told to take a memory checkpoint", flush=True)
            flags = torch.tensor([int(d.checkpoint), int(d.stop), d.checkpoint_at_step,
                                  int(d.memory_checkpoint)])
            dist.broadcast(flags, src=0)
            if flags[0]:
                print(f"checkpoint asked for step {int(flags[2])} taken after step {step}",
                      flush=True)
                if dist.get_rank() == 0:
                    reporter.save(step, {"model": net.state_dict(), "optimizer": opt.state_dict(),
                                         "step": step})
                    print(f"checkpoint of step {step} registered", flush=True)
                    if state is None:
                        checks = start_checkpoint_checks(reporter, step)
                        memory_at = step + 5
                elif state is None:
                    # Only rank 0 saves: another rank's upload is refused by
                    # the coordinator (a file of a step nobody else writes).
                    mine = reporter.checkpoint_path(step + 2000000)
                    try:
                        os.makedirs(os.path.dirname(mine), exist_ok=True)
                        with open(mine, "wb") as f:
                            f.write(b"rank %d" % dist.get_rank())
                        expect_error("PERMISSION_DENIED", reporter.register_checkpoint,
                                     step + 2000000, mine)
                        print(f"rank {dist.get_rank()}'s checkpoint refused", flush=True)
                    except Exception as e:  # the test reads the log
                        print(f"rank {dist.get_rank()}'s checkpoint check FAILED: {e!r}",
                              flush=True)
                    finally:
                        if os.path.exists(mine):
                            os.remove(mine)
            if state is not None and flags[3] and dist.get_rank() == 0:
                # The restarted generation follows the automatic cadence.
                reporter.save(step, {"model": net.state_dict(), "optimizer": opt.state_dict(),
                                     "step": step}, memory=True)
                print(f"automatic memory checkpoint of step {step} registered", flush=True)
            if step == memory_at and dist.get_rank() == 0:
                # A newer one in the node's memory: the restart takes it.
                reporter.save(step, {"model": net.state_dict(), "optimizer": opt.state_dict(),
                                     "step": step}, memory=True)
                print(f"memory checkpoint of step {step} registered", flush=True)
            if flags[1]:
                break
        if checks is not None:
            checks.join(timeout=30.0)
    print(f"done at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
