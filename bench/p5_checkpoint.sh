#!/usr/bin/env bash
# P5 (issue #10): how long a checkpoint blocks training. A synthetic model of
# P5_MIB MiB of parameters (default 512; SGD with momentum, so the file is
# about twice that) saved P5_TRIALS times (default 5) synchronously and
# asynchronously in one process (p5_checkpoint), and `dd conv=fdatasync` of
# the same size on the same disk (P5_DIR, default a directory under
# $TMPDIR or /tmp), in the same run; then the asynchronous saves again with
# every copy made before the call returns (--copy-during-step=false).
# Ratios: asynchronous blocking / synchronous blocking (target <= 5%), the
# whole cost to the next training step / synchronous blocking, background
# write throughput / dd (target >= 80%). Writes bench/results/p5_checkpoint.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MIB="${P5_MIB:-512}"
TRIALS="${P5_TRIALS:-5}"
OUT="$RESULTS/p5_checkpoint.md"
need "$BIN/p5_checkpoint"
DIR="${P5_DIR:-$TMP/ckpt}"
mkdir -p "$DIR"
"$BIN/p5_checkpoint" --dir="$DIR" --mib="$MIB" --trials="$TRIALS" | tee "$TMP/p5.jsonl"
# The same with every copy made before save_checkpoint_async returns.
"$BIN/p5_checkpoint" --dir="$DIR" --mib="$MIB" --trials="$TRIALS" --copy-during-step=false |
  tee "$TMP/p5-before.jsonl"
bytes=$(python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if 'summary' in l][0]['bytes'])" "$TMP/p5.jsonl")
count=$(( (bytes + 1048575) / 1048576 ))
: > "$TMP/dd.txt"
for i in $(seq 1 3); do
  # dd's last line: "N bytes (...) copied, S s, R MB/s"
  dd if=/dev/zero of="$DIR/dd.bin" bs=1M count="$count" conv=fdatasync 2>&1 | tail -1 >> "$TMP/dd.txt"
  rm -f "$DIR/dd.bin"
done
cat "$TMP/dd.txt" >&2
fs=$(df -T "$DIR" | awk 'NR==2 {print $1" ("$2")"}')
python3 - "$TMP/p5.jsonl" "$TMP/dd.txt" "$OUT" "$MIB" "$TRIALS" "$fs" "$TMP/p5-before.jsonl" <<'PY'
import re, sys
from benchlib import json_lines, machine, median, write_report
rows = json_lines(sys.argv[1])
trials = [r for r in rows if not r.get("summary")]
s = [r for r in rows if r.get("summary")][0]
dd = []
for line in open(sys.argv[2]):
    m = re.match(r"(\d+) bytes .* copied, ([0-9.]+) s", line)
    if m: dd.append(int(m.group(1)) / float(m.group(2)) / 2**20)
out, mib, ntrials, fs = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
before = json_lines(sys.argv[7])
bt = [r for r in before if not r.get("summary")]
bs = [r for r in before if r.get("summary")][0]
mb = s["bytes"] / 2**20
write_mib_s = [r["bytes"] / 2**20 / r["async_write_s"] for r in trials]
sync_mib_s = [r["bytes"] / 2**20 / r["sync_block_s"] for r in trials]
block_ratio = median(r["async_block_s"] / r["sync_block_s"] for r in trials)
dd_med = median(dd)
L = ["# P5: checkpoint blocking time, synchronous vs asynchronous", "",
     f"Command: `bench/p5_checkpoint.sh` (P5_MIB={mib}, P5_TRIALS={ntrials})",
     f"Machine: {machine()}; disk: {fs}.", "",
     f"Model: {s['layers']} Linear(2048, 2048) layers, {s['param_mib']} MiB of float parameters, "
     f"SGD with momentum (as much optimizer state again); checkpoint file {mb:.0f} MiB. "
     "One process, one torch thread; each trial saves the same state synchronously "
     "(`save_checkpoint`: snapshot by reference, serialize, CRC-32, write, fsync, rename) and "
     "asynchronously (`save_checkpoint_async`, the default: it copies buffers and the RNG state and "
     "returns; the background thread copies parameters and optimizer state "
     f"({s['snapshot_threads']} copy threads) while the next training step ({s['batch']} rows, "
     f"{s['step_s']:.3f} s without a save) runs its forward and backward, that step's optimizer update "
     "waiting for the copy if it is not done, then serializes and writes, timed until the file is "
     "durable). Async blocks = the call + the optimizer update's wait for the copy; async cost = the "
     "call + how much longer that step took than the one before it (the background copy and write "
     "share the 2 cores and the memory with it). The first asynchronous save, which allocates the "
     f"snapshot memory, took {s['first_async_block_s']:.3f} s to copy and is not in the trials.", "",
     "| trial | sync blocks (s) | async blocks (s) | ratio | async cost (s) | cost ratio | background write (s) | write MiB/s |",
     "|---|---|---|---|---|---|---|---|"]
for r, w in zip(trials, write_mib_s):
    L.append(f"| {r['trial']} | {r['sync_block_s']:.3f} | {r['async_block_s']:.4f} | "
             f"{r['async_block_s'] / r['sync_block_s']:.4f} | {r['async_cost_s']:.3f} | "
             f"{r['async_cost_s'] / r['sync_block_s']:.3f} | {r['async_write_s']:.3f} | {w:.0f} |")
cost_ratio = median(r["async_cost_s"] / r["sync_block_s"] for r in trials)
b_block = median(r["async_block_s"] / r["sync_block_s"] for r in bt)
b_cost = median(r["async_cost_s"] / r["sync_block_s"] for r in bt)
L += ["", f"`dd if=/dev/zero bs=1M count={round(mb)} conv=fdatasync` on the same directory, 3 runs: "
      + ", ".join(f"{x:.0f}" for x in dd) + f" MiB/s (median {dd_med:.0f}).", "",
      "## Verdicts", "",
      f"- **Blocking, async / sync: {block_ratio:.4f}** (median of the per-trial ratios; target <= 0.05): "
      f"median {s['async_block_s']:.4f} s against {s['sync_block_s']:.3f} s. With everything copied "
      f"before the call returns (`checkpoint_copy_during_step` false, same run): {b_block:.3f} "
      f"({bs['async_block_s']:.3f} s).",
      f"- **Whole cost to training, async / sync: {cost_ratio:.3f}** (median; the blocking plus the next "
      f"step's slowdown while the copy and the write share the machine): median {s['async_cost_s']:.3f} s. "
      f"Copied before the call returns: {b_cost:.3f} ({bs['async_cost_s']:.3f} s).",
      f"- **Background write throughput / dd: {median(write_mib_s) / dd_med:.2f}** (target >= 0.80): "
      f"median {median(write_mib_s):.0f} MiB/s (the deferred copy, serialize, CRC-32, write, fsync, rename, "
      f"while a training step runs beside it) against dd's {dd_med:.0f} MiB/s. "
      f"The synchronous save moves {median(sync_mib_s):.0f} MiB/s.",
      f"- Noise: this disk's speed varies from one write to the next (dd {min(dd):.0f}-{max(dd):.0f} MiB/s, "
      f"background writes {min(write_mib_s):.0f}-{max(write_mib_s):.0f} MiB/s, synchronous saves "
      f"{min(r['sync_block_s'] for r in trials):.2f}-{max(r['sync_block_s'] for r in trials):.2f} s): "
      "the ratios are of medians over noisy figures; rerun before reading a few percent into them."]
write_report(out, L)
PY
