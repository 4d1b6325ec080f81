#!/usr/bin/env bash
# bench/scale_bench.sh BUILD_DIR -- the extender and `kubectl gpupool inspect`
# against a real kube-apiserver v1.20.2 holding 5,000 and then 65,000 fake GPU
# nodes of mixed models (8 GPUs each) and ~0.6 bound gpu-mem pods per node.
# Prints a Markdown report on stdout (bench/scale_bench.py says what each row is).
#
# etcd (data on tmpfs) and kube-apiserver start as in bench/extender_bench.sh,
# on ports of their own (etcd 23792/23802, apiserver 16445, extender 39997), and
# everything runs at nice 10 (a shared machine). Environment: SIZES (default
# 5000,65000), DURATION (s per filter series, 10), BINDS (500), RUNS (inspect
# runs, 3), BENCH_CLIENT (wrk or python), PERF=1 (perf record the extender's
# filter series), SYNC_VARIANTS and HOLD (below), K8S_CACHE. Logs: /var/tmp/gpupool-scale-bench/logs/<UTC time>/.
set -euo pipefail

if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: bench/scale_bench.sh BUILD_DIR" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
export E2E_STATE=/dev/shm/gpupool-scale-bench
export E2E_RUN=${TMPDIR:-/tmp}/gpupool-scale-bench-run
export E2E_LOGS=/var/tmp/gpupool-scale-bench/logs/$stamp
. "$SRC/test/e2e/lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}
EXTENDER_BIN=${EXTENDER_BIN:-$BUILD/bin/gpupool-scheduler-extender}
ETCD_PORT=23792
ETCD_PEER_PORT=23802
API_PORT=16445
EXTENDER_PORT=39997

. "$SRC/bench/apiserver.sh"
bench_preflight scale_bench.sh $ETCD_PORT $ETCD_PEER_PORT $API_PORT $EXTENDER_PORT -- "$EXTENDER_BIN" "$BUILD/bin/kubectl-gpupool"
if [[ -z ${BENCH_CLIENT:-} ]]; then
  BENCH_CLIENT=python
  command -v wrk >/dev/null && BENCH_CLIENT=wrk
fi
# SYNC_VARIANTS="--list-page-size=500;--list-page-size=5000": extender
# arguments to time a full sync with before the measured extender starts.
variants=()
IFS=';' read -ra vs <<<"${SYNC_VARIANTS:-}"
for v in "${vs[@]}"; do [[ -n $v ]] && variants+=(--sync-variant="$v"); done
# The machine is shared: everything this script starts inherits the niceness.
renice -n 10 $$ >/dev/null

cleanup() {
  stop_pid kube-apiserver 15 >&2
  stop_pid etcd 15 >&2
  rm -rf "$E2E_STATE" "$E2E_RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# TaintNodesByCondition off: the fake nodes have no kubelet to clear the not-ready taint.
bench_start_apiserver /var/tmp/gpupool-scale-bench/logs ServiceAccount,TaintNodesByCondition

cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
commit=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -z "$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit (with uncommitted changes)"
echo "## gpupool at scale against kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}')"
echo
echo "$(nproc) CPUs, ${cpu:-$(uname -m)}, $(free -g | awk '/^Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg) at start; $(date -u '+%Y-%m-%d %H:%M UTC'); commit $commit; logs $E2E_LOGS"
echo
"$PYTHON" "$SRC/bench/scale_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
  --kubeconfig "$KUBECONFIG" --extender "$EXTENDER_BIN" --bin-dir "$BUILD/bin" --port "$EXTENDER_PORT" \
  --sizes "${SIZES:-5000,65000}" --duration "${DURATION:-10}" --binds "${BINDS:-500}" \
  --runs "${RUNS:-3}" --client "$BENCH_CLIENT" --log-dir "$E2E_LOGS" ${PERF:+--perf} \
  --apiserver-pid "$(cat "$(pidfile kube-apiserver)")" --etcd-pid "$(cat "$(pidfile etcd)")" \
  "${variants[@]}"
# HOLD=N keeps the populated cluster up N seconds (profiling; KUBECONFIG on stderr).
if [[ -n ${HOLD:-} ]]; then
  echo "holding the cluster ${HOLD}s: KUBECONFIG=$KUBECONFIG" >&2
  sleep "$HOLD"
fi
echo
echo "apiserver + etcd at the end: $(ps -o rss= -p "$(cat "$E2E_RUN/pids/kube-apiserver.pid" 2>/dev/null || echo 1)" | awk '{printf "%.0f MiB", $1/1024}') + $(ps -o rss= -p "$(cat "$E2E_RUN/pids/etcd.pid" 2>/dev/null || echo 1)" | awk '{printf "%.0f MiB", $1/1024}') resident"
