#!/usr/bin/env bash
# demo.sh <build dir> -- parts 1 and 2 of `make demo` (scripts/demo_pool.py is 3 to 6,
# scripts/demo_dra.py 7 and 8).
#
# 1. gpupool-device-plugin on a simulated node, and what the kubelet sees: the
#    registration, the device list and one Allocate response. The node: the fake NVML
#    (<build>/test/fakenvml/libnvidia-ml.so.1) serving test/fakenvml/inventories/4gpu.json,
#    a temporary socket directory, and the kubelet simulator (test/sim/kubelet_sim.py).
# 2. libgpupool-cuda enforcing a container's share: two processes of one container
#    with a 4 GiB share of a 16 GiB GPU, through the fake libcuda
#    (<build>/test/fakecuda) and the probe (<build>/test/cuda/gpupool-cudaprobe); the
#    second is refused the memory past the share, then a process without the library
#    sees the whole GPU.
#    Not run under GP_PLUGIN_WRAPPER (scripts/cross.sh's qemu): cross.sh runs the
#    library under qemu itself.
# Everything is stopped and removed at the end.
# Exit 0 on success; on any failure, non-zero with the plugin's log.
# GP_PLUGIN_WRAPPER: a command line the plugin runs under (e.g. qemu-aarch64-static
# for an arm64 build, scripts/cross.sh), as in the integration suite.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
PY=${PYTHON:-/usr/bin/python3}
INVENTORY=${GP_DEMO_INVENTORY:-$ROOT/test/fakenvml/inventories/4gpu.json}

die() { echo "demo: $*" >&2; exit 1; }

[ -d "$BUILD" ] || die "no build directory $BUILD (run make first)"
BUILD=$(cd "$BUILD" && pwd)
PLUGIN=$BUILD/bin/gpupool-device-plugin
FAKENVML=$BUILD/test/fakenvml
[ -x "$PLUGIN" ] || die "$PLUGIN is not built"
[ -e "$FAKENVML/libnvidia-ml.so.1" ] || die "fake NVML $FAKENVML/libnvidia-ml.so.1 is not built"
[ -r "$INVENTORY" ] || die "inventory $INVENTORY not found"
CUDALIB=$BUILD/lib/libgpupool-cuda.so
FAKECUDA=$BUILD/test/fakecuda
PROBE=$BUILD/test/cuda/gpupool-cudaprobe
PHYSTOOL=$FAKECUDA/gpupool-fakecuda-phys
for f in "$CUDALIB" "$FAKECUDA/libcuda.so.1" "$PROBE" "$PHYSTOOL"; do
  [ -e "$f" ] || die "$f is not built (make builds it)"
done
"$PY" -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null ||
  die "$PY lacks grpcio/grpc-tools/protobuf (Debian: python3-grpcio python3-grpc-tools python3-protobuf)"

TMP=$(mktemp -d /tmp/gpupool-demo.XXXXXX) || die "mktemp failed"
SOCKDIR=$TMP/device-plugins
LOG=$TMP/plugin.log
SIM_OUT=$TMP/kubelet.out
CONTROL=$TMP/nvml-control
mkdir -p "$SOCKDIR" && : >"$CONTROL"
SIM_PID=''
PLUGIN_PID=''
HOLDER_PID=''

cleanup() {
  [ -n "$HOLDER_PID" ] && kill "$HOLDER_PID" 2>/dev/null && wait "$HOLDER_PID" 2>/dev/null
  [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null && wait "$SIM_PID" 2>/dev/null
  [ -n "$PLUGIN_PID" ] && kill -KILL "$PLUGIN_PID" 2>/dev/null && wait "$PLUGIN_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo >&2
  echo "demo: FAILED: $*" >&2
  if [ -s "$SIM_OUT" ]; then echo "--- kubelet simulator ---" >&2; cat "$SIM_OUT" >&2; fi
  echo "--- plugin log ($LOG) ---" >&2
  cat "$LOG" >&2 2>/dev/null
  exit 1
}

ngpus=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["gpus"] if isinstance(d,dict) and "gpus" in d else d))' "$INVENTORY" 2>/dev/null || echo "?")
echo "== 1. the device plugin on a simulated node: fake NVML with $ngpus GPUs ($(basename "$INVENTORY"))"
echo "   socket dir: $SOCKDIR"
echo

