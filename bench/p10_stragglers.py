"""P10 (issue #13): straggler detection on real jobs. A local cluster
(coordinator and 2 single-slot workers on 127.0.0.1) runs the 2-rank CNN on
Fashion-MNIST; in each seeded trial one random rank's trainer is slowed
from outside by a random factor F in [1.3, 3] (stopped for 1 - 1/F of
every 50 ms, so its own work takes F times as long) for 12 s. Reported per
trial: whether that rank was flagged within 30 steps of the slowdown's
start, after how many steps, and any flag of the other rank; and false
positives over undisturbed steps (every trial's warm-up plus an undisturbed
job). Driven through the frameworm Python client. Prints JSON lines.

usage: p10_stragglers.py BIN_DIR TRIALS SEED
"""
import json
import os
import random
import signal
import sys
import tempfile
import time

import frameworm
from benchlib import start_cluster, stop_cluster

JOB = """name: p10
nodes: 2
nproc_per_node: 1
backend: gloo
heartbeat_timeout: 60
train:
  model: cnn
  dataset: fashion-mnist
  max_steps: {steps}
  batch_size: 32
"""


def trainer_pid(job, rank):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        # The trainer itself, not its frameworm-task-shim (whose arguments name it).
        if (cmd.split(b"\0")[0].endswith(b"frameworm-train")
                and f"FRAMEWORM_JOB_ID={job}".encode() in env
                and f"RANK={rank}".encode() in env):
            return int(pid)
    return None


def wait_step(c, job, step, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = c.status(job)
        if int(st.get("step", 0)) >= step:
            return int(st["step"])
        if st.get("state") in frameworm.FINAL_STATES:
            raise SystemExit(f"{job} ended early: {st}")
        time.sleep(0.1)
    raise SystemExit(f"{job} did not reach step {step}")


def main():
    bin_dir, trials, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    d = tempfile.mkdtemp(prefix="p10-")
    procs, addr = start_cluster(bin_dir, d)
    c = frameworm.Client(addr)
    try:
        undisturbed_steps = undisturbed_flags = 0
        for t in range(trials):
            job = c.submit(JOB.format(steps=100000))
            warm = wait_step(c, job, 40)
            rank, factor = rng.randrange(2), rng.uniform(1.3, 3.0)
            stop = (1 - 1 / factor) * 0.05
            pid = trainer_pid(job, rank)
            start = int(c.status(job).get("step", 0))
            end = time.monotonic() + 12
            while time.monotonic() < end:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stop)
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.05 - stop)
            os.kill(pid, signal.SIGCONT)
            rows = c.metrics(job)
            c.cancel(job)
            # Undisturbed: the warm-up's steps once a full window (5) is in.
            for r in rows:
                if 5 <= r["step"] <= start:
                    undisturbed_steps += 1
                    undisturbed_flags += 1 if r["stragglers"] else 0
            after = [r for r in rows if r["step"] > start]
            first = next((r["step"] - start for r in after if rank in r["stragglers"]), None)
            wrong = sum(1 for r in after if any(x != rank for x in r["stragglers"]))
            print(json.dumps({"trial": t, "rank": rank, "factor": round(factor, 2),
                              "slowed_steps": len(after), "steps_to_flag": first,
                              "detected_30": first is not None and first <= 30,
                              "wrong_flags": wrong}), flush=True)
        job = c.submit(JOB.format(steps=700))
        final = c.wait(job, timeout=300)
        for r in c.metrics(job):
            if r["step"] >= 5:
                undisturbed_steps += 1
                undisturbed_flags += 1 if r["stragglers"] else 0
        print(json.dumps({"summary": True, "undisturbed_steps": undisturbed_steps,
                          "undisturbed_flagged_steps": undisturbed_flags,
                          "undisturbed_job": final.get("state")}), flush=True)
    finally:
        stop_cluster(procs)

if __name__ == "__main__":
    main()
