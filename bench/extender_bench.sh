#!/usr/bin/env bash
# bench/extender_bench.sh BUILD_DIR -- gpupool-scheduler-extender against a real
# kube-apiserver holding 1,000 and then 5,000 fake GPU nodes (8 GPUs each) and
# ~0.6 bound pods per node. Prints a Markdown report on stdout.
#
# Starts etcd (data on tmpfs) and kube-apiserver v1.20.2 (from test/e2e/build-k8s.sh,
# $K8S_CACHE/bin) on ports of its own (etcd 23790/23800, apiserver 16443), so it
# does not collide with an e2e cluster; no kubelet, scheduler or containerd.
# Then bench/extender_bench.py populates the cluster, starts the extender and
# drives filter/prioritize (wrk + bench/extender_wrk.lua, keep-alive) and bind.
# Everything it started is stopped on exit. Root is not needed unless
# $K8S_CACHE is only readable by root.
#
# Environment: EXTENDER_BIN (default BUILD_DIR/bin/gpupool-scheduler-extender),
# SIZES (default 1000,5000), DURATION (s per series, default 10), BINDS (300),
# BENCH_CLIENT (wrk or python; default wrk when installed), EXTENDER_PREFIX
# (default /gpupool-scheduler), EXTENDER_PORT (39998), K8S_CACHE, PERF=1 (perf record
# the extender during the 1-connection series: <logs>/perf-<nodes>-<verb>.data).
# Logs (etcd, apiserver, extender per size): /var/tmp/gpupool-bench/logs/<UTC time>/.
set -euo pipefail

if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: bench/extender_bench.sh BUILD_DIR" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
# Our own state, run and log dirs: lib.sh derives KUBECONFIG, pid files and
# the logs from these, so the e2e cluster's files are never touched.
export E2E_STATE=/dev/shm/gpupool-bench
export E2E_RUN=${TMPDIR:-/tmp}/gpupool-bench-run
export E2E_LOGS=/var/tmp/gpupool-bench/logs/$stamp
. "$SRC/test/e2e/lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}
EXTENDER_BIN=${EXTENDER_BIN:-$BUILD/bin/gpupool-scheduler-extender}
ETCD_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=16443
EXTENDER_PORT=${EXTENDER_PORT:-39998}

. "$SRC/bench/apiserver.sh"
bench_preflight extender_bench.sh $ETCD_PORT $ETCD_PEER_PORT $API_PORT $EXTENDER_PORT -- "$EXTENDER_BIN"
if [[ -z ${BENCH_CLIENT:-} ]]; then
  BENCH_CLIENT=python
  command -v wrk >/dev/null && BENCH_CLIENT=wrk
fi

cleanup() {
  stop_pid kube-apiserver 15 >&2
  stop_pid etcd 15 >&2
  rm -rf "$E2E_STATE" "$E2E_RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# TaintNodesByCondition off: the fake nodes have no kubelet to clear the not-ready taint.
bench_start_apiserver /var/tmp/gpupool-bench/logs ServiceAccount,TaintNodesByCondition

cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
commit=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -z "$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit (with uncommitted changes)"
echo "## gpupool-scheduler-extender against kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}')"
echo
echo "$(nproc) CPUs, ${cpu:-$(uname -m)}, load $(cut -d' ' -f1-3 /proc/loadavg) at start; $(date -u '+%Y-%m-%d %H:%M UTC'); commit $commit; extender $EXTENDER_BIN; logs $E2E_LOGS"
echo
if [[ -n ${HA_BENCH:-} ]]; then   # bench/extender_ha_bench.sh
  # A SIGKILLed holder's Lease is taken after a lease duration: with the
  # extender's default 10 s and a kill every 10 s, each new holder would be
  # killed as it starts. 6 s (renew 4 s, retry 1 s, margin 1.5 s) leaves time
  # to bind between kills; docs/ha.md gives the arithmetic for any values.
  IFS=, read -r ld rd rp fm <<<"${LEASE:-6s,4s,1s,1.5s}"
  echo "Replicas run with --leader-elect-lease-duration $ld --leader-elect-renew-deadline $rd --leader-elect-retry-period $rp --leader-elect-fence-margin $fm."
  echo
  "$PYTHON" "$SRC/bench/extender_ha_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
    --kubeconfig "$KUBECONFIG" --extender "$EXTENDER_BIN" --port "$EXTENDER_PORT" \
    --nodes "${NODES:-5000}" --replicas "${REPLICAS:-3}" --pods "${PODS:-2000}" \
    --kill-every "${KILL_EVERY:-10}" --log-dir "$E2E_LOGS" \
    --extender-arg=--leader-elect-lease-duration="$ld" --extender-arg=--leader-elect-renew-deadline="$rd" \
    --extender-arg=--leader-elect-retry-period="$rp" --extender-arg=--leader-elect-fence-margin="$fm"
else
  "$PYTHON" "$SRC/bench/extender_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
    --kubeconfig "$KUBECONFIG" --extender "$EXTENDER_BIN" --port "$EXTENDER_PORT" \
    --prefix "${EXTENDER_PREFIX:-/gpupool-scheduler}" --sizes "${SIZES:-1000,5000}" \
    --duration "${DURATION:-10}" --binds "${BINDS:-300}" --client "$BENCH_CLIENT" --log-dir "$E2E_LOGS" \
    ${PERF:+--perf}
fi
