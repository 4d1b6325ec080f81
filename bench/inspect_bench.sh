#!/usr/bin/env bash
# bench/inspect_bench.sh BUILD_DIR -- kubectl-gpupool / kubectl-inspect-gpushare
# against a real kube-apiserver v1.20.2 holding 1,000 and then 5,000 fake GPU
# nodes (8 GPUs each, ~0.6 bound gpushare pods per node). Prints a Markdown
# table on stdout. The etcd + apiserver start-up is extender_bench.sh's, on
# ports of its own (etcd 23791/23801, apiserver 16444); the nodes and pods
# are made by extender_bench.py's Cluster. Environment: SIZES (default
# 1000,5000), RUNS (default 5), SHAPE (lean: what the extender reads;
# kubelet: ~12 KB nodes as a real kubelet reports them), SYSTEM_PODS (0-4
# non-GPU DaemonSet pods per node), K8S_CACHE.
set -euo pipefail

if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: bench/inspect_bench.sh BUILD_DIR" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
# Our own state, run and log dirs: lib.sh derives KUBECONFIG, pid files and
# the logs from these, so the e2e cluster's files are never touched.
export E2E_STATE=/dev/shm/gpupool-inspect-bench
export E2E_RUN=${TMPDIR:-/tmp}/gpupool-inspect-bench-run
export E2E_LOGS=/var/tmp/gpupool-inspect-bench/logs/$stamp
. "$SRC/test/e2e/lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}
ETCD_PORT=23791
ETCD_PEER_PORT=23801
API_PORT=16444

. "$SRC/bench/apiserver.sh"
bench_preflight inspect_bench.sh $ETCD_PORT $ETCD_PEER_PORT $API_PORT -- "$BUILD/bin/kubectl-gpupool"

cleanup() {
  stop_pid kube-apiserver 15 >&2
  stop_pid etcd 15 >&2
  rm -rf "$E2E_STATE" "$E2E_RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_start_apiserver /var/tmp/gpupool-inspect-bench/logs ServiceAccount

echo "## kubectl-gpupool inspect against kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}')"
echo
echo "$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1); $(date -u '+%Y-%m-%d %H:%M UTC'); logs $E2E_LOGS"
echo
"$PYTHON" "$SRC/bench/inspect_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
  --kubeconfig "$KUBECONFIG" --bin-dir "$BUILD/bin" --sizes "${SIZES:-1000,5000}" --runs "${RUNS:-5}" \
  --shape "${SHAPE:-lean}" --system-pods "${SYSTEM_PODS:-0}"
# HOLD=N keeps the populated cluster up N seconds for profiling (perf record
# ... kubectl-gpupool inspect, with the KUBECONFIG printed here).
if [[ -n ${HOLD:-} ]]; then
  echo "holding the cluster ${HOLD}s: KUBECONFIG=$KUBECONFIG" >&2
  sleep "$HOLD"
fi
