# shellcheck shell=bash disable=SC2016
# 10e, 10f: the two other ways kube-scheduler reaches the extender, on top
# of 10c's overlays/gpu-mem (plugin in gpu-mem mode, extender on its Service):
#   10e  overlays/secondary-scheduler, for managed control planes: applied
#        over gpu-mem (its ServiceAccount, RBAC, ConfigMap; the Deployment at
#        0 replicas, no registry here), then the kube-scheduler this suite
#        built runs as gpupool-scheduler with the ServiceAccount's token and
#        gpupool-scheduler-v1beta1.yaml (the v1 file's twin: 1.20 reads no
#        v1); a pod with schedulerName: gpupool-scheduler lands on the GPU the
#        extender chose, the Lease kube-system/gpupool-scheduler names it.
#   10f  overlays/gpushare: the extender as a host-network DaemonSet on
#        127.0.0.1:32766, and kube-scheduler started with gpushare's own
#        Policy file (gpushare/scheduler-policy-config.json, unchanged); a
#        gpu-mem pod is bound through /gpushare-scheduler and runs.
# Sourced by deploy.sh inside 10c (needs its helpers, $big, mem_pod_ok, $dp).

rt_pod() {  # rt_pod NAME MEM [SCHEDULER]
  kc apply -f - <<EOP | sed 's/^/    /'
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: gpupool-e2e-deploy}}
spec:
  schedulerName: ${3:-default-scheduler}
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "trap 'exit 0' TERM; env | grep -E '^(NVIDIA_VISIBLE_DEVICES|ALIYUN_COM_GPU_MEM)' | sort; echo READY; sleep 3600 & wait \$!"]
    resources:
      limits: {aliyun.com/gpu-mem: "$2"}
