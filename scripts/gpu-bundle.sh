#!/usr/bin/env bash
# Packs what flyt's `gpu` checks need out of a build tree into a small folder that can travel to a
# GPU machine that has NVIDIA's driver and CUDA toolkit but not flyt's build dependencies (a stock
# CUDA image): flyt's programs and gpu test binaries (stripped), flyt's libcudart.so.13, the
# nvcc-built test programs, and the shared libraries they load that are not part of glibc or the
# driver (libbpf, libpq, libtirpc, ...). scripts/gpu-checks.sh runs the checks from it.
#   scripts/gpu-bundle.sh <build dir> <dest dir>
# The folder keeps the build tree's layout (bin/, lib/, tests/...), so the test scripts take it as
# their build dir. Test binaries find source files (fatbins, scripts) by the absolute source path
# they were built with; gpu-checks.sh makes that path point at the checkout it runs in.
set -euo pipefail
build=$(cd "$1" && pwd)
dest=$2
rm -rf "$dest"
mkdir -p "$dest/syslib"
dest=$(cd "$dest" && pwd)

elf() { [ -f "$1" ] && head -c 4 "$1" 2>/dev/null | grep -q ELF; }
copy() { # copy <path relative to build>: stripped when an ELF file
  local rel=$1
  mkdir -p "$dest/$(dirname "$rel")"
  if elf "$build/$rel"; then
    strip --strip-debug -o "$dest/$rel" "$build/$rel"
  else
    cp -a "$build/$rel" "$dest/$rel"
  fi
}

# flyt's programs and libraries.
for f in "$build"/bin/*; do copy "bin/$(basename "$f")"; done
(cd "$build" && find lib -type f -o -type l) | while read -r rel; do copy "$rel"; done
# The nvcc-built programs the gpu checks run.
for d in cuda remote programs trace; do
  [ -d "$build/tests/$d" ] || continue
  (cd "$build" && find "tests/$d" -maxdepth 1 -type f -perm -u+x) | while read -r rel; do copy "$rel"; done
done
# The gpu test binaries (GoogleTest), wherever CMake put them.
(cd "$build" && find . -type f -perm -u+x \( -name '*_gpu_test' -o -name real_nvml_test \) \
  -not -path './CMakeFiles/*' | sed 's|^\./||') | while read -r rel; do copy "$rel"; done

# Shared libraries outside glibc and the driver that any of them loads.
find "$dest" -type f -perm -u+x | while read -r f; do
  elf "$f" || continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) continue ;;
    libcuda.so*|libnvidia-*|libcudart.so*) continue ;;
  esac
  case $lib in "$build"/*) continue ;; esac
  cp -L "$lib" "$dest/syslib/"
done
# libtirpc reads /etc/netconfig (Debian's libtirpc-common), which a stock image may lack.
[ -f /etc/netconfig ] && cp /etc/netconfig "$dest/syslib/netconfig"
echo "$build" >"$dest/BUILD_DIR"
du -sh "$dest"
