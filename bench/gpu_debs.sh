#!/usr/bin/env bash
# Fetches, on a machine with Debian's package registry, the .deb files that
# bench/gpu.sh needs on a GPU machine without one (into .debs/, git-ignored).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$ROOT/.debs"
cd "$ROOT/.debs"
apt-get download libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 protobuf-compiler-grpc \
  libprotobuf-dev libprotobuf32 libprotoc32 protobuf-compiler libabsl-dev libabsl20220623 \
  libgtest-dev libgmock-dev googletest libyaml-cpp-dev libyaml-cpp0.7 libsqlite3-dev \
  libgloo-dev libre2-9 libre2-dev libc-ares2 libc-ares-dev libssl-dev zlib1g-dev ninja-build \
  dataset-fashion-mnist
ls -la