# the kubelet: serves kubelet.sock, waits for the plugin, prints what it sees
"$PY" "$ROOT/test/sim/kubelet_sim.py" --dir "$SOCKDIR" --print --allocate 2 --timeout 15 \
  >"$SIM_OUT" 2>&1 &
SIM_PID=$!
for _ in $(seq 200); do
  [ -S "$SOCKDIR/kubelet.sock" ] && break
  kill -0 "$SIM_PID" 2>/dev/null || fail "kubelet simulator did not start"
  sleep 0.05
done
[ -S "$SOCKDIR/kubelet.sock" ] || fail "kubelet simulator did not create kubelet.sock"

# the plugin, on the fake NVML
LD_LIBRARY_PATH=$FAKENVML FAKE_NVML_INVENTORY=$INVENTORY FAKE_NVML_CONTROL=$CONTROL \
  ${GP_PLUGIN_WRAPPER:-} "$PLUGIN" --kubelet-socket "$SOCKDIR/kubelet.sock" >"$LOG" 2>&1 &
PLUGIN_PID=$!
echo "plugin started: $PLUGIN (pid $PLUGIN_PID)"

# wait for the simulator to finish; stop early if the plugin dies first
while kill -0 "$SIM_PID" 2>/dev/null; do
  if ! kill -0 "$PLUGIN_PID" 2>/dev/null; then
    wait "$PLUGIN_PID"; rc=$?; PLUGIN_PID=
    fail "plugin exited early (status $rc)"
  fi
  sleep 0.05
done
wait "$SIM_PID"; sim_rc=$?; SIM_PID=
kill -0 "$PLUGIN_PID" 2>/dev/null || { wait "$PLUGIN_PID"; rc=$?; PLUGIN_PID=; fail "plugin exited early (status $rc)"; }
[ "$sim_rc" -eq 0 ] || fail "the kubelet simulator failed (status $sim_rc)"

echo
echo "== what the kubelet sees"
sed '/^kubelet simulator listening/d; s/^/   /' "$SIM_OUT"
echo

# stop: SIGTERM must end the plugin with status 0 and remove its socket
echo "stopping the plugin with SIGTERM"
kill -TERM "$PLUGIN_PID"
for _ in $(seq 100); do kill -0 "$PLUGIN_PID" 2>/dev/null || break; sleep 0.05; done
kill -0 "$PLUGIN_PID" 2>/dev/null && fail "plugin still running 5 s after SIGTERM"
wait "$PLUGIN_PID"; rc=$?; PLUGIN_PID=
[ "$rc" -eq 0 ] || fail "plugin exited with status $rc after SIGTERM (want 0)"
leftover=$(find "$SOCKDIR" -name 'gpupool-*.sock' 2>/dev/null)
[ -z "$leftover" ] || fail "plugin left its socket behind: $leftover"

echo "== plugin log (klog lines; the merged configuration JSON is left out)"
grep -E '^[IWEF][0-9]{4} ' "$LOG" | sed 's/^/   /' | head -n 30
echo
echo "   stopped with SIGTERM: exit status 0, socket removed."
echo

# ---------------------------------------------------------------------------
# 2. libgpupool-cuda at work. The variables are what the plugin's Allocate gives a
# gpu-mem container (CUDA_DEVICE_MEMORY_LIMIT, the region prefix; the library comes
# through /etc/ld.so.preload there, LD_PRELOAD here). FAKECUDA_PHYS is the fake
# driver's record of what the GPU itself holds, across processes.
UUID=GPU-fa4ecada-0000-0000-0000-000000000000
GIB=1073741824
gib() { awk -v b="$1" 'BEGIN { printf "%g GiB", b / 1073741824 }'; }
# "info CUDA_SUCCESS free=N total=N" -> "free X GiB of Y GiB"
show_info() { sed -n 's/^info CUDA_SUCCESS free=\([0-9]*\) total=\([0-9]*\)$/\1 \2/p' | {
  read -r f t || return 1; echo "free $(gib "$f") of $(gib "$t")"; }; }
