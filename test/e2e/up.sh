#!/usr/bin/env bash
# Starts a real one-node Kubernetes v1.20.2 cluster on this machine:
#   etcd -> kube-apiserver -> containerd (own config/root/socket, CNI bridge)
#   -> kube-controller-manager (service accounts and their tokens only)
#   -> kube-scheduler -> kubelet (node "localhost", root /var/lib/kubelet)
# then waits for the node to be Ready and removes the not-ready taint (the
# controller-manager runs no node lifecycle controller). Authorization is
# Node,RBAC: the suite's own components use the admin token (system:masters);
# pods get their ServiceAccount's token, so deployed components are held to
# the rules of their (Cluster)Roles. Binaries come from build-k8s.sh ($K8S_BIN), images
# from images.sh. Logs go to $E2E_LOGS. Stop with down.sh.
# Recipe and pitfalls: docs/e2e.md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || e2e_die "must run as root"
for c in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [[ -x $K8S_BIN/$c ]] || e2e_die "$K8S_BIN/$c missing: run test/e2e/build-k8s.sh"
done
for c in etcd containerd containerd-shim-runc-v2 runc ctr openssl curl ip; do
  command -v "$c" >/dev/null || e2e_die "$c missing: run scripts/install-deps.sh --e2e"
done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  e2e_die "CNI plugins missing in /usr/lib/cni (containernetworking-plugins)"

# Refuse to trample a kubelet (or kubelet root) that is not ours.
if [[ -d $KUBELET_ROOT && ! -f $KUBELET_ROOT/.gpupool-e2e ]] &&
   [[ -n "$(ls -A "$KUBELET_ROOT" 2>/dev/null)" ]] && [[ ${E2E_FORCE:-0} != 1 ]]; then
  e2e_die "$KUBELET_ROOT exists and was not made by this suite (set E2E_FORCE=1 to use it anyway)"
fi
for port in 2379 2380 6443 10248 10250; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    e2e_die "port $port is already in use (a cluster still running? try test/e2e/down.sh)"
  fi
done

t0=$SECONDS
mkdir -p "$E2E_LOGS" "$E2E_RUN/pids"
rm -rf "$E2E_STATE"
mkdir -p "$E2E_STATE"/{etcd,pki,kubelet-pki,cni/net.d,cni/ipam,containerd} "$KUBELET_ROOT"
touch "$KUBELET_ROOT/.gpupool-e2e"

# --- credentials -----------------------------------------------------------
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN,admin,admin,system:masters" >"$E2E_STATE/pki/tokens.csv"
openssl genrsa -out "$E2E_STATE/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$E2E_STATE/pki/sa.key" -pubout -out "$E2E_STATE/pki/sa.pub" 2>/dev/null
cat >"$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
chmod 600 "$KUBECONFIG" "$E2E_STATE/pki/tokens.csv"

# The apiserver refuses a loopback advertise address; nothing connects to it.
ADVERTISE=$(ip -4 -o addr show scope global 2>/dev/null | awk 'NR == 1 {split($4, a, "/"); print a[1]}')
# The node's address, when the machine has one: the kubelet serves on it and
# the API server reaches the node there (its Hostname, "localhost", is
# loopback, which the API server's node proxy refuses: "address not allowed",
# so kubectl gpupool top could not read the agent's /metrics through it).
NODE_IP=$ADVERTISE
ADVERTISE=${ADVERTISE:-192.0.2.1}
echo "$NODE_IP" >"$E2E_STATE/node-ip"
# Pods on the pod network reach the apiserver at this address (deploy.sh 10g:
# the extender's replicas as shipped; the serving certificate names it).
echo "$ADVERTISE" >"$E2E_STATE/advertise"

# A CA and the apiserver's serving certificate. The token controller puts
# ca.crt into every service-account token secret, and in-cluster clients
# verify the server with it: 127.0.0.1 (how this cluster's host-network pods
# reach the apiserver, docs/e2e.md) and the `kubernetes` Service's names.
pki=$E2E_STATE/pki
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=gpupool-e2e-ca \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
  -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' \
  "$ADVERTISE" >"$pki/apiserver.ext"
openssl x509 -req -days 2 -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
  -CAcreateserial -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null ||
  e2e_die "openssl: cannot make the apiserver's certificate"

# --- etcd ------------------------------------------------------------------
e2e_log "starting etcd"
start_bg etcd "$E2E_LOGS/etcd.log" etcd --name e2e --data-dir "$E2E_STATE/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster e2e=http://127.0.0.1:2380 --quota-backend-bytes=1073741824
wait_for 30 "etcd healthy" curl -fsS --max-time 2 http://127.0.0.1:2379/health ||
  e2e_die "etcd did not start; see $E2E_LOGS/etcd.log"

