#!/usr/bin/env bash
# Frameworm developer entry point.
#   deploy/dev.sh install   install what is missing (Debian packages, .venv with torch)
#   deploy/dev.sh build     install, then configure and build into build/
#   deploy/dev.sh test      install, build, run every test through ctest, then
#                           every fuzz target for a few seconds (fuzz/run.sh)
#   deploy/dev.sh demo      install, build, run the main job
#   deploy/dev.sh check-cuda  whether the CUDA toolkit the build needs is there
# Every step is idempotent: a second run checks and skips what is there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TORCH_VERSION="${FRAMEWORM_TORCH_VERSION:-2.11.0}"
BUILD_DIR="${FRAMEWORM_BUILD_DIR:-$ROOT/build}"
JOBS="${FRAMEWORM_JOBS:-$(nproc)}"
APT_PACKAGES=(build-essential cmake ninja-build pkg-config python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libyaml-cpp-dev libsqlite3-dev
  libgloo-dev zlib1g-dev libssl-dev clang libclang-rt-14-dev dataset-fashion-mnist
  iproute2 util-linux nftables elfutils prometheus systemd slurmctld slurmd slurm-client munge chromium)

log() { echo "[dev.sh] $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_debs() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  fi
}

install_venv() {
  local py="$ROOT/.venv/bin/python"
  # tensorboard: its event reader checks the coordinator's TensorBoard files;
  # grpcio(-tools), pyyaml: the Python client (python/) and its build;
  # kubernetes-validate: deploy/check.sh's schema check of the manifests.
  if [ -x "$py" ] && "$py" -c "import torch, numpy, tensorboard, grpc, grpc_tools, yaml, kubernetes_validate, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    return
  fi
  log "creating .venv with torch==$TORCH_VERSION (LibTorch comes from this wheel) and tensorboard"
  [ -x "$py" ] || python3 -m venv "$ROOT/.venv"
  # setuptools<82: torch's own bound (grpcio-tools would take a newer one).
  "$ROOT/.venv/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" numpy \
    tensorboard grpcio grpcio-tools pyyaml kubernetes-validate "setuptools<82"
}

install() { install_debs; install_venv; }

# The torch wheel is its CUDA 13 build: LibTorch's CMake files need a CUDA
# toolkit (nvcc) to configure, GPU or not, and CMake looks for nvcc on PATH
# only. nvcc on PATH: nothing to do; else $CUDA_HOME/bin/nvcc (default
# /usr/local/cuda) goes on PATH for the build; else fails saying what to do.
check_cuda_toolkit() {
  local home="${CUDA_HOME:-/usr/local/cuda}"
  command -v nvcc > /dev/null 2>&1 && return 0
  if [ -x "$home/bin/nvcc" ]; then
    export PATH="$home/bin:$PATH"
    log "CUDA toolkit: $home (its bin/ put on PATH for the build)"
    return 0
  fi
  log "no CUDA toolkit: neither nvcc on PATH nor $home/bin/nvcc. LibTorch from the torch"
  log "wheel (its CUDA 13 build) needs one to configure, with or without a GPU: install"
  log "NVIDIA's CUDA 13 toolkit (cuda-toolkit-13-0) or set CUDA_HOME to one"
  return 1
}

build() {
  install
  check_cuda_toolkit
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

run_tests() {
  build
  cd "$BUILD_DIR"
  ctest --output-on-failure -j "$JOBS" "$@"
  # Every fuzz target briefly from its seed corpus (clang, ASan + UBSan).
  "$ROOT/fuzz/run.sh" "${FRAMEWORM_FUZZ_SECONDS:-20}"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  install) install ;;
  build) build ;;
  test) run_tests "$@" ;;
  demo) build; exec "$ROOT/deploy/demo.sh" "$@" ;;
  check-cuda) check_cuda_toolkit ;;
  *) echo "usage: deploy/dev.sh {install|build|test|demo|check-cuda}" >&2; exit 2 ;;
esac
