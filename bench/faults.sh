#!/usr/bin/env bash
# The fault-injection suite at scale: runs tests/e2e/fault_test.cc on
# FAULT_SEEDS (default 1-40) seeded schedules (SIGKILL/SIGSTOP of trainers,
# workers and the coordinator; one fault or two close together) against an
# undisturbed run of the same job, and counts how they ended. Needs root
# (nothing else: one host). Writes bench/results/faults.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SEEDS="${FAULT_SEEDS:-1-40}"
OUT="$RESULTS/faults.md"
need "$BIN/fault_e2e_test"
FRAMEWORM_BIN_DIR="$BIN" FRAMEWORM_FAULT_SEEDS="$SEEDS" FRAMEWORM_FAULT_RESULTS="$TMP/runs.jsonl" \
  "$BIN/fault_e2e_test" --gtest_filter='Seeds/*' >"$TMP/run.log" 2>&1 || true
[[ -s "$TMP/runs.jsonl" ]] || { echo "faults: no schedule ran; see the log below" >&2; tail -30 "$TMP/run.log" >&2; exit 1; }
python3 - "$TMP/runs.jsonl" "$OUT" "$SEEDS" "$TMP/run.log" <<'PY'
import json, os, re, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
out, seeds = sys.argv[2], sys.argv[3]
# A schedule the test wrote no result for (an exception or a crash ended it
# first) counts as failed, with the first failure line of its log.
wanted = []
for part in seeds.split(","):
  lo, _, hi = part.partition("-")
  wanted += range(int(lo), int(hi or lo) + 1)
log = open(sys.argv[4], errors="replace").read()
for seed in sorted(set(wanted) - {r["seed"] for r in runs}):
  block = re.search(r"\[ RUN +\] \S+/seed%d\n(.*?)(?=\n\[ RUN|\Z)" % seed, log, re.S)
  lines = [l for l in (block.group(1) if block else "").splitlines()
           if "Failure" in l or "exception" in l or "FAILED" in l]
  why = lines[0] if lines else "the test did not run or did not finish"
  if len(lines) > 1 and lines[0].endswith("Failure"): why += " " + lines[1]
  print(f"faults: seed {seed} wrote no result: {why}", file=sys.stderr)
  runs.append({"seed": seed, "ok": False, "restarts": 0, "wall_s": 0.0, "limit_s": 0.0,
               "accuracy": 0.0, "baseline_wall_s": runs[0]["baseline_wall_s"] if runs else 1.0,
               "baseline_accuracy": runs[0]["baseline_accuracy"] if runs else 0.0,
               "schedule": f"seed {seed}: (no result)", "error": "no result: " + why[:300]})
runs.sort(key=lambda r: r["seed"])
from benchlib import cpu_model; cpu = cpu_model()
ok = [r for r in runs if r["ok"]]
bad = [r for r in runs if not r["ok"]]
base = runs[0]["baseline_wall_s"]
ratio = [r["wall_s"] / r["baseline_wall_s"] for r in runs if r["wall_s"] > 0] or [0.0]
lines = ["# Fault-injection suite: seeded schedules against an undisturbed run", "",
  f"Command: `bench/faults.sh` (FAULT_SEEDS={seeds}); {os.cpu_count()} cores, {cpu}.",
  "Job: 2 nodes x 1 process, CNN on Fashion-MNIST, 150 steps, checkpoint every 25, heartbeat_timeout 4 s,",
  "three single-slot workers, mutual TLS. Verdict per schedule: SUCCEEDED, test accuracy within 0.3 points",
  "of the undisturbed run, every checkpoint complete, no process or /dev/shm segment left, wall time within",
  "2 x undisturbed + 4 s per fault plus the seconds it stops or keeps down its target (monotonic clock).", "",
  f"**{len(ok)} of {len(runs)} schedules passed.** Undisturbed run: {base:.1f} s, accuracy {runs[0]['baseline_accuracy']:.4f}.",
  f"Median wall / undisturbed: {statistics.median(ratio):.2f} (max {max(ratio):.2f}); "
  f"median restarts {statistics.median(r['restarts'] for r in runs):.0f}; "
  f"accuracy equal to the undisturbed run in {sum(abs(r['accuracy']-r['baseline_accuracy'])<1e-9 for r in runs)} of {len(runs)}.", "",
  "| seed | ok | restarts | wall (s) | limit (s) | accuracy | schedule |", "|---|---|---|---|---|---|---|"]
for r in runs:
  sched = r["schedule"].split(": ", 1)[1]
  lines.append(f"| {r['seed']} | {'yes' if r['ok'] else '**no**'} | {r['restarts']} | {r['wall_s']:.1f} | "
               f"{r['limit_s']:.1f} | {r['accuracy']:.4f} | {sched}{' — ' + r['error'] if r['error'] else ''} |")
from benchlib import write_report; write_report(out, lines)
PY
cat "$OUT" | sed -n 1,12p
