#!/usr/bin/env bash
# Checks the deployment files the way their tools read them (a ctest,
# deploy_files_test): the systemd units with systemd-analyze verify (any
# complaint fails), the Kubernetes manifests against the Kubernetes schemas
# (kubernetes-validate --strict, from .venv), the container's staged root
# (deploy/docker/stage.sh: every library a daemon loads is in it or is
# glibc's, and each daemon runs from it), the build context (.dockerignore
# leaves out what .gitignore does), the build's CUDA toolkit check
# (deploy/dev.sh check-cuda), the image script's argument errors
# (deploy/docker/build.sh). Each checker is first shown a broken copy, so
# a checker that accepts anything fails this script.
#   deploy/check.sh BIN_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:?usage: deploy/check.sh BIN_DIR}"
PY="$ROOT/.venv/bin/python"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "deploy/check.sh: $*" >&2; exit 1; }

# systemd: ExecStart must exist to verify, so the units point at BIN here.
verify_unit() {  # unit file -> output of systemd-analyze verify ("" when clean)
  systemd-analyze verify "$1" 2>&1 || true
}
sed "s|/usr/local/bin/|$BIN/|; s/^Restart=on-failure/Restart=sometimes/" \
  "$ROOT/deploy/systemd/frameworm-coordinator.service" > "$TMP/broken.service"
