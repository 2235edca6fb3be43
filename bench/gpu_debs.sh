#!/usr/bin/env bash
# The Debian packages that bench/gpu.sh needs on a GPU machine without a
# package registry, as .deb files in .debs/ (git-ignored; carry it).
#
#   bench/gpu_debs.sh                fetch the set (apt-get download; needs the
#                                    registry), then check it as --verify does
#   bench/gpu_debs.sh --verify       unpack .debs/ into a scratch prefix and check
#                                    it: every symbolic link resolves inside the
#                                    prefix, every library a carried program or
#                                    library needs is carried (or is the C/C++
#                                    runtime), every package of the list is there;
#                                    prints the sizes
#   bench/gpu_debs.sh --unpack DIR   unpack .debs/ into DIR the way gpu.sh uses it
#                                    (merged /usr, absolute links made relative,
#                                    pkg-config files pointing into DIR), then the
#                                    same checks; exit 1 if one fails
#
# The set is complete on its own: headers, CMake and pkg-config files, the
# shared libraries the -dev links point at, protoc and grpc_cpp_plugin,
# pkg-config (gRPC's CMake files find re2 through it), ninja and Fashion-MNIST.
# Never unpack it into /: `dpkg -x` into a prefix only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBS="${FRAMEWORM_DEBS_DIR:-$ROOT/.debs}"
ARCH_DIR=x86_64-linux-gnu

PACKAGES=(
  # gRPC and protobuf (libraries, headers, CMake files, protoc and its plugin)
  libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
  # what gRPC links and finds: abseil, re2, c-ares, OpenSSL, zlib
  libabsl-dev libabsl20220623 libre2-dev libre2-9 libc-ares-dev libc-ares2
  libssl-dev libssl3 zlib1g-dev zlib1g
  # pkg-config (gRPC's Findre2.cmake needs it)
  pkgconf pkgconf-bin libpkgconf3
  # the rest of the build: GoogleTest, yaml-cpp, SQLite, gloo's headers, ninja
  libgtest-dev libgmock-dev googletest libyaml-cpp-dev libyaml-cpp0.7 libsqlite3-dev libsqlite3-0
  libgloo-dev ninja-build
  # the data
  dataset-fashion-mnist
)
# Libraries every Linux system has (glibc, the GCC runtime): not carried.
BASE_LIBS='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'

log() { echo "[gpu_debs.sh] $*" >&2; }

