#!/usr/bin/env bash
# demo.sh <build dir> -- run gpupool-device-plugin on a simulated node and show what the
# kubelet sees: the registration, the device list and one Allocate response.
#
# Simulated node: the fake NVML (<build>/test/fakenvml/libnvidia-ml.so.1) serving
# test/fakenvml/inventories/4gpu.json, a temporary socket directory, and the kubelet
# simulator (test/sim/kubelet_sim.py). Everything is stopped and removed at the end.
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

cleanup() {
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
echo "== gpupool demo: simulated node, fake NVML with $ngpus GPUs ($(basename "$INVENTORY"))"
echo "   socket dir: $SOCKDIR"
echo

# 1. the kubelet: serves kubelet.sock, waits for the plugin, prints what it sees
"$PY" "$ROOT/test/sim/kubelet_sim.py" --dir "$SOCKDIR" --print --allocate 2 --timeout 15 \
  >"$SIM_OUT" 2>&1 &
SIM_PID=$!
for _ in $(seq 200); do
  [ -S "$SOCKDIR/kubelet.sock" ] && break
  kill -0 "$SIM_PID" 2>/dev/null || fail "kubelet simulator did not start"
  sleep 0.05
done
[ -S "$SOCKDIR/kubelet.sock" ] || fail "kubelet simulator did not create kubelet.sock"

# 2. the plugin, on the fake NVML
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

# 3. stop: SIGTERM must end the plugin with status 0 and remove its socket
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
echo "== stopped with SIGTERM: exit status 0, socket removed. Demo OK."
