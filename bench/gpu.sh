#!/usr/bin/env bash
# The GPU run, on a machine with an NVIDIA GPU and its own torch (2.11,
# CUDA, NCCL) for python3: builds the training library against that torch,
# runs the NCCL-labelled tests, and compares single-GPU images/s of
# frameworm-train against the same model in Python, in under 10 minutes.
# Writes bench/results/gpu.md (and copies it to $OUT when set).
#
# Such a machine may have no package registry: put the Debian packages the
# build needs, as .deb files, in .debs/ (bench/gpu_debs.sh fetches them on a
# machine that has one); they are unpacked under /tmp/fw-deps, not into /.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="$ROOT/build-gpu"
PY="${PYTHON:-python3}"
STEPS="${GPU_STEPS:-300}"
BATCH="${GPU_BATCH:-256}"
log() { echo "[gpu.sh] $*" >&2; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"

prefix=/tmp/fw-deps
if compgen -G ".debs/*.deb" > /dev/null; then
  mkdir -p "$prefix"
  for d in .debs/*.deb; do dpkg -x "$d" "$prefix"; done
  export CMAKE_PREFIX_PATH="$prefix/usr:$prefix/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}"
  export CPATH="$prefix/usr/include:${CPATH:-}"
  export LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib:${LIBRARY_PATH:-}"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib:${LD_LIBRARY_PATH:-}"
  export PATH="$prefix/usr/bin:$PATH"
fi

t0=$(date +%s)
cmake -S . -B "$BUILD" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
  -DCMAKE_BUILD_TYPE=Release -DFRAMEWORM_PYTHON="$(command -v "$PY")" \
  -DCMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}" > "$BUILD.configure.log" 2>&1 \
  || { tail -40 "$BUILD.configure.log"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" --target frameworm-train nccl_test ddp_test 2>&1 | tail -3
log "built in $(( $(date +%s) - t0 )) s"

(cd "$BUILD" && ctest -L nccl --output-on-failure) | tee /tmp/fw-nccl.log

tmp=$(mktemp -d)
for model in cnn mlp; do
  "$BUILD/bin/frameworm-train" --device=cuda --model=$model --batch-size=$BATCH \
    --max-steps=$STEPS --log-every=1 --seed=42 --threads=4 --checkpoint-dir="$tmp/ck" > "$tmp/fw-$model.jsonl"
  "$PY" bench/peer_ddp.py --device=cuda --model=$model --batch-size=$BATCH \
    --max-steps=$STEPS --seed=42 --threads=4 > "$tmp/py-$model.jsonl"
done
"$PY" - "$tmp" "$BATCH" "$STEPS" <<'PY' | tee bench/results/gpu.md
import json, statistics, subprocess, sys
tmp, batch, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def med(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    rows = [r for r in rows if "step_seconds" in r and r.get("event", "step") == "step"][20:]
    return statistics.median(r["step_seconds"] for r in rows)
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
nccl = open("/tmp/fw-nccl.log").read()
print("# GPU: single-GPU images/s, frameworm-train vs Python (same model, data, seed)\n")
print(f"Command: `bench/gpu.sh` (GPU_BATCH={batch}, GPU_STEPS={steps}; median step after 20 warm-up steps)")
print(f"GPU: {gpu}\n")
print("| model | frameworm img/s | Python img/s | ratio |\n|---|---|---|---|")
for m in ("cnn", "mlp"):
    f, p = med(f"{tmp}/fw-{m}.jsonl"), med(f"{tmp}/py-{m}.jsonl")
    print(f"| {m} | {batch/f:.0f} | {batch/p:.0f} | {p/f:.2f}x |")
print("\nNCCL-labelled tests:\n")
print("```\n" + "\n".join(l for l in nccl.splitlines() if "Test" in l or "tests" in l) + "\n```")
PY
[ -n "${OUT:-}" ] && cp bench/results/gpu.md "$OUT/" || true
rm -rf "$tmp"
