"""gpu_report.py WORK OUT COPY: bench/gpu.sh's report from what its steps left
in the work folder (environment FW_MODE, FW_BATCH, FW_STEPS, FW_WARMUP,
FW_FINAL)."""
import glob, json, os, statistics, sys
work, out_path, copy_path = sys.argv[1], sys.argv[2], sys.argv[3]
mode, batch, steps, warmup = os.environ["FW_MODE"], int(os.environ["FW_BATCH"]), int(os.environ["FW_STEPS"]), int(os.environ["FW_WARMUP"])
final = os.environ.get("FW_FINAL") == "1"
gpu = mode == "gpu"

def read(path, default=""):
    try:
        return open(path).read()
    except OSError:
        return default

env = {}
for line in read(f"{work}/env.summary").splitlines():
    k, _, v = line.partition("=")
    env[k] = v.strip()
rows = [l.split("\t") for l in read(f"{work}/steps.tsv").splitlines() if l.strip()]
L = []
if gpu:
    L += ["# GPU check: NCCL tests and single-GPU throughput, frameworm-train vs Python", ""]
    L += ["Command: `bench/gpu.sh` on the GPU machine, the Debian packages carried in `.debs/`"
          " (bench/gpu_debs.sh) and unpacked under " + os.environ["FW_PREFIX"] + "; its log is gpu.log beside this report.", ""]
else:
    L += ["# GPU check rehearsal on the CPU machine", ""]
    L += ["Command: `bench/gpu.sh --rehearse` (as root): the GPU run's steps in a private mount namespace in which"
          " every file that the carried packages install is hidden under /usr (overlay whiteouts; "
          + read(f"{work}/hidden.count", "?").strip() + " files, the runtime libraries of zlib1g, libssl3 and libsqlite3-0 kept),"
          " so the build sees only the prefix unpacked from `.debs/` (" + os.environ["FW_PREFIX"] + "), the CUDA toolkit in /usr/local/cuda"
          " and " + os.environ["FW_PY"] + "'s torch, as on the GPU machine. No GPU: the NCCL tests skip, the benchmarks run briefly on the CPU."
          " Log: build-rehearse/out/rehearsal.log.", ""]
machine = [("GPU", env.get("gpu") or "none"), ("CPU", env.get("cpu", "?")), ("OS", env.get("os", "?")),
           ("kernel", env.get("kernel", "?")), ("glibc", env.get("glibc", "?")), ("compiler", env.get("compiler", "?")),
           ("CUDA compiler", env.get("nvcc", "?")), ("CMake", env.get("cmake", "?")), ("torch", env.get("torch", "?"))]
L += ["Machine: " + "; ".join(f"{k}: {v}" for k, v in machine if v), ""]
ok = [r for r in rows if r[1] in ("passed",)]
bad = [r for r in rows if r[1] in ("failed", "timed out")]
other = [r for r in rows if r[1] not in ("passed", "failed", "timed out")]
total_s = sum(float(r[3] or 0) for r in rows)
status = "finished" if final else "IN PROGRESS (this report is rewritten after every step)"
L += [f"Run {status}: {len(rows)} steps ran or were skipped in {total_s:.0f} s; {len(ok)} passed, {len(bad)} failed"
      + (" (" + ", ".join(r[0] for r in bad) + ")" if bad else "")
      + (f", {len(other)} skipped or not run" if other else "") + ".", ""]
L += ["## Steps", "", "| step | result | exit code | seconds | note |", "|---|---|---|---|---|"]
for r in rows:
    r = (r + ["", "", "", "", ""])[:5]
    L.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |")
L.append("")

