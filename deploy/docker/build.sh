#!/usr/bin/env bash
# Builds the container image (deploy/docker/Dockerfile) and checks it the way
# a user would use it: a coordinator, two workers and a 2-node job of the
# built-in trainer on Fashion-MNIST, all in one container of the image, on
# that container's own loopback (--network=none), as the image's user. The
# data is the host's Debian dataset, mounted read-only. Writes the figures to
# bench/results/container.md.
#
#   deploy/docker/build.sh [--tag TAG] [--engine docker|podman] [--runtime NAME]
#                          [--cuda-toolkit DIR] [--ca-file FILE] [--from-build DIR]
#                          [--debootstrap-base] [--check-only]
#
#   --tag TAG           the image (default frameworm:0.3.0)
#   --engine E          docker when a Docker engine answers (docker info), else podman
#   --runtime NAME      podman's OCI runtime, e.g. runc where crun cannot run
#                       (a host with cgroups in hybrid mode)
#   --cuda-toolkit DIR  a CUDA 13 toolkit on this host (e.g. /usr/local/cuda-13.0),
#                       mounted read-only at /usr/local/cuda for the build's RUN
#                       steps (LibTorch's CMake files need one); podman only
#   --ca-file FILE      a CA bundle pip inside the build must trust (a
#                       TLS-intercepting proxy): mounted read-only for the
#                       build's RUN steps and named in PIP_CERT (a build
#                       argument, not kept in the image); podman only
#   --from-build DIR    skip the image's build stage: stage the binaries of a
#                       build made on this host (a Debian bookworm build dir,
#                       e.g. build/) with deploy/docker/stage.sh into an image
#                       of its own, and build the Dockerfile with its build
#                       stage replaced by that image (the runtime stage as is)
#   --debootstrap-base  where no registry serves debian:bookworm (air-gapped,
#                       or Docker Hub unreachable): makes it from Debian's
#                       mirror with debootstrap (--variant=minbase), tags it
#                       debian:bookworm and debian:bookworm-slim, and builds
#                       with --pull=never; needs root and debootstrap
#   --check-only        check an image built before
#
# The build runs deploy/dev.sh build inside the image (Debian packages, the
# torch wheel, the whole project): about 30 minutes on 2 cores. Needs the
# dataset on the host (/usr/share/datasets/fashion-mnist: Debian's
# dataset-fashion-mnist; deploy/dev.sh install puts it there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TAG=frameworm:0.3.0
ENGINE=""
RUNTIME=""
CA_FILE=""
CUDA_DIR=""
FROM_BUILD=""
DEBOOTSTRAP=0
BUILD=1
DATA=/usr/share/datasets/fashion-mnist
OUT="$ROOT/bench/results/container.md"

die() { echo "deploy/docker/build.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="${2:?--tag needs a value}"; shift 2 ;;
    --engine) ENGINE="${2:?--engine needs docker or podman}"; shift 2 ;;
    --runtime) RUNTIME="${2:?--runtime needs a name}"; shift 2 ;;
    --ca-file) CA_FILE="${2:?--ca-file needs a file}"; shift 2 ;;
    --cuda-toolkit) CUDA_DIR="${2:?--cuda-toolkit needs a directory}"; shift 2 ;;
    --from-build) FROM_BUILD="${2:?--from-build needs a build directory}"; shift 2 ;;
    --debootstrap-base) DEBOOTSTRAP=1; shift ;;
    --check-only) BUILD=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done
# The arguments first (no engine needed to refuse them), then the engine.
[ -d "$DATA" ] || die "$DATA is missing (Debian's dataset-fashion-mnist: deploy/dev.sh install)"
case "$ENGINE" in "" | docker | podman) ;; *) die "--engine must be docker or podman, not '$ENGINE'" ;; esac
if [ -n "$FROM_BUILD" ]; then
  [ -x "$FROM_BUILD/bin/frameworm-coordinator" ] || die "--from-build $FROM_BUILD has no bin/frameworm-coordinator (deploy/dev.sh build)"
fi
if [ -n "$CUDA_DIR" ]; then
  [ -x "$CUDA_DIR/bin/nvcc" ] || die "--cuda-toolkit $CUDA_DIR has no bin/nvcc"
  [ "$ENGINE" != docker ] || die "--cuda-toolkit needs podman (docker build mounts no folders)"
fi
if [ -n "$CA_FILE" ]; then
  [ -r "$CA_FILE" ] || die "--ca-file $CA_FILE cannot be read"
  [ "$ENGINE" != docker ] || die "--ca-file needs podman (docker build mounts no files; use a build secret)"
