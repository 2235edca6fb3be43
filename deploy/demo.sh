#!/usr/bin/env bash
# The main job on a local cluster: starts a frameworm-coordinator and two
# frameworm-workers (one CPU slot each) on 127.0.0.1, submits
# examples/fashion_mnist.yaml (2 nodes x 1 process, CNN, Gloo), watches it
# to completion, prints the final test accuracy, the job's events and where
# checkpoints, logs, metrics and TensorBoard files are, then stops the
# daemons. Called by `deploy/dev.sh demo`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FRAMEWORM_BUILD_DIR:-$ROOT/build}/bin"
JOB="${1:-$ROOT/examples/fashion_mnist.yaml}"
DEMO_DIR="${FRAMEWORM_DEMO_DIR:-$ROOT/demo-run}"
PORT="${FRAMEWORM_DEMO_PORT:-7070}"
ADDR="127.0.0.1:$PORT"
METRICS="127.0.0.1:$((PORT + 1))"
DASHBOARD="127.0.0.1:$((PORT + 10))"
export FRAMEWORM_COORDINATOR="$ADDR"

rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"
pids=()
stop() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT

wait_for() {  # file, text, what
  for _ in $(seq 1 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "demo: $3 did not start; its log ($1):" >&2
  cat "$1" >&2
  exit 1
}

"$BIN/frameworm-coordinator" --listen="$ADDR" --state-dir="$DEMO_DIR/state" \
  --metrics-listen="$METRICS" --dashboard-listen="$DASHBOARD" > "$DEMO_DIR/coordinator.log" 2>&1 &
pids+=($!)
wait_for "$DEMO_DIR/coordinator.log" "listening on" "frameworm-coordinator"
for w in worker-0 worker-1; do
  "$BIN/frameworm-worker" --coordinator="$ADDR" --name="$w" --slots=1 \
    --work-dir="$DEMO_DIR/$w" > "$DEMO_DIR/$w.log" 2>&1 &
  pids+=($!)
  wait_for "$DEMO_DIR/$w.log" "registered" "frameworm-worker $w"
done
echo "demo: coordinator on $ADDR, workers worker-0 and worker-1 (1 CPU slot each)"
echo "demo: dashboard at http://$DASHBOARD/ and Prometheus metrics at http://$METRICS/metrics while the cluster runs"

job=$("$BIN/frameworm-cli" submit "$JOB")
echo "demo: submitted $JOB as $job; watching (frameworm-cli watch $job; its page: http://$DASHBOARD/#job/$job)"
start=$(date +%s)
rc=0
"$BIN/frameworm-cli" watch "$job" || rc=$?
elapsed=$(( $(date +%s) - start ))

"$BIN/frameworm-cli" logs "$job" --rank 0 > "$DEMO_DIR/rank0.log" 2>&1 || true
done_line=$(grep '"event":"done"' "$DEMO_DIR/rank0.log" | tail -n 1 || true)
echo
echo "demo: job $job finished in ${elapsed}s with exit code $rc"
if [ -n "$done_line" ]; then
  acc=$(echo "$done_line" | python3 -c 'import json,sys; print("%.2f%%" % (100*json.load(sys.stdin)["val_accuracy"]))')
  echo "demo: final test accuracy $acc  ($done_line)"
fi
echo "demo: checkpoints:"
"$BIN/frameworm-cli" checkpoints "$job" || true
echo "demo: events (frameworm-cli events $job):"
"$BIN/frameworm-cli" events "$job" || true
echo "demo: logs: $DEMO_DIR/state/logs/$job/ (also: frameworm-cli logs $job --rank 0)"
echo "demo: TensorBoard: $ROOT/.venv/bin/tensorboard --logdir $DEMO_DIR/state/tensorboard"
echo "demo: daemon logs and trainer outputs under $DEMO_DIR"
exit "$rc"