EOP
}
rt_assigned() { [[ $(kc get pod "$1" -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_ASSIGNED}' 2>/dev/null) == true ]]; }
rt_running() { pod_phase_is "$1" Running && rt_assigned "$1"; }

# =====================================================================================
section "10e. overlays/secondary-scheduler: gpupool-scheduler beside kube-scheduler"
dep_apply secondary-scheduler
check "kubectl apply -k (secondary-scheduler): Deployment gpupool-scheduler" dep_kc get deployment gpupool-scheduler -o name
# Same plugin DaemonSet as gpu-mem's: applying over it must not roll it.
rt_same_plugin() { sleep 3; [[ "$(dep_pod "$DEP_PLUGIN_SEL")" == "$dp" ]]; }
check "... the plugin DaemonSet left as it was (pod $dp)" rt_same_plugin
rt_cm=$(dep_kc get deployment gpupool-scheduler -o jsonpath='{.spec.template.spec.volumes[?(@.name=="config")].configMap.name}' 2>/dev/null)
rt_cm_ok() { dep_kc get configmap "$rt_cm" -o jsonpath='{.data.gpupool-scheduler-config\.yaml}' | grep -q '^  resourceName: gpupool-scheduler$'; }
check "... mounting ConfigMap ${rt_cm:-none} with the v1 configuration (Lease gpupool-scheduler)" rt_cm_ok
rt_sa=gpupool-scheduler
for q in "get leases.coordination.k8s.io/gpupool-scheduler -n kube-system" \
  "update leases.coordination.k8s.io/gpupool-scheduler -n kube-system" "create leases.coordination.k8s.io -n kube-system" \
  "create pods --subresource=binding -n default" "list nodes" "create events.events.k8s.io -n default"; do
  check "[rbac] $rt_sa can-i $q: yes" rbac_can_i yes "$rt_sa" $q
done
for q in "update leases.coordination.k8s.io/some-other-lease -n kube-system" "patch nodes" "get secrets -n kube-system"; do
  check "[rbac] $rt_sa can-i $q: no" rbac_can_i no "$rt_sa" $q
done
# The ServiceAccount's token (1.20: a Secret made by the token controller).
rt_secret=
rt_has_secret() {
  rt_secret=$(dep_kc get serviceaccount "$rt_sa" -o jsonpath='{.secrets[0].name}' 2>/dev/null)
  [[ -n $rt_secret ]]
}
wait_for 30 "ServiceAccount $rt_sa has a token Secret" rt_has_secret
rt_kc=$DEP_DIR/gpupool-scheduler.kubeconfig
dep_kc get secret "$rt_secret" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$DEP_DIR/gpupool-scheduler-ca.crt"
cat >"$rt_kc" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$DEP_DIR/gpupool-scheduler-ca.crt"}
users:
- name: $rt_sa
  user: {token: "$(dep_kc get secret "$rt_secret" -o jsonpath='{.data.token}' | base64 -d)"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $rt_sa}
current-context: e2e
EOK
sed "s#@KUBECONFIG@#$rt_kc#" "$E2E_DIR/gpupool-scheduler-v1beta1.yaml" >"$DEP_DIR/gpupool-scheduler.yaml"
RT_LOG=$E2E_LOGS/gpupool-scheduler.log
printf '  $ kube-scheduler --config=%s   (as %s; log: %s)\n' "$DEP_DIR/gpupool-scheduler.yaml" "$rt_sa" "$RT_LOG"
start_bg gpupool-scheduler "$RT_LOG" "$K8S_BIN/kube-scheduler" --secure-port=0 --v=2 --config="$DEP_DIR/gpupool-scheduler.yaml"
rt_leader() {
  [[ "$(dep_kc get lease gpupool-scheduler -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)" == *_* ]]
}
wait_for 60 "Lease kube-system/gpupool-scheduler held" rt_leader
kshow -n "$DEP_NS" get lease gpupool-scheduler -o wide
check "gpupool-scheduler holds its own Lease kube-system/gpupool-scheduler" rt_leader
rt_ext() { grep -q "Creating extender with config.*URLPrefix:http://$DEP_CLUSTER_IP:39999/gpupool-scheduler" "$RT_LOG"; }
check "gpupool-scheduler created the extender (the Service's address)" rt_ext
rt_pod dep-mem-second "$big" gpupool-scheduler
wait_for 90 "dep-mem-second Running and ASSIGNED" rt_running dep-mem-second
kshow get pod dep-mem-second -o jsonpath='{.spec.schedulerName} {.spec.nodeName} {.metadata.annotations}{"\n"}'
rt_by_second() {
  kc get events --field-selector involvedObject.name=dep-mem-second,reason=Scheduled \
    -o jsonpath='{range .items[*]}{.source.component}/{.reportingComponent}{"\n"}{end}' 2>/dev/null | grep -q gpupool-scheduler
}
kshow get events --field-selector involvedObject.name=dep-mem-second,reason=Scheduled
check "[secondary] dep-mem-second scheduled by gpupool-scheduler (its Scheduled event)" rt_by_second
check "[secondary] dep-mem-second bound by the extender, ASSIGNED, sees the GPU of its IDX" mem_pod_ok dep-mem-second
# A 403 as the API reports it (rbac.sh's pattern), not any "403" in a timestamp.
check "gpupool-scheduler's log holds no 403" bash -c "! grep -qiE 'forbidden|(status|HTTP|code)[ =:]*403' '$RT_LOG'"
stop_pid gpupool-scheduler 10
dep_delete_pods

# =====================================================================================
section "10f. overlays/gpushare: gpushare's own scheduler configuration, unchanged"
RT_GS=$E2E_DIR/gpushare/scheduler-policy-config.json
rt_gs_sum() { [[ "$(sha256sum <"$RT_GS" | cut -d' ' -f1)" == e6ff2a67cdefc5d81d65f68acee23494cf102c4284362eb7b017d35f301acec2 ]]; }
check "gpushare's Policy file is the published one (sha256, gpushare/SOURCE.md)" rt_gs_sum
echo "  $ cat test/e2e/gpushare/scheduler-policy-config.json"; sed 's/^/    /' "$RT_GS"; echo
# gpushare's route replaces the Service route: its extender goes first.
dep_kc delete deployment,service gpupool-scheduler-extender --wait=false 2>&1 | sed 's/^/    /'
dep_reap "$DEP_EXT_SEL"
# The DaemonSet runs where kube-scheduler runs: kubeadm's control-plane label.
kshow label node "$NODE_NAME" node-role.kubernetes.io/control-plane= --overwrite
dep_apply gpushare
check "kubectl apply -k (gpushare): the extender DaemonSet" dep_kc get daemonset gpupool-scheduler-extender -o name
check "... the plugin DaemonSet left as it was (pod $dp)" rt_same_plugin
wait_for 90 "extender DaemonSet pod Ready on 127.0.0.1:32766" dep_pod_ready "$DEP_EXT_SEL"
rt_ep=$(dep_pod "$DEP_EXT_SEL")
check "extender DaemonSet pod ${rt_ep:-none} Ready (readiness /healthz on 127.0.0.1:32766)" test -n "$rt_ep"
rt_lo() { ss -Hltn 'sport = :32766' | awk '{print $4}' | grep -qx '127.0.0.1:32766'; }
check "... listening on 127.0.0.1:32766 only" rt_lo
dep_scheduler gpushare --kubeconfig="$KUBECONFIG" --leader-elect=false --port=0 --bind-address=127.0.0.1 \
  --policy-config-file="$RT_GS" --use-legacy-policy-config=true
rt_gs_ext() { grep -q 'Creating extender with config.*URLPrefix:http://127.0.0.1:32766/gpushare-scheduler' "$DEP_SCHED_LOG"; }
wait_for 30 "kube-scheduler: Creating extender (gpushare's file)" rt_gs_ext
check "kube-scheduler created the extender from gpushare's Policy file" rt_gs_ext
rt_pod dep-mem-gpushare "$big"
wait_for 90 "dep-mem-gpushare Running and ASSIGNED" rt_running dep-mem-gpushare
kshow get pod dep-mem-gpushare -o jsonpath='{.spec.nodeName} {.metadata.annotations}{"\n"}'
check "[gpushare] dep-mem-gpushare bound through /gpushare-scheduler, ASSIGNED, sees the GPU of its IDX" \
  mem_pod_ok dep-mem-gpushare
# Its metrics stay on the node's loopback with its verbs (the overlay says why).
rt_gs_bind() { curl -fsS --max-time 5 http://127.0.0.1:39998/metrics | grep -qx 'gpupool_extender_binds_total{result="bound"} 1'; }
curl -fsS --max-time 5 http://127.0.0.1:39998/metrics | grep '^gpupool_extender_binds_total' | sed 's/^/    /'
check "[gpushare] the DaemonSet's extender made that bind (127.0.0.1:39998/metrics: bound 1)" rt_gs_bind
dep_delete_pods
dep_delete gpushare
dep_delete secondary-scheduler
kc label node "$NODE_NAME" node-role.kubernetes.io/control-plane- >/dev/null 2>&1
