#!/usr/bin/env bash
# Starts a real one-node Kubernetes 1.36 cluster on this machine, for the DRA
# suite (test/e2e/dra.sh):
#   etcd -> kube-apiserver -> kube-controller-manager (service accounts, the
#   root CA ConfigMap, ResourceClaims, DaemonSets, garbage collection)
#   -> containerd 2 (own config/root/socket, CDI on: /etc/cdi, /var/run/cdi;
#   CNI bridge gpuk136) -> kube-scheduler -> kubelet (node "localhost", root
#   /var/lib/kubelet, cgroupfs, failCgroupV1: false)
# then waits for the node to be Ready and removes the not-ready taint (no node
# lifecycle controller runs). Binaries: K136_TARBALL unpacked once into
# K136_CACHE (k136/lib.sh says which tarballs it takes); images: the 1.20
# suite's (test/e2e/images.sh). Logs go to $E2E_LOGS. Stop with k136/down.sh.
# It shares the ports (2379, 6443, 10248, 10250) with the 1.20 cluster of
# test/e2e/up.sh: run one after the other. docs/e2e.md has the details.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || e2e_die "must run as root"
t0=$SECONDS
k136_unpack
for c in etcd containerd containerd-shim-runc-v2 runc ctr openssl curl ip; do
  command -v "$c" >/dev/null || e2e_die "$c missing: run scripts/install-deps.sh --e2e, or set K136_EXTRA_BIN"
done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  e2e_die "CNI plugins missing in /usr/lib/cni (containernetworking-plugins)"
# containerd 1.x drops the kubelet's CDI device names without a word.
ctrd_version=$(containerd --version | awk '{print $3}')
[[ ${ctrd_version%%.*} -ge 2 ]] 2>/dev/null ||
  e2e_die "$(command -v containerd) is $ctrd_version; DRA needs containerd >= 2 (CDI): set K136_EXTRA_BIN"
K8S_VERSION=$("$K8S_BIN/kubelet" --version | awk '{print $2}')
e2e_log "Kubernetes $K8S_VERSION from $K8S_BIN; containerd $ctrd_version ($(command -v containerd)); etcd $(etcd --version | awk 'NR == 1 {print $3}') ($(command -v etcd))"

# Refuse to trample a kubelet (or kubelet root) that is not ours.
if [[ -d $KUBELET_ROOT && ! -f $KUBELET_ROOT/.gpupool-e2e ]] &&
   [[ -n "$(ls -A "$KUBELET_ROOT" 2>/dev/null)" ]] && [[ ${E2E_FORCE:-0} != 1 ]]; then
  e2e_die "$KUBELET_ROOT exists and was not made by this suite (set E2E_FORCE=1 to use it anyway)"
fi
for port in 2379 2380 6443 10248 10250; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    e2e_die "port $port is already in use (a cluster still running? try test/e2e/k136/down.sh or test/e2e/down.sh)"
  fi
done

mkdir -p "$E2E_LOGS" "$E2E_RUN/pids"
rm -rf "$E2E_STATE"
mkdir -p "$E2E_STATE"/{etcd,pki,kubelet-pki,cni/net.d,cni/ipam,containerd} "$KUBELET_ROOT" "${CDI_DIRS[@]}"
touch "$KUBELET_ROOT/.gpupool-e2e"

# --- credentials -----------------------------------------------------------
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN,admin,admin,system:masters" >"$E2E_STATE/pki/tokens.csv"
pki=$E2E_STATE/pki
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
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
chmod 600 "$KUBECONFIG" "$pki/tokens.csv"
# The apiserver refuses a loopback advertise address; nothing connects to it.
ADVERTISE=$(ip -4 -o addr show scope global 2>/dev/null | awk 'NR == 1 {split($4, a, "/"); print a[1]}')
ADVERTISE=${ADVERTISE:-192.0.2.1}
echo "$ADVERTISE" >"$E2E_STATE/advertise"
# A CA (the root-ca publisher puts it into every namespace's kube-root-ca.crt,
# which in-cluster clients verify the server with) and the serving cert.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=gpupool-e2e-k136-ca \
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
  --initial-cluster e2e=http://127.0.0.1:2380 --quota-backend-bytes=1073741824 \
  --unsafe-no-fsync
wait_for 30 "etcd healthy" curl -fsS --max-time 2 http://127.0.0.1:2379/health ||
  e2e_die "etcd did not start; see $E2E_LOGS/etcd.log"

