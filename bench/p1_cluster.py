"""P1c: what running as a cluster job adds to each step. A local cluster
(coordinator and 2 two-slot workers on 127.0.0.1) runs the 2-rank MLP
(on two nodes, and on one node with two processes) and CNN (two nodes) on
Fashion-MNIST with a given frameworm-train binary (the job's
entrypoint), and the same binary runs the same configuration on its own
(no coordinator). Per run: the wall time per step from the job's
aggregated metrics (unix_ms of the step's last report, between step 50
and the last), and the time inside the step (the done line's
mean_step_seconds). Prints JSON lines.

Then, per binary, a coordinator outage: the MLP job runs, the
coordinator is stopped (SIGSTOP) for 5 s and continued, and the steps the
job made meanwhile (its step 1 s after, less the steps of that second at
the rate before the stop) against the steps it makes in 5 s undisturbed.

usage: p1_cluster.py BIN_DIR RUNS [LABEL=TRAIN_BINARY ...]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import frameworm
from benchlib import start_cluster, stop_cluster

# (model, nodes, processes per node, flags): the MLP on two nodes (Gloo
# between them), and on one node with two processes (the intra-node
# shared-memory path); the CNN on two nodes.
CONFIGS = [("mlp", 2, 1, ["--epochs=5"]), ("mlp", 1, 2, ["--epochs=5"]),
           ("cnn", 2, 1, ["--max-steps=300"])]
FLAGS = ["--dataset=fashion-mnist", "--batch-size=64", "--threads=1", "--backend=gloo",
         "--seed=42", "--log-every=1000000"]


def done_line(text):
    for line in reversed(text.splitlines()):
        if line.startswith('{"event":"done"'):
            return json.loads(line)
    return {}


def wall_per_step(rows, first=50):
    rows = [r for r in rows if r["step"] >= first and r.get("unix_ms")]
    if len(rows) < 2:
        return None
    return (rows[-1]["unix_ms"] - rows[0]["unix_ms"]) / 1000.0 / (rows[-1]["step"] - rows[0]["step"])


def main():
    bin_dir, runs = sys.argv[1], int(sys.argv[2])
    trainers = dict(a.split("=", 1) for a in sys.argv[3:]) or {"this": f"{bin_dir}/frameworm-train"}
    d = tempfile.mkdtemp(prefix="p1c-")
    procs, addr = start_cluster(bin_dir, d, slots=2)
    c = frameworm.Client(addr)
    try:
        for run in range(runs):
            for model, nodes, nproc, extra in CONFIGS:
                for label, train in trainers.items():
                    args = [train, f"--model={model}"] + extra + FLAGS
                    spec = {"name": f"p1c-{model}-{label}", "nodes": nodes, "nproc_per_node": nproc,
                            "backend": "gloo", "entrypoint": args}
                    job = c.submit(spec)
                    final = c.wait(job, timeout=600)
                    rows = c.metrics(job)
                    logs = subprocess.run([f"{bin_dir}/frameworm-cli", f"--coordinator={addr}",
                                           "logs", job, "--rank", "0"],
                                          capture_output=True, text=True).stdout
                    cluster = {"wall_per_step": wall_per_step(rows),
                               "in_step": done_line(logs).get("mean_step_seconds"),
                               "state": final.get("state")}
                    t0 = time.monotonic()
                    alone = subprocess.run(args + ["--nprocs=2", f"--checkpoint-dir={d}/alone"],
                                           capture_output=True, text=True)
                    wall = time.monotonic() - t0
                    print(json.dumps({"run": run, "model": model, "layout": f"{nodes}x{nproc}",
                                      "trainer": label,
                                      "cluster": cluster,
                                      "alone": {"in_step": done_line(alone.stdout).get("mean_step_seconds"),
                                                "process_seconds": wall}}), flush=True)
        for run in range(runs):
            for label, train in trainers.items():
                args = [train, "--model=mlp", "--epochs=1000"] + FLAGS
                job = c.submit({"name": f"p1c-outage-{label}", "nodes": 2, "nproc_per_node": 1,
                                "backend": "gloo", "heartbeat_timeout": 60, "entrypoint": args})
                while int(c.status(job).get("step", 0)) < 300:
                    time.sleep(0.2)
                s0, t0 = int(c.status(job)["step"]), time.monotonic()
                time.sleep(2)
                s1, t1 = int(c.status(job)["step"]), time.monotonic()
                rate = (s1 - s0) / (t1 - t0)
                procs[0].send_signal(signal.SIGSTOP)
                time.sleep(5)
                procs[0].send_signal(signal.SIGCONT)
                time.sleep(1)
                s2 = int(c.status(job)["step"])
                c.cancel(job)
                during = s2 - s1 - rate * (time.monotonic() - t1 - 5)
                print(json.dumps({"run": run, "outage": True, "trainer": label,
                                  "steps_per_s_before": rate, "steps_in_5s_stopped": during,
                                  "ratio": during / (5 * rate)}), flush=True)
    finally:
        stop_cluster(procs)

if __name__ == "__main__":
    main()
