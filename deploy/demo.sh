#!/usr/bin/env bash
# The main job: 2-process DDP training of the Fashion-MNIST CNN through
# launch_distributed (frameworm-train --nprocs 2), printing per-epoch loss
# and accuracy. Called by `deploy/dev.sh demo` after the build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FRAMEWORM_BUILD_DIR:-$ROOT/build}/bin"
EPOCHS="${FRAMEWORM_DEMO_EPOCHS:-2}"
exec "$BIN/frameworm-train" --nprocs 2 --model cnn --dataset fashion-mnist \
  --epochs "$EPOCHS" --batch-size 64 --backend gloo "$@"
