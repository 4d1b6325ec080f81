#!/usr/bin/env bash
# bench/top_bench.sh BUILD_DIR -- kubectl gpupool top against a real
# kube-apiserver v1.20.2 holding 1,000 and then 5,000 fake GPU nodes, every
# node agent's /metrics read through the apiserver's node proxy (one busybox
# httpd on a host address plays every agent). Prints a Markdown table.
# Ports of its own (etcd 23796/23806, apiserver 16449, agent 19409).
# Environment: SIZES (default 1000,5000), RUNS (default 3), WORKERS
# (default 16,64,256), EXTENDER=1 (also the default top, --from auto: the
# extender on the agent's address, port 19410, behind a Service, sweeping
# the agents in the background; EXTENDER_FROM=proxy for its node-proxy
# mode), K8S_CACHE. The per-agent rows name --from agents.
set -euo pipefail

if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: bench/top_bench.sh BUILD_DIR" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
# Our own state, run and log dirs: lib.sh derives KUBECONFIG, pid files and
# the logs from these, so the e2e cluster's files are never touched.
export E2E_STATE=/dev/shm/gpupool-top-bench
export E2E_RUN=${TMPDIR:-/tmp}/gpupool-top-bench-run
export E2E_LOGS=/var/tmp/gpupool-top-bench/logs/$stamp
. "$SRC/test/e2e/lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}
ETCD_PORT=23796
ETCD_PEER_PORT=23806
API_PORT=16449
AGENT_PORT=19409

. "$SRC/bench/apiserver.sh"
bench_preflight top_bench.sh $ETCD_PORT $ETCD_PEER_PORT $API_PORT $AGENT_PORT -- "$BUILD/bin/kubectl-gpupool"

AGENT_DIR=$(mktemp -d)
cleanup() {
  [[ -n ${AGENT_PID:-} ]] && kill "$AGENT_PID" 2>/dev/null
  rm -rf "$AGENT_DIR"
  stop_pid kube-apiserver 15 >&2
  stop_pid etcd 15 >&2
  rm -rf "$E2E_STATE" "$E2E_RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_start_apiserver /var/tmp/gpupool-top-bench/logs ServiceAccount

# kube-apiserver will not proxy to loopback addresses: the agent listens on
# the host's own address.
AGENT_IP=$(ip -4 -o addr show scope global | awk '{split($4, a, "/"); print a[1]; exit}')
[[ -n $AGENT_IP ]] || { echo "top_bench.sh: no global IPv4 address for the agent" >&2; exit 1; }
echo "# fake agent" >"$AGENT_DIR/metrics"
busybox httpd -f -p "$AGENT_IP:$AGENT_PORT" -h "$AGENT_DIR" &
AGENT_PID=$!

echo "## kubectl gpupool top against kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}')"
echo
echo "$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1); $(date -u '+%Y-%m-%d %H:%M UTC'); logs $E2E_LOGS"
echo
"$PYTHON" "$SRC/bench/top_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
  --kubeconfig "$KUBECONFIG" --bin-dir "$BUILD/bin" --agent-ip "$AGENT_IP" --agent-port "$AGENT_PORT" \
  --agent-dir "$AGENT_DIR" --apiserver-pid "$(cat "$(pidfile kube-apiserver)")" --sizes "${SIZES:-1000,5000}" --runs "${RUNS:-3}" --workers "${WORKERS:-16,64,256}" \
  ${EXTENDER:+--extender-bin "$BUILD/bin/gpupool-scheduler-extender" --extender-from "${EXTENDER_FROM:-direct}"}
# HOLD=N keeps the populated cluster (and the agent) up N seconds.
if [[ -n ${HOLD:-} ]]; then
  echo "holding the cluster ${HOLD}s: KUBECONFIG=$KUBECONFIG" >&2
  sleep "$HOLD"
fi