fi
if [ -z "$ENGINE" ]; then
  if command -v docker > /dev/null && docker info > /dev/null 2>&1; then ENGINE=docker
  elif command -v podman > /dev/null; then ENGINE=podman
  else die "no container engine: neither a Docker engine answers (docker info) nor podman is installed"
  fi
  if [ "$ENGINE" = docker ] && { [ -n "$CUDA_DIR" ] || [ -n "$CA_FILE" ]; }; then
    die "--cuda-toolkit and --ca-file need podman (found docker; --engine podman)"
  fi
fi
command -v "$ENGINE" > /dev/null || die "$ENGINE is not installed"

engine=("$ENGINE")
[ -n "$RUNTIME" ] && engine+=(--runtime "$RUNTIME")
# Containers get limits below this shell's (the engines' defaults are
# higher, and raising a limit, even to its current value with some
# runtimes, needs privileges a sandboxed root may lack): at most 16384.
below() { if [ "$1" = unlimited ] || [ "$1" -gt 16384 ]; then echo 16384; else echo $(($1 - 1)); fi; }
limits=(--ulimit "nofile=$(below "$(ulimit -Sn)"):$(below "$(ulimit -Sn)")"
  --ulimit "nproc=$(below "$(ulimit -Su)"):$(below "$(ulimit -Su)")")