[ -n "$(verify_unit "$TMP/broken.service")" ] || fail "systemd-analyze verify accepts a bad Restart="
for unit in "$ROOT"/deploy/systemd/*.service; do
  sed "s|/usr/local/bin/|$BIN/|" "$unit" > "$TMP/$(basename "$unit")"
  out="$(verify_unit "$TMP/$(basename "$unit")")"
  [ -z "$out" ] || fail "$(basename "$unit"): $out"
  echo "ok: $(basename "$unit") (systemd-analyze verify)"
done

# Kubernetes: every manifest against the schemas, unknown fields refused.
sed 's/^  replicas: 1/  replicass: 1/' "$ROOT/deploy/kubernetes/coordinator.yaml" > "$TMP/broken.yaml"
if "$PY" -m kubernetes_validate --strict --quiet "$TMP/broken.yaml" > /dev/null 2>&1; then
  fail "kubernetes-validate accepts an unknown field"
fi
"$PY" -m kubernetes_validate --strict --quiet "$ROOT"/deploy/kubernetes/*.yaml \
  || fail "a Kubernetes manifest does not validate"
echo "ok: deploy/kubernetes/*.yaml (kubernetes-validate --strict)"

# The container build's context: every top-level directory .gitignore
# keeps out (/build/, /.venv/, ...) is in .dockerignore too.
context_leaks() {  # .dockerignore -> the .gitignore directories it lets in
  sed -n 's|^/\([^/]*\)/$|\1|p' "$ROOT/.gitignore" | while read -r d; do
    grep -qxF "$d" "$1" || echo "$d"
  done
}
grep -vx '.venv' "$ROOT/.dockerignore" > "$TMP/broken.dockerignore"
[ -n "$(context_leaks "$TMP/broken.dockerignore")" ] || fail "the .dockerignore check misses .venv"
leaks="$(context_leaks "$ROOT/.dockerignore")"
[ -z "$leaks" ] || fail ".dockerignore lets into the build context: $leaks"
echo "ok: .dockerignore (the build context leaves out $(sed -n 's|^/\([^/]*\)/$|\1|p' "$ROOT/.gitignore" | tr '\n' ' '))"

# The container's root: the daemons with their libraries (frameworm-train's
# LibTorch libraries only resolved, not copied: gigabytes).
FRAMEWORM_STAGE_BINARIES="frameworm-coordinator frameworm-worker frameworm-cli frameworm-task-shim" \
  "$ROOT/deploy/docker/stage.sh" "$TMP/stage" "$(dirname "$BIN")" > /dev/null
LIB="$TMP/stage/usr/local/lib/frameworm"
GLIBC='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so'
for b in frameworm-coordinator frameworm-worker frameworm-cli; do
  LD_LIBRARY_PATH="$LIB" ldd "$TMP/stage/usr/local/bin/$b" | awk '/=>/ {print $1, $3}' |
    while read -r name path; do
      [[ "$name" =~ $GLIBC ]] && continue
      [[ "$path" == "$LIB/"* ]] || fail "$b loads $name from $path, outside the image's root"
    done
  LD_LIBRARY_PATH="$LIB" "$TMP/stage/usr/local/bin/$b" --version > /dev/null || fail "$b does not run from the image's root"
done
if ldd "$BIN/frameworm-train" | grep -q "not found"; then fail "frameworm-train has unresolved libraries"; fi
echo "ok: deploy/docker/stage.sh (3 daemons self-contained, frameworm-train resolves)"

# The build's CUDA toolkit check (deploy/dev.sh check-cuda): passes here,
# where the build ran, and names the missing toolkit where none is found
# (a PATH holding only dirname, CUDA_HOME at nothing).
FRAMEWORM_JOBS=1 "$ROOT/deploy/dev.sh" check-cuda || fail "dev.sh check-cuda fails on the machine that built"
mkdir -p "$TMP/bare-bin"
ln -s "$(command -v dirname)" "$TMP/bare-bin/dirname"
if out="$(PATH="$TMP/bare-bin" CUDA_HOME="$TMP/no-cuda" FRAMEWORM_JOBS=1 "$BASH" "$ROOT/deploy/dev.sh" check-cuda 2>&1)"; then
  fail "dev.sh check-cuda passes without a CUDA toolkit"
fi
grep -q "no CUDA toolkit: neither nvcc on PATH nor $TMP/no-cuda/bin/nvcc" <<< "$out" ||
  fail "dev.sh check-cuda without a toolkit says: $out"
# A toolkit off PATH (as /usr/local/cuda usually is) goes on PATH for CMake.
mkdir -p "$TMP/off-path-cuda/bin"
printf '#!/bin/sh\nexit 0\n' > "$TMP/off-path-cuda/bin/nvcc"
chmod +x "$TMP/off-path-cuda/bin/nvcc"
out="$(PATH="$TMP/bare-bin" CUDA_HOME="$TMP/off-path-cuda" FRAMEWORM_JOBS=1 "$BASH" "$ROOT/deploy/dev.sh" check-cuda 2>&1)" ||
  fail "dev.sh check-cuda refuses a toolkit in CUDA_HOME: $out"
grep -q "CUDA toolkit: $TMP/off-path-cuda (its bin/ put on PATH" <<< "$out" ||
  fail "dev.sh check-cuda with a toolkit off PATH says: $out"
echo "ok: deploy/dev.sh check-cuda (finds the toolkit, on PATH or in CUDA_HOME; names it when missing)"

# deploy/docker/build.sh refuses bad arguments before it needs an engine.
refuses() {  # expected message, arguments...
  local want="$1" out
  shift
  if out="$("$ROOT/deploy/docker/build.sh" "$@" 2>&1)"; then fail "build.sh $* was accepted"; fi
  grep -qF -e "$want" <<< "$out" || fail "build.sh $* says: $out (expected: $want)"
}
refuses "unknown argument '--bogus'" --bogus
refuses "--engine must be docker or podman, not 'lxc'" --engine lxc
refuses "--cuda-toolkit $TMP/no-cuda has no bin/nvcc" --cuda-toolkit "$TMP/no-cuda"
refuses "--from-build $TMP has no bin/frameworm-coordinator" --from-build "$TMP"
refuses "--ca-file $TMP/no.crt cannot be read" --ca-file "$TMP/no.crt"
refuses "--cuda-toolkit needs podman" --engine docker --cuda-toolkit "$TMP/off-path-cuda"
echo "ok: deploy/docker/build.sh (refuses bad arguments, naming them)"