# --- kube-apiserver --------------------------------------------------------
e2e_log "starting kube-apiserver (advertise $ADVERTISE)"
# The node's InternalIP first (kubeadm's order) when the kubelet serves on it;
# without a global address, the kubelet and this fall back to loopback.
PREFERRED_ADDRESSES=Hostname,InternalIP
[[ -n $NODE_IP ]] && PREFERRED_ADDRESSES=InternalIP,Hostname
# Every address, not only 127.0.0.1: pod-network pods (10g) come through the
# CNI bridge to $ADVERTISE. Clients authenticate (no anonymous access).
start_bg kube-apiserver "$E2E_LOGS/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
  --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --secure-port=6443 --insecure-port=0 \
  --advertise-address="$ADVERTISE" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --token-auth-file="$E2E_STATE/pki/tokens.csv" \
  --anonymous-auth=false \
  --authorization-mode=Node,RBAC \
  --service-account-key-file="$E2E_STATE/pki/sa.pub" \
  --service-account-signing-key-file="$E2E_STATE/pki/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-cluster-ip-range=10.96.0.0/24 \
  --kubelet-preferred-address-types="$PREFERRED_ADDRESSES" \
  --allow-privileged=true \
  --profiling=false \
  --v=1
apiserver_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" https://127.0.0.1:6443/healthz; }
wait_for 90 "kube-apiserver healthz" apiserver_ok ||
  e2e_die "kube-apiserver did not become healthy; see $E2E_LOGS/kube-apiserver.log"

# --- kube-controller-manager: service accounts -------------------------------
# The ServiceAccount admission plugin (on) refuses pods whose ServiceAccount
# does not exist and mounts its token secret: the serviceaccount controller
# makes every namespace's `default`, the token controller signs the tokens
# (sa.key; the apiserver checks them with sa.pub). Nothing else: no node
# lifecycle (the suite's kubelet-less Nodes would be evicted), and deploy.sh
# starts the rollout controllers separately.
e2e_log "starting kube-controller-manager (serviceaccount, serviceaccount-token)"
start_bg kube-controller-manager-sa "$E2E_LOGS/kube-controller-manager-sa.log" \
  "$K8S_BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --leader-elect=false \
  --controllers=serviceaccount,serviceaccount-token \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
  --port=0 --secure-port=0 --v=1
sa_token_ready() {  # sa_token_ready NAMESPACE: `default` exists with its token secret
  local s t
  s=$(kc -n "$1" get serviceaccount default -o jsonpath='{.secrets[0].name}' 2>/dev/null) && [[ -n $s ]] &&
    t=$(kc -n "$1" get secret "$s" -o jsonpath='{.data.token}' 2>/dev/null) && [[ -n $t ]]
}
for ns in default kube-system; do
  wait_for 60 "ServiceAccount $ns/default with its token" sa_token_ready "$ns" ||
    e2e_die "no $ns/default token; see $E2E_LOGS/kube-controller-manager-sa.log"
done

# --- containerd ------------------------------------------------------------
# isGateway: the bridge takes the subnet's first address, and the IPAM's
# default route sends pods' traffic through it, so pod-network pods (10g)
# reach the host's apiserver and the host (kube-scheduler) reaches them.
cat >"$E2E_STATE/cni/net.d/10-gpupool-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "gpupool-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$E2E_STATE/cni/ipam"
      }
    }
  ]
}
EOF
cat >"$E2E_STATE/containerd.toml" <<EOF
version = 2
root = "$E2E_STATE/containerd"
state = "$E2E_RUN/containerd"
oom_score = 0

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$E2E_STATE/cni/net.d"
    max_conf_num = 1
EOF
e2e_log "starting containerd ($CTRD_SOCK)"
mkdir -p "$E2E_RUN/containerd"
start_bg containerd "$E2E_LOGS/containerd.log" containerd --config "$E2E_STATE/containerd.toml"
wait_for 30 "containerd answers" ctr --address "$CTRD_SOCK" version ||
  e2e_die "containerd did not start; see $E2E_LOGS/containerd.log"
"$E2E_DIR/images.sh" build
"$E2E_DIR/images.sh" import

# --- kube-scheduler --------------------------------------------------------
e2e_log "starting kube-scheduler"
start_bg kube-scheduler "$E2E_LOGS/kube-scheduler.log" "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$KUBECONFIG" --leader-elect=false \
  --port=0 --secure-port=0 --bind-address=127.0.0.1 --v=2

# --- kubelet ---------------------------------------------------------------
cat >"$E2E_STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${NODE_IP:-127.0.0.1}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
nodeStatusUpdateFrequency: ${NODE_STATUS_UPDATE_FREQUENCY:-10s}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
serializeImagePulls: false
EOF
e2e_log "starting kubelet"
start_kubelet
wait_for 60 "kubelet healthz" kubelet_healthy ||
  e2e_die "kubelet did not become healthy; see $E2E_LOGS/kubelet.log"
wait_for 90 "node $NODE_NAME Ready" node_ready ||
  e2e_die "node did not become Ready; see $E2E_LOGS/kubelet.log"
kc taint node "$NODE_NAME" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
kc get node -o wide
e2e_log "cluster up in $((SECONDS - t0))s (logs: $E2E_LOGS)"
