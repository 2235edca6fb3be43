"""P1r: what frameworm.Reporter's pacing saves a fast Python DDP job: the
same 2-rank job (bench/py_reporter_entry.py, 1 node x 2 processes on a
local cluster) with the default pacing (at most one report call per 50 ms)
and with report_every=0 (a call as soon as the previous returned, as before
2026-12-06), alternating, RUNS rounds. Prints one JSON line per job.

usage: p1_reporter.py BIN_DIR SITE_DIR RUNS STEPS
"""
import json
import os
import sys
import tempfile

from benchlib import start_cluster, stop_cluster


def main():
    bin_dir, site, runs, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sys.path.insert(0, site)
    import frameworm

    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as state:
        procs, addr = start_cluster(bin_dir, state, workers=("w0",), slots=2)
        try:
            client = frameworm.Client(addr)
            for run in range(1, runs + 1):
                for pace in (0.05, 0.0):
                    out = os.path.join(state, f"out-{pace}-{run}.json")
                    job = client.submit({
                        "name": "p1r", "nodes": 1, "nproc_per_node": 2, "backend": "gloo",
                        "env": {"PYTHONPATH": site, "OMP_NUM_THREADS": "1"},
                        "entrypoint": [sys.executable, os.path.join(here, "py_reporter_entry.py"),
                                       str(steps), str(pace), out]})
                    final = client.watch(job, timeout=900)
                    row = {"run": run, "pace": pace, "state": final["state"]}
                    if final["state"] == "SUCCEEDED":
                        with open(out) as f:
                            row.update(json.load(f))
                    print(json.dumps(row), flush=True)
        finally:
            stop_cluster(procs)


if __name__ == "__main__":
    main()
