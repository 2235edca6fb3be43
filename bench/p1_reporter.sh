#!/usr/bin/env bash
# P1r: a fast torchrun-style Python DDP job (2 ranks on one node of a local
# cluster, MLP steps of about 2 ms) reporting every step with
# frameworm.Reporter, paced (the default: at most one call per 50 ms)
# against unpaced (report_every=0), alternating, $P1R_RUNS rounds (3) of
# $P1R_STEPS steps (3000). Writes bench/results/p1_reporter.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS="${P1R_RUNS:-3}"
STEPS="${P1R_STEPS:-3000}"
OUT="$RESULTS/p1_reporter.md"
need "$BIN/frameworm-coordinator" "$BIN/frameworm-worker"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  --target "$TMP/site" "$ROOT/python" > /dev/null
"$PY" "$ROOT/bench/p1_reporter.py" "$BIN" "$TMP/site" "$RUNS" "$STEPS" | tee "$TMP/p1r.jsonl"
"$PY" - "$TMP/p1r.jsonl" "$OUT" "$RUNS" "$STEPS" <<'PY'
import sys
from benchlib import json_lines, machine, median, write_report
rows = json_lines(sys.argv[1])
out, runs, steps = sys.argv[2], sys.argv[3], sys.argv[4]
bad = [r for r in rows if r["state"] != "SUCCEEDED"]
if bad:
    sys.exit(f"p1_reporter: jobs did not succeed: {bad}")
L = ["# P1r: a Python DDP job's step reports, paced against unpaced", "",
     f"Command: `bench/p1_reporter.sh` ({runs} rounds of {steps} steps, alternating); machine: {machine()}.",
     "A local cluster (coordinator and one two-slot worker on 127.0.0.1, on the same cores) runs "
     "bench/py_reporter_entry.py as a 1 node x 2 process job: torch DDP over Gloo, 1 thread per rank, "
     "an MLP 784-128-10 on a fixed batch of 64, `frameworm.Reporter.step` after every step. Paced: "
     "the default `report_every=0.05` (frameworm/pacing.py); unpaced: `report_every=0`, a call as "
     "soon as the previous one returned (the Reporter before 2026-12-06). Rank 0's numbers, medians "
     "over rounds.", "",
     "| reporter | wall per step (ms) | median step (ms) | report calls per 1000 steps |",
     "|---|---|---|---|"]
res = {}
for pace, name in ((0.05, "paced"), (0.0, "unpaced")):
    rs = [r for r in rows if r["pace"] == pace]
    res[name] = median([r["wall_per_step_s"] for r in rs])
    L.append(f"| {name} | {res[name] * 1e3:.2f} | {median([r['median_step_s'] for r in rs]) * 1e3:.2f} | "
             f"{median([1000 * r['calls'] / r['steps'] for r in rs]):.0f} |")
per_round = [p["wall_per_step_s"] / u["wall_per_step_s"]
             for p in rows if p["pace"] == 0.05 for u in rows if u["pace"] == 0.0 and u["run"] == p["run"]]
L += ["", f"Wall per step, paced / unpaced: **{res['paced'] / res['unpaced']:.3f}** "
          f"(per round: {', '.join(f'{x:.3f}' for x in per_round)})."]
write_report(out, L)
PY
