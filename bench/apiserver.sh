# bench/apiserver.sh -- sourced by extender_bench.sh, inspect_bench.sh,
# scale_bench.sh and top_bench.sh (it defines functions only): checks what a
# run needs, starts etcd (data on tmpfs) and kube-apiserver v1.20.2 on the caller's ports
# and waits until the default namespace exists. The caller has set up lib.sh
# (start_bg, wait_for, e2e_log), E2E_LOGS/E2E_STATE/E2E_RUN, KUBECONFIG,
# K8S_BIN, ETCD_PORT, ETCD_PEER_PORT, API_PORT and `stamp`, and its EXIT trap
# stops what start_bg started. Sets TOKEN (the admin bearer token).
#
#   bench_preflight NAME PORT... -- BINARY...
#   bench_start_apiserver LOG_ROOT DISABLED_ADMISSION_PLUGINS

# Exits 1 naming what is missing: kube-apiserver, the BINARYs, etcd, or a
# PORT already listened on (a bench still running?). NAME prefixes messages.
bench_preflight() {
  local name=$1 f port
  shift
  local ports=()
  while [[ $# -gt 0 && $1 != -- ]]; do ports+=("$1"); shift; done
  shift
  for f in "$K8S_BIN/kube-apiserver" "$@"; do
    [[ -x $f ]] || { echo "$name: $f missing (build-k8s.sh / cmake --build)" >&2; exit 1; }
  done
  command -v etcd >/dev/null || { echo "$name: etcd missing (scripts/install-deps.sh --e2e)" >&2; exit 1; }
  for port in "${ports[@]}"; do
    if ss -Hltn "sport = :$port" | grep -q .; then
      echo "$name: port $port in use (a bench still running?)" >&2
      exit 1
    fi
  done
}

bench_start_apiserver() {
  local BENCH_LOG_ROOT=$1 BENCH_DISABLED_ADMISSION=$2
  mkdir -p "$E2E_LOGS" "$E2E_STATE/pki" "$E2E_RUN/pids"
  ln -sfn "$stamp" "$BENCH_LOG_ROOT/latest"
  ls -1d "$BENCH_LOG_ROOT"/20*/ 2>/dev/null | head -n -10 | xargs -r rm -rf

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
    --disable-admission-plugins="$BENCH_DISABLED_ADMISSION" \
    --service-cluster-ip-range=10.97.0.0/24 \
    --profiling=false --v=1
  apiserver_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz"; }
  wait_for 120 "kube-apiserver ready" apiserver_ok >&2 ||
    { echo "kube-apiserver did not become ready; see $E2E_LOGS/kube-apiserver.log" >&2; exit 1; }
  # The default namespace is made by the apiserver's bootstrap controller.
  ns_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/api/v1/namespaces/default"; }
  wait_for 60 "namespace default" ns_ok >&2 || exit 1
}
