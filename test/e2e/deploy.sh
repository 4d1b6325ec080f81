#!/usr/bin/env bash
# shellcheck disable=SC2016
# gpupool deployed for real: the images of `make image` (scripts/image.sh)
# imported into the cluster's containerd, the kustomize overlays of deploy/
# applied with `kubectl apply -k`, and pods run through them:
#   10   images built and imported; kube-controller-manager (DaemonSet,
#        Deployment, ReplicaSet, garbage collector) started for the rollouts
#   10a  overlays/whole-gpu: the device plugin as a DaemonSet pod (uid 0, no
#        capabilities, read-only root): registration, allocation,
#        over-subscription, an XID and its recovery, the pod deleted and
#        re-created by the DaemonSet without losing an allocation
#   10b  overlays/time-slicing: the ConfigMap and CONFIG_FILE roll the
#        DaemonSet out: 4 GPUs x 4 replicas
#   10c  overlays/gpu-mem: the plugin in gpu-mem mode + the extender as a
#        Deployment (uid 65532, no capabilities), kube-scheduler configured
#        from the overlay's ConfigMap; gpu-mem pods bound by the extender run
#        on the GPUs it chose; `kubectl port-forward` to the extender Service
#
#   10d  least privilege, enforced (rbac.sh): the API server authorizes with
#        Node,RBAC and the gpu-mem pods call it with their ServiceAccount's
#        token; `kubectl auth can-i --as` each verb they need (yes) and some
#        they must not have (no); their logs hold no 403
#
# The overlays are applied through a test overlay generated under
# $E2E_STATE/deploy/ that adds only what this cluster lacks: the fake NVML as
# a hostPath --driver-root (never in the image), the inventory and control
# file, and -- no kube-proxy routes the `kubernetes` Service here -- the
# API server's loopback address for the host-network pods' in-cluster
# configuration (KUBERNETES_SERVICE_HOST/PORT). Everything else, the
# ServiceAccounts and their RBAC included, is used as shipped.
#
# Sourced by run.sh after extender.sh (shares its counters, `section`,
# `check` and teardown). Standalone, on a cluster from up.sh:
#   test/e2e/deploy.sh BUILD_DIR
# Environment: FAKENVML_DIR (holding root/usr/lib64/), FAKE_NVML_INVENTORY (as run.sh), GP_IMAGE_CACHE
# (mmdebstrap rootfs cache, default $K8S_CACHE/image-rootfs), DEPLOY_OVERLAYS
# (default "whole-gpu time-slicing gpu-mem"), DEPLOY_SKIP=1 (skip all of it).

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then   # standalone
  set -uo pipefail
  [[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
  BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "deploy.sh: build dir $1 not found" >&2; exit 2; }
  . "$(dirname "$0")/lib.sh"
  T_START=$SECONDS
  section() { printf '\n==== %s (%s, +%ss) ====\n' "$*" "$(date +%H:%M:%S)" "$((SECONDS - T_START))"; }
  trap 'echo "$E2E_PASSED passed, $E2E_FAILED failed"' EXIT
fi

DEP_NS=kube-system
DEP_DIR=$E2E_STATE/deploy
DEP_PLUGIN_SEL=app.kubernetes.io/name=gpupool-device-plugin
DEP_EXT_SEL=app.kubernetes.io/name=gpupool-scheduler-extender
DEP_IMAGES=$BUILD/images
DEP_PLUGIN_BIN=$BUILD/bin/gpupool-device-plugin
DEP_EXT_BIN=$BUILD/bin/gpupool-scheduler-extender
# Recovery must take longer than the kubelet's 10 s node-status period, or
# allocatable never shows the Unhealthy GPU (run.sh uses 25 for the same reason).
DEP_PROBES=25
DEP_OVERLAYS=" ${DEPLOY_OVERLAYS:-whole-gpu time-slicing gpu-mem} "
dep_wanted() { [[ $DEP_OVERLAYS == *" $1 "* ]]; }
# The fake NVML build dir: libnvidia-ml.so.1 and root/usr/lib64/ (a driver root).
DEP_FAKENVML=${FAKENVML_DIR:-}
if [[ ! -e $DEP_FAKENVML/root/usr/lib64/libnvidia-ml.so.1 ]]; then
  DEP_LIB=$(find "$BUILD" -path '*/fakenvml/root/usr/lib64/libnvidia-ml.so.1' -not -path '*/v1only/*' 2>/dev/null | head -n1)
  DEP_FAKENVML=${DEP_LIB:+${DEP_LIB%/root/usr/lib64/libnvidia-ml.so.1}}
fi
if [[ -z ${FAKE_NVML_INVENTORY:-} ]]; then
  FAKE_NVML_INVENTORY=$REPO_ROOT/test/fakenvml/inventories/4gpu.json
  [[ -f $FAKE_NVML_INVENTORY ]] || FAKE_NVML_INVENTORY=$E2E_DIR/inventory-4gpu.json
fi
mapfile -t DEP_UUIDS < <(/usr/bin/python3 -c 'import json,sys; [print(g["uuid"]) for g in json.load(open(sys.argv[1]))["gpus"]]' "$FAKE_NVML_INVENTORY")

dep_kc() { kc -n "$DEP_NS" "$@"; }
# The extender Service's fixed ClusterIP (overlays/gpu-mem/extender.yaml).
# No kube-proxy runs here: dep_cluster_ip add puts the address on the host's
# loopback, so a connection to it reaches the (host-network, all-interfaces)
# extender as kube-proxy's DNAT would; down.sh removes it too.
DEP_CLUSTER_IP=10.96.0.39
dep_cluster_ip() {  # dep_cluster_ip add|del
  ip addr "$1" "$DEP_CLUSTER_IP/32" dev lo 2>/dev/null
  # Read whole, not piped to grep -q: under pipefail, ip writing its next
  # line (lo's inet6) after grep has quit dies of SIGPIPE and fails the check.
  [[ $1 == del || $(ip -o addr show dev lo) == *" $DEP_CLUSTER_IP/32 "* ]]
}
. "$E2E_DIR/rbac.sh"   # 10d: least privilege (rbac_*)
dep_is_fake_uuid() { local u; for u in "${DEP_UUIDS[@]}"; do [[ $u == "$1" ]] && return 0; done; return 1; }

# --- cluster pieces ------------------------------------------------------------
# The e2e cluster runs no controller-manager; DaemonSets and Deployments need
# one. Only the controllers the rollouts use, and the Endpoints of Services
# (the API server's service proxy, which kubectl gpupool top reads the
# extender through, answers 503 without them); it serves no port.
dep_start_kcm() {
  is_running kube-controller-manager && return 0
  printf '  $ kube-controller-manager --controllers=daemonset,deployment,replicaset,garbagecollector,endpoint\n'
  start_bg kube-controller-manager "$E2E_LOGS/kube-controller-manager.log" \
    "$K8S_BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --leader-elect=false \
    --controllers=daemonset,deployment,replicaset,garbagecollector,endpoint \
    --port=0 --secure-port=0 --concurrent-deployment-syncs=2 --v=1
}
# dep_scheduler LABEL ARGS...  -- replaces the running kube-scheduler.
dep_scheduler() {
  local label=$1
  shift
  stop_pid kube-scheduler 10
  DEP_SCHED_LOG=$E2E_LOGS/kube-scheduler-deploy-$label.log
  printf '  $ kube-scheduler %s   (log: %s)\n' "$*" "$DEP_SCHED_LOG"
  start_bg kube-scheduler "$DEP_SCHED_LOG" "$K8S_BIN/kube-scheduler" --secure-port=0 --v=2 "$@"
}
dep_plain_scheduler() {
  dep_scheduler plain --kubeconfig="$KUBECONFIG" --leader-elect=false --port=0 --bind-address=127.0.0.1
}

# --- images ------------------------------------------------------------------------
dep_images_current() {
  local n
  for n in gpupool-device-plugin gpupool-scheduler-extender; do
    [[ -f $DEP_IMAGES/$n.oci.tar && -f $DEP_IMAGES/$n.ref ]] || return 1
    [[ ! -x $BUILD/bin/$n || $DEP_IMAGES/$n.oci.tar -nt $BUILD/bin/$n ]] || return 1
  done
}
dep_image_ref() { cat "$DEP_IMAGES/$1.ref"; }
dep_image_imported() {
  local refs
  refs=$(ctr_ images ls -q 2>/dev/null) && grep -qxF "$(dep_image_ref "$1")" <<<"$refs"
}

# --- the test overlay ----------------------------------------------------------------
# dep_overlay NAME  -- writes $DEP_DIR/kustomize/NAME/ over deploy/overlays/NAME
# and prints its path.
dep_overlay() {
  local name=$1 dir=$DEP_DIR/kustomize/$1 rel kube_env="" ext_patch="" host_net="" ext_kind=Deployment ext_net=""
  mkdir -p "$dir"
  rel=$(realpath --relative-to="$dir" "$REPO_ROOT/deploy/overlays/$name")
  if [[ $name == gpu-mem || $name == secondary-scheduler || $name == gpushare ]]; then
    # In-cluster configuration (the ServiceAccount's token and ca.crt) with
    # the address kube-proxy would have given the `kubernetes` Service: this
    # cluster runs none; host-network pods reach its API server on 127.0.0.1:6443.
    kube_env='        - {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}
        - {name: KUBERNETES_SERVICE_PORT, value: "6443"}'
    # The plugin is host-network as shipped, and so is the extender here
    # but in 10g, which runs its replicas on the pod network as shipped.
    host_net='      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet'
    # The extender as shipped runs on the pod network (overlays/gpu-mem) and
    # kube-scheduler reaches it at the Service's ClusterIP; here it joins the
    # host network too, and dep_cluster_ip stands in for kube-proxy. The
    # gpushare overlay's extender is a host-network DaemonSet as shipped.
    # Two host-network replicas would share one node's port: one here,
    # replaced by Recreate (a surge pod could not open the port).
    # DEP_EXT_POD_NET=ADDRESS (10g) keeps the shipped pod network, replicas
    # and strategy, and the extender reaches the apiserver at ADDRESS.
    # No PodDisruptionBudget either way (policy/v1 is 1.21+; this cluster is 1.20).
    local ext_replicas="" ext_pdb="" ext_env=$kube_env
    if [[ $name == gpushare ]]; then
      ext_kind=DaemonSet
    else
      ext_pdb=$'---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: gpupool-scheduler-extender, namespace: kube-system}\n$patch: delete'
      if [[ -n ${DEP_EXT_POD_NET:-} ]]; then
        ext_env="        - {name: KUBERNETES_SERVICE_HOST, value: $DEP_EXT_POD_NET}
        - {name: KUBERNETES_SERVICE_PORT, value: \"6443\"}"
      else
        ext_net=$host_net
        ext_replicas=$'  replicas: 1\n  strategy: {type: Recreate, rollingUpdate: null}'
      fi
    fi
    ext_patch=$(cat <<EOF
$ext_pdb
---
apiVersion: apps/v1
kind: $ext_kind
metadata: {name: gpupool-scheduler-extender, namespace: kube-system}
spec:
$ext_replicas
  template:
    spec:
$ext_net
      containers:
      - name: gpupool-scheduler-extender
        env:
$ext_env
EOF
)
    if [[ $name == secondary-scheduler ]]; then
      # No registry here for registry.k8s.io/kube-scheduler: the suite runs
      # the kube-scheduler it built as gpupool-scheduler instead (10e), and
      # there is no DNS for the shipped urlPrefix: the Service keeps the
      # fixed ClusterIP of overlays/gpu-mem that dep_cluster_ip routes.
      ext_patch+=$(cat <<EOF

---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gpupool-scheduler, namespace: kube-system}
spec:
  replicas: 0
---
apiVersion: v1
kind: Service
metadata: {name: gpupool-scheduler-extender, namespace: kube-system}
spec:
  clusterIP: $DEP_CLUSTER_IP
EOF
)
    fi
    # GFD node labels (--node-labels) too: one more call under the plugin's RBAC.
    kube_env+='
        - {name: GP_NODE_LABELS, value: "true"}'
  fi
  cat >"$dir/kustomization.yaml" <<EOF
# Generated by test/e2e/deploy.sh: deploy/overlays/$name for the e2e cluster.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
bases:
- $rel
images:
- name: localhost/gpupool/gpupool-device-plugin
  newName: $(dep_image_ref gpupool-device-plugin | sed 's/:[^:/]*$//')
  newTag: "$(dep_image_ref gpupool-device-plugin | sed 's/^.*://')"
- name: localhost/gpupool/gpupool-scheduler-extender
  newName: $(dep_image_ref gpupool-scheduler-extender | sed 's/:[^:/]*$//')
  newTag: "$(dep_image_ref gpupool-scheduler-extender | sed 's/^.*://')"
patchesStrategicMerge:
- e2e.yaml
EOF
  cat >"$dir/e2e.yaml" <<EOF
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: gpupool-device-plugin, namespace: kube-system}
spec:
  template:
    spec:
      # Only the node with a kubelet (other suites add kubelet-less Nodes).
      nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
$host_net
      containers:
      - name: gpupool-device-plugin
        env:
        - {name: NVIDIA_DRIVER_ROOT, value: /fakenvml/root}
        - {name: FAKE_NVML_INVENTORY, value: /e2e/inventory.json}
        - {name: FAKE_NVML_CONTROL, value: /e2e/fake-nvml-control}
        - {name: FAIL_ON_INIT_ERROR, value: "true"}
        - {name: GP_HEALTH_RECOVERY_PROBES, value: "$DEP_PROBES"}
        - {name: GP_HEALTH_PROBE_INTERVAL, value: 1s}
$kube_env
        volumeMounts:
        - {name: fakenvml, mountPath: /fakenvml, readOnly: true}
        - {name: e2e, mountPath: /e2e}
      volumes:
      - {name: fakenvml, hostPath: {path: $DEP_FAKENVML, type: Directory}}
      - {name: e2e, hostPath: {path: $DEP_DIR/nvml, type: Directory}}
$( [[ -n $kube_env ]] && echo "      - {name: state, hostPath: {path: $DEP_DIR/gpupool-state, type: DirectoryOrCreate}}")
$ext_patch
EOF
  sed -i '/^$/d' "$dir/e2e.yaml"
  echo "$dir"
}
dep_apply() {  # dep_apply NAME  -- kubectl apply -k the test overlay of NAME
  local dir
  dir=$(dep_overlay "$1")
  printf '  $ kubectl apply -k %s   (bases: deploy/overlays/%s)\n' "$dir" "$1"
  kc apply -k "$dir" 2>&1 | sed 's/^/    /'
  return "${PIPESTATUS[0]}"
}
dep_delete() {  # dep_delete NAME
  printf '  $ kubectl delete -k %s\n' "$DEP_DIR/kustomize/$1"
  kc delete -k "$DEP_DIR/kustomize/$1" --ignore-not-found --wait=false 2>&1 | sed 's/^/    /'
}

