#!/usr/bin/env bash
# P6: from kill -9 of a worker to detection, and to the next completed step.
# Writes bench/results/p6_recovery.md. Targets: detection <= 3 s, resume <= 10 s.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRIALS="${P6_TRIALS:-5}"
HB="${P6_HEARTBEAT_TIMEOUT:-2}"
OUT="$ROOT/bench/results/p6_recovery.md"
tmp="$TMP/out"
FRAMEWORM_BIN_DIR="$BIN" "$BIN/p6_recovery" "$TRIALS" "$HB" | tee "$tmp"
python3 - "$tmp" "$OUT" "$TRIALS" "$HB" <<'PY'
import json, statistics, sys, os, subprocess
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out, trials, hb = sys.argv[2], sys.argv[3], sys.argv[4]
from benchlib import cpu_model; cpu = cpu_model()
det = [r["detection_s"] for r in rows]
res = [r["resume_s"] for r in rows]
lines = ["# P6: recovery from kill -9 of a worker", "",
  f"Command: `bench/p6_recovery.sh` (P6_TRIALS={trials}, job heartbeat_timeout {hb}s)",
  f"Machine: {os.cpu_count()} cores, {cpu}; coordinator, 3 workers and 2 trainers on 127.0.0.1",
  "Job: 2 nodes x 1 process, CNN on Fashion-MNIST, batch 64, checkpoint every 10 steps;",
  "the worker of node rank 1 is SIGKILLed once the job passed step 15.", "",
  "| trial | detection (s) | resume: next completed step (s) | resumed at step |", "|---|---|---|---|"]
for r in rows:
  lines.append(f"| {r['trial']} | {r['detection_s']:.2f} | {r['resume_s']:.2f} | {r['resumed_at_step']} |")
lines += ["", f"Median detection {statistics.median(det):.2f} s (target <= 3 s); "
          f"median resume {statistics.median(res):.2f} s (target <= 10 s).", "",
          "Reading: a killed worker takes its trainer with it (parent-death signal); the surviving",
          "rank's Gloo connection resets, it exits non-zero and the coordinator fails the generation",
          "at once, before the heartbeat timeout. A node that goes silent without closing its",
          "connections is caught by the heartbeat timeout instead (the end-to-end test",
          "FrozenNodeIsDetectedByHeartbeatTimeout checks it lands between timeout - 1 s and timeout + 1.5 s).",
          "Resume times are polled every 100 ms, so they are upper bounds by up to 0.1 s."]
from benchlib import write_report; write_report(out, lines)
PY
