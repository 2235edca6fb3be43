#!/usr/bin/env bash
# P1c: the cost of running as a cluster job (bench/p1_cluster.py): the
# 2-rank MLP and CNN as jobs on a local cluster, wall time per step from
# the job's metrics against the time inside the step, for this build's
# frameworm-train and, with P1C_BASELINE=PATH (another build's
# frameworm-train, e.g. one from before asynchronous step reports), that
# one too, alternating, $P1C_RUNS runs (3); and per binary the steps the
# MLP job makes while the coordinator is stopped for 5 s.
# Writes bench/results/p1_cluster.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS="${P1C_RUNS:-3}"
OUT="$RESULTS/p1_cluster.md"
need "$BIN/frameworm-coordinator" "$BIN/frameworm-worker" "$BIN/frameworm-train" "$BIN/frameworm-cli"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  --target "$TMP/site" "$ROOT/python" > /dev/null
trainers=("this=$BIN/frameworm-train")
[[ -n "${P1C_BASELINE:-}" ]] && trainers+=("baseline=$P1C_BASELINE")
PYTHONPATH="$TMP/site:$PYTHONPATH" "$PY" "$ROOT/bench/p1_cluster.py" "$BIN" "$RUNS" "${trainers[@]}" \
  | tee "$TMP/p1c.jsonl"
"$PY" - "$TMP/p1c.jsonl" "$OUT" "$RUNS" "${P1C_BASELINE:-}" <<'PY'
import sys
from benchlib import json_lines, machine, median, write_report
rows = json_lines(sys.argv[1])
out, runs, baseline = sys.argv[2], sys.argv[3], sys.argv[4]
L = ["# P1c: a step as a cluster job against the step itself", "",
     f"Command: `{'P1C_BASELINE=' + baseline + ' ' if baseline else ''}bench/p1_cluster.sh` "
     f"({runs} runs, alternating); machine: {machine()}.",
     "A local cluster (coordinator and 2 two-slot workers on 127.0.0.1, all on the same 2 cores) "
     "runs each 2-rank job (Gloo, batch 64 per rank, 1 thread per rank, Fashion-MNIST; MLP 5 epochs, "
     "2345 steps, as 2 nodes x 1 process and as 1 node x 2 processes, which averages gradients "
     "through the intra-node shared memory; CNN 300 steps, 2 x 1) with the named frameworm-train as "
     "its entrypoint. Wall per step: from the job's aggregated metrics (time the coordinator took "
     "each step's last report, step 50 to the last; reports arrive in batches at most 50 ms apart "
     "since 2026-12-06); in-step: the time inside the training step (rank 0's done line); alone: "
     "the same binary and flags as `--nprocs 2` without a coordinator (always the shared-memory "
     "path). Medians over runs.", "",
     "| model | nodes x processes | trainer | wall per step as a job (ms) | in-step as a job (ms) | wall / in-step | in-step alone (ms) |",
     "|---|---|---|---|---|---|---|"]
outages = [r for r in rows if r.get("outage")]
rows = [r for r in rows if not r.get("outage")]
keys = sorted({(r["model"], r["layout"], r["trainer"]) for r in rows},
              key=lambda k: (k[0] != "mlp", k[1], k[2] != "this", k))
res = {}
for model, layout, trainer in keys:
    rs = [r for r in rows if (r["model"], r["layout"], r["trainer"]) == (model, layout, trainer)
          and r["cluster"]["wall_per_step"]]
    w = median([r["cluster"]["wall_per_step"] for r in rs])
    i = median([r["cluster"]["in_step"] for r in rs])
    a = median([r["alone"]["in_step"] for r in rs])
    res[(model, layout, trainer)] = w
    L.append(f"| {model} | {layout} | {trainer} | {w*1e3:.2f} | {i*1e3:.2f} | {w/i:.2f} | {a*1e3:.2f} |")
L.append("")
for model, layout, trainer in keys:
    if trainer == "this" and (model, layout, "baseline") in res:
        L.append(f"- {model} {layout}: wall per step, this / baseline = "
                 f"**{res[(model, layout, 'this')] / res[(model, layout, 'baseline')]:.3f}**")
L += ["", "## A coordinator outage", "",
      "The MLP job; the coordinator stopped (SIGSTOP) for 5 s: the steps made meanwhile against 5 s at "
      "the rate just before (medians over runs).", "",
      "| trainer | steps/s before | steps made in the 5 s stopped | ratio |", "|---|---|---|---|"]
for label in sorted({r["trainer"] for r in outages}, key=lambda t: t != "this"):
    rs = [r for r in outages if r["trainer"] == label]
    L.append(f"| {label} | {median(r['steps_per_s_before'] for r in rs):.0f} | "
             f"{median(r['steps_in_5s_stopped'] for r in rs):.0f} | {median(r['ratio'] for r in rs):.3f} |")
write_report(out, L)
PY
