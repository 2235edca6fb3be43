# Sourced by the bench/*.sh scripts: the paths every benchmark uses and the
# checks they share. Sets ROOT (the checkout), BUILD and BIN (the build and
# its binaries: $FRAMEWORM_BUILD_DIR, default build/), PY (the .venv Python
# that carries torch, or $PYTHON), RESULTS (bench/results) and TMP (a
# scratch directory removed on exit); PYTHONPATH gains bench/ so the
# scripts' Python reports can `import benchlib`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FRAMEWORM_BUILD_DIR:-$ROOT/build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
BIN="$BUILD/bin"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
RESULTS="$ROOT/bench/results"
export PYTHONPATH="$ROOT/bench${PYTHONPATH:+:$PYTHONPATH}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# need FILE...: every FILE is executable, else a one-line error and exit 1.
need() {
  local f
  for f in "$@"; do
    [[ -x "$f" ]] || { echo "$(basename "$0"): missing $f (build first)" >&2; exit 1; }
  done
}
