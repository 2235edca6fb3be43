#!/usr/bin/env bash
# P2: allreduce of 0.94 (the MLP's gradients), 4, 25 and 100 MB between 2
# ranks, over Gloo (TCP loopback) and over the intra-node shared-memory
# allreduce that frameworm-train uses when all ranks are local (through
# its slots, and in place in the shared region as gradients are): bus
# bandwidth against the same ring bound, B = loopback TCP bandwidth
# measured in the same run. P2_BASELINE=<another build's allreduce_bench>
# runs it too, alternating, and adds its shm rows as "shm (baseline)".
# Writes bench/results/p2_allreduce.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS="${P2_RUNS:-3}"
OUT="$ROOT/bench/results/p2_allreduce.md"
PORT=$((29700 + RANDOM % 200))
BASELINE="${P2_BASELINE:-}"
if [ -n "$BASELINE" ] && [ ! -x "$BASELINE" ]; then
  echo "p2_allreduce: P2_BASELINE '$BASELINE' is not an executable allreduce_bench" >&2
  exit 2
fi
for run in $(seq 1 "$RUNS"); do
  for kind in current ${BASELINE:+baseline}; do
    bin="$BIN/allreduce_bench"
    [ "$kind" = baseline ] && bin="$BASELINE"
    PORT=$((PORT + 1))
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        "$bin" > "$TMP/$kind-run$run-rank$r.jsonl" &
    done
    wait
  done
done
python3 - "$TMP" "$RUNS" "$OUT" <<'PY'
import json, statistics, sys, glob, platform, os, subprocess
tmp, runs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for kind in ("current", "baseline"):
    for f in sorted(glob.glob(f"{tmp}/{kind}-run*-rank0.jsonl")):
        for line in open(f):
            d = json.loads(line)
            path = d.get("path", "gloo")
            if kind == "baseline":
                if path != "shm":
                    continue
                path = "shm (baseline)"
            rows.setdefault((path, d["bytes"]), []).append(d)
from benchlib import cpu_model; cpu = cpu_model()
lines = ["# P2: allreduce bus bandwidth, 2 ranks: Gloo over loopback and intra-node shared memory", "",
         f"Command: `bench/p2_allreduce.sh` ({runs} runs, each 7 timed allreduces per size; medians)",
         f"Machine: {os.cpu_count()} cores, {cpu}", "",
         "| path | size | median time (ms) | bus bandwidth (Gbit/s) | loopback TCP (Gbit/s) | efficiency vs ring bound |",
         "|---|---|---|---|---|---|"]
for key in sorted(rows):
    path, b = key
    rs = rows[key]
    t = statistics.median(r["median_s"] for r in rs)
    bus = statistics.median(r["bus_gbps"] for r in rs)
    lb = statistics.median(r["loopback_gbps"] for r in rs)
    eff = statistics.median(r["efficiency"] for r in rs)
    lines.append(f"| {path} | {b/1e6:g} MB | {t*1e3:.3f} | {bus:.2f} | {lb:.2f} | {eff*100:.0f}% |")
lines += ["", "Target: >= 70% of the ring bound 2(n-1)/n * S / B.", "",
          "Reading: B is one TCP stream with a sender on one core and a receiver on the other.",
          "gloo: in a 2-rank allreduce each rank both sends and receives S bytes through the kernel and",
          "adds S/2 floats, so with only 2 cores the copies alone bound the bus bandwidth near B/2",
          "(50% of the ring bound) before Gloo's own threads and chunking; Python DDP (P1) uses this path.",
          "shm: frameworm-train's default when every rank is on this machine (ShmAllreduce, 256 KiB",
          "slots, larger tensors in chunks): each rank copies the half the other sums into its slot, sums",
          "its own half (read in place) with the other's slot into a result area with vectorized loops,",
          "and copies the other half of the result back, with no kernel crossing; the same bound is kept",
          "as the yardstick so the two rows compare directly.",
          "shm-inplace: how frameworm-train's gradient buckets are summed (they lie in each rank's shared",
          "region): each rank sums its half reading the other rank's buffer where it lies and writes the mean",
          "into both ranks' buffers as it goes: no copy in, no copy out, no result area, two barriers."]
if any(p == "shm (baseline)" for p, _ in rows):
    lines += ["", f"shm (baseline): `P2_BASELINE={os.environ.get('P2_BASELINE', '')}`, run alternately with this build in each run."]
from benchlib import write_report; write_report(out, lines)
PY
