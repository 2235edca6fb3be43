#!/usr/bin/env bash
# P1: step time of frameworm-train against the same model in Python DDP
# under torchrun (the .venv torch), same data, seed and per-rank batch, in
# one run, alternating the two. Gloo, 1 thread per rank. Also the 1-rank
# step (scaling), two 1-rank runs side by side (what sharing the machine
# alone costs a step), the 2-rank step's allreduce wait, and both loss
# curves side by side.
# Writes bench/results/p1_step_time.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS="${P1_RUNS:-3}"
SEED=42
OUT="$ROOT/bench/results/p1_step_time.md"
port=$((29800 + RANDOM % 100))
for run in $(seq 1 "$RUNS"); do
  for model in cnn mlp; do
    steps=$([ "$model" = cnn ] && echo 80 || echo 300)
    for world in 1 2; do
      port=$((port + 1))
      "$BIN/frameworm-train" --nprocs "$world" --model "$model" --dataset fashion-mnist \
        --batch-size 64 --max-steps "$steps" --seed "$SEED" --threads 1 --backend gloo \
        --log-every 1 --checkpoint-dir "$TMP/ck" > "$TMP/fw-$model-$world-$run.jsonl"
      "$ROOT/.venv/bin/torchrun" --nproc_per_node="$world" --master_port="$port" \
        "$ROOT/bench/peer_ddp.py" --model "$model" --batch-size 64 --max-steps "$steps" \
        --seed "$SEED" --threads 1 > "$TMP/py-$model-$world-$run.jsonl" 2>/dev/null
    done
    # Two independent 1-rank runs at once: each has one core, as a rank of
    # the 2-rank job has, and there is no allreduce. Ten times the steps, so
    # that their steady parts overlap: 300 MLP steps take about 0.3 s, less
    # than the two processes' start-up times differ.
    co_steps=$([ "$model" = cnn ] && echo "$steps" || echo $((steps * 10)))
    for k in a b; do
      "$BIN/frameworm-train" --nprocs 1 --model "$model" --dataset fashion-mnist \
        --batch-size 64 --max-steps "$co_steps" --epochs 10 --seed "$SEED" --threads 1 --backend gloo \
        --log-every 1 --checkpoint-dir "$TMP/ck-$k" > "$TMP/co-$model-$k-$run.jsonl" &
    done
    wait
  done
done
"$PY" - "$TMP" "$RUNS" "$OUT" <<'PY'
import json, os, statistics, subprocess, sys
tmp, runs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def steps(path):
    rows = []
    for line in open(path):
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if d.get("event", "step") == "step" and "step_seconds" in d:
            rows.append(d)
    return rows
def median_step(path, key="step_seconds"):
    rows = steps(path)[5:]  # the first steps warm up
    return statistics.median(r.get(key, 0.0) for r in rows)
from benchlib import cpu_model; cpu = cpu_model()
torch_v = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True).stdout.strip()
res = {}
for model in ("cnn", "mlp"):
    for world in (1, 2):
        fw = [median_step(f"{tmp}/fw-{model}-{world}-{r}.jsonl") for r in range(1, runs + 1)]
        py = [median_step(f"{tmp}/py-{model}-{world}-{r}.jsonl") for r in range(1, runs + 1)]
        res[(model, world)] = (statistics.median(fw), statistics.median(py),
                               statistics.median(f / p for f, p in zip(fw, py)))
L = ["# P1: step time, frameworm-train vs Python DDP (torchrun)", "",
     f"Command: `bench/p1_step_time.sh` ({runs} runs, alternating; per run the median step after 5 warm-up steps; the table gives medians over runs)",
     f"Machine: {os.cpu_count()} cores, {cpu}; torch {torch_v}; Gloo over loopback, 1 intra-op thread per rank, batch 64 per rank, seed 42, Fashion-MNIST", "",
     "| model | ranks | frameworm step (ms) | Python DDP step (ms) | ratio (frameworm / Python) |", "|---|---|---|---|---|"]
for (model, world), (f, p, r) in res.items():
    L.append(f"| {model} | {world} | {f*1000:.2f} | {p*1000:.2f} | {r:.3f} |")
