#!/bin/sh
# bench/run.sh BUILD_DIR -- every benchmark, one Markdown report on stdout.
#
# Called by `make bench`. Runs, in order:
#   snapshot_bench   ListAndWatch snapshot encode time and size (in-process)
#   plugin_bench     the real plugin on the fake NVML, played by a C kubelet:
#                    exec -> Register, RSS, Allocate, XID -> ListAndWatch, sizes
#   sim_latency.py   Allocate latency from the Python kubelet simulator
#   kubelet_restart_bench.py  kubelet restart (socket before listen) -> Register
#   gpumem_bench.py  gpu-mem mode: Allocate latency with pod identity, RSS
#   placement_bench  the placement engine's score cost (in-process)
#   extender_filter_bench  the extender's filter/prioritize at 5,000 nodes (in-process)
#   isolation_bench.sh  libgpupool-cuda: alloc+free and launch cost, 256
#                    processes starting at once, region size (fake libcuda)
#   throttle_bench.py  libgpupool-cuda's compute limit: achieved shares per
#                    split on the fake driver's simulated device, priority,
#                    launch cost without and with a limit
#   binpack.sh       gpupool-sim on the four openb traces, seeds 42..51
#   extender_bench.sh, inspect_bench.sh  against a real kube-apiserver with
#                    1,000 and 5,000 nodes, when the Kubernetes binaries are
#                    built (test/e2e/build-k8s.sh); skipped otherwise
# Exits non-zero if any of them fails. About 15 minutes on 2 cores.
set -u

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: bench/run.sh BUILD_DIR" >&2
    exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}

for f in "$BUILD/bin/gpupool-device-plugin" "$BUILD/bench/snapshot_bench" \
         "$BUILD/bench/plugin_bench" "$BUILD/test/fakenvml/libnvidia-ml.so.1"; do
    if [ ! -e "$f" ]; then
        echo "bench/run.sh: $f is missing (build first: make)" >&2
        exit 1
    fi
done

cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
[ -n "$cpu" ] || cpu=$(uname -m)
commit=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit (with uncommitted changes)"
fi

echo "# gpupool benchmarks"
echo
echo "| | |"
echo "|---|---|"
echo "| machine | $(nproc) CPUs, $cpu, $(uname -sr) |"
echo "| load average at start | $(cut -d' ' -f1-3 /proc/loadavg) |"
echo "| date | $(date -u '+%Y-%m-%d %H:%M:%S UTC') |"
echo "| commit | $commit |"
echo "| build | $BUILD |"

failed=""
start=$(date +%s)

echo
echo "## GPU-memory limits in the container (isolation_bench.sh, fake libcuda)"
echo
"$SRC/bench/isolation_bench.sh" "$BUILD" || failed="$failed isolation_bench"

echo
echo "## Compute limits in the container (throttle_bench.py, simulated device)"
echo
"$PYTHON" "$SRC/bench/throttle_bench.py" "$BUILD" || failed="$failed throttle_bench"

echo
echo "## ListAndWatch snapshot encode (snapshot_bench, in-process)"
echo
"$BUILD/bench/snapshot_bench" || failed="$failed snapshot_bench"

echo
echo "## The plugin from the kubelet's side (plugin_bench)"
"$BUILD/bench/plugin_bench" -F "$BUILD/test/fakenvml" -I "$SRC/test/fakenvml/inventories" \
    "$BUILD/bin/gpupool-device-plugin" || failed="$failed plugin_bench"

echo
echo "## Allocate from the Python kubelet simulator (sim_latency.py)"
"$PYTHON" "$SRC/bench/sim_latency.py" --calls 10000 "$BUILD" || failed="$failed sim_latency.py"

echo
echo "## Kubelet restart -> Register (kubelet_restart_bench.py)"
echo
GP_BUILD_DIR="$BUILD" "$PYTHON" "$SRC/bench/kubelet_restart_bench.py" --restarts 100 ||
    failed="$failed kubelet_restart_bench.py"
# the device-plugins directory removed and re-created each time (issue 27 N5)
GP_BUILD_DIR="$BUILD" "$PYTHON" "$SRC/bench/kubelet_restart_bench.py" --restarts 30 --down 2 --remove-dir ||
    failed="$failed kubelet_restart_bench.py--remove-dir"

echo
echo "## gpu-mem mode: Allocate with exact pod identity (gpumem_bench.py)"
echo
GP_BUILD_DIR="$BUILD" "$PYTHON" "$SRC/bench/gpumem_bench.py" --pods 300 || failed="$failed gpumem_bench.py"

echo
echo "## Placement engine score cost (placement_bench)"
echo
"$BUILD/bench/placement_bench" 10 || failed="$failed placement_bench"

echo
echo "## Extender filter and prioritize, in-process (extender_filter_bench)"
echo
"$BUILD/bench/extender_filter_bench" 5000 200 || failed="$failed extender_filter_bench"

echo
echo "## Binpacking on the openb traces (binpack.sh)"
echo
"$SRC/bench/binpack.sh" "$BUILD" || failed="$failed binpack.sh"

k8s_bin=${K8S_CACHE:-/var/cache/gpupool-k8s}/bin
if [ -x "$k8s_bin/kube-apiserver" ] && command -v etcd >/dev/null 2>&1; then
    echo
    echo "## Extender against a real kube-apiserver (extender_bench.sh)"
    echo
    "$SRC/bench/extender_bench.sh" "$BUILD" || failed="$failed extender_bench.sh"
    echo
    echo "## kubectl gpupool inspect against a real kube-apiserver (inspect_bench.sh)"
    echo
    "$SRC/bench/inspect_bench.sh" "$BUILD" || failed="$failed inspect_bench.sh"
else
    echo
    echo "(extender_bench.sh and inspect_bench.sh skipped: no kube-apiserver in $k8s_bin; run test/e2e/build-k8s.sh)"
fi

echo
echo "Total $(( $(date +%s) - start )) s."
if [ -n "$failed" ]; then
    echo "bench/run.sh: FAILED:$failed" >&2
    exit 1
fi
