#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, its own CUDA toolkit and a
# python3 with torch 2.11 (CUDA, NCCL), but no package registry. Builds the
# project against that torch and the Debian packages carried in .debs/
# (bench/gpu_debs.sh fetches them where a registry is), runs the NCCL tests
# (train/nccl_test.cc, tests/e2e/gpu_cluster_test.cc) with CUDA required,
# and compares frameworm-train with the same model in Python, like for like.
#
#   bench/gpu.sh              the GPU run (about 5 minutes on 16 cores; stops
#                             starting steps after GPU_BUDGET_S, default 540)
#   bench/gpu.sh --rehearse   the same steps on a CPU machine, as root, in a
#                             private mount namespace where the system's copies
#                             of everything .debs/ carries are hidden (overlay
#                             whiteouts over /usr), with the carried prefix and
#                             $PYTHON's torch standing in for the GPU machine's:
#                             the NCCL tests skip, the benchmarks run briefly on
#                             the CPU. Writes bench/results/gpu_rehearsal.md.
#
# Every step's output goes, as it runs, to one log ($OUT/gpu.log on the GPU
# run; build-rehearse/out/rehearsal.log); each step's exit code is recorded
# and the script goes on to the next step where it can. The report
# ($OUT/gpu.md, also bench/results/gpu.md) is rewritten after every step, so
# a run cut short still says which steps ran. Files in $OUT: gpu.md, gpu.log,
# steps.tsv, bench.tar.gz, and configure-debug.tar.gz when configure fails.
#
# Variables: PYTHON (python3; the rehearsal: .venv/bin/python if there),
# GPU_BATCH (256), GPU_STEPS (230, at most one epoch of full batches),
# GPU_WARMUP (30 steps excluded), GPU_BUDGET_S (540), GPU_JOBS (nproc),
# GPU_FRESH=1 (build from scratch; the GPU run's build folder is new anyway),
# GPU_ONLY="nccl_test p5-checkpoint" (run only these steps after the build),
# GPU_P5_MIB (the P5 model's MiB: GPU 1024, rehearsal 64).
# The prefix is /tmp/fw-deps (rehearsal: /tmp/fw-deps-rehearse; GPU_PREFIX
# sets it); never /.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/bench/gpu.sh"
ARCH_DIR=x86_64-linux-gnu
TARGETS=(frameworm-train nccl_test frameworm-coordinator frameworm-worker frameworm-cli
  gpu_cluster_e2e_test p5_checkpoint)

