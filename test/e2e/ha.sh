# shellcheck shell=bash disable=SC2016
# 10g: the extender's replicas as shipped (overlays/gpu-mem: 2 replicas on the
# pod network, --leader-elect on the Lease kube-system/gpupool-scheduler-extender,
# docs/ha.md), kube-scheduler calling them through the Service's ClusterIP.
# 25 gpu-mem pods are created at once; once 5 are bound the Lease holder's
# pod is deleted and 25 more are created. Every pod must run, bound with its
# annotations, and no GPU
# may hold more than its memory.
#
# No kube-proxy runs here: ha_proxy stands in for it with one iptables NAT
# chain that sends the ClusterIP to the Ready extender pods at random (as
# kube-proxy's iptables mode does), re-synced every second.
# Sourced by deploy.sh inside 10c, after routes.sh (needs its helpers and
# $per_gpu; the gpu-mem plugin DaemonSet still runs).

HA_CHAIN=GPUPOOL-E2E-SVC
HA_PODS=50
HA_LEASE=gpupool-scheduler-extender

ha_ready_ips() {  # the Ready, not-terminating extender pods' IPs
  dep_kc get pods -l "$DEP_EXT_SEL" -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.status.podIP} {.metadata.deletionTimestamp} {.status.containerStatuses[0].ready}{"\n"}{end}' 2>/dev/null |
    awk 'NF == 2 && $2 == "true" {print $1}' | sort
}
ha_proxy_sync() {
  local ips n i rules
  mapfile -t ips < <(ha_ready_ips)
  n=${#ips[@]}
  rules="*nat"$'\n'"-F $HA_CHAIN"$'\n'
  for ((i = 0; i < n; i++)); do
    if ((n - i > 1)); then
      rules+="-A $HA_CHAIN -p tcp -m statistic --mode random --probability $(awk -v k=$((n - i)) 'BEGIN {printf "%.5f", 1 / k}') -j DNAT --to-destination ${ips[i]}"$'\n'
    else
      rules+="-A $HA_CHAIN -p tcp -j DNAT --to-destination ${ips[i]}"$'\n'
    fi
  done
  iptables-restore -w --noflush <<<"${rules}COMMIT"
}
ha_proxy_start() {
  ip addr del "$DEP_CLUSTER_IP/32" dev lo 2>/dev/null
  iptables -w -t nat -N "$HA_CHAIN" 2>/dev/null
  iptables -w -t nat -C OUTPUT -d "$DEP_CLUSTER_IP/32" -j "$HA_CHAIN" 2>/dev/null ||
    iptables -w -t nat -A OUTPUT -d "$DEP_CLUSTER_IP/32" -j "$HA_CHAIN"
  # With no endpoint a connection is refused at once, as kube-proxy does.
  iptables -w -C OUTPUT -d "$DEP_CLUSTER_IP/32" -p tcp -j REJECT --reject-with tcp-reset 2>/dev/null ||
    iptables -w -A OUTPUT -d "$DEP_CLUSTER_IP/32" -p tcp -j REJECT --reject-with tcp-reset
  # Ends with the suite even when it dies before ha_proxy_stop.
  ( while kill -0 $$ 2>/dev/null; do ha_proxy_sync; sleep 1; done ) >>"$E2E_LOGS/ha-proxy.log" 2>&1 &
  HA_PROXY_PID=$!
}
ha_proxy_stop() {
  [[ -n ${HA_PROXY_PID:-} ]] && { kill "$HA_PROXY_PID" 2>/dev/null; wait "$HA_PROXY_PID" 2>/dev/null; }
  HA_PROXY_PID=
  iptables -w -D OUTPUT -d "$DEP_CLUSTER_IP/32" -p tcp -j REJECT --reject-with tcp-reset 2>/dev/null
  iptables -w -t nat -D OUTPUT -d "$DEP_CLUSTER_IP/32" -j "$HA_CHAIN" 2>/dev/null
  iptables -w -t nat -F "$HA_CHAIN" 2>/dev/null
  iptables -w -t nat -X "$HA_CHAIN" 2>/dev/null
  dep_cluster_ip add
}
ha_two_ready() { [[ $(ha_ready_ips | grep -c '^10\.88\.') -ge 2 ]]; }
ha_holder() {  # the pod named by the Lease's holderIdentity (hostname_random)
  local id
  id=$(dep_kc get lease "$HA_LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)
  [[ -n $id ]] && echo "${id%%_*}"
}
ha_holder_is_replica() {
  local h
  h=$(ha_holder) && [[ $(dep_kc get pod "$h" -o jsonpath='{.metadata.labels.app\.kubernetes\.io/name}' 2>/dev/null) == gpupool-scheduler-extender ]]
}
ha_holder_other_than() { local h; h=$(ha_holder) && [[ $h != "$1" ]] && dep_kc get pod "$h" -o name >/dev/null 2>&1; }
ha_pods_json() { kc get pods -l app=gpupool-e2e-ha -o json 2>/dev/null; }
ha_bound() { ha_pods_json | /usr/bin/python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin)["items"] if p["spec"].get("nodeName")))'; }
ha_bound_at_least() { [[ $(ha_bound) -ge $1 ]]; }
ha_all_running() {
  [[ $(ha_pods_json | /usr/bin/python3 -c 'import json,sys
print(sum(1 for p in json.load(sys.stdin)["items"] if p["status"].get("phase") == "Running"
          and p["metadata"].get("annotations", {}).get("ALIYUN_COM_GPU_MEM_ASSIGNED") == "true"))') -eq $HA_PODS ]]
}
# Prints per-GPU use and the gaps between binds; fails on any over-commit, a
# bound pod without annotations or an annotated pod not bound.
ha_audit() {
  ha_pods_json | /usr/bin/python3 -c '
import json, sys, datetime
per_gpu, t_del = int(sys.argv[1]), float(sys.argv[2])
use, bad, times = {}, [], []
for p in json.load(sys.stdin)["items"]:
    a = p["metadata"].get("annotations", {})
    node, idx, mem = p["spec"].get("nodeName"), a.get("ALIYUN_COM_GPU_MEM_IDX"), a.get("ALIYUN_COM_GPU_MEM_POD")
    name = p["metadata"]["name"]
    if bool(node) != bool(idx and mem):
        bad.append(f"{name}: node {node!r} IDX {idx!r} POD {mem!r}")
        continue
    if not node:
        continue
    for i in idx.split(","):
        use[(node, i)] = use.get((node, i), 0) + int(mem) // len(idx.split(","))
    for c in p["status"].get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "True":
            times.append(datetime.datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
                         .replace(tzinfo=datetime.timezone.utc).timestamp())
for (node, i), gib in sorted(use.items()):
    print(f"    {node} GPU {i}: {gib} of {per_gpu} GiB" + ("   OVER-COMMITTED" if gib > per_gpu else ""))
    if gib > per_gpu:
        bad.append(f"{node} GPU {i} holds {gib} GiB > {per_gpu}")
times.sort()
after = [t for t in times if t >= t_del]
gap = max((b - a for a, b in zip(times, times[1:])), default=0)
first = "%.0f s after it" % (after[0] - t_del) if after else "none"
print(f"    {len(times)} pods scheduled; longest gap between binds {gap:.0f} s; first bind after the "
      f"delete: {first} (1 s resolution)")
for b in bad:
    print("    BAD:", b)
sys.exit(1 if bad else 0)' "$per_gpu" "$HA_T_DEL"
}

# =====================================================================================
section "10g. two extender replicas: the Lease holder deleted while $HA_PODS gpu-mem pods schedule"
# 10f's `kubectl delete -k` took the whole gpu-mem overlay with it: start
# from nothing, as a fresh install does.
dep_reap app.kubernetes.io/part-of=gpupool
HA_ADVERTISE=$(cat "$E2E_STATE/advertise" 2>/dev/null)
DEP_EXT_POD_NET=$HA_ADVERTISE dep_apply gpu-mem
wait_for 120 "plugin pod Ready in gpu-mem mode" dep_pod_ready "$DEP_PLUGIN_SEL"
wait_for 90 "node allocatable aliyun.com/gpu-mem = $mem_total" mem_is
ha_replicas() { [[ $(dep_kc get deployment gpupool-scheduler-extender -o jsonpath='{.spec.replicas}') == 2 ]]; }
check "overlays/gpu-mem ships the extender with 2 replicas" ha_replicas
ha_proxy_start
wait_for 120 "2 extender pods Ready on the pod network" ha_two_ready
kshow -n "$DEP_NS" get pods -l "$DEP_EXT_SEL" -o wide
check "2 extender replicas Ready on the pod network (they reach the apiserver at $HA_ADVERTISE)" ha_two_ready
wait_for 30 "the Lease $HA_LEASE held by a replica" ha_holder_is_replica
kshow -n "$DEP_NS" get lease "$HA_LEASE" -o jsonpath='{.spec}{"\n"}'
check "the Lease kube-system/$HA_LEASE names one of the replicas" ha_holder_is_replica
dep_scheduler gpu-mem-ha --config="$DEP_DIR/scheduler-config.yaml"

ha_pods_yaml() {  # ha_pods_yaml FIRST COUNT FILE
  {
    echo "apiVersion: v1"
    echo "kind: List"
    echo "items:"
    for ((i = $1; i < $1 + $2; i++)); do
      cat <<EOP
- apiVersion: v1
  kind: Pod
  metadata: {name: ha-mem-$i, labels: {app: gpupool-e2e-ha}}
  spec:
    restartPolicy: Never
    terminationGracePeriodSeconds: 1
    nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
    containers:
    - name: c
      image: $BUSYBOX_IMAGE
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "trap 'exit 0' TERM; sleep 3600 & wait \$!"]
      resources:
        limits: {aliyun.com/gpu-mem: "1"}
EOP
    done
  } >"$3"
}
# Half the pods, the holder deleted once 5 of them are bound, then the other
# half at once: those are scheduled across the failover.
ha_half=$((HA_PODS / 2))
ha_pods_yaml 0 "$ha_half" "$DEP_DIR/ha-pods-1.yaml"
ha_pods_yaml "$ha_half" "$((HA_PODS - ha_half))" "$DEP_DIR/ha-pods-2.yaml"
printf '  $ kubectl apply -f %s   (%s pods, 1 GiB each)\n' "$DEP_DIR/ha-pods-1.yaml" "$ha_half"
kc apply -f "$DEP_DIR/ha-pods-1.yaml" >/dev/null
wait_for 120 "5 of the pods bound" ha_bound_at_least 5
ha_old=$(ha_holder)
HA_T_DEL=$(date +%s)
printf '  $ kubectl -n %s delete pod %s   (the Lease holder, %s of %s pods bound)\n' "$DEP_NS" "$ha_old" "$(ha_bound)" "$HA_PODS"
dep_kc delete pod "$ha_old" --wait=false 2>&1 | sed 's/^/    /'
printf '  $ kubectl apply -f %s   (%s more pods)\n' "$DEP_DIR/ha-pods-2.yaml" "$((HA_PODS - ha_half))"
kc apply -f "$DEP_DIR/ha-pods-2.yaml" >/dev/null
printf '    %s of %s pods bound right after\n' "$(ha_bound)" "$HA_PODS"
wait_for 60 "another replica holds the Lease" ha_holder_other_than "$ha_old"
printf '    new holder %s after %ss\n' "$(ha_holder)" "$(($(date +%s) - HA_T_DEL))"
check "a replica other than the deleted $ha_old took the Lease" ha_holder_other_than "$ha_old"
wait_for 300 "all $HA_PODS pods Running and ASSIGNED" ha_all_running
kshow -n "$DEP_NS" get pods -l "$DEP_EXT_SEL" -o wide
check "all $HA_PODS gpu-mem pods Running, ASSIGNED by the plugin" ha_all_running
check "no GPU over-committed; every bound pod annotated, every annotated pod bound" ha_audit
ha_metrics() {  # the replicas' bind counters, through kubectl exec-less port-forward
  local p port=$((42000 + RANDOM % 2000)) pid
  for p in $(dep_kc get pods -l "$DEP_EXT_SEL" -o name); do
    "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" -n "$DEP_NS" port-forward "$p" "$port:39998" >/dev/null 2>&1 &
    pid=$!
    wait_for 15 "port-forward to $p" curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$port/metrics"
    printf '    %s: ' "$p"
    curl -fsS --max-time 5 "http://127.0.0.1:$port/metrics" | grep -E '^gpupool_extender_(binds_total|leader)' | tr '\n' ' '
    echo
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
}
ha_metrics
kc delete pods -l app=gpupool-e2e-ha --wait=false >/dev/null 2>&1
ha_gone() { [[ -z "$(kc get pods -l app=gpupool-e2e-ha -o name 2>/dev/null)" ]]; }
wait_for 90 "the $HA_PODS pods gone" ha_gone || kc delete pods -l app=gpupool-e2e-ha --grace-period=0 --force >/dev/null 2>&1
ha_proxy_stop
