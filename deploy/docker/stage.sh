#!/usr/bin/env bash
# Gathers what the container image holds into a root-like directory DEST:
# the daemons, the CLI and what the worker starts under usr/local/bin, and
# every shared library they load that glibc does not provide (gRPC,
# protobuf, abseil, LibTorch and its CUDA/NCCL libraries, ...) under
# usr/local/lib/frameworm, found through an ld.so.conf.d entry. Used by
# the Dockerfile's build stage; deploy/check.sh checks the result.
#   deploy/docker/stage.sh DEST [BUILD_DIR]
# FRAMEWORM_STAGE_BINARIES (space-separated) stages only those.
set -euo pipefail
DEST="${1:?usage: stage.sh DEST [BUILD_DIR]}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${2:-$ROOT/build}/bin"
read -r -a BINARIES <<< "${FRAMEWORM_STAGE_BINARIES:-frameworm-coordinator frameworm-worker frameworm-cli frameworm-train frameworm-task-shim}"
# Provided by every glibc system (the image's base).
GLIBC='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so'

mkdir -p "$DEST/usr/local/bin" "$DEST/usr/local/lib/frameworm" "$DEST/etc/ld.so.conf.d"
for b in "${BINARIES[@]}"; do
  [ -x "$BIN/$b" ] || { echo "stage.sh: $BIN/$b is missing: build first (deploy/dev.sh build)" >&2; exit 1; }
  install -m 0755 "$BIN/$b" "$DEST/usr/local/bin/$b"
  ldd "$BIN/$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if [[ "$name" =~ $GLIBC ]]; then continue; fi
    [ -e "$DEST/usr/local/lib/frameworm/$name" ] || cp -L "$path" "$DEST/usr/local/lib/frameworm/$name"
  done
  if ldd "$BIN/$b" | grep -q "not found"; then
    echo "stage.sh: $b has unresolved libraries:" >&2
    ldd "$BIN/$b" | grep "not found" >&2
    exit 1
  fi
done
echo /usr/local/lib/frameworm > "$DEST/etc/ld.so.conf.d/frameworm.conf"
echo "stage.sh: $(ls "$DEST/usr/local/bin" | wc -l) binaries, $(ls "$DEST/usr/local/lib/frameworm" | wc -l) libraries in $DEST"
