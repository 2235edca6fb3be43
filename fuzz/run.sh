#!/usr/bin/env bash
# Builds the fuzz targets (clang, ASan + UBSan; build-fuzz/) and runs each
# for SECONDS (default 10) from its seed corpus in fuzz/corpus/<target>,
# on a scratch copy (the tree's corpus is not changed). Exits non-zero on
# the first crash, leak, timeout or sanitizer report; the reproducer is
# left in build-fuzz/artifacts/. Prints each target's executions.
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-10}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(job_spec_fuzzer coordinator_fuzzer wire_budget_fuzzer)
BUILD="${FRAMEWORM_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT/fuzz" -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
cmake --build "$BUILD" --target "${TARGETS[@]}" -j "${FRAMEWORM_JOBS:-$(nproc)}"
mkdir -p "$BUILD/artifacts"
for t in "${TARGETS[@]}"; do
  corpus="$ROOT/fuzz/corpus/${t%_fuzzer}"
  scratch="$(mktemp -d)"
  cp "$corpus"/* "$scratch"/
  log="$BUILD/artifacts/$t.log"
  if ! "$BUILD/bin/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" "$scratch" >"$log" 2>&1; then
    rm -rf "$scratch"
    echo "[fuzz] $t FAILED; see $log:" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$log" >&2 || tail -20 "$log" >&2
    exit 1
  fi
  rm -rf "$scratch"
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  echo "[fuzz] $t: $runs inputs in ${SECONDS_EACH}s, no crash"
done