usage() { sed -n '2,/^set -uo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ------------------------------------------------------------------ helpers

# Marks the running step as skipped (not failed) with a reason.
skip() {
  echo "SKIPPED: $*"
  echo "$*" > "$FW_WORK/skip.$FW_STEP_NAME"
  exit 0
}
# A note for the step's row in the report.
note() { echo "$*" >> "$FW_WORK/note.$FW_STEP_NAME"; }
# Shows a command and its output (at most 80 lines); never fails.
show() {
  echo "\$ $*"
  timeout 60 "$@" 2>&1 | head -n 80
  echo "  (exit ${PIPESTATUS[0]})"
}
summary() { echo "$1=$2" >> "$FW_WORK/env.summary"; }
# Python with the library path it had before the prefix's was put in front
# (its own zlib, OpenSSL, ...; the image's own entries, libcuda's, stay).
# Sets PYENV, the env(1) words that do that.
pyenv_words() {
  if [ -n "${FW_ORIG_LD_LIBRARY_PATH:-}" ]; then
    PYENV=(env "LD_LIBRARY_PATH=$FW_ORIG_LD_LIBRARY_PATH")
  else
    PYENV=(env -u LD_LIBRARY_PATH)
  fi
}
py() {
  local PYENV
  pyenv_words
  "${PYENV[@]}" "$FW_PY" "$@"
}

# ------------------------------------------------------------------- steps

step_env() {
  : > "$FW_WORK/env.summary"
  show date -u
  show uname -a
  show cat /etc/os-release
  echo "cores: $(nproc)"
  show free -g
  show df -h "$FW_ROOT" /tmp /dev/shm
  show id
  echo "--- tools"
  local t
  for t in c++ g++ gcc cc ld cmake ctest ninja nvcc nvidia-smi python3 "$FW_PY" pkg-config protoc \
    grpc_cpp_plugin readelf dpkg dpkg-deb unshare timeout; do
    printf '  %-16s %s\n' "$(basename "$t")" "$(command -v "$t" || echo '(none)')"
  done
  show c++ --version
  show c++ -v
  show ld --version
  show cmake --version
  show ninja --version
  show nvcc --version
  show ldd --version
  echo "--- GPU"
  show nvidia-smi
  show nvidia-smi -L
  show nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv
  ls -la /dev/nvidia* 2>&1 | head
  echo "--- python and torch ($FW_PY)"
  py - <<'PY' 2>&1 | tee "$FW_WORK/torch.txt"
import os, sys
print("python", sys.version.split()[0], sys.executable)
try:
    import torch
except Exception as e:
    print("torch: import failed:", e); sys.exit(0)
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("cuda_available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device0", p.name, "capability %d.%d" % (p.major, p.minor), "memory %.0f GiB" % (p.total_memory / 2**30))
    try:
        print("nccl", torch.cuda.nccl.version())
    except Exception as e:
        print("nccl: ?", e)
print("arch_list", torch.cuda.get_arch_list() if hasattr(torch.cuda, "get_arch_list") else "?")
print("cxx11_abi", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
print("distributed", torch.distributed.is_available(), "nccl_backend", torch.distributed.is_nccl_available())
try:
    import numpy; print("numpy", numpy.__version__)
except Exception as e:
    print("numpy: missing", e)
PY
  echo "--- CUDA toolkit and the headers ProcessGroupNCCL.hpp pulls in"
  ls -d /usr/local/cuda* 2>&1 | head
  echo "nvcc: $(command -v nvcc || echo none); toolkit include: ${FW_CUDA_INC:-none}"
  local h d
  for h in cuda_runtime_api.h cublas_v2.h cublasLt.h cusparse.h cusolverDn.h curand.h nccl.h cudnn.h nvtx3/nvToolsExt.h; do
    local where=""
    for d in ${FW_CUDA_INC:-} /usr/local/cuda/include /usr/include $FW_PIP_NVIDIA_INC; do
      [ -e "$d/$h" ] && where="$where $d"
    done
    printf '  %-22s %s\n' "$h" "${where:-MISSING}"
  done
  echo "NCCL include dir for configure: ${FW_NCCL_INC:-none found}; CPATH: ${CPATH:-unset}"
  echo "--- libraries the system has (ldconfig -p)"
  local line
  ldconfig -p 2> /dev/null | grep -E 'lib(z|ssl|crypto|sqlite3|protobuf|grpc\+?\+?|absl_base|yaml-cpp|re2|cares|stdc\+\+|cuda|nccl|cudnn|cublas|pkgconf)\.so' |
    while IFS= read -r line; do [ -e "${line##*=> }" ] && echo "$line"; done | head -40
  if command -v dpkg > /dev/null; then
    echo "--- Debian/Ubuntu packages of the system that .debs/ also carries"
    dpkg -l 2> /dev/null | awk '/^ii/ {print $2, $3}' |
      grep -E '^(libgrpc|protobuf|libprotobuf|libprotoc|libabsl|libgtest|libgmock|googletest|libyaml-cpp|libsqlite3|libgloo|libre2|libc-ares|libssl|zlib1g|pkgconf|pkg-config|ninja|dataset)' | head -40
  fi
  echo "--- .debs/"
  if [ -d "$FW_ROOT/.debs" ]; then
    echo "$(ls "$FW_ROOT"/.debs/*.deb 2> /dev/null | wc -l) .deb files, $(du -sh "$FW_ROOT/.debs" | cut -f1)"
  else
    echo "NO .debs FOLDER: the packages were not carried"
  fi
  echo "--- environment"
  env | grep -E '^(CUDA|NCCL|TORCH|LD_LIBRARY_PATH|PATH|CPATH|LIBRARY_PATH|CMAKE|PKG_CONFIG|PYTHON|OUT)=' | sort
  ulimit -a | head -20
  # For the report.
  summary os "$( (. /etc/os-release && echo "$PRETTY_NAME") 2> /dev/null || echo '?')"
  summary kernel "$(uname -r)"
  summary cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  summary compiler "$(c++ --version 2> /dev/null | head -1 || echo none)"
  summary cmake "$(cmake --version 2> /dev/null | head -1 || echo none)"
  summary nvcc "$(nvcc --version 2> /dev/null | grep -i release | sed 's/.*release //' || echo none)"
  summary glibc "$(ldd --version 2> /dev/null | head -1 | awk '{print $NF}')"
  summary gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | head -1 || true)"
  summary torch "$(grep -E '^torch ' "$FW_WORK/torch.txt" | head -1)"
  return 0
}

# Rehearsal only: whiteouts over /usr for every file that the carried
# packages (and the packages only gloo's library needs) install, except the
# base runtime libraries of zlib1g, libssl3 and libsqlite3-0, which any
# system has.
step_hide() {
  [ -n "${FW_IN_NS:-}" ] || { echo "not in a private mount namespace: refusing to hide /usr"; return 1; }
  [ "$(id -u)" = 0 ] || { echo "needs root"; return 1; }
  compgen -G "$FW_ROOT/.debs/*.deb" > /dev/null || { echo "no .debs/*.deb: run bench/gpu_debs.sh first"; return 1; }
  local hide=/tmp/fw-rehearse-hide d
  mkdir -p "$hide"
  mount -t tmpfs fw-rehearse-hide "$hide" || return 1
  local carried=() extra=(libgloo0 libhiredis-dev libhiredis0.14 libibverbs-dev libnl-3-dev
    libnl-route-3-dev pkg-config) keep=(zlib1g libssl3 libsqlite3-0)
  for d in "$FW_ROOT"/.debs/*.deb; do carried+=("$(dpkg-deb --show --showformat='${Package}' "$d")"); done
  list_files() {  # the files of packages "$@": from the .deb if carried, and from dpkg -L
    local q
    for q in "$@"; do
      for d in "$FW_ROOT"/.debs/"${q}"_*.deb; do
        [ -e "$d" ] && dpkg-deb --fsys-tarfile "$d" | tar -t
      done
      dpkg -L "$q" 2> /dev/null
    done | sed -E 's#^\./#/#; s#^\.$##; s#^/(lib|lib64|bin|sbin)/#/usr/\1/#' | grep -E '^/usr/' | grep -v '/$' | sort -u
  }
  list_files "${carried[@]}" "${extra[@]}" > "$FW_WORK/hide-candidates.txt"
  list_files "${keep[@]}" > "$FW_WORK/hide-keep.txt"
  comm -23 "$FW_WORK/hide-candidates.txt" "$FW_WORK/hide-keep.txt" |
    "$FW_PY" -c '
import os, stat, sys
root = sys.argv[1]
n = 0
for line in sys.stdin:
    p = line.rstrip("\n")
    if not os.path.lexists(p) or (os.path.isdir(p) and not os.path.islink(p)):
        continue
    w = root + p
    os.makedirs(os.path.dirname(w), exist_ok=True)
    os.mknod(w, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    print(p)
    n += 1
print(n, "whiteouts", file=sys.stderr)
' "$hide" > "$FW_WORK/hidden.txt" || return 1
  mkdir -p "$hide/usr"
  mount -t overlay fw-rehearse-usr -o "lowerdir=$hide/usr:/usr" /usr || return 1
  echo "hidden under /usr: $(wc -l < "$FW_WORK/hidden.txt") files of ${#carried[@]} carried and ${#extra[@]} more packages"
  echo "kept: the runtime libraries of ${keep[*]}"
  local bad=0 f
  for f in /usr/include/grpcpp/grpcpp.h /usr/include/absl/base/config.h /usr/include/google/protobuf/message.h \
    /usr/include/zlib.h /usr/include/sqlite3.h /usr/include/openssl/ssl.h /usr/include/gloo/algorithm.h \
    /usr/include/gtest/gtest.h /usr/include/yaml-cpp/yaml.h /usr/include/re2/re2.h \
    "/usr/lib/$ARCH_DIR/libprotobuf.so" "/usr/lib/$ARCH_DIR/libz.so" "/usr/lib/$ARCH_DIR/libssl.so" \
    "/usr/lib/$ARCH_DIR/libgrpc++.so.1.51" "/usr/lib/$ARCH_DIR/cmake/grpc/gRPCConfig.cmake" \
    "/usr/lib/$ARCH_DIR/pkgconfig/re2.pc" /usr/bin/protoc /usr/bin/grpc_cpp_plugin /usr/bin/pkg-config \
    /usr/bin/ninja /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz; do
    if [ -e "$f" ]; then echo "STILL VISIBLE: $f"; bad=1; fi
  done
  for f in "/usr/lib/$ARCH_DIR/libz.so.1" "/usr/lib/$ARCH_DIR/libc.so.6" /usr/include/stdio.h \
    /usr/bin/c++ /usr/bin/cmake; do
    [ -e "$f" ] || { echo "MISSING (should stay): $f"; bad=1; }
  done
  [ $bad = 0 ] && echo "spot checks: the carried packages' files are gone, the toolchain is there"
  note "$(wc -l < "$FW_WORK/hidden.txt") files hidden under /usr"
  return $bad
}

step_unpack() {
  if [ ! -d "$FW_ROOT/.debs" ]; then
    echo "NO .debs FOLDER in $FW_ROOT: the packages were not carried (name .debs in the run's carry list;"
    echo "bench/gpu_debs.sh fetches them where the registry is)"
    note "no .debs folder"
    return 1
  fi
  [ -f "$FW_ROOT/.debs/MANIFEST" ] && { echo "MANIFEST:"; sed 's/^/  /' "$FW_ROOT/.debs/MANIFEST"; }
  bash "$FW_ROOT/bench/gpu_debs.sh" --unpack "$FW_PREFIX"
  local rc=$?
  echo "--- the prefix's tools"
  show pkg-config --version
  show pkg-config --cflags --libs re2
  show protoc --version
  show ninja --version
  ls -la "$FW_PREFIX/usr/bin/grpc_cpp_plugin" 2>&1
  ls "$FW_DATA"
  return $rc
}

step_configure() {
  # Unknowns of the GPU machine: a CMake 4 (the carried CMake files are
  # 3.2x's; old policy floors are an error there without the minimum) and a
  # host compiler newer than nvcc accepts (torch's CMake files enable CUDA;
  # this project compiles no CUDA code).
  local args=(-S "$FW_ROOT" -B "$FW_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DFRAMEWORM_PYTHON="$(command -v "$FW_PY")" -DCMAKE_PREFIX_PATH="$FW_PREFIX/usr"
    -DPKG_CONFIG_EXECUTABLE="$FW_PREFIX/usr/bin/pkg-config" -DCMAKE_POLICY_VERSION_MINIMUM=3.5
    -DCMAKE_CUDA_FLAGS=-allow-unsupported-compiler)
  [ -x "$FW_PREFIX/usr/bin/ninja" ] && args+=(-DCMAKE_MAKE_PROGRAM="$FW_PREFIX/usr/bin/ninja")
  [ -n "${FW_NCCL_INC:-}" ] && args+=(-DNCCL_INCLUDE_DIR="$FW_NCCL_INC")
  # A clean configure (nothing cached from an earlier run); objects stay,
  # unless GPU_FRESH=1 (the output folder, which may be inside, stays).
  if [ "${GPU_FRESH:-0}" = 1 ] && [ -d "$FW_BUILD" ]; then
    find "$FW_BUILD" -mindepth 1 -maxdepth 1 ! -path "$FW_OUT" -exec rm -rf {} +
  fi
  rm -f "$FW_BUILD/CMakeCache.txt"
  echo "\$ cmake ${args[*]}"
  cmake "${args[@]}"
  local rc=$?
  local cache="$FW_BUILD/CMakeCache.txt"
  if [ -f "$cache" ]; then
    echo "--- where configure found the carried packages"
    local line outside=0
    while IFS= read -r line; do
      echo "  $line"
      case "${line#*=}" in
        "$FW_PREFIX"/*) ;;
        *) outside=1 ;;
      esac
    done < <(grep -E '^(Protobuf_(INCLUDE_DIR|LIBRARY_RELEASE|LITE_LIBRARY_RELEASE|PROTOC_EXECUTABLE)|ZLIB_(INCLUDE_DIR|LIBRARY_RELEASE)|OPENSSL_(INCLUDE_DIR|SSL_LIBRARY|CRYPTO_LIBRARY)|SQLite3_(INCLUDE_DIR|LIBRARY)|GTest_DIR|gRPC_DIR|absl_DIR|yaml-cpp_DIR|GLOO_INCLUDE_DIR|c-ares_(INCLUDE_DIR|LIBRARY)|pkgcfg_lib_RE2_re2|PKG_CONFIG_EXECUTABLE|CMAKE_MAKE_PROGRAM)[:=]' "$cache" |
      sed -E 's/:[A-Z]+=/=/')
    if [ $outside = 1 ]; then
      echo "SOME CARRIED PACKAGES WERE FOUND OUTSIDE THE PREFIX (the system's own copies): above"
      note "carried packages found outside the prefix"
      # The rehearsal proves the carried set complete: there it fails.
      [ "$FW_MODE" = rehearse ] && [ $rc = 0 ] && rc=1
    else
      echo "every carried package was found in the prefix"
      note "every carried package found in the prefix"
    fi
    echo "--- torch, CUDA and NCCL as configured"
    grep -E '^(NCCL_INCLUDE_DIR|CUDA_TOOLKIT_ROOT_DIR|CUDA_VERSION|CMAKE_CUDA_COMPILER|CMAKE_CXX_COMPILER|Torch_DIR|FRAMEWORM_PYTHON)[:=]' "$cache" | sed 's/^/  /'
    if grep -q -- '-DFRAMEWORM_HAVE_NCCL' "$FW_BUILD/build.ninja" 2> /dev/null; then
      echo "NCCL backend: compiled in (FRAMEWORM_HAVE_NCCL)"
      note "NCCL backend compiled in"
    else
      echo "NCCL BACKEND NOT COMPILED IN: NCCL_INCLUDE_DIR or the CUDA toolkit was not found"
      note "NCCL backend not compiled in"
      [ $rc = 0 ] && rc=1
    fi
  fi
  if [ $rc != 0 ] && [ -d "$FW_BUILD/CMakeFiles" ]; then
    (cd "$FW_BUILD" && tar czf "$FW_OUT/configure-debug.tar.gz" CMakeCache.txt CMakeFiles/CMakeConfigureLog.yaml \
      CMakeFiles/CMakeOutput.log CMakeFiles/CMakeError.log 2> /dev/null)
    echo "configure's own logs: $FW_OUT/configure-debug.tar.gz"
  fi
  return $rc
}

step_build() {
  [ -f "$FW_BUILD/build.ninja" ] || skip "not configured"
  local nice=()
  [ "$FW_MODE" = rehearse ] && nice=(nice -n 10)
  echo "\$ cmake --build $FW_BUILD -j $FW_JOBS --target ${TARGETS[*]} -- -k 0"
  "${nice[@]}" cmake --build "$FW_BUILD" -j "$FW_JOBS" --target "${TARGETS[@]}" -- -k 0
  local rc=$? t missing=()
  for t in "${TARGETS[@]}"; do [ -x "$FW_BUILD/bin/$t" ] || missing+=("$t"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "NOT BUILT: ${missing[*]}"
    note "not built: ${missing[*]}"
    [ $rc = 0 ] && rc=1
  else
    echo "built: ${TARGETS[*]}"
    note "${#TARGETS[@]} targets, -j $FW_JOBS"
  fi
  return $rc
}

# The built programs load every carried library from the prefix, nothing is
# missing; in the rehearsal also: every header the build read from
# /usr/include belongs to the toolchain (libc, kernel headers, libstdc++).
step_linkcheck() {
  local libs_list="$FW_WORK/carried-libs.txt" bad=0 b
  (cd "$FW_PREFIX/usr/lib/$ARCH_DIR" 2> /dev/null && ls -- *.so.* 2> /dev/null) | sort -u > "$libs_list"
  for b in "${TARGETS[@]}"; do
    local f="$FW_BUILD/bin/$b"
    [ -x "$f" ] || { echo "$b: not built"; continue; }
    ldd "$f" > "$FW_WORK/ldd.$b" 2>&1
    local counts
    counts=$(awk -v p="$FW_PREFIX/" -v list="$libs_list" '
      BEGIN { while ((getline l < list) > 0) carried[l] = 1 }
      /=>/ {
        name = $1; path = $3
        if (path == "not") { print "NOT FOUND: " name > "/dev/stderr"; bad = 1; next }
        if (index(path, p) == 1) { n["prefix"]++; next }
        if (path ~ /site-packages|\/torch\/lib\//) { n["torch/nvidia"]++; next }
        if (path ~ /^\/usr\/local\/cuda/) { n["cuda"]++; next }
        if (name in carried) { print "FROM THE SYSTEM, NOT THE PREFIX: " name " => " path > "/dev/stderr"; bad = 1; next }
        n["system"]++; sys[name] = 1
      }
      END {
        s = ""; for (k in n) s = s k "=" n[k] " "
        t = ""; for (k in sys) t = t k " "
        print s "| system: " t
        exit bad }' "$FW_WORK/ldd.$b")
    local rc=$?
    echo "$b: $counts"
    [ $rc = 0 ] || bad=1
  done
  [ $bad = 0 ] && note "carried libraries load from the prefix"
  if [ "$FW_MODE" = rehearse ] && command -v dpkg > /dev/null; then
    echo "--- headers the build read from /usr/include, by package"
    ninja -C "$FW_BUILD" -t deps 2> /dev/null | awk '$1 ~ /^\/usr\/include\// {print $1}' | sort -u > "$FW_WORK/usr-headers.txt"
    local pk
    pk=$(xargs -r dpkg -S < "$FW_WORK/usr-headers.txt" 2> /dev/null | cut -d: -f1 | tr ', ' '\n\n' | grep -v '^$' | sort | uniq -c)
    echo "$pk"
    local others
    others=$(echo "$pk" | awk '{print $2}' | grep -v -E '^(libc6-dev|linux-libc-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev|libcrypt-dev|libnsl-dev|libtirpc-dev|gcc-[0-9]+|g\+\+-[0-9]+)$' || true)
    if [ -n "$others" ]; then
      echo "HEADERS FROM OTHER SYSTEM PACKAGES (should have come from the prefix): $others"
      bad=1
    else
      echo "$(wc -l < "$FW_WORK/usr-headers.txt") headers from /usr/include, all of the toolchain's packages"
      note "the $(wc -l < "$FW_WORK/usr-headers.txt") headers read from /usr/include are the toolchain's ($(echo "$pk" | awk '{print $2}' | tr '\n' ' ' | sed 's/ $//'))"
    fi
  fi
  return $bad
}

# A gtest binary through ctest. With CUDA required (the GPU run), a skipped
# test counts as a failure.
step_test() {
  local name=$1
  [ -x "$FW_BUILD/bin/$name" ] || skip "$name not built"
  local out="$FW_WORK/tests/$name.out"
  (cd "$FW_BUILD" && FRAMEWORM_REQUIRE_CUDA="$FW_REQUIRE_CUDA" ctest -R "^$name\$" -V --output-on-failure) 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  local passed skipped failed
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$out" | tail -1 | awk '{print $NF}')
  skipped=$(grep -oE '\[  SKIPPED \] [0-9]+ test' "$out" | tail -1 | awk '{print $(NF-1)}')
  failed=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$out" | tail -1 | awk '{print $(NF-1)}')
  echo "$name ${passed:-0} ${skipped:-0} ${failed:-0}" > "$FW_WORK/tests/$name.summary"
  echo "$name: passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0} (ctest exit $rc)"
  if [ -z "$passed" ] && [ -z "$failed" ]; then
    echo "NO GTEST SUMMARY: the binary did not run to its end"
    [ $rc = 0 ] && rc=1
  fi
  if [ "${failed:-0}" -gt 0 ]; then
    note "${failed} failed: $(grep -A2 -m1 ': Failure$' "$out" | tail -2 | sed -E 's/^[0-9]+: //' | grep -v '^Failed$' | tr '\n' ' ' | cut -c1-160)"
  fi
  if [ "${skipped:-0}" -gt 0 ]; then
    if [ "$FW_REQUIRE_CUDA" = 1 ]; then
      echo "SKIPPED TESTS COUNT AS FAILURES ON THE GPU RUN"
      note "${skipped} skipped, counted as failures"
      [ $rc = 0 ] && rc=1
    else
      note "${skipped} skipped (no GPU), ${passed:-0} passed"
    fi
  fi
  return $rc
}

# One benchmark run: kind fw (frameworm-train, one process), fwddp (the same
# under WORLD_SIZE=1: DistributedTrainer over NCCL, gloo in the rehearsal),
# py (bench/peer_ddp.py), pyddp (the same in DistributedDataParallel).
step_bench() {
  local kind=$1 model=$2
  local common=(--model="$model" --batch-size="$FW_BATCH" --max-steps="$FW_STEPS" --seed=42
    --threads=4 --data-dir="$FW_DATA")
  local fwflags=(--epochs=1 --log-every=1 --checkpoint-dir="$FW_WORK/ck-$kind-$model")
  local port
  port=$(py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local ddp_env=(WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=0
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port")
  local cmd PYENV
  pyenv_words
  case "$kind" in
    fw | fwddp) [ -x "$FW_BUILD/bin/frameworm-train" ] || skip "frameworm-train not built" ;;
  esac
  case "$kind" in
    fw) cmd=("$FW_BUILD/bin/frameworm-train" "${common[@]}" "${fwflags[@]}" --device="$FW_DEV") ;;
    fwddp) cmd=(env "${ddp_env[@]}" "$FW_BUILD/bin/frameworm-train" "${common[@]}" "${fwflags[@]}"
      --backend="$FW_DDP_BACKEND") ;;
    py) cmd=("${PYENV[@]}" "$FW_PY" "$FW_ROOT/bench/peer_ddp.py" "${common[@]}"
      --device="$FW_DEV" --frameworm-syncs) ;;
    pyddp) cmd=("${PYENV[@]}" "${ddp_env[@]}" "$FW_PY" "$FW_ROOT/bench/peer_ddp.py"
      "${common[@]}" --device="$FW_DEV" --frameworm-syncs --ddp --backend="$FW_DDP_BACKEND") ;;
    *) echo "unknown kind $kind"; return 2 ;;
  esac
  echo "\$ ${cmd[*]}"
  # stamp.py itself runs with the prefix's library path: frameworm-train needs it.
  "$FW_PY" "$FW_ROOT/bench/gpu_stamp.py" "$FW_WORK/bench/$kind-$model.tsv" "${cmd[@]}"
  local rc=$?
  if [ $rc != 0 ]; then
    note "$(cut -f2- "$FW_WORK/bench/$kind-$model.tsv" | grep -v -e step_seconds -e '^\s*$' | tail -1 | cut -c1-160)"
  fi
  return $rc
}

# P5 on the run's device: how long a checkpoint of a synthetic model blocks
# training, synchronous against asynchronous (on the GPU the snapshot copies
# into pinned host memory). GPU_P5_MIB MiB of parameters (GPU run 1024,
# rehearsal 64), as many again of momentum.
step_p5() {
  [ -x "$FW_BUILD/bin/p5_checkpoint" ] || skip "p5_checkpoint not built"
  local mib=${GPU_P5_MIB:-64}
  [ "$FW_MODE" = gpu ] && mib=${GPU_P5_MIB:-1024}
  rm -rf "$FW_WORK/p5" && mkdir -p "$FW_WORK/p5"
  local cmd=("$FW_BUILD/bin/p5_checkpoint" --dir="$FW_WORK/p5" --mib="$mib" --trials=3 --device="$FW_DEV")
  echo "\$ ${cmd[*]}"
  "${cmd[@]}" | tee "$FW_WORK/p5.jsonl"
  local rc=${PIPESTATUS[0]}
  rm -rf "$FW_WORK/p5"
  return "$rc"
}

report() {
  FW_FINAL="${1:-0}" py "$FW_ROOT/bench/gpu_report.py" "$FW_WORK" "$FW_OUT/$FW_REPORT" "$FW_ROOT/bench/results/$FW_REPORT" ||
    echo "report.py failed (exit $?)"
}

# run_step NAME LIMIT_S FUNCTION ARGS...: runs bash gpu.sh --step FUNCTION
# ARGS with a time limit (cut to what is left of the budget), records its
# result and rewrites the report.
run_step() {
  local name=$1 cap=$2
  shift 2
  local left=$((FW_DEADLINE - $(date +%s)))
  case "$name" in hide | env | unpack | configure | build | linkcheck) ;; *)
    if [ -n "${GPU_ONLY:-}" ] && [[ " $GPU_ONLY " != *" $name "* ]]; then
      printf '%s\tnot run\t\t0\tnot in GPU_ONLY\n' "$name" >> "$FW_WORK/steps.tsv"
      return 0
    fi ;;
  esac
  if [ "$left" -lt 20 ]; then
    printf '%s\tnot run\t\t0\tno time left of the %ss budget\n' "$name" "$FW_BUDGET" >> "$FW_WORK/steps.tsv"
    cp "$FW_WORK/steps.tsv" "$FW_OUT/steps.tsv"
    echo "===== [$name] not run: no time left"
    report 0
    return 1
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo
  echo "===== $(date -u +%H:%M:%S) [$name] start (limit ${cap}s, $((left)) s of the budget left)"
  local t0 t1 rc status note
  t0=$(date +%s.%N)
  FW_STEP_NAME=$name timeout --kill-after=10 "$cap" bash "$SELF" --step "$@"
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}')
  case $rc in
    0) status=passed ;;
    124 | 137) status="timed out"; echo "killed at the ${cap}s limit" >> "$FW_WORK/note.$name" ;;
    *) status=failed ;;
  esac
  if [ -f "$FW_WORK/skip.$name" ]; then
    status=skipped
    note=$(cat "$FW_WORK/skip.$name")
  else
    note=""
    [ -f "$FW_WORK/note.$name" ] && note=$(tr '\n' ';' < "$FW_WORK/note.$name" | sed 's/;$//')
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" "${note//|//}" >> "$FW_WORK/steps.tsv"
  cp "$FW_WORK/steps.tsv" "$FW_OUT/steps.tsv"
  echo "===== $(date -u +%H:%M:%S) [$name] $status (exit $rc, ${secs} s)"
  report 0
  return $rc
}

# Paths and tools from the prefix, the CUDA toolkit, NCCL's headers.
setup_env() {
  export FW_ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
  export PATH="$FW_PREFIX/usr/bin:$PATH"
  if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="$PATH:/usr/local/cuda/bin"
  fi
  export CMAKE_PREFIX_PATH="$FW_PREFIX/usr"
  export PKG_CONFIG_LIBDIR="$FW_PREFIX/usr/lib/$ARCH_DIR/pkgconfig:$FW_PREFIX/usr/share/pkgconfig:$FW_PREFIX/usr/lib/pkgconfig"
  unset PKG_CONFIG_PATH
  export LD_LIBRARY_PATH="$FW_PREFIX/usr/lib/$ARCH_DIR:$FW_PREFIX/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The prefix's multiarch headers (openssl/opensslconf.h, ...): the compiler
  # searches only the system's /usr/include/<arch> on its own, and CMake's
  # OPENSSL_INCLUDE_DIR names <prefix>/usr/include alone.
  export CPATH="$FW_PREFIX/usr/include/$ARCH_DIR${CPATH:+:$CPATH}"
  export FW_DATA="$FW_PREFIX/usr/share/datasets/fashion-mnist"
  export FRAMEWORM_DATA_DIR="$FW_DATA"
  export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
  export PYTHONUNBUFFERED=1
  # The CUDA toolkit's include folder, and the pip wheels' (nvidia/*/include).
  FW_CUDA_INC=""
  if command -v nvcc > /dev/null; then
    FW_CUDA_INC="$(realpath -m "$(dirname "$(realpath "$(command -v nvcc)")")/../include")"
  fi
  FW_PIP_NVIDIA_INC="$(py -c 'import os, glob, torch; s = os.path.dirname(os.path.dirname(torch.__file__)); print(" ".join(sorted(glob.glob(os.path.join(s, "nvidia", "*", "include")))))' 2> /dev/null)"
  FW_NCCL_INC=""
  local d
  for d in $FW_PIP_NVIDIA_INC $FW_CUDA_INC /usr/local/cuda/include /usr/include; do
    if [ -e "$d/nccl.h" ]; then FW_NCCL_INC="$d"; break; fi
  done
  # ProcessGroupNCCL.hpp includes cuBLAS/cuSPARSE/cuSOLVER headers through
  # ATen's CUDA context: if the toolkit lacks them, take the wheels' copies.
  if [ -n "$FW_CUDA_INC" ] && [ ! -e "$FW_CUDA_INC/cublas_v2.h" ]; then
    for d in $FW_PIP_NVIDIA_INC; do
      if [ -e "$d/cublas_v2.h" ]; then
        export CPATH="$d${CPATH:+:$CPATH}"
        echo "cublas_v2.h is not in the toolkit ($FW_CUDA_INC): CPATH gets $d"
        break
      fi
    done
  fi
  export FW_CUDA_INC FW_PIP_NVIDIA_INC FW_NCCL_INC
}