for model in ("cnn", "mlp"):
    one, two = res[(model, 1)][0], res[(model, 2)][0]
    co = statistics.median(statistics.mean(median_step(f"{tmp}/co-{model}-{k}-{r}.jsonl") for k in "ab")
                           for r in range(1, runs + 1))
    # A 2-rank step waits for the slower rank: the slower of the two.
    co_slow = statistics.median(max(median_step(f"{tmp}/co-{model}-{k}-{r}.jsonl") for k in "ab")
                                for r in range(1, runs + 1))
    wait = statistics.median(median_step(f"{tmp}/fw-{model}-2-{r}.jsonl", "wait_seconds")
                             for r in range(1, runs + 1))
    L.append("")
    L.append(f"{model}: 2-rank step / 1-rank step (frameworm) = {two/one:.3f}; two 1-rank runs side by side "
             f"step {co*1000:.2f} ms ({co/one:.3f} of one alone), so the 2-rank step is {two/co:.3f} of a step "
             f"that shares the machine the same way; the slower of the two steps {co_slow*1000:.2f} ms "
             f"({co_slow/one:.3f} of one alone; the 2-rank step is {two/co_slow:.3f} of it); of the 2-rank step, "
             f"{wait*1000:.2f} ms is the gradient allreduce and the wait for the other rank (`wait_seconds`)")
    per_run = [median_step(f"{tmp}/fw-{model}-2-{r}.jsonl") / median_step(f"{tmp}/fw-{model}-1-{r}.jsonl")
               for r in range(1, runs + 1)]
    L.append("")
    L.append(f"{model}: 2-rank / 1-rank step per run, in run order: " + ", ".join(f"{x:.3f}" for x in per_run))