# Temporary folders, removed however the script ends.
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT
pull=()
if [ "$DEBOOTSTRAP" = 1 ]; then
  [ "$(id -u)" = 0 ] || die "--debootstrap-base needs root"
  command -v debootstrap > /dev/null || die "--debootstrap-base needs debootstrap (apt-get install debootstrap)"
  rootfs="$(mktemp -d /tmp/frameworm-rootfs.XXXXXX)"
  scratch+=("$rootfs")  # its .log stays when debootstrap fails
  echo "build.sh: debootstrap bookworm (minbase) into $rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian > "$rootfs.log" 2>&1 ||
    { tail -20 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
  tar -C "$rootfs" -c . | "${engine[@]}" import - docker.io/library/debian:bookworm > /dev/null
  "${engine[@]}" tag docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
  base_note="made with debootstrap --variant=minbase bookworm from deb.debian.org, tagged debian:bookworm and debian:bookworm-slim"
  pull=(--pull=never)
fi

build_s=0
if [ "$BUILD" = 1 ]; then
  t0=$(date +%s)
  dockerfile="$ROOT/deploy/docker/Dockerfile"
  if [ -n "$FROM_BUILD" ]; then
    ctx="$(mktemp -d /tmp/frameworm-stage.XXXXXX)"
    scratch+=("$ctx")
    "$ROOT/deploy/docker/stage.sh" "$ctx/stage" "$(readlink -f "$FROM_BUILD")"
    printf 'FROM scratch\nCOPY stage /stage\n' > "$ctx/Containerfile"
    "${engine[@]}" build -q -f "$ctx/Containerfile" -t localhost/frameworm-stage:latest "$ctx" > /dev/null
    # The Dockerfile with its build stage (from "FROM ... AS build" to the
    # next FROM) replaced by the staged image.
    awk '/^FROM .* AS build$/ {print "FROM localhost/frameworm-stage:latest AS build"; skip = 1; next}
         /^FROM / {skip = 0}
         !skip' "$dockerfile" > "$ctx/Dockerfile"
    grep -q '^FROM localhost/frameworm-stage:latest AS build$' "$ctx/Dockerfile" ||
      die "deploy/docker/Dockerfile has no 'FROM ... AS build' stage to replace"
    rm -rf "$ctx/stage"
    dockerfile="$ctx/Dockerfile"
  fi
  args=(build "${pull[@]}" -f "$dockerfile" -t "$TAG")
  if [ "$ENGINE" = podman ]; then
    # The build's RUN steps need the network (Debian packages, the wheel).
    args+=(--network=host "${limits[@]}")
    [ -n "$CA_FILE" ] && args+=(-v "$(readlink -f "$CA_FILE"):/run/frameworm-build-ca.crt:ro"
      --build-arg PIP_CERT=/run/frameworm-build-ca.crt)
    [ -n "$CUDA_DIR" ] && args+=(-v "$(readlink -f "$CUDA_DIR"):/usr/local/cuda:ro")
  fi
  echo "build.sh: ${engine[*]} ${args[*]} $ROOT"
  "${engine[@]}" "${args[@]}" "$ROOT"
  build_s=$(( $(date +%s) - t0 ))
fi
"${engine[@]}" image inspect "$TAG" > /dev/null 2>&1 || die "no image $TAG (build it first)"
if [ "$DEBOOTSTRAP" = 0 ]; then
  base_id=$("${engine[@]}" image inspect --format '{{.Id}}' debian:bookworm-slim 2> /dev/null | cut -c1-12 || true)
  base_note="debian:bookworm-slim from the engine's store (id ${base_id:-gone}; pulled, or made by an earlier --debootstrap-base)"
fi
size_mb=$("${engine[@]}" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f", $1 / 1e6}')

# The check, inside one container: its own loopback only, the image's user.
read -r -d '' CHECK << 'SH' || true
set -eu
d=$(mktemp -d)
export FRAMEWORM_COORDINATOR=127.0.0.1:7070
wait_for() {  # file, text, what
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done
  echo "check: $3 did not start:"; cat "$1"; exit 1
}
id
frameworm-coordinator --version
frameworm-coordinator --listen=127.0.0.1:7070 --state-dir="$d/state" > "$d/coordinator.log" 2>&1 &
wait_for "$d/coordinator.log" "listening on" coordinator
for w in worker-0 worker-1; do
  frameworm-worker --name="$w" --slots=1 --work-dir="$d/$w" > "$d/$w.log" 2>&1 &
  wait_for "$d/$w.log" registered "$w"
done
cat > "$d/job.yaml" << 'YAML'
name: container-check
nodes: 2
nproc_per_node: 1
backend: gloo
max_restarts: 1
train:
  model: mlp
  dataset: fashion-mnist
  epochs: 1
  batch_size: 64
  max_steps: 300
  log_every: 50
checkpoint:
  every_n_steps: 100
  keep_last: 2
YAML
job=$(frameworm-cli submit "$d/job.yaml")
echo "submitted $job"
rc=0
frameworm-cli watch "$job" > "$d/watch.log" 2>&1 || rc=$?
tail -3 "$d/watch.log"
echo "watch exit code: $rc"
frameworm-cli status "$job"
frameworm-cli checkpoints "$job"
frameworm-cli logs "$job" --rank 0 | grep '"event":"done"' | tail -1
exit "$rc"
SH
run=(run --rm --network=none "${limits[@]}" -v "$DATA:$DATA:ro" "$TAG" bash -c "$CHECK")
echo "build.sh: ${engine[*]} run --rm --network=none ... $TAG bash -c <the check>"
log="$(mktemp)"
scratch+=("$log")
t0=$(date +%s)
rc=0
"${engine[@]}" "${run[@]}" 2>&1 | tee "$log" || rc=$?
check_s=$(( $(date +%s) - t0 ))
[ "$rc" = 0 ] && grep -q "SUCCEEDED" "$log" || rc=1

{
  echo "# The container image, built and run"
  echo
  echo "Command: \`deploy/docker/build.sh$([ "$ENGINE" = podman ] && echo " --engine podman")$([ -n "$RUNTIME" ] && echo " --runtime $RUNTIME")$([ -n "$CUDA_DIR" ] && echo " --cuda-toolkit $CUDA_DIR")$([ -n "$CA_FILE" ] && echo " --ca-file FILE")$([ -n "$FROM_BUILD" ] && echo " --from-build $FROM_BUILD")$([ "$DEBOOTSTRAP" = 1 ] && echo " --debootstrap-base")$([ "$BUILD" = 0 ] && echo " --check-only")\` on $(date -u +%Y-%m-%d), $(nproc) cores, $("${engine[@]}" --version)."
  echo
  echo "- Base image: $base_note."
  if [ "$BUILD" = 1 ] && [ -n "$FROM_BUILD" ]; then
    echo "- Build: the runtime stage from the binaries of $FROM_BUILD (staged by deploy/docker/stage.sh; the image's build stage skipped): ${build_s} s."
  elif [ "$BUILD" = 1 ]; then
    echo "- Build (both stages: deploy/dev.sh build inside the image, then deploy/docker/stage.sh): ${build_s} s."
  fi
  echo "- Image $TAG: ${size_mb} MB (the three daemons and CLI, frameworm-train, frameworm-task-shim and every library they load: gRPC, protobuf, LibTorch with its CUDA and NCCL libraries)."
  echo "- The check (${check_s} s): one container of the image, \`--network=none\` (its own loopback), as the image's user, the host's dataset mounted read-only: a coordinator, two workers (one slot each) and a 2-node job (MLP, Gloo, 300 steps, a checkpoint every 100). Result: $([ "$rc" = 0 ] && echo "the job SUCCEEDED" || echo "FAILED (exit $rc)")."
  echo
  echo '```'
  cat "$log"
  echo '```'
} > "$OUT"
echo "build.sh: wrote $OUT"
exit "$rc"