# --- kube-apiserver --------------------------------------------------------
e2e_log "starting kube-apiserver (advertise $ADVERTISE)"
start_bg kube-apiserver "$E2E_LOGS/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
  --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=127.0.0.1 --secure-port=6443 \
  --advertise-address="$ADVERTISE" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --token-auth-file="$pki/tokens.csv" \
  --anonymous-auth=false \
  --authorization-mode=Node,RBAC \
  --service-account-key-file="$pki/sa.pub" \
  --service-account-signing-key-file="$pki/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-cluster-ip-range=10.96.0.0/24 \
  --kubelet-preferred-address-types=Hostname,InternalIP \
  --allow-privileged=true \
  --profiling=false \
  --v=1
apiserver_ok() { curl -fsSk --max-time 2 -H "Authorization: Bearer $TOKEN" https://127.0.0.1:6443/readyz; }
wait_for 90 "kube-apiserver readyz" apiserver_ok ||
  e2e_die "kube-apiserver did not become ready; see $E2E_LOGS/kube-apiserver.log"

# --- kube-controller-manager -------------------------------------------------
# serviceaccount: every namespace's `default` (the ServiceAccount admission
# plugin refuses pods without it); root-ca publisher: kube-root-ca.crt, which
# every pod's projected token volume mounts; resourceclaim: reservedFor and
# deallocation when a claim's pod goes (a deleted pod's share is freed for
# the next claim), claims from templates; daemonset + garbage collector: the
# DaemonSet of `kubectl apply -k deploy/overlays/dra`. No node lifecycle.
# The shared tarball's build (Kubernetes as vendored by MicroShift) also adds
# a ConfigMap openshift-service-ca.crt to every projected token volume; the
# kubelet does not start a pod until it exists, and only that build's
# service-ca publisher makes it. Official builds have no such controller.
kcm_controllers=serviceaccount-controller,root-ca-certificate-publisher-controller,resourceclaim-controller,daemonset-controller,garbage-collector-controller
# (The help read whole first: `grep -q` on the pipe would end it early, and
# pipefail would call the SIGPIPE'd writer a failure.)
kcm_help=$("$K8S_BIN/kube-controller-manager" --help 2>&1 || true)
if [[ $kcm_help == *service-ca-certificate-publisher-controller* ]]; then
  kcm_controllers+=,service-ca-certificate-publisher-controller
fi
e2e_log "starting kube-controller-manager"
start_bg kube-controller-manager "$E2E_LOGS/kube-controller-manager.log" \
  "$K8S_BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --leader-elect=false \
  --controllers="$kcm_controllers" \
  --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
  --secure-port=0 --v=1

# --- containerd 2 (CDI on) -----------------------------------------------------
cat >"$E2E_STATE/cni/net.d/10-gpupool-e2e-k136.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "gpupool-e2e-k136",
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
cdi_dirs=$(printf '"%s", ' "${CDI_DIRS[@]}")
cat >"$E2E_STATE/containerd.toml" <<EOF
version = 3
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

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = true
  cdi_spec_dirs = [${cdi_dirs%, }]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
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
  --kubeconfig="$KUBECONFIG" --leader-elect=false --secure-port=0 --v=2

# --- kubelet ---------------------------------------------------------------
cat >"$E2E_STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$CTRD_SOCK
runtimeRequestTimeout: 2m
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
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
sa_ready() {  # the `default` ServiceAccount and the CA ConfigMap(s) pods mount
  kc -n default get serviceaccount default >/dev/null 2>&1 &&
    kc -n default get configmap kube-root-ca.crt >/dev/null 2>&1 || return 1
  [[ $kcm_controllers != *service-ca* ]] ||
    { kc -n default get configmap openshift-service-ca.crt && kc -n kube-system get configmap openshift-service-ca.crt; } >/dev/null 2>&1
}
wait_for 60 "ServiceAccount default/default and the CA ConfigMaps pods mount" sa_ready ||
  e2e_die "no default ServiceAccount; see $E2E_LOGS/kube-controller-manager.log"
wait_for 90 "node $NODE_NAME Ready" node_ready ||
  e2e_die "node did not become Ready; see $E2E_LOGS/kubelet.log"
kc taint node "$NODE_NAME" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
kc get node -o wide
e2e_log "cluster up in $((SECONDS - t0))s (logs: $E2E_LOGS)"