code_of() { awk -v c="$2" '$1 == c { n++; if (n == '"${3:-1}"') { print $2; exit } }' "$1"; }
cuda_env() {
  env LD_LIBRARY_PATH="$FAKECUDA" FAKECUDA_DEVICES="$UUID=16g" FAKECUDA_PHYS="$TMP/gpu-phys" "$@"
}
# A sanitized build's library (make asan) needs the sanitizer runtimes ahead of it in
# the preload list, where a sanitized program has them.
SAN_PRELOAD=
for rt in $(readelf -d "$CUDALIB" 2>/dev/null | sed -n 's/.*Shared library: \[\(lib[a-z]*san\.so[.0-9]*\)\].*/\1/p'); do
  SAN_PRELOAD+="$(gcc -print-file-name="$rt"):"
done
in_container() {
  cuda_env CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/region" \
    LD_PRELOAD="$SAN_PRELOAD$CUDALIB" "$@"
}

if [ -n "${GP_PLUGIN_WRAPPER:-}" ]; then
  echo "demo: part 1 OK; part 2 is not run under GP_PLUGIN_WRAPPER"
  exit 0
fi
echo "== 2. libgpupool-cuda: a container's 4 GiB share of a 16 GiB GPU (fake libcuda)"
echo "   the container's env: CUDA_DEVICE_MEMORY_LIMIT=4g, libgpupool-cuda.so preloaded"
in_container "$PROBE" init alloc 3g info hold >"$TMP/a.out" 2>&1 &
HOLDER_PID=$!
for _ in $(seq 200); do grep -q '^holding' "$TMP/a.out" && break; sleep 0.05; done
grep -q '^holding' "$TMP/a.out" || fail "process A did not start: $(cat "$TMP/a.out")"
[ "$(code_of "$TMP/a.out" alloc)" = CUDA_SUCCESS ] || fail "process A: $(cat "$TMP/a.out")"
echo "   process A (pid $HOLDER_PID): cuMemAlloc 3 GiB -> CUDA_SUCCESS; the share: $(show_info <"$TMP/a.out")"
in_container "$PROBE" init alloc 2g alloc 1g info >"$TMP/b.out" 2>&1 ||
  fail "process B: $(cat "$TMP/b.out")"
b_big=$(code_of "$TMP/b.out" alloc 1)
b_fit=$(code_of "$TMP/b.out" alloc 2)
echo "   process B: cuMemAlloc 2 GiB -> $b_big (past the share: A holds 3 of its 4 GiB)"
echo "   process B: cuMemAlloc 1 GiB -> $b_fit; the share: $(show_info <"$TMP/b.out")"
[ "$b_big" = CUDA_ERROR_OUT_OF_MEMORY ] || fail "process B was not refused past the share: $(cat "$TMP/b.out")"
[ "$b_fit" = CUDA_SUCCESS ] || fail "process B was refused inside the share: $(cat "$TMP/b.out")"
held=$("$PHYSTOOL" "$TMP/gpu-phys" | sed -n 's/.* current=\([0-9]*\) .*/\1/p')
echo "   the GPU holds $(gib "${held:-0}") for the container (B has exited: A's 3 GiB)"
[ "${held:-0}" -eq $((3 * GIB)) ] || fail "the fake GPU holds ${held:-?} bytes, want $((3 * GIB))"
cuda_env "$PROBE" init info >"$TMP/c.out" 2>&1 || fail "process C: $(cat "$TMP/c.out")"
echo "   a process without the library sees the GPU itself: $(show_info <"$TMP/c.out")"
kill "$HOLDER_PID" && wait "$HOLDER_PID" 2>/dev/null
HOLDER_PID=''
echo
echo "demo: parts 1-2 OK"