# --- pods of the overlays --------------------------------------------------------------
# The one Running, Ready, not-terminating pod of a selector (name), or nothing.
dep_pod() {
  dep_kc get pods -l "$1" -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name} {.metadata.deletionTimestamp} {.status.containerStatuses[0].ready}{"\n"}{end}' 2>/dev/null |
    awk 'NF == 2 && $2 == "true" {print $1}' | head -n1
}
dep_pod_ready() { [[ -n "$(dep_pod "$1")" ]]; }
# Every pod of SELECTOR gone or marked for deletion (the kubelet of v1.20
# takes from 10 s to a minute to confirm a deletion, docs/e2e.md).
dep_all_deleted() {
  local out
  out=$(dep_kc get pods -l "$1" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.deletionTimestamp}{"\n"}{end}' 2>/dev/null) || return 1
  ! grep -q '=$' <<<"$out"
}
# Waits for the deleted pods of SELECTOR to go (forced after 30 s).
dep_reap() {
  dep_none() { [[ -z "$(dep_kc get pods -l "$1" -o name 2>/dev/null)" ]]; }
  wait_for 30 "pods of $1 gone" dep_none "$1" && return 0
  dep_kc delete pods -l "$1" --grace-period=0 --force >/dev/null 2>&1
  wait_for 30 "pods of $1 gone (forced)" dep_none "$1"
}
dep_pod_ready_other_than() {  # dep_pod_ready_other_than SELECTOR OLD_POD
  local p
  p=$(dep_pod "$1")
  [[ -n $p && $p != "$2" ]]
}
# Host view of a pod's container process: "uid capeff noNewPrivs rootfs-mode".
dep_pid_of() {  # dep_pid_of POD  -- host pid of the pod's (first) container
  local cid pid
  cid=$(dep_kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}' 2>/dev/null)
  cid=${cid#containerd://}
  [[ -n $cid ]] || return 1
  pid=$(ctr_ tasks ls 2>/dev/null | awk -v c="$cid" '$1 == c {print $2}')
  [[ -n $pid && -r /proc/$pid/status ]] || return 1
  echo "$pid"
}
dep_proc_of() {  # dep_proc_of POD
  local pid st root
  pid=$(dep_pid_of "$1") || return 1
  st=$(awk '/^Uid:/ {u = $2} /^CapEff:/ {c = $2} /^NoNewPrivs:/ {n = $2} END {print u, c, n}' "/proc/$pid/status")
  root=$(awk '$5 == "/" {split($6, o, ","); print o[1]; exit}' "/proc/$pid/mountinfo")
  echo "$st $root"
}
dep_proc_is() {  # dep_proc_is POD "UID CAPEFF NNP ROOTMODE"
  local got
  got=$(dep_proc_of "$1")
  echo "    $1: uid capeff no_new_privs rootfs = $got"
  [[ $got == "$2" ]]
}
dep_image_of() { dep_kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].image}' 2>/dev/null; }

