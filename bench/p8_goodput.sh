#!/usr/bin/env bash
# P8 goodput (issue #10): the 2-node CNN job on Fashion-MNIST (3 epochs)
# undisturbed, then the same job with kill -9 of a seeded random trainer or
# worker every P8_EVERY_S seconds (default 30), each on a fresh local
# cluster, in the same run (p8_goodput). Targets: goodput = undisturbed
# wall / disturbed wall >= 0.90; steps lost per failure <= one in-memory
# checkpoint interval; the same accuracy within 0.3 points.
# Writes bench/results/p8_goodput.md. Takes about 2 job lengths plus the
# recoveries (4-6 minutes on 2 cores).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EVERY="${P8_EVERY_S:-30}"
SEED="${P8_SEED:-1}"
CKPT="${P8_CHECKPOINT_EVERY:-50}"
OUT="$RESULTS/p8_goodput.md"
need "$BIN/p8_goodput" "$BIN/frameworm-coordinator" "$BIN/frameworm-worker" "$BIN/frameworm-train"
rc=0
FRAMEWORM_BIN_DIR="$BIN" "$BIN/p8_goodput" --every-s="$EVERY" --seed="$SEED" \
  --checkpoint-every="$CKPT" | tee "$TMP/p8.jsonl" || rc=$?
python3 - "$TMP/p8.jsonl" "$OUT" "$EVERY" "$SEED" "$CKPT" "$rc" <<'PY'
import sys
from benchlib import json_lines, machine, median, write_report
rows = json_lines(sys.argv[1])
out, every, seed, ckpt, rc = sys.argv[2:7]
fails = [r for r in rows if not r.get("summary")]
s = ([r for r in rows if r.get("summary")] or [None])[0]
L = ["# P8: goodput under a kill -9 every %s s" % every, "",
     f"Command: `bench/p8_goodput.sh` (P8_EVERY_S={every}, P8_SEED={seed}, P8_CHECKPOINT_EVERY={ckpt}); exit status {rc}.",
     f"Machine: {machine()}; a local cluster (coordinator and 3 single-slot workers on 127.0.0.1, mutual TLS).", "",
     "Job: 2 nodes x 1 process, the CNN on Fashion-MNIST for 3 epochs, batch 32 per rank, Gloo, "
     f"disk checkpoints every {ckpt} steps (asynchronous), in-memory checkpoints at the automatic cadence (the default: "
     "at most every 10 steps, fewer when a snapshot would cost over 2% of the step time), heartbeat timeout 4 s. "
     "The undisturbed run and the disturbed "
     "run each start a fresh cluster. Every failure: kill -9 of a seeded random rank's trainer, or of the worker "
     "running it (started again 1 s later); the next kill comes the period after the job trains again.", ""]
if s is None:
    L += ["**The run failed before its summary.**"]
else:
    L += ["| failure | what | newest aggregated step before | checkpoint step loaded | steps lost | kill -> next generation's first step (s) |",
          "|---|---|---|---|---|---|"]
    for r in fails:
        L.append(f"| {r['failure']} | {r['what']} | {r['step_before']} | {r['resumed_after']} | {r['steps_lost']} | {r['back_training_s']:.2f} |")
    lost = median(r["steps_lost"] for r in fails) if fails else float("nan")
    back = median(r["back_training_s"] for r in fails) if fails else float("nan")
    L += ["", "## Verdicts", "",
          f"- **Goodput {s['goodput']:.3f}** (target >= 0.90): undisturbed {s['undisturbed_wall_s']:.1f} s, "
          f"disturbed {s['disturbed_wall_s']:.1f} s with {len(fails)} failures ({s['restarts']} restarts); the disturbed run "
          + ("SUCCEEDED." if s["disturbed_ok"] else "did NOT succeed."),
          f"- **Steps lost per failure: median {lost:.0f}, at most {max(r['steps_lost'] for r in fails) if fails else 0}** "
          "(target <= one in-memory checkpoint interval, which the automatic cadence keeps at 10 steps or more: a failure loses the steps since the newest "
          "recorded checkpoint, in memory or on disk); median time from the kill to the next generation's first step: "
          f"{back:.2f} s.",
          f"- **Accuracy**: undisturbed {s['undisturbed_accuracy']:.4f}, disturbed {s['disturbed_accuracy']:.4f} "
          f"(difference {abs(s['undisturbed_accuracy'] - s['disturbed_accuracy']) * 100:.2f} points; target <= 0.3)."]
write_report(out, L)
PY
exit "$rc"
