#!/usr/bin/env bash
# P7: test accuracy of the Fashion-MNIST CNN, 2 ranks (DDP over Gloo, batch
# 64 per rank) against 1 rank at the same global batch (128), same seed and
# epochs. Targets: >= 91%, the two within 0.3 points.
# Writes bench/results/p7_accuracy.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EPOCHS="${P7_EPOCHS:-8}"
OUT="$ROOT/bench/results/p7_accuracy.md"
common=(--model cnn --dataset fashion-mnist --epochs "$EPOCHS" --seed 42 --threads 1
        --backend gloo --checkpoint-dir "$TMP/ck")
t0=$(date +%s.%N)
"$BIN/frameworm-train" --nprocs 2 --batch-size 64 "${common[@]}" > "$TMP/two.jsonl"
t1=$(date +%s.%N)
"$BIN/frameworm-train" --nprocs 1 --batch-size 128 "${common[@]}" > "$TMP/one.jsonl"
t2=$(date +%s.%N)
python3 -c "print($t1 - $t0)" > "$TMP/t2"
python3 -c "print($t2 - $t1)" > "$TMP/t1"
python3 - "$TMP" "$OUT" "$EPOCHS" <<'PY'
import json, os, subprocess, sys
tmp, out, epochs = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    ev = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if l.startswith("{")]
    return [e for e in ev if e.get("event") == "epoch"], [e for e in ev if e.get("event") == "done"][-1]
e2, d2 = load("two"); e1, d1 = load("one")
t2 = float(open(f"{tmp}/t2").read().split()[-1]); t1 = float(open(f"{tmp}/t1").read().split()[-1])
from benchlib import cpu_model; cpu = cpu_model()
L = ["# P7: CNN test accuracy, 2 ranks vs 1 rank", "",
     f"Command: `bench/p7_accuracy.sh` (P7_EPOCHS={epochs}); Fashion-MNIST test split (10,000 images), seed 42, SGD lr 0.05 momentum 0.9",
     f"Machine: {os.cpu_count()} cores, {cpu}; 1 thread per rank", "",
     "| epoch | 2 ranks x batch 64: test accuracy | 1 rank x batch 128: test accuracy |", "|---|---|---|"]
for a, b in zip(e2, e1):
    L.append(f"| {a['epoch']} | {100*a['val_accuracy']:.2f}% | {100*b['val_accuracy']:.2f}% |")
diff = abs(d2["val_accuracy"] - d1["val_accuracy"]) * 100
L += ["", f"Final: 2 ranks {100*d2['val_accuracy']:.2f}% in {t2:.0f} s, 1 rank {100*d1['val_accuracy']:.2f}% in {t1:.0f} s; difference {diff:.2f} points.",
      "Targets: >= 91%, the two within 0.3 points."]
from benchlib import write_report; write_report(out, L)
PY