# --- node and workload pods -----------------------------------------------------------
dep_gpu() { node_res "$1" nvidia.com/gpu; }
dep_wait_gpu() {  # dep_wait_gpu CAPACITY ALLOCATABLE TIMEOUT
  dep_gpu_is() { [[ "$(dep_gpu capacity)/$(dep_gpu allocatable)" == "$1/$2" ]]; }
  wait_for "$3" "node nvidia.com/gpu capacity=$1 allocatable=$2" dep_gpu_is "$1" "$2"
}
dep_show_gpu() {
  kshow get node "$NODE_NAME" -o jsonpath='{"capacity: "}{.status.capacity}{"\nallocatable: "}{.status.allocatable}{"\n"}'
}
dep_registrations() {
  local n
  n=$(grep -c 'Registered endpoint .* nvidia.com/gpu \|Registered endpoint .* aliyun.com/gpu-mem ' "$E2E_LOGS/kubelet.log" 2>/dev/null)
  echo "${n:-0}"
}
dep_gpu_pod() {  # dep_gpu_pod NAME GPUS
  sed -e "s/@NAME@/$1/" -e "s/@GPUS@/$2/" -e 's/app: gpupool-e2e}/app: gpupool-e2e-deploy}/' \
    "$E2E_DIR/manifests/gpu-pod.yaml" | kc apply -f - | sed 's/^/    /'
}
# grep on a captured log: `kubectl logs | grep -q` can fail under pipefail
# when grep exits before kubectl has written everything (SIGPIPE).
dep_log_has() {
  local log
  log=$(kc logs "$1" 2>/dev/null) && grep -q -- "$2" <<<"$log"
}
dep_pod_up() { pod_phase_is "$1" Running && dep_log_has "$1" '^READY$'; }
# The plugin pod's Prometheus endpoint (the base's GP_METRICS_ADDR :9401),
# reached through `kubectl port-forward` (this cluster's host has no route
# into the pod network); dep_metrics_forward POD starts it.
dep_metrics_forward() {
  mf_port=$((42000 + RANDOM % 2000))
  printf '  $ kubectl -n %s port-forward pod/%s %s:9401; curl 127.0.0.1:%s/metrics\n' \
    "$DEP_NS" "$1" "$mf_port" "$mf_port"
  "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" -n "$DEP_NS" port-forward "pod/$1" \
    "$mf_port:9401" >"$E2E_LOGS/port-forward-metrics.log" 2>&1 &
  mf_pid=$!
  mf_ok() { dep_metrics >/dev/null; }
  wait_for 30 "port-forward to the plugin's /metrics" mf_ok
}
dep_metrics_stop() { kill "$mf_pid" 2>/dev/null; wait "$mf_pid" 2>/dev/null; }
dep_metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$mf_port/metrics"; }
dep_metric_is() {  # dep_metric_is 'NAME{LABELS}' VALUE
  local text
  text=$(dep_metrics) || return 1
  grep -qxF -- "$1 $2" <<<"$text"
}
dep_metric_count_is() {  # dep_metric_count_is NAME N  -- N samples of NAME at value 1
  local text
  text=$(dep_metrics) || return 1
  (( $(grep -c -- "^$1{.*} 1\$" <<<"$text") == $2 ))
}
dep_uuids() {
  kc logs "$1" 2>/dev/null | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p' | head -n1 | tr ',' '\n' | sed '/^$/d'
}
dep_n_fake_uuids() {  # dep_n_fake_uuids POD N  -- N distinct fake UUIDs
  local -a u
  mapfile -t u < <(dep_uuids "$1")
  echo "    $1: NVIDIA_VISIBLE_DEVICES=$(IFS=,; echo "${u[*]}")"
  (( ${#u[@]} == $2 )) || return 1
  (( $(printf '%s\n' "${u[@]}" | sort -u | wc -l) == $2 )) || return 1
  local x
  for x in "${u[@]}"; do dep_is_fake_uuid "$x" || return 1; done
}
dep_disjoint() {  # dep_disjoint POD_A POD_B
  local both
  both=$( { dep_uuids "$1"; dep_uuids "$2"; } | sort)
  [[ -n $both ]] && [[ "$(echo "$both" | uniq -d)" == "" ]]
}
dep_unschedulable_for() {  # dep_unschedulable_for POD TEXT
  kc get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null | grep -F -- "$2" >/dev/null
}
dep_delete_pods() {
  kc delete pods -l app=gpupool-e2e-deploy --grace-period=0 --force --wait=false >/dev/null 2>&1
  wait_for 60 "deploy test pods deleted" bash -c "! $K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pods -l app=gpupool-e2e-deploy -o name | grep -q ."
}

# =====================================================================================
section "10. images (make image) into containerd; kube-controller-manager"
DEP_T0=$SECONDS
dep_ready=1
for f in "$DEP_PLUGIN_BIN" "$DEP_FAKENVML/root/usr/lib64/libnvidia-ml.so.1" "$K8S_BIN/kube-controller-manager"; do
  [[ -e $f ]] || { fail "deploy e2e: $f missing"; dep_ready=0; }
done
if ((dep_ready)) && [[ ${DEPLOY_SKIP:-0} != 1 ]]; then
  if dep_images_current; then
    e2e_log "images: $DEP_IMAGES/*.oci.tar are newer than the programs"
  else
    mkdir -p "${GP_IMAGE_CACHE:-$K8S_CACHE/image-rootfs}"
    printf '  $ scripts/image.sh %s\n' "$BUILD"
    t=$SECONDS
    GP_IMAGE_CACHE=${GP_IMAGE_CACHE:-$K8S_CACHE/image-rootfs} "$REPO_ROOT/scripts/image.sh" "$BUILD" 2>&1 | sed 's/^/    /'
    e2e_log "scripts/image.sh took $((SECONDS - t)) s"
  fi
  check "make image: both OCI archives built" dep_images_current
  dep_images_current || dep_ready=0
fi
if ((dep_ready)) && [[ ${DEPLOY_SKIP:-0} != 1 ]]; then
  sed 's/^/    /' "$DEP_IMAGES/sizes.txt" 2>/dev/null
  for n in gpupool-device-plugin gpupool-scheduler-extender; do
    printf '  $ ctr -n k8s.io images import %s\n' "$DEP_IMAGES/$n.oci.tar"
    ctr_ images import "$DEP_IMAGES/$n.oci.tar" 2>&1 | sed 's/^/    /'
    check "image $(dep_image_ref "$n") imported into containerd (no registry)" dep_image_imported "$n"
  done
  ctr_ images ls 2>/dev/null | awk 'NR == 1 || /gpupool\//' | cut -c1-160 | sed 's/^/    /'

  # Fake NVML inputs (see the header).
  rm -rf "$DEP_DIR"
  mkdir -p "$DEP_DIR/nvml"
  cp "$FAKE_NVML_INVENTORY" "$DEP_DIR/nvml/inventory.json"
  : >"$DEP_DIR/nvml/fake-nvml-control"

  # Every overlay and sample pod as the API server sees it, nothing created.
  for o in whole-gpu time-slicing gpu-mem secondary-scheduler gpushare; do
    check "kubectl apply -k deploy/overlays/$o --dry-run=server" \
      bash -c "$K8S_BIN/kubectl --kubeconfig $KUBECONFIG apply -k $REPO_ROOT/deploy/overlays/$o --dry-run=server -o name | sed 's/^/    /'"
  done
  # 1.20 knows no sidecar field (restartPolicy of an init container): no
  # client-side schema check, the server drops what it does not know.
  check "kubectl apply -f deploy/examples/ --dry-run=server (sample pods)" \
    bash -c "$K8S_BIN/kubectl --kubeconfig $KUBECONFIG apply -f $REPO_ROOT/deploy/examples/ --dry-run=server --validate=false -o name | sed 's/^/    /'"

  dep_start_kcm
  wait_for 30 "kube-controller-manager running" is_running kube-controller-manager
  check "kube-controller-manager running (DaemonSet/Deployment controllers)" is_running kube-controller-manager

  # ===================================================================================
  if dep_wanted whole-gpu; then
  section "10a. overlays/whole-gpu: the device plugin as a DaemonSet pod"
  echo "  $ cat deploy/overlays/whole-gpu/kustomization.yaml"
  grep -v '^#' "$REPO_ROOT/deploy/overlays/whole-gpu/kustomization.yaml" | sed 's/^/    /'
  echo "  $ cat $DEP_DIR/kustomize/whole-gpu/e2e.yaml   (test-only additions)"
  dep_overlay whole-gpu >/dev/null
  sed 's/^/    /' "$DEP_DIR/kustomize/whole-gpu/e2e.yaml"
  regs=$(dep_registrations)
  dep_apply whole-gpu
  check "kubectl apply -k (whole-gpu) created the DaemonSet" dep_kc get daemonset gpupool-device-plugin -o name
  wait_for 90 "DaemonSet pod Running" dep_pod_ready "$DEP_PLUGIN_SEL"
  dp=$(dep_pod "$DEP_PLUGIN_SEL")
  kshow -n "$DEP_NS" get daemonset,pods -l "$DEP_PLUGIN_SEL" -o wide
  check "DaemonSet pod $dp Running" dep_pod_ready "$DEP_PLUGIN_SEL"
  runs_image() { [[ "$(dep_image_of "$1")" == *"$2" ]]; }
  check "pod runs image $(dep_image_ref gpupool-device-plugin)" runs_image "$dp" "$(dep_image_ref gpupool-device-plugin)"
  check "plugin container: uid 0, no capabilities, no_new_privs, read-only rootfs" \
    dep_proc_is "$dp" "0 0000000000000000 1 ro"
  rbac_whole_gpu "$dp"
  registered() { (( $(dep_registrations) > regs )); }
  wait_for 60 "kubelet: Registered endpoint (DaemonSet pod)" registered
  dep_wait_gpu 4 4 60
  dep_show_gpu
  check "[whole-gpu] capacity nvidia.com/gpu = 4" node_res_is capacity nvidia.com/gpu 4
  check "[whole-gpu] allocatable nvidia.com/gpu = 4" node_res_is allocatable nvidia.com/gpu 4

  dep_gpu_pod dep-two 2
  wait_for 90 "pod dep-two Running" dep_pod_up dep-two
  kshow logs dep-two
  check "[whole-gpu] dep-two sees 2 distinct fake GPUs" dep_n_fake_uuids dep-two 2
  dep_metrics_forward "$dp"
  metrics_text=$(dep_metrics)
  grep -E '^gpupool_(gpu_healthy|deviceplugin_devices_(advertised|allocated)|deviceplugin_pod_resources_up)' \
    <<<"$metrics_text" | sed 's/^/    /'
  check "[whole-gpu] metrics: 4 GPUs healthy" dep_metric_count_is gpupool_gpu_healthy 4
  check "[whole-gpu] metrics: the real kubelet's PodResources answered" \
    dep_metric_is gpupool_deviceplugin_pod_resources_up 1
  check "[whole-gpu] metrics: devices_allocated nvidia.com/gpu = 2 (dep-two)" \
    dep_metric_is 'gpupool_deviceplugin_devices_allocated{resource="nvidia.com/gpu"}' 2
  dep_metrics_stop
  dep_gpu_pod dep-three 3
  wait_for 60 "dep-three Unschedulable" dep_unschedulable_for dep-three "Insufficient nvidia.com/gpu"
  check "[whole-gpu] a pod asking for 3 of the 2 left stays Pending (Insufficient nvidia.com/gpu)" \
    dep_unschedulable_for dep-three "Insufficient nvidia.com/gpu"
  kc delete pod dep-three --grace-period=0 --force --wait=false >/dev/null 2>&1

  echo "  $ echo 'xid 3 48' >> $DEP_DIR/nvml/fake-nvml-control   (hostPath /e2e in the pod)"
  echo "xid 3 48" >>"$DEP_DIR/nvml/fake-nvml-control"
  dep_wait_gpu 4 3 30
  dep_show_gpu
  check "[whole-gpu] XID 48 through the hostPath control file: allocatable 3" node_res_is allocatable nvidia.com/gpu 3
  dep_wait_gpu 4 4 $((DEP_PROBES + 40))
  check "[whole-gpu] recovered after $DEP_PROBES probes: allocatable 4" node_res_is allocatable nvidia.com/gpu 4

  # The DaemonSet re-creates a deleted plugin pod; the new one registers and
  # the running allocation survives.
  regs=$(dep_registrations)
  printf '  $ kubectl -n %s delete pod %s\n' "$DEP_NS" "$dp"
  dep_kc delete pod "$dp" --wait=false >/dev/null 2>&1
  wait_for 90 "a new DaemonSet pod Running" dep_pod_ready_other_than "$DEP_PLUGIN_SEL" "$dp"
  dp2=$(dep_pod "$DEP_PLUGIN_SEL")
  wait_for 60 "kubelet: Registered endpoint (re-created pod)" registered
  dep_wait_gpu 4 4 60
  kshow -n "$DEP_NS" get pods -l "$DEP_PLUGIN_SEL" -o wide
  check "[whole-gpu] the DaemonSet re-created the plugin pod ($dp -> ${dp2:-none})" test -n "$dp2"
  check "[whole-gpu] the new pod registered: allocatable nvidia.com/gpu = 4" node_res_is allocatable nvidia.com/gpu 4
  check "[whole-gpu] dep-two still Running" pod_phase_is dep-two Running
  dep_gpu_pod dep-after 2
  wait_for 90 "pod dep-after Running" dep_pod_up dep-after
  check "[whole-gpu] a new 2-GPU pod gets the other 2 GPUs" dep_disjoint dep-two dep-after
  dep_delete_pods

  fi

  # ===================================================================================
  if dep_wanted time-slicing; then
  section "10b. overlays/time-slicing: ConfigMap + CONFIG_FILE, 4 replicas per GPU"
  echo "  $ cat deploy/overlays/time-slicing/time-slicing.yaml"
  grep -v '^#' "$REPO_ROOT/deploy/overlays/time-slicing/time-slicing.yaml" | sed 's/^/    /'
  dp=$(dep_pod "$DEP_PLUGIN_SEL")
  dep_apply time-slicing
  ts_cm() {  # the DaemonSet mounts the generated ConfigMap, and it exists
    local cm
    cm=$(dep_kc get daemonset gpupool-device-plugin -o jsonpath='{.spec.template.spec.volumes[?(@.name=="config")].configMap.name}')
    [[ $cm == gpupool-device-plugin-config-* ]] && dep_kc get configmap "$cm" >/dev/null
  }
  check "kubectl apply -k (time-slicing): the DaemonSet mounts the generated ConfigMap" ts_cm
  wait_for 90 "the DaemonSet rolled out a new pod" dep_pod_ready_other_than "$DEP_PLUGIN_SEL" "$dp"
  dep_wait_gpu 16 16 60
  dep_show_gpu
  kshow -n "$DEP_NS" get configmaps,pods -l "$DEP_PLUGIN_SEL" -o wide
  check "[time-slicing] capacity nvidia.com/gpu = 16 (4 GPUs x 4)" node_res_is capacity nvidia.com/gpu 16
  check "[time-slicing] allocatable nvidia.com/gpu = 16" node_res_is allocatable nvidia.com/gpu 16
  dep_gpu_pod dep-ts 1
  wait_for 90 "pod dep-ts Running" dep_pod_up dep-ts
  check "[time-slicing] a 1-GPU pod sees one fake GPU" dep_n_fake_uuids dep-ts 1
  dep_delete_pods
  dep_delete time-slicing
  wait_for 60 "the garbage collector deleting the plugin pods" dep_all_deleted "$DEP_PLUGIN_SEL"
  check "kubectl delete -k: the DaemonSet's pods are being deleted (garbage collector)" dep_all_deleted "$DEP_PLUGIN_SEL"
  dep_reap "$DEP_PLUGIN_SEL"

  fi

  # ===================================================================================
  if ! dep_wanted gpu-mem; then
    :
  elif ! "$DEP_PLUGIN_BIN" --help 2>&1 | grep -q -- 'resource-mode'; then
    fail "gpu-mem overlay: $DEP_PLUGIN_BIN has no --resource-mode"
  elif [[ ! -x $DEP_EXT_BIN ]]; then
    fail "gpu-mem overlay: $DEP_EXT_BIN missing"
  else
    section "10c. overlays/gpu-mem: plugin in gpu-mem mode + extender Deployment"
    check "the Service's ClusterIP $DEP_CLUSTER_IP on the host's loopback (kube-proxy's part)" dep_cluster_ip add
    dep_apply gpu-mem
    check "kubectl apply -k (gpu-mem) created the extender Deployment" dep_kc get deployment gpupool-scheduler-extender -o name
    kshow -n "$DEP_NS" get serviceaccounts,clusterroles,clusterrolebindings,roles,rolebindings,services,configmaps \
      -l app.kubernetes.io/part-of=gpupool
    # kube-scheduler from the configuration the overlay shipped (ConfigMap),
    # pointed at this cluster's kubeconfig.
    dep_kc get configmap gpupool-scheduler-config -o jsonpath='{.data.scheduler-config-v1beta1\.yaml}' |
      sed -e "s#^\(\s*kubeconfig:\).*#\1 $KUBECONFIG#" >"$DEP_DIR/scheduler-config.yaml"
    printf 'leaderElection:\n  leaderElect: false\nhealthzBindAddress: 127.0.0.1:10251\nmetricsBindAddress: 127.0.0.1:10251\n' \
      >>"$DEP_DIR/scheduler-config.yaml"
    check "the overlay's ConfigMap holds the v1beta1 scheduler configuration" \
      grep -q '^kind: KubeSchedulerConfiguration' "$DEP_DIR/scheduler-config.yaml"
    check "... the v1 one for 1.25+" bash -c "$K8S_BIN/kubectl --kubeconfig $KUBECONFIG -n $DEP_NS get configmap gpupool-scheduler-config -o jsonpath='{.data.scheduler-config-v1\\.yaml}' | grep -q '^apiVersion: kubescheduler.config.k8s.io/v1$'"
    check "... and the Policy" bash -c "$K8S_BIN/kubectl --kubeconfig $KUBECONFIG -n $DEP_NS get configmap gpupool-scheduler-config -o jsonpath='{.data.scheduler-policy-config\\.json}' | grep -q '\"kind\": \"Policy\"'"
    dep_scheduler gpu-mem --config="$DEP_DIR/scheduler-config.yaml"
    sched_ext() { grep -q "Creating extender with config.*URLPrefix:http://$DEP_CLUSTER_IP:39999/" "$DEP_SCHED_LOG"; }
    wait_for 30 "kube-scheduler: Creating extender" sched_ext
    check "kube-scheduler uses the extender from the overlay's configuration" sched_ext

    mem_total=$(/usr/bin/python3 -c 'import json,sys; print(sum(g.get("memory_mib", 40960) // 1024 for g in json.load(open(sys.argv[1]))["gpus"]))' "$FAKE_NVML_INVENTORY")
    per_gpu=$(/usr/bin/python3 -c 'import json,sys; print(min(g.get("memory_mib", 40960) // 1024 for g in json.load(open(sys.argv[1]))["gpus"]))' "$FAKE_NVML_INVENTORY")
    mem_is() { [[ "$(node_res allocatable aliyun.com/gpu-mem)" == "$mem_total" ]]; }
    wait_for 120 "extender Deployment pod Ready" dep_pod_ready "$DEP_EXT_SEL"
    wait_for 90 "node allocatable aliyun.com/gpu-mem = $mem_total (plugin registered)" mem_is
    ep=$(dep_pod "$DEP_EXT_SEL")
    dp=$(dep_pod "$DEP_PLUGIN_SEL")
    kshow -n "$DEP_NS" get deployments,replicasets,daemonsets,pods -o wide
    check "extender pod ${ep:-none} Ready (readiness probe /healthz)" test -n "$ep"
    check "extender container: uid 65532, no capabilities, no_new_privs, read-only rootfs" \
      dep_proc_is "$ep" "65532 0000000000000000 1 ro"
    check "plugin pod ${dp:-none} Ready in gpu-mem mode" test -n "$dp"
    svc_ip_is() { [[ "$(dep_kc get service gpupool-scheduler-extender -o jsonpath='{.spec.clusterIP}')" == "$DEP_CLUSTER_IP" ]]; }
    check "the extender Service has the fixed ClusterIP $DEP_CLUSTER_IP of the scheduler configurations" svc_ip_is
    ext_scrape_ann() {
      [[ "$(dep_kc get pod "$ep" -o jsonpath='{.metadata.annotations.prometheus\.io/scrape}/{.metadata.annotations.prometheus\.io/port}')" == true/39998 ]]
    }
    check "extender pod: prometheus.io/scrape true, port 39998" ext_scrape_ann
    [[ -n $dp ]] || for p in $(dep_kc get pods -l "$DEP_PLUGIN_SEL" -o name); do
      kshow -n "$DEP_NS" logs "$p" --previous --tail=20
      kshow -n "$DEP_NS" logs "$p" --tail=20
    done
    kshow get node "$NODE_NAME" -o jsonpath='{"allocatable: "}{.status.allocatable}{"\ngpupool.io/gpus: "}{.metadata.annotations.gpupool\.io/gpus}{"\n"}'
    check "[gpu-mem] node allocatable aliyun.com/gpu-mem = $mem_total (4 GPUs x $per_gpu GiB)" mem_is

    # Two pods that cannot share one GPU, then one no GPU can hold.
    big=$((per_gpu * 2 / 3))
    for p in dep-mem-a dep-mem-b; do
      kc apply -f - <<EOF | sed 's/^/    /'
apiVersion: v1
kind: Pod
metadata: {name: $p, labels: {app: gpupool-e2e-deploy}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "trap 'exit 0' TERM; env | grep -E '^(NVIDIA_VISIBLE_DEVICES|ALIYUN_COM_GPU_MEM)' | sort; echo READY; sleep 3600 & wait \$!"]
    resources:
      limits: {aliyun.com/gpu-mem: "$big"}
EOF
    done
    wait_for 90 "dep-mem-a and dep-mem-b Running" bash -c \
      "for p in dep-mem-a dep-mem-b; do [[ \$($K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pod \$p -o jsonpath='{.status.phase}') == Running ]] || exit 1; done"
    kshow get pods -l app=gpupool-e2e-deploy -o wide
    for p in dep-mem-a dep-mem-b; do
      kshow get pod "$p" -o jsonpath='{.metadata.annotations}{"\n"}'
      kshow logs "$p"
    done
    ann() { kc get pod "$1" -o jsonpath="{.metadata.annotations.$2}" 2>/dev/null; }
    mem_pod_ok() {  # bound by the extender, ASSIGNED by the plugin, on the GPU it chose
      local idx uuid
      idx=$(ann "$1" ALIYUN_COM_GPU_MEM_IDX)
      [[ $idx =~ ^[0-9]+$ ]] || return 1
      uuid=${DEP_UUIDS[$idx]}
      [[ $(ann "$1" ALIYUN_COM_GPU_MEM_ASSIGNED) == true && $(ann "$1" ALIYUN_COM_GPU_MEM_POD) == "$big" ]] &&
        dep_log_has "$1" "^NVIDIA_VISIBLE_DEVICES=$uuid\$"
    }
    wait_for 30 "dep-mem-a and dep-mem-b ASSIGNED by the plugin" bash -c \
      "for p in dep-mem-a dep-mem-b; do [[ \$($K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pod \$p -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_ASSIGNED}') == true ]] || exit 1; done"
    check "[gpu-mem] dep-mem-a ($big GiB) bound by the extender, ASSIGNED, sees the GPU of its IDX" mem_pod_ok dep-mem-a
    check "[gpu-mem] dep-mem-b ($big GiB) bound by the extender, ASSIGNED, sees the GPU of its IDX" mem_pod_ok dep-mem-b
    check "[gpu-mem] $big + $big GiB > $per_gpu: different GPUs" \
      test "$(ann dep-mem-a ALIYUN_COM_GPU_MEM_IDX)" != "$(ann dep-mem-b ALIYUN_COM_GPU_MEM_IDX)"
    kc apply -f - <<EOF | sed 's/^/    /'
apiVersion: v1
kind: Pod
metadata: {name: dep-mem-huge, labels: {app: gpupool-e2e-deploy}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    resources:
      limits: {aliyun.com/gpu-mem: "$((per_gpu + 1))"}
EOF
    huge_refused() {
      [[ "$(kc get pod dep-mem-huge -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}' 2>/dev/null)" == Unschedulable ]]
    }
    wait_for 60 "dep-mem-huge Unschedulable" huge_refused
    kshow get pod dep-mem-huge -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}'
    check "[gpu-mem] a pod larger than any GPU ($((per_gpu + 1)) GiB, $mem_total free on the node) stays Pending" huge_refused
    huge_by_extender() {
      local m
      m=$(kc get pod dep-mem-huge -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null)
      [[ -n $m && $m != *"Insufficient aliyun.com/gpu-mem"* ]]
    }
    check "[gpu-mem] ... refused by the extender, not by the scheduler's own fit" huge_by_extender

    rbac_gpu_mem "$dp" "$ep"

    # Used beside booked the default way (issue 26): the shipped extender
    # sweeps each GPU-sharing node's agent at the node's InternalIP:9401 in
    # the background, and kubectl gpupool top reads its snapshot through the
    # Service (the API server's service proxy): one request, no node proxy.
    top_via_extender() {  # every GPU of the node with the agent's figures, booked where the pods are
      KUBECONFIG=$KUBECONFIG timeout 60 "$BUILD/bin/kubectl-gpupool" top gpus --node "$NODE_NAME" --from extender -o json \
        2>"$DEP_DIR/top.err" | /usr/bin/python3 -c '
import json, sys
gpus = json.load(sys.stdin)["gpus"]
print("      " + json.dumps([[g["index"], g["bookedBytes"], g["usedBytes"], g["smUtilization"], g["nodeMetrics"]] for g in gpus]))
sys.exit(not (len(gpus) == int(sys.argv[1]) and all(g["nodeMetrics"] is True and g["smUtilization"] is not None for g in gpus)
              and sum(1 for g in gpus if g["bookedBytes"]) == 2))' "${#DEP_UUIDS[@]}" && ! grep -q warning "$DEP_DIR/top.err"
    }
    echo "    \$ kubectl gpupool top gpus --node $NODE_NAME --from extender -o json"
    wait_for 60 "the extender's sweep of the agent, through the Service" top_via_extender
    check "[gpu-mem] kubectl gpupool top --from extender: the ${#DEP_UUIDS[@]} GPUs with the agent's figures (the extender's direct sweep of InternalIP:9401), 2 booked" top_via_extender
    top_auto_log() {  # the default (auto) takes the same snapshot and asks no agent
      local log  # read whole: a grep -q quitting early would SIGPIPE the CLI (pipefail)
      log=$(KUBECONFIG=$KUBECONFIG timeout 60 "$BUILD/bin/kubectl-gpupool" top gpus --node "$NODE_NAME" -v 1 2>&1 >/dev/null)
      [[ $log == *"0 of 1 nodes are not in the extender's sweep"* ]]
    }
    check "[gpu-mem] kubectl gpupool top (default --from auto) reads the extender's snapshot and no agent" top_auto_log
    KUBECONFIG=$KUBECONFIG timeout 60 "$BUILD/bin/kubectl-gpupool" top gpus 2>&1 | sed 's/^/      /'

    # The Service: kubectl port-forward into the extender's pod.
    pf_port=$((40000 + RANDOM % 2000))
    printf '  $ kubectl -n %s port-forward svc/gpupool-scheduler-extender %s:39999\n' "$DEP_NS" "$pf_port"
    "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" -n "$DEP_NS" port-forward svc/gpupool-scheduler-extender \
      "$pf_port:39999" >"$E2E_LOGS/port-forward.log" 2>&1 &
    pf_pid=$!
    pf_ok() { curl -fsS --max-time 5 -o /dev/null "http://127.0.0.1:$pf_port/healthz"; }
    wait_for 30 "port-forward answers /healthz" pf_ok
    check "the extender Service answers /healthz through kubectl port-forward" pf_ok
    kill "$pf_pid" 2>/dev/null
    wait "$pf_pid" 2>/dev/null
    # Metrics on every interface of the pod, through the Service's port.
    printf '  $ kubectl -n %s port-forward svc/gpupool-scheduler-extender %s:metrics\n' "$DEP_NS" "$pf_port"
    "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" -n "$DEP_NS" port-forward svc/gpupool-scheduler-extender \
      "$pf_port:39998" >"$E2E_LOGS/port-forward-metrics-ext.log" 2>&1 &
    pf_pid=$!
    pf_metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$pf_port/metrics" | grep -q '^gpupool_extender_binds_total{result="bound"} [1-9]'; }
    wait_for 30 "the Service's metrics port answers" pf_metrics
    check "the extender's /metrics through the Service's metrics port (binds_total bound > 0)" pf_metrics
    kill "$pf_pid" 2>/dev/null
    wait "$pf_pid" 2>/dev/null

    dep_delete_pods
    . "$E2E_DIR/routes.sh"   # 10e secondary scheduler, 10f gpushare's configuration
    . "$E2E_DIR/ha.sh"       # 10g two extender replicas, the active one deleted

    dep_delete_pods
    dep_delete gpu-mem
    dep_plain_scheduler
    dep_cluster_ip del
    wait_for 60 "the garbage collector deleting every gpupool pod" dep_all_deleted app.kubernetes.io/part-of=gpupool
    check "kubectl delete -k (gpu-mem): every gpupool pod is being deleted (garbage collector)" \
      dep_all_deleted app.kubernetes.io/part-of=gpupool
    dep_reap app.kubernetes.io/part-of=gpupool
  fi
  stop_pid kube-controller-manager 10
fi
T_DEPLOY=$((SECONDS - DEP_T0))
e2e_log "deploy scenarios took ${T_DEPLOY}s"