tests = sorted(glob.glob(f"{work}/tests/*.summary"))
if tests:
    L += ["## NCCL-labelled tests", ""]
    L += ["With `FRAMEWORM_REQUIRE_CUDA=1` (the GPU run) a test without a GPU fails instead of skipping, and gpu.sh"
          " counts any skip as a failure." if gpu else
          "No GPU here, so the GPU tests skip (the GPU run sets `FRAMEWORM_REQUIRE_CUDA=1`, which makes that a failure);"
          " the CPU-side test of the autocast wrapper runs.", ""]
    L += ["| binary | passed | skipped | failed |", "|---|---|---|---|"]
    for t in tests:
        f = read(t).split()
        if len(f) == 4:
            L.append(f"| {f[0]} | {f[1]} | {f[2]} | {f[3]} |")
    for t in tests:
        name = os.path.basename(t)[:-len(".summary")]
        lines = [l.split(": ", 1)[-1] if l[:1].isdigit() and ": " in l[:6] else l
                 for l in read(f"{work}/tests/{name}.out").splitlines()]
        keep, seen = [], set()
        for i, l in enumerate(lines):
            if ((l.startswith(("[       OK", "[  FAILED", "[  SKIPPED ]")) and l.endswith(" ms)"))
                    or l.startswith("fp32:")):
                pick = [l]
            elif l.endswith(": Failure"):
                pick = [l] + lines[i + 1:i + 3]
            else:
                continue
            key = "\n".join(pick)
            if key not in seen:
                seen.add(key)
                keep += pick
        if keep:
            L += ["", f"{name}:", "```"] + keep[:40] + ["```"]
    L.append("")

def load(kind, model):
    path = f"{work}/bench/{kind}-{model}.tsv"
    if not os.path.exists(path):
        return None
    rows = []
    for line in open(path, errors="replace"):
        t, _, rest = line.partition("\t")
        rest = rest.strip()
        if not rest.startswith("{"):
            continue
        try:
            j = json.loads(rest)
        except ValueError:
            continue
        if "step_seconds" in j and j.get("event", "step") == "step":
            rows.append((float(t), int(j["step"]), float(j["step_seconds"])))
    after = [r for r in rows if r[1] > warmup]
    start = [r for r in rows if r[1] == warmup]
    if len(after) < 3 or not start:
        return {"steps": len(rows)}
    med = statistics.median(r[2] for r in after)
    span = after[-1][0] - start[0][0]
    return {"steps": len(rows), "median_ms": med * 1e3, "img_med": batch / med,
            "img_wall": (after[-1][1] - warmup) * batch / span if span > 0 else float("nan")}

models = ("cnn", "mlp")
res = {(k, m): load(k, m) for k in ("fw", "py", "fwddp", "pyddp") for m in models}
if any(res.values()):
    dev = "GPU" if gpu else "CPU (rehearsal: checks the commands and the arithmetic, not a measurement)"
    L += ["## Throughput, like for like", ""]
    L += [f"Device: {dev}. Both sides: the same model (same layers and initial weights for seed 42), Fashion-MNIST in memory,"
          f" batch {batch}, {steps} steps, all full batches inside one epoch (no evaluation or epoch boundary in the window),"
          f" 4 intra-op threads, the first {warmup} steps excluded as warm-up. Both wait on the device at the same two points"
          " per step (loss and accuracy read back after backward, then the optimizer step: `peer_ddp.py --frameworm-syncs`"
          " does what frameworm-train's step does). *wall img/s*: images between the last warm-up step's output line and the"
          " last step's, over the time between their arrival (everything counted: batching, logging); *median*: of the steps'"
          " own timers (host-to-device copy to optimizer step).", ""]
    L += ["| model | frameworm img/s (wall) | Python img/s (wall) | frameworm / Python | frameworm median step (ms) | Python median step (ms) | steps (fw / py) |",
          "|---|---|---|---|---|---|---|"]
    for m in models:
        f, p = res[("fw", m)], res[("py", m)]
        if not f or not p or "img_wall" not in f or "img_wall" not in p:
            L.append(f"| {m} | {f and f.get('img_wall', 'n/a')} | {p and p.get('img_wall', 'n/a')} | n/a | | | {f and f['steps']} / {p and p['steps']} |")
            continue
        L.append(f"| {m} | {f['img_wall']:.0f} | {p['img_wall']:.0f} | {f['img_wall'] / p['img_wall']:.2f}x |"
                 f" {f['median_ms']:.3f} | {p['median_ms']:.3f} | {f['steps']} / {p['steps']} |")
    L += ["", "DDP overhead at world size 1: the same run under WORLD_SIZE=1 (frameworm-train's DistributedTrainer with its"
          f" reducer over {os.environ['FW_DDP_BACKEND']}; Python: DistributedDataParallel), against the single process. Target: at most 3% for frameworm-train.", ""]
    L += ["| model | frameworm single img/s | frameworm DDP img/s | overhead (wall) | overhead (median step) | Python DDP overhead (wall) |",
          "|---|---|---|---|---|---|"]
    for m in models:
        f, d, p, pd = res[("fw", m)], res[("fwddp", m)], res[("py", m)], res[("pyddp", m)]
        def ov(a, b, key):
            if not a or not b or key not in a or key not in b:
                return "n/a"
            return f"{(a[key] / b[key] - 1) * 100:+.1f}%"
        if f and d and "img_wall" in f and "img_wall" in d:
            L.append(f"| {m} | {f['img_wall']:.0f} | {d['img_wall']:.0f} | {ov(f, d, 'img_wall')} | {ov(f, d, 'img_med')} | {ov(p, pd, 'img_wall')} |")
        else:
            L.append(f"| {m} | n/a | n/a | n/a | n/a | {ov(p, pd, 'img_wall')} |")
    L.append("")