# unpack DIR: .debs/*.deb into DIR, relocated; prints what it checked.
# Returns 1 when a check fails (DIR is still usable for a look).
unpack() {
  local prefix
  prefix="$(realpath -m "$1")"
  if ! compgen -G "$DEBS/*.deb" > /dev/null; then
    log "no .deb files in $DEBS: nothing to unpack (run bench/gpu_debs.sh where the registry is, and carry .debs)"
    return 1
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  local d n=0
  for d in "$DEBS"/*.deb; do
    if command -v dpkg > /dev/null; then
      dpkg -x "$d" "$prefix" || return 1
    else
      # No dpkg: a .deb is an ar archive around data.tar.*.
      local data z
      data=$(ar t "$d" | grep '^data\.tar')
      case "$data" in *.xz) z=-J ;; *.gz) z=-z ;; *.zst) z=--zstd ;; *) z= ;; esac
      ar p "$d" "$data" | tar -x $z -f - -C "$prefix" || return 1
    fi
    n=$((n + 1))
  done
  log "unpacked $n packages into $prefix"
  # Merged /usr: /lib, /bin, /sbin of a package go under usr/ (as on the
  # system they came from), so one library folder holds everything.
  local top
  for top in lib lib64 bin sbin; do
    if [ -d "$prefix/$top" ] && [ ! -L "$prefix/$top" ]; then
      mkdir -p "$prefix/usr/$top"
      cp -a "$prefix/$top/." "$prefix/usr/$top/"
      rm -rf "${prefix:?}/$top"
      ln -s "usr/$top" "$prefix/$top"
    fi
  done
  # gloo is used for its headers only (the code is libtorch's own): its
  # library is not carried, so its link and CMake files, which would point
  # at nothing, go.
  rm -rf "$prefix/usr/lib/libgloo.so" "$prefix/usr/share/cmake/Gloo"
  # Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) would
  # point at the system's copy: make them relative, inside the prefix.
  local l t
  while IFS= read -r -d '' l; do
    t="$(readlink "$l")"
    case "$t" in
      /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$prefix$t")" "$l" ;;
    esac
  done < <(find "$prefix" -type l -print0)
  # pkg-config files: prefix=/usr -> prefix=<DIR>/usr (and any other
  # variable that starts with /usr).
  find "$prefix" -name '*.pc' -type f -print0 |
    xargs -0 -r sed -E -i "s#^([A-Za-z_][A-Za-z0-9_]*=)/usr(/|\$)#\1$prefix/usr\2#"
  check "$prefix"
}

# check DIR: the checks of an unpacked prefix. Returns 1 if one fails.
check() {
  local prefix="$1" bad=0 l r
  # 1. Every symbolic link resolves, and inside the prefix.
  local links=0
  while IFS= read -r -d '' l; do
    links=$((links + 1))
    if ! r="$(realpath -e "$l" 2> /dev/null)"; then
      echo "BROKEN LINK: ${l#"$prefix"} -> $(readlink "$l")"
      bad=1
    elif [[ "$r" != "$prefix"/* ]]; then
      echo "LINK OUT OF THE PREFIX: ${l#"$prefix"} -> $r"
      bad=1
    fi
  done < <(find "$prefix" -type l -print0)
  echo "links: $links checked, every one resolves inside the prefix: $([ $bad = 0 ] && echo yes || echo NO)"
  # 2. Every library a carried ELF file needs is carried or a base library.
  local libdir="$prefix/usr/lib/$ARCH_DIR" f need missing=0 elves=0
  if command -v readelf > /dev/null; then
    while IFS= read -r -d '' f; do
      [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
      elves=$((elves + 1))
      while IFS= read -r need; do
        [[ "$need" =~ $BASE_LIBS ]] && continue
        if [ ! -e "$libdir/$need" ] && [ ! -e "$prefix/usr/lib/$need" ]; then
          echo "MISSING LIBRARY: ${f#"$prefix"} needs $need, which is not carried"
          missing=1
        fi
      done < <(readelf -d "$f" 2> /dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    done < <(find "$prefix/usr/lib" "$prefix/usr/bin" -type f \( -name '*.so*' -o -perm -u+x \) -print0 2> /dev/null)
    echo "ELF files: $elves checked, every needed library carried or in the base set: $([ $missing = 0 ] && echo yes || echo NO)"
    [ $missing = 0 ] || bad=1
  else
    echo "ELF files: not checked (no readelf)"
  fi
  # 3. Every package of the list is there (and only one version of each).
  local p c absent=""
  for p in "${PACKAGES[@]}"; do
    c=$(compgen -G "$DEBS/${p}_*.deb" | wc -l)
    if [ "$c" -eq 0 ]; then
      absent="$absent $p"
    elif [ "$c" -gt 1 ]; then
      echo "SEVERAL VERSIONS of $p in $DEBS: $(compgen -G "$DEBS/${p}_*.deb" | xargs -n1 basename | tr '\n' ' ')"
      bad=1
    fi
  done
  if [ -n "$absent" ]; then
    echo "PACKAGES MISSING from $DEBS:$absent"
    bad=1
  else
    echo "packages: all ${#PACKAGES[@]} of the list are there"
  fi
  # 4. What the build looks for.
  local want
  for want in usr/include/grpcpp/grpcpp.h usr/include/google/protobuf/message.h \
    usr/include/absl/status/status.h usr/include/gtest/gtest.h usr/include/yaml-cpp/yaml.h \
    usr/include/sqlite3.h usr/include/gloo/algorithm.h usr/include/zlib.h usr/include/re2/re2.h \
    usr/include/openssl/ssl.h usr/bin/protoc usr/bin/grpc_cpp_plugin usr/bin/pkg-config usr/bin/ninja \
    "usr/lib/$ARCH_DIR/cmake/grpc/gRPCConfig.cmake" "usr/lib/$ARCH_DIR/cmake/absl/abslConfig.cmake" \
    "usr/lib/$ARCH_DIR/pkgconfig/re2.pc" "usr/lib/$ARCH_DIR/libz.so" "usr/lib/$ARCH_DIR/libssl.so" \
    "usr/lib/$ARCH_DIR/libsqlite3.so" "usr/lib/$ARCH_DIR/libprotobuf.so" \
    usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
    usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz; do
    if [ ! -e "$prefix/$want" ]; then
      echo "NOT IN THE PREFIX: /$want"
      bad=1
    fi
  done
  echo "prefix: $(du -sh "$prefix" | cut -f1) unpacked"
  return $bad
}

sizes() {
  echo "sizes of $DEBS:"
  (cd "$DEBS" && du -b ./*.deb | sort -rn | awk '{printf "  %8.1f KiB  %s\n", $1/1024, substr($2,3)}')
  local debs repo
  debs=$(du -cb "$DEBS"/*.deb | tail -1 | cut -f1)
  repo=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
  awk -v d="$debs" -v r="$repo" 'BEGIN {
    printf "total: .debs %.1f MiB + repository files %.1f MiB = %.1f MiB of the 64 MiB that travel\n",
      d/1048576, r/1048576, (d+r)/1048576 }'
  if [ $((debs + repo)) -gt $((62 * 1048576)) ]; then
    echo "TOO BIG: over 62 MiB; trim the list (the data set is the largest)"
    return 1
  fi
}

verify() {
  local scratch rc=0
  scratch="$(mktemp -d /tmp/fw-debs-verify.XXXXXX)"
  unpack "$scratch/prefix" || rc=1
  sizes || rc=1
  rm -rf "$scratch"
  if [ $rc = 0 ]; then log "the set in $DEBS is complete"; else log "the set in $DEBS has problems (above)"; fi
  return $rc
}

case "${1:-}" in
  --unpack)
    [ $# -eq 2 ] || { echo "usage: bench/gpu_debs.sh --unpack DIR" >&2; exit 2; }
    unpack "$2"
    ;;
  --verify)
    verify
    ;;
  "")
    tmp="$(mktemp -d /tmp/fw-debs-new.XXXXXX)"
    trap 'rm -rf "$tmp"' EXIT
    log "downloading ${#PACKAGES[@]} packages"
    (cd "$tmp" && apt-get download "${PACKAGES[@]}")
    # One version of each package: replace the folder as a whole.
    for f in "$tmp"/*.deb; do
      dpkg-deb --show --showformat='${Package} ${Version} ${Architecture}\n' "$f"
    done > "$tmp/MANIFEST"
    rm -rf "$DEBS"
    mv "$tmp" "$DEBS"
    trap - EXIT
    verify
    ;;
  *)
    echo "usage: bench/gpu_debs.sh [--verify | --unpack DIR]" >&2
    exit 2
    ;;
esac