main() {
  mkdir -p "$FW_OUT" "$FW_WORK/bench" "$FW_WORK/tests"
  rm -f "$FW_WORK"/note.* "$FW_WORK"/skip.* "$FW_WORK"/bench/* "$FW_WORK"/tests/* "$FW_WORK/env.summary"
  : > "$FW_WORK/steps.tsv"
  echo "bench/gpu.sh: mode $FW_MODE, $(date -u), root $FW_ROOT, build $FW_BUILD, prefix $FW_PREFIX,"
  echo "  output $FW_OUT, python $FW_PY, budget ${FW_BUDGET}s, batch $FW_BATCH, steps $FW_STEPS, warm-up $FW_WARMUP"
  local rc=0
  if [ "$FW_MODE" = rehearse ]; then
    run_step hide 300 step_hide || rc=1
    [ -f "$FW_WORK/hidden.txt" ] && wc -l < "$FW_WORK/hidden.txt" > "$FW_WORK/hidden.count"
  fi
  setup_env
  run_step env 90 step_env || rc=1
  run_step unpack 120 step_unpack || rc=1
  run_step configure 300 step_configure || rc=1
  run_step build "$FW_BUILD_LIMIT" step_build || rc=1
  run_step linkcheck 120 step_linkcheck || rc=1
  run_step nccl_test 180 step_test nccl_test || rc=1
  local m
  for m in cnn mlp; do
    run_step "bench-frameworm-$m" 90 step_bench fw "$m" || rc=1
    run_step "bench-python-$m" 90 step_bench py "$m" || rc=1
    run_step "bench-frameworm-ddp-$m" 90 step_bench fwddp "$m" || rc=1
    run_step "bench-python-ddp-$m" 90 step_bench pyddp "$m" || rc=1
  done
  (cd "$FW_WORK" && tar czf "$FW_OUT/bench.tar.gz" bench tests env.summary torch.txt 2> /dev/null)
  run_step gpu_cluster_e2e 200 step_test gpu_cluster_e2e_test || rc=1
  run_step p5-checkpoint 150 step_p5 || rc=1
  cp "$FW_WORK/steps.tsv" "$FW_OUT/steps.tsv"
  (cd "$FW_WORK" && tar czf "$FW_OUT/bench.tar.gz" bench tests env.summary torch.txt 2> /dev/null)
  echo
  echo "===== report: $FW_OUT/$FW_REPORT (and bench/results/$FW_REPORT)"
  report 1
  echo "files in $FW_OUT: $(ls "$FW_OUT" | tr '\n' ' ')"
  return $rc
}

# ------------------------------------------------------------------- entry

if [ "${1:-}" = --step ]; then
  shift
  case "${1:-}" in
    step_*) "$@"; exit $? ;;
    *) echo "bad step ${1:-}" >&2; exit 2 ;;
  esac
fi

MODE=gpu
case "${1:-}" in
  "") ;;
  --rehearse) MODE=rehearse ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

if [ "$MODE" = rehearse ] && [ -z "${FW_IN_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "bench/gpu.sh --rehearse: needs root (a private mount namespace)" >&2; exit 1; }
  command -v unshare > /dev/null || { echo "bench/gpu.sh --rehearse: needs unshare" >&2; exit 1; }
  exec env FW_IN_NS=1 unshare --mount --propagation private -- bash "$SELF" --rehearse
fi

export FW_MODE="$MODE" FW_ROOT="$ROOT"
if [ "$MODE" = gpu ]; then
  export FW_BUILD="$ROOT/build-gpu" FW_PREFIX="${GPU_PREFIX:-/tmp/fw-deps}" FW_OUT="${OUT:-$ROOT/build-gpu/out}"
  export FW_WORK=/tmp/fw-gpu-work FW_PY="${PYTHON:-python3}" FW_JOBS="${GPU_JOBS:-$(nproc)}"
  export FW_BATCH="${GPU_BATCH:-256}" FW_STEPS="${GPU_STEPS:-230}" FW_WARMUP="${GPU_WARMUP:-30}"
  export FW_BUDGET="${GPU_BUDGET_S:-540}" FW_BUILD_LIMIT=420 FW_DEV=cuda FW_DDP_BACKEND=nccl
  export FW_REQUIRE_CUDA=1 FW_REPORT=gpu.md FW_LOG=gpu.log
else
  py_default=python3
  [ -x "$ROOT/.venv/bin/python" ] && py_default="$ROOT/.venv/bin/python"
  export FW_BUILD="$ROOT/build-rehearse" FW_PREFIX=/tmp/fw-deps-rehearse
  export FW_OUT="${REHEARSE_OUT:-$ROOT/build-rehearse/out}" FW_WORK=/tmp/fw-rehearse-work
  export FW_PY="${PYTHON:-$py_default}" FW_JOBS="${GPU_JOBS:-2}"
  export FW_BATCH="${GPU_BATCH:-256}" FW_STEPS="${GPU_STEPS:-40}" FW_WARMUP="${GPU_WARMUP:-10}"
  export FW_BUDGET="${GPU_BUDGET_S:-5400}" FW_BUILD_LIMIT=3600 FW_DEV=cpu FW_DDP_BACKEND=gloo
  export FW_REQUIRE_CUDA=0 FW_REPORT=gpu_rehearsal.md FW_LOG=rehearsal.log
fi
# At most one epoch of full batches: the same steps on both sides.
max_steps=$((60000 / FW_BATCH))
if [ "$FW_STEPS" -gt "$max_steps" ]; then FW_STEPS=$max_steps; fi
if [ "$FW_WARMUP" -ge "$FW_STEPS" ]; then FW_WARMUP=$((FW_STEPS / 4)); fi
export FW_STEPS FW_WARMUP
export FW_DEADLINE=$(($(date +%s) + FW_BUDGET))

mkdir -p "$FW_OUT"
: > "$FW_OUT/$FW_LOG"
main 2>&1 | tee -a "$FW_OUT/$FW_LOG"
rc=${PIPESTATUS[0]}
# Files under $OUT come back only up to 16 MiB each: keep the head and the tail.
if [ -f "$FW_OUT/$FW_LOG" ] && [ "$(stat -c %s "$FW_OUT/$FW_LOG")" -gt $((15 * 1048576)) ]; then
  { head -c $((3 * 1048576)) "$FW_OUT/$FW_LOG"; echo; echo "[... cut to fit ...]"
    tail -c $((11 * 1048576)) "$FW_OUT/$FW_LOG"; } > "$FW_OUT/$FW_LOG.cut"
  mv "$FW_OUT/$FW_LOG.cut" "$FW_OUT/$FW_LOG"
fi
exit "$rc"
