#!/usr/bin/env bash
# P5 (issue #10): how long a checkpoint blocks training. A synthetic model of
# P5_MIB MiB of parameters (default 512; SGD with momentum, so the file is
# about twice that) saved P5_TRIALS times (default 5) synchronously and
# asynchronously in one process (p5_checkpoint), and `dd conv=fdatasync` of
# the same size on the same disk (P5_DIR, default a directory under
# $TMPDIR or /tmp), in the same run. Ratios: asynchronous blocking /
# synchronous blocking (target <= 5%), background write throughput / dd
# (target >= 80%). Writes bench/results/p5_checkpoint.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MIB="${P5_MIB:-512}"
TRIALS="${P5_TRIALS:-5}"
OUT="$RESULTS/p5_checkpoint.md"
need "$BIN/p5_checkpoint"
DIR="${P5_DIR:-$TMP/ckpt}"
mkdir -p "$DIR"
"$BIN/p5_checkpoint" --dir="$DIR" --mib="$MIB" --trials="$TRIALS" | tee "$TMP/p5.jsonl"
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
python3 - "$TMP/p5.jsonl" "$TMP/dd.txt" "$OUT" "$MIB" "$TRIALS" "$fs" <<'PY'
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
     "(`save_checkpoint`: snapshot by reference, serialize, CRC-32, write, fsync, rename) and then "
     "asynchronously (`save_checkpoint_async`: blocks while the state is copied into the "
     f"snapshot's memory, {s['snapshot_threads']} copy threads; the rest runs in the background, "
     "timed until the file is durable). The first asynchronous save, which allocates the snapshot "
     f"memory, blocked {s['first_async_block_s']:.3f} s and is not in the trials.", "",
     "| trial | sync blocks (s) | async blocks (s) | ratio | background write (s) | write MiB/s |",
     "|---|---|---|---|---|---|"]
for r, w in zip(trials, write_mib_s):
    L.append(f"| {r['trial']} | {r['sync_block_s']:.3f} | {r['async_block_s']:.3f} | "
             f"{r['async_block_s'] / r['sync_block_s']:.3f} | {r['async_write_s']:.3f} | {w:.0f} |")
L += ["", f"`dd if=/dev/zero bs=1M count={round(mb)} conv=fdatasync` on the same directory, 3 runs: "
      + ", ".join(f"{x:.0f}" for x in dd) + f" MiB/s (median {dd_med:.0f}).", "",
      "## Verdicts", "",
      f"- **Blocking, async / sync: {block_ratio:.3f}** (median of the per-trial ratios; target <= 0.05): "
      f"median {s['async_block_s']:.3f} s against {s['sync_block_s']:.3f} s.",
      f"- **Background write throughput / dd: {median(write_mib_s) / dd_med:.2f}** (target >= 0.80): "
      f"median {median(write_mib_s):.0f} MiB/s (serialize, CRC-32, write, fsync, rename) against dd's {dd_med:.0f} MiB/s. "
      f"The synchronous save moves {median(sync_mib_s):.0f} MiB/s.",
      f"- Noise: this disk's speed varies from one write to the next (dd {min(dd):.0f}-{max(dd):.0f} MiB/s, "
      f"background writes {min(write_mib_s):.0f}-{max(write_mib_s):.0f} MiB/s, synchronous saves "
      f"{min(r['sync_block_s'] for r in trials):.2f}-{max(r['sync_block_s'] for r in trials):.2f} s): "
      "the ratios are of medians over noisy figures; rerun before reading a few percent into them."]
write_report(out, L)
PY
