#!/usr/bin/env bash
# bench/inspect_bench.sh BUILD_DIR -- kubectl-gpupool / kubectl-inspect-gpushare
# against a real kube-apiserver v1.20.2 holding 1,000 and then 5,000 fake GPU
# nodes (8 GPUs each, ~0.6 bound gpushare pods per node). Prints a Markdown
# table on stdout. The etcd + apiserver start-up is extender_bench.sh's, on
# ports of its own (etcd 23791/23801, apiserver 16444); the nodes and pods
# are made by extender_bench.py's Cluster. Environment: SIZES (default
# 1000,5000), RUNS (default 5), K8S_CACHE.
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

for f in "$K8S_BIN/kube-apiserver" "$BUILD/bin/kubectl-gpupool"; do
  [[ -x $f ]] || { echo "inspect_bench.sh: $f missing (build-k8s.sh / cmake --build)" >&2; exit 1; }
done
command -v etcd >/dev/null || { echo "inspect_bench.sh: etcd missing (scripts/install-deps.sh --e2e)" >&2; exit 1; }
for port in $ETCD_PORT $ETCD_PEER_PORT $API_PORT; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    echo "inspect_bench.sh: port $port in use (a bench still running?)" >&2
    exit 1
  fi
done

cleanup() {
  stop_pid kube-apiserver 15 >&2
  stop_pid etcd 15 >&2
  rm -rf "$E2E_STATE" "$E2E_RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$E2E_LOGS" "$E2E_STATE/pki" "$E2E_RUN/pids"
ln -sfn "$stamp" /var/tmp/gpupool-inspect-bench/logs/latest
ls -1d /var/tmp/gpupool-inspect-bench/logs/20*/ 2>/dev/null | head -n -10 | xargs -r rm -rf

TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN,admin,admin,system:masters" >"$E2E_STATE/pki/tokens.csv"
openssl genrsa -out "$E2E_STATE/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$E2E_STATE/pki/sa.key" -pubout -out "$E2E_STATE/pki/sa.pub" 2>/dev/null
cat >"$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: https://127.0.0.1:$API_PORT
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: bench
  context: {cluster: bench, user: admin}
current-context: bench
EOF
chmod 600 "$KUBECONFIG" "$E2E_STATE/pki/tokens.csv"
ADVERTISE=$(ip -4 -o addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')

e2e_log "starting etcd (data on tmpfs: $E2E_STATE/etcd)" >&2
start_bg etcd "$E2E_LOGS/etcd.log" etcd --name bench --data-dir "$E2E_STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "bench=http://127.0.0.1:$ETCD_PEER_PORT" --quota-backend-bytes=4294967296
wait_for 30 "etcd healthy" curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" >&2 ||
  { echo "etcd did not start; see $E2E_LOGS/etcd.log" >&2; exit 1; }

e2e_log "starting kube-apiserver on 127.0.0.1:$API_PORT" >&2
start_bg kube-apiserver "$E2E_LOGS/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --secure-port=$API_PORT --insecure-port=0 \
  --advertise-address="${ADVERTISE:-192.0.2.1}" \
  --cert-dir="$E2E_STATE/pki/apiserver" \
  --token-auth-file="$E2E_STATE/pki/tokens.csv" \
  --authorization-mode=AlwaysAllow \
  --service-account-key-file="$E2E_STATE/pki/sa.pub" \
  --service-account-signing-key-file="$E2E_STATE/pki/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc \
  --disable-admission-plugins=ServiceAccount \
  --service-cluster-ip-range=10.97.0.0/24 \
  --profiling=false --v=1
apiserver_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz"; }
wait_for 120 "kube-apiserver ready" apiserver_ok >&2 ||
  { echo "kube-apiserver did not become ready; see $E2E_LOGS/kube-apiserver.log" >&2; exit 1; }
# The default namespace is made by the apiserver's bootstrap controller.
ns_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/api/v1/namespaces/default"; }
wait_for 60 "namespace default" ns_ok >&2 || exit 1

echo "## kubectl-gpupool inspect against kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}')"
echo
echo "$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1); $(date -u '+%Y-%m-%d %H:%M UTC'); logs $E2E_LOGS"
echo
"$PYTHON" "$SRC/bench/inspect_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
  --kubeconfig "$KUBECONFIG" --bin-dir "$BUILD/bin" --sizes "${SIZES:-1000,5000}" --runs "${RUNS:-5}"
# HOLD=N keeps the populated cluster up N seconds for profiling (perf record
# ... kubectl-gpupool inspect, with the KUBECONFIG printed here).
if [[ -n ${HOLD:-} ]]; then
  echo "holding the cluster ${HOLD}s: KUBECONFIG=$KUBECONFIG" >&2
  sleep "$HOLD"
fi
