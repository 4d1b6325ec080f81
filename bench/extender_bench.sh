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

for f in "$K8S_BIN/kube-apiserver" "$EXTENDER_BIN"; do
  [[ -x $f ]] || { echo "extender_bench.sh: $f missing (build-k8s.sh / cmake --build)" >&2; exit 1; }
done
command -v etcd >/dev/null || { echo "extender_bench.sh: etcd missing (scripts/install-deps.sh --e2e)" >&2; exit 1; }
for port in $ETCD_PORT $ETCD_PEER_PORT $API_PORT $EXTENDER_PORT; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    echo "extender_bench.sh: port $port in use (a bench still running?)" >&2
    exit 1
  fi
done
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

mkdir -p "$E2E_LOGS" "$E2E_STATE/pki" "$E2E_RUN/pids"
ln -sfn "$stamp" /var/tmp/gpupool-bench/logs/latest
ls -1d /var/tmp/gpupool-bench/logs/20*/ 2>/dev/null | head -n -10 | xargs -r rm -rf

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
  --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
  --service-cluster-ip-range=10.97.0.0/24 \
  --profiling=false --v=1
apiserver_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz"; }
wait_for 120 "kube-apiserver ready" apiserver_ok >&2 ||
  { echo "kube-apiserver did not become ready; see $E2E_LOGS/kube-apiserver.log" >&2; exit 1; }
# The default namespace is made by the apiserver's bootstrap controller.
ns_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/api/v1/namespaces/default"; }
wait_for 60 "namespace default" ns_ok >&2 || exit 1

cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
commit=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -z "$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit (with uncommitted changes)"
echo "## gpupool-scheduler-extender against kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}')"
echo
echo "$(nproc) CPUs, ${cpu:-$(uname -m)}, load $(cut -d' ' -f1-3 /proc/loadavg) at start; $(date -u '+%Y-%m-%d %H:%M UTC'); commit $commit; extender $EXTENDER_BIN; logs $E2E_LOGS"
echo
"$PYTHON" "$SRC/bench/extender_bench.py" --server "https://127.0.0.1:$API_PORT" --token "$TOKEN" \
  --kubeconfig "$KUBECONFIG" --extender "$EXTENDER_BIN" --port "$EXTENDER_PORT" \
  --prefix "${EXTENDER_PREFIX:-/gpupool-scheduler}" --sizes "${SIZES:-1000,5000}" \
  --duration "${DURATION:-10}" --binds "${BINDS:-300}" --client "$BENCH_CLIENT" --log-dir "$E2E_LOGS" \
  ${PERF:+--perf}
