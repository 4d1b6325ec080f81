#!/usr/bin/env bash
# cross.sh -- builds every gpupool program for arm64 (aarch64-linux-gnu) on this
# amd64 host and smoke-tests the result under qemu-user (what `make cross` runs,
# and `make test` through it):
#
#   scripts/cross.sh [BUILD_DIR]      (default build-arm64)
#
#   1. configure with cmake/aarch64-linux-gnu.cmake (Debian's cross gcc, the
#      :arm64 multiarch libraries) and build; GP_CROSS_TARGETS limits the build
#      to those targets (default: all, unit tests and benches included);
#   2. each program is an AArch64 ELF (readelf) whose --version runs under
#      qemu-aarch64-static and names the program;
#   3. gpupool-sim replays the shipped openb trace (data/openb, seed 42) under
#      qemu and must print the same JSON as the host build in GP_NATIVE_BUILD
#      (default build/, skipped with a note when it has no gpupool-sim);
#   4. the arm64 device plugin on the arm64 fake NVML, run under qemu, against
#      the kubelet simulator (scripts/demo.sh with GP_PLUGIN_WRAPPER):
#      registration, ListAndWatch, one Allocate, SIGTERM with exit status 0;
#   5. libgpupool-cuda.so: no glibc reference newer than 2.17, a 4 GiB limit enforced
#      on the arm64 fake libcuda under qemu
# Exit 0 when everything passes; otherwise 1 with what failed.
# Packages: scripts/install-deps.sh --cross. binfmt_misc is not needed: qemu
# is named explicitly. It runs without -L /usr/aarch64-linux-gnu: that loader
# (libc6-arm64-cross) mixed with the multiarch libc6:arm64 hangs in
# pthread_create; the host's /lib/ld-linux-aarch64.so.1 (libc6:arm64) matches.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-arm64}
NATIVE=${GP_NATIVE_BUILD:-$ROOT/build}
TRIPLET=aarch64-linux-gnu
PROGRAMS=(gpupool-device-plugin gpupool-scheduler-extender kubectl-gpupool gpupool-sim)

die() { printf 'cross: FAILED: %s\n' "$*" >&2; exit 1; }
log() { printf '%s cross: %s\n' "$(date +%H:%M:%S)" "$*"; }

for c in cmake $TRIPLET-gcc $TRIPLET-g++ $TRIPLET-pkg-config qemu-aarch64-static readelf; do
  command -v "$c" >/dev/null || die "$c missing: run scripts/install-deps.sh --cross"
done
[[ -e /lib/ld-linux-aarch64.so.1 ]] || die "/lib/ld-linux-aarch64.so.1 missing (libc6:arm64): run scripts/install-deps.sh --cross"
QEMU=(qemu-aarch64-static)

# --- 1. build ---------------------------------------------------------------------
t0=$SECONDS
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/$TRIPLET.cmake" >/dev/null || die "cmake configure"
targets=()
for t in ${GP_CROSS_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" "${targets[@]}" -- --no-print-directory >"$BUILD/cross-build.log" 2>&1 ||
  { tail -n 40 "$BUILD/cross-build.log" >&2; die "cross build (log: $BUILD/cross-build.log)"; }
log "built $BUILD in $((SECONDS - t0)) s"

# --- 2. every program: AArch64, runs under qemu ---------------------------------------
for p in "${PROGRAMS[@]}"; do
  bin=$BUILD/bin/$p
  [[ -x $bin ]] || die "$bin not built"
  machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
  [[ $machine == AArch64 ]] || die "$p is a '$machine' binary, not AArch64"
  flag=--version

  out=$("${QEMU[@]}" "$bin" "$flag" 2>&1) || die "$p $flag under qemu: $out"
  grep -q "$p" <<<"$out" || die "$p $flag under qemu printed no program name: $out"
  log "$p: $machine, $flag under qemu: $(head -n1 <<<"$out")"
done
readelf -h "$BUILD/test/fakenvml/libnvidia-ml.so.1" | grep -q 'Machine: *AArch64' ||
  die "the fake NVML ($BUILD/test/fakenvml/libnvidia-ml.so.1) is not an AArch64 library"

# --- 3. the simulator agrees with the host build --------------------------------------
nodes=$ROOT/data/openb/openb_node_list_gpu_node.csv
pods=$ROOT/data/openb/openb_pod_list_default.csv
t=$SECONDS
arm=$("${QEMU[@]}" "$BUILD/bin/gpupool-sim" --nodes "$nodes" --pods "$pods" --seed 42 -o json) ||
  die "gpupool-sim under qemu on data/openb"
log "gpupool-sim (arm64, qemu) on data/openb, seed 42, $((SECONDS - t)) s: $(head -n1 <<<"$arm")"
if [[ -x $NATIVE/bin/gpupool-sim ]]; then
  host=$("$NATIVE/bin/gpupool-sim" --nodes "$nodes" --pods "$pods" --seed 42 -o json) ||
    die "gpupool-sim ($NATIVE) on data/openb"
  [[ $arm == "$host" ]] || die "gpupool-sim differs between arm64 and $NATIVE:
arm64: $arm
host:  $host"
  log "gpupool-sim: arm64 output identical to $NATIVE/bin/gpupool-sim"
else
  log "gpupool-sim: no host build in $NATIVE, arm64 output not compared"
fi

# --- 4. the device plugin up to registration and an Allocate --------------------------
t=$SECONDS
out=$(GP_PLUGIN_WRAPPER="${QEMU[*]}" "$ROOT/scripts/demo.sh" "$BUILD" 2>&1) ||
  { printf '%s\n' "$out" >&2; die "the arm64 device plugin under qemu (scripts/demo.sh)"; }
grep -q '^demo: part 1 OK' <<<"$out" || { printf '%s\n' "$out" >&2; die "scripts/demo.sh did not finish"; }
log "device plugin (arm64, qemu, fake NVML): registered, ListAndWatch, Allocate, SIGTERM -> 0 ($((SECONDS - t)) s)"
# --- 5. the isolation library: old-glibc references, and a limit under qemu --------------
t=$SECONDS
OBJDUMP=$TRIPLET-objdump "$ROOT/test/unit/cuda/check_glibc_versions.sh" "$BUILD/lib/libgpupool-cuda.so" >/dev/null ||
  die "libgpupool-cuda.so (arm64) needs a newer glibc than 2.17 or exports too much"
out=$("${QEMU[@]}" -E LD_LIBRARY_PATH="$BUILD/test/fakecuda" -E FAKECUDA_DEVICES=16g \
      -E CUDA_DEVICE_MEMORY_LIMIT=4g -E CUDA_DEVICE_MEMORY_SHARED_CACHE="$BUILD/cross-region" \
      -E LD_PRELOAD="$BUILD/lib/libgpupool-cuda.so" \
      "$BUILD/test/cuda/gpupool-cudaprobe" init info alloc 4g alloc 1m 2>&1) || die "cudaprobe under qemu: $out"
rm -f "$BUILD"/cross-region.*
grep -q 'info CUDA_SUCCESS free=4294967296 total=4294967296' <<<"$out" &&
  grep -q 'alloc CUDA_ERROR_OUT_OF_MEMORY' <<<"$out" ||
  die "libgpupool-cuda.so (arm64) under qemu did not enforce 4 GiB: $out"
log "libgpupool-cuda.so (arm64, qemu, fake libcuda): glibc <= 2.17, 4 GiB enforced ($((SECONDS - t)) s)"
log "OK: ${#PROGRAMS[@]} programs for arm64 in $BUILD, smoke-tested under qemu ($((SECONDS - t0)) s in all)"