L += ["", "Targets: cnn ratio <= 1.0, mlp ratio <= 0.7, 2-rank step within 10% of the 1-rank step, loss curves equal within 1e-4 relative.", "",
      "Paths: with both ranks on this machine frameworm-train averages gradients through its intra-node",
      "shared-memory allreduce (train/shm_allreduce.h; its start line says \"gradient_allreduce\":\"shm\"),",
      "Python DDP through Gloo over loopback. `FRAMEWORM_NO_SHM=1 bench/p1_step_time.sh` puts frameworm on Gloo too.",
      "The gradient buckets lie in the shared-memory segment: each gradient is copied into its bucket once as",
      "autograd hands it over, and the allreduce sums each rank's half where the buckets lie (P2's shm-inplace:",
      "0.12 ms for the MLP's 0.94 MB), so a 2-rank MLP step moves about 2.4 MB more per rank than a 1-rank one.",
      "Some runs of the 2-rank MLP job take 1.5-1.6 ms a step instead of 1.1, every step alike, rank 0 waiting",
      "a steady 0.22-0.4 ms for rank 1; 1-rank runs alone or side by side between them are not slowed. Pinning",
      "the ranks to separate CPUs does not prevent it and there are no page faults per step; the cause is not",
      "found. The per-run ratios show which runs met it.",
      "Where the 2-rank MLP step's extra time went before 2026-12-05's two changes (perf record -F 4999 of one",
      "rank for 1.5 s, 1-rank against 2-rank, samples per step; steps 0.990 and 1.112 ms): the allreduce's copy",
      "of the other rank's half out of its buffer (memmove, +32 us), the hook's copy of each gradient into its",
      "bucket (+26 us), the summing (+12 us), about +65 us off the CPU (barrier waits and preemptions), while",
      "the model's own kernels cost the same. Since then the hook copies only the part of a gradient that the",
      "other rank sums (this rank's own share is read where autograd left it), and each rank writes its share's",
      "mean into both buffers as it sums (no copy-out, two barriers instead of three): in alternating rounds",
      "the 2-rank step went 1.101 -> 1.086 -> 1.050 ms. A bare cross-core read of 1 MiB that the other core",
      "just wrote takes 37-40 us in some runs and 60-70 us in others on this machine (a pthread ping-pong",
      "test, six runs in a row): the slow state is consistent with that.",
      "Measured again after those changes (2026-12-05, on a 2-core AMD EPYC family 26 VM; `perf record -a",
      "-F 2999` over 4 s of steady training, 1-rank against 2-rank, samples per rank and step; steps 0.760 and",
      "0.824 ms): waiting in the two barriers (spinning, sched_yield and the scheduler) +29 us per rank, about",
      "the same on both ranks, so it is the jitter of each rank's own step (its p10-p90 spread alone is 180 us)",
      "with the slower of the two setting the pace; the hook's copy +11 us, the sum +10.5 us, the hooks' mutex",
      "+2.7 us, the GEMMs +3.7 us (two busy cores sharing the cache). Streaming (non-temporal) stores for the",
      "mean written into the other rank's buffer measured 1.103 against 1.118 in 8 alternating rounds, within",
      "the spread, and were not kept.",
      "Tried on 2026-12-05 and not kept: splitting the SGD update across the ranks (ZeRO-1 style: each rank",
      "updated its share of every bucket from its share's mean, wrote the new values into the other rank's",
      "shared region, one barrier, copied the other share out; momentum kept in the region and pulled by rank 0",
      "before a checkpoint). It was bit-for-bit equal to the whole update (same losses to the last digit over",
      "300 steps, tests with weight decay, Nesterov, dampening and an asynchronous checkpoint resumed) but",
      "measured 1.079 against 1.077 for the unsplit build in 8 alternating rounds (1.102 against 1.071 in 8",
      "more): the whole SGD update is only about 1.7% of the 2-rank step's samples (about 14 us), so halving it",
      "is smaller than the copy of the other share it adds. The GEMMs are 63% of the samples.",
      "The 2-rank/1-rank MLP ratio of the whole P1 run (median of its runs) on the same training code",
      "(since 2026-12-05's in-place allreduce), one P1 run per line in time order: 1.102, 1.131, 1.065, 1.147,",
      "then 1.060 on 2026-12-05 in the evening (a quiet machine) and 1.092 on 2026-12-05 later",
      "(the RPC hardening since: no training code changed): the 1.10 target is met in some runs and",
      "not in others; this machine's run-to-run spread is as large as what is left to gain.",
      "On 2026-12-05/06 the runs moved to a 2-core Intel Xeon VM, slower and noisier (a 1-rank MLP step",
      "0.89-1.46 ms between runs and within one): 1.510, then 1.093 an hour later (both with the launcher",
      "no longer waking every 5 ms, no training code changed; between them the MLP side-by-side runs were",
      "made long enough to overlap: they were 0.3 s each, less than their start-up skew). On that VM two busy processes slow each other",
      "unevenly: in two 3,000-step 1-rank runs at once, one ran at 1.48 ms while the other ran at 0.95,",
      "then the other way round, so a 2-rank job, paced by its slower rank, is compared with the slower",
      "of the two side-by-side runs too. On 2026-12-06, the same VM quiet (a 1-rank MLP step 0.72 ms, the CNN",
      "21.4 ms, two 1-rank runs side by side 1.006 of one alone): 1.139, every run 1.095-1.164, the same",
      "training code. So the gap is not this VM's noise alone: `perf record -a -g -F 2999` over 3 s of",
      "steady training (1-rank 0.765 ms, 2-rank 0.845 ms a step; samples per rank and step) puts +44 us",
      "in the sum (AddPairIntoBothScaled: this rank's half read where autograd left it and the peer's",
      "addend read from its region, the mean written into both regions) and +13 us in the hook's copy of",
      "the peer's half into the region, +8 us in the barriers; the GEMMs +4 us. The sum moves what any",
      "allreduce of two ranks must: each line of the 0.94 MB crosses between the cores twice (the peer's",
      "addend here, the mean back); .grad is already the bucket's slice (no copy back). Fetching the",
      "peer's lines for writing 4 KiB ahead (PREFETCHW, so that reading then writing a line the peer wrote",
      "is one exchange between the cores, not two) made the 2-rank step 1.019 of the step without it",
      "(median of 8 alternating rounds, 0.820 against 0.804 ms): not kept. Spinning 4,096 pauses in a",
      "barrier before yielding the CPU instead of 256 (fewer sched_yield calls): 1.001, not kept.",
      "On 2026-12-06 (second session; 1-rank 0.765 ms, 2-rank 0.856 ms, 1.119 in 5 alternating rounds):",
      "CLDEMOTE (this CPU has it) of the lines the other rank reads next, after the hook's copy and after",
      "the mean written into its region, made the 2-rank step slower: 1.036 (after the sum), 1.033 (after",
      "the copy), 1.082 (both) of the step without it, 6 alternating rounds each: a line the peer fetches",
      "from the shared L3 costs more here than one it snoops from this core's L2. Each rank computing the",
      "whole mean into its own gradients (the hook copies the whole gradient into the region, each rank",
      "reads the other's whole region; no write into the peer's region, .grad stays autograd's tensor,",
      "the same losses to the last digit) measured 1.007 of the present scheme, and 1.005 with one barrier",
      "instead of two (unsafe without double buffering): the cross-core traffic is already at its floor.",
      ""]
for model in ("cnn", "mlp"):
    fw = steps(f"{tmp}/fw-{model}-2-1.jsonl")
    py = steps(f"{tmp}/py-{model}-2-1.jsonl")
    n = min(len(fw), len(py))
    rel = [abs(fw[i]["loss"] - py[i]["loss"]) / abs(py[i]["loss"]) for i in range(n)]
    L.append(f"## Loss curves, {model}, 2 ranks (rank 0's loss), run 1")
    L.append(f"Max relative difference over {n} steps: {max(rel):.2e}")
    L.append("")
    L.append("| step | frameworm loss | Python DDP loss | relative difference |")
    L.append("|---|---|---|---|")
    for i in list(range(0, n, max(1, n // 10))) + [n - 1]:
        L.append(f"| {fw[i]['step']} | {fw[i]['loss']:.7f} | {py[i]['loss']:.7f} | {rel[i]:.1e} |")
    L.append("")
from benchlib import write_report; write_report(out, L)
PY
