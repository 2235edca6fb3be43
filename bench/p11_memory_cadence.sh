#!/usr/bin/env bash
# P11 (issue #10): what in-memory checkpoints at the automatic cadence cost
# training (p11_memory_cadence: one training run per round, in alternating
# blocks with and without in-memory checkpoints, so the machine's drift
# cancels; P11_ROUNDS rounds, default 3). Two models: the demo CNN on
# Fashion-MNIST (500 steps, blocks of 60), and a wide synthetic one of
# P11_MIB MiB of parameters (default 64; SGD with momentum, so each snapshot
# is twice that; 420 steps, blocks of 100). Snapshots go to P11_DIR
# (default a directory under /dev/shm, the tmpfs the workers use). Per
# round: the extra time per save against the off blocks' mean step, and
# its share of the steps between two saves (target <= 0.02). Writes
# bench/results/p11_memory_cadence.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROUNDS="${P11_ROUNDS:-3}"
MIB="${P11_MIB:-64}"
OUT="$RESULTS/p11_memory_cadence.md"
need "$BIN/p11_memory_cadence"
DIR="${P11_DIR:-/dev/shm/frameworm-p11-$$}"
mkdir -p "$DIR"
trap 'rm -rf "$TMP" "$DIR"' EXIT
"$BIN/p11_memory_cadence" --dir="$DIR" --model=cnn --steps=500 --block=60 --warmup=20 \
  --rounds="$ROUNDS" | tee "$TMP/p11.jsonl"
"$BIN/p11_memory_cadence" --dir="$DIR" --model=wide --mib="$MIB" --steps=420 --block=100 \
  --warmup=20 --rounds="$ROUNDS" | tee -a "$TMP/p11.jsonl"
fs=$(df -T "$DIR" | awk 'NR==2 {print $1" ("$2")"}')
python3 - "$TMP/p11.jsonl" "$OUT" "$ROUNDS" "$MIB" "$fs" <<'PY'
import sys
from benchlib import json_lines, machine, median, write_report
rows = json_lines(sys.argv[1])
out, rounds, mib, fs = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
L = ["# P11: the cost of in-memory checkpoints at the automatic cadence", "",
     f"Command: `bench/p11_memory_cadence.sh` (P11_ROUNDS={rounds}, P11_MIB={mib})",
     f"Machine: {machine()}; snapshots to {fs}.", "",
     "One process, one torch thread, one training run (seed 42) per round in alternating blocks "
     "of steps: in an on block in-memory checkpoints come at the automatic cadence "
     "(`memory_checkpoint_every` -1, the default: the next one max(10, ceil((blocked + background) "
     "/ (2% of the mean step))) steps after the last, train/memory_cadence.h; the newest two files "
     "kept, as the coordinator keeps them), except in its last quarter, so the last save's cost "
     "stays in its block; in an off block none start. A step's time is the wall time between two "
     "steps' `on_step` (a snapshot's blocking and the copy and write beside the next steps count), "
     "after 20 warm-up steps and an untimed warm-up run. Extra per save = (the on blocks' time - "
     "their steps x the off blocks' mean step) / saves; share = extra per save / (steps between "
     "two saves x the off blocks' mean step): what the cadence costs training.", "",
     "| model | round | block (steps) | off mean step (ms) | on mean step (ms) | saves | steps between | extra per save (ms) | share | snapshot (MiB) |",
     "|---|---|---|---|---|---|---|---|---|---|"]
verdicts = []
for model in ("cnn", "wide"):
    mine = [x for x in rows if x["model"] == model]
    for x in mine:
        L.append(f"| {model} | {x['round']} | {x['block']} | {x['off_mean_step_s']*1e3:.2f} | "
                 f"{x['on_mean_step_s']*1e3:.2f} | {x['saves']} | {x['spacing']:.1f} | "
                 f"{x['extra_per_save_s']*1e3:.1f} | {x['share']:.4f} | {x['checkpoint_mib']:.1f} |")
    if mine:
        verdicts.append(f"- **{model}: share {median([x['share'] for x in mine]):.4f}** (median over "
                        f"rounds; target <= 0.02); on / off mean step "
                        f"{median([x['on_mean_step_s'] / x['off_mean_step_s'] for x in mine]):.4f}.")
L += ["", "## Verdicts", ""] + verdicts
write_report(out, L)
PY
cat "$OUT"