p5 = [json.loads(l) for l in read(f"{work}/p5.jsonl").splitlines() if l.startswith("{")]
p5s = [r for r in p5 if r.get("summary")]
if p5s:
    r = p5s[0]
    L += ["## P5 on this device: checkpoint blocking time", ""]
    L += [f"`p5_checkpoint --device={r.get('device', '?')} --mib={r['param_mib']} --trials=3`: a synthetic model of"
          f" {r['param_mib']} MiB of parameters (SGD with momentum: as many again), a {r['bytes'] / 2**20:.0f} MiB"
          " checkpoint file; medians of the trials. *sync block*: save_checkpoint (serialize, checksum, write, fsync,"
          " rename: training waits for all of it); *async block*: save_checkpoint_async until it returns (the snapshot"
          + (", into pinned host memory" if r.get("device") == "cuda" else "") + "); *async write*: from then until the"
          " file is durable, in the background. Target: async block at most 5% of sync block.", ""]
    L += ["| device | sync block (s) | async block (s) | async / sync | async write (s) | first async block (s) |",
          "|---|---|---|---|---|---|"]
    ratio = r["async_block_s"] / r["sync_block_s"] if r["sync_block_s"] > 0 else float("nan")
    L.append(f"| {r.get('device', '?')} | {r['sync_block_s']:.4f} | {r['async_block_s']:.4f} | {ratio * 100:.1f}% |"
             f" {r['async_write_s']:.4f} | {r['first_async_block_s']:.4f} |")
    L.append("")
if not gpu:
    L += ["## What the rehearsal shows", "",
          "- The carried set is complete: with the system's copies hidden, configure found every package in the prefix"
          " (the configure step fails otherwise), the programs load every carried library from it (linkcheck), and every"
          " header read from /usr/include belongs to the toolchain (linkcheck).",
          "- The build of the GPU run's targets works against the CUDA torch wheel and the CUDA 13 toolkit, with the NCCL backend compiled in.",
          "- The CPU-side steps work as they will on the GPU: the tests run and skip cleanly without a GPU, the data is read"
          " from the prefix through --data-dir, the benchmark commands and the report's arithmetic work.",
          "- Not shown (needs the GPU): that the GPU machine's compiler and OS accept the same build (the env step logs them"
          " first), NCCL and CUDA at run time, and the figures.", ""]
text = "\n".join(L) + "\n"
for p in (out_path, copy_path):
    if p:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p + ".tmp", "w").write(text)
        os.replace(p + ".tmp", p)
if final:
    print(text)
