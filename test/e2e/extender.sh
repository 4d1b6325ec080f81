#!/usr/bin/env bash
# shellcheck disable=SC2016
# gpupool-scheduler-extender end to end: the real kube-scheduler v1.20.2 with
# the extender, configured twice from the examples shipped in deploy/scheduler/:
#   phase A  KubeSchedulerConfiguration v1beta1 (`--config`, `extenders:`)
#   phase B  the legacy Policy (`--policy-config-file`)
# Nodes: the real kubelet's node "localhost" plus two fake Node objects (no
# kubelet; created Ready through the API). The test sets their
# aliyun.com/gpu-mem / aliyun.com/gpu-count capacity:
#   localhost             2 GPUs x  8 GiB   (status patched; the kubelet keeps it)
#   gpupool-e2e-fake-1    6 GPUs x 16 GiB
#   gpupool-e2e-fake-2    2 GPUs x  8 GiB
# Pods request aliyun.com/gpu-mem; each phase checks the bind (spec.nodeName,
# the gpushare annotations), that no GPU is over-committed (annotations and
# the extender's /inspect), and that pods no GPU can hold stay Pending with
# the extender's own reason in their FailedScheduling event. Between the
# phases the extender restarts and must rebuild the same usage from the
# annotations.
#
# Sourced by run.sh after the device-plugin scenarios (shares its counters,
# `section`, `check`, teardown). Standalone, on a cluster from up.sh:
#   test/e2e/extender.sh BUILD_DIR
# Environment: EXTENDER_BIN (default BUILD_DIR/bin/gpupool-scheduler-extender),
# EXT_PORT (39999), EXT_PREFIX (/gpupool-scheduler).

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then   # standalone
  set -uo pipefail
  [[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
  BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "extender.sh: build dir $1 not found" >&2; exit 2; }
  . "$(dirname "$0")/lib.sh"
  T_START=$SECONDS
  section() { printf '\n==== %s (%s, +%ss) ====\n' "$*" "$(date +%H:%M:%S)" "$((SECONDS - T_START))"; }
  EXT_STANDALONE=1
fi

EXTENDER_BIN=${EXTENDER_BIN:-$BUILD/bin/gpupool-scheduler-extender}
EXT_PORT=${EXT_PORT:-39999}
EXT_PREFIX=${EXT_PREFIX:-/gpupool-scheduler}
EXT_URL=http://127.0.0.1:$EXT_PORT
EXT_N=0
EXT_PID=
EXT_TOKEN=$(sed -n 's/^ *token: *//p' "$KUBECONFIG" | head -n1)
EXT_FAKE_NODES=(gpupool-e2e-fake-1 gpupool-e2e-fake-2)
declare -A EXT_DEV=([localhost]=8 [gpupool-e2e-fake-1]=16 [gpupool-e2e-fake-2]=8)
declare -A EXT_COUNT=([localhost]=2 [gpupool-e2e-fake-1]=6 [gpupool-e2e-fake-2]=2)

# api METHOD PATH [CONTENT-TYPE BODY] -- the API server, for what kubectl 1.20
# cannot do (node status is a subresource: no `kubectl patch --subresource`).
ext_api() {
  local args=(-sSk --max-time 20 -X "$1" -H "Authorization: Bearer $EXT_TOKEN" "https://127.0.0.1:6443$2")
  [[ $# -ge 4 ]] && args+=(-H "Content-Type: $3" --data-binary "$4")
  curl "${args[@]}"
}
ext_http() { curl -sS --max-time 10 "$@"; }

# --- the extender process ----------------------------------------------------
ext_start() {  # ext_start LABEL
  EXT_N=$((EXT_N + 1))
  mkdir -p "$E2E_LOGS"
  EXT_LOG=$E2E_LOGS/extender-$EXT_N-$1.log
  : >"$EXT_LOG"
  printf '  $ gpupool-scheduler-extender --address 127.0.0.1 --port %s --kubeconfig %s -v 4   (log: %s)\n' "$EXT_PORT" "$KUBECONFIG" "$EXT_LOG"
  mkdir -p "$E2E_RUN/pids"
  env -u PORT -u LOG_LEVEL setsid "$EXTENDER_BIN" --address 127.0.0.1 --port "$EXT_PORT" --kubeconfig "$KUBECONFIG" -v 4 \
    </dev/null >>"$EXT_LOG" 2>&1 &
  EXT_PID=$!
  echo "$EXT_PID" >"$(pidfile scheduler-extender)"
  wait_for 60 "extender /healthz" ext_http -f "$EXT_URL/healthz"
}
ext_stop() {  # sets EXT_RC
  EXT_RC=
  [[ -n $EXT_PID ]] || return 0
  stop_child "$EXT_PID" 15
  EXT_RC=$STOP_RC
  rm -f "$(pidfile scheduler-extender)"
  e2e_log "extender pid $EXT_PID exited with status $EXT_RC"
  EXT_PID=
}
ext_alive() { [[ -n $EXT_PID ]] && alive "$EXT_PID"; }

# --- kube-scheduler with a given configuration ---------------------------------
# The shipped examples name the in-cluster URL and kubeconfig; the copies we
# run point at this cluster (everything else is used as shipped).
# No leader election: scheduler restarts would wait for the lease otherwise.
ext_localize() {  # ext_localize SRC DST
  sed -e "s#http://[A-Za-z0-9._-]*:[0-9]*/#$EXT_URL/#" \
      -e "s#^\(\s*kubeconfig:\).*#\1 $KUBECONFIG#" \
      -e "s#^\(\s*leaderElect:\).*#\1 false#" "$1" >"$2"
  case $1 in
  *.yaml)
    grep -q '^\s*leaderElect:' "$2" || printf 'leaderElection:\n  leaderElect: false\n' >>"$2"
    # v1beta1 defaults these to 0.0.0.0:10251 (docs/e2e.md): keep them on loopback.
    grep -q '^healthzBindAddress' "$2" || echo 'healthzBindAddress: 127.0.0.1:10251' >>"$2"
    grep -q '^metricsBindAddress' "$2" || echo 'metricsBindAddress: 127.0.0.1:10251' >>"$2"
    ;;
  esac
}
ext_scheduler() {  # ext_scheduler LABEL ARGS...  -- replaces the running scheduler
  local label=$1
  shift
  stop_pid kube-scheduler 10
  mkdir -p "$E2E_LOGS"
  EXT_SCHED_LOG=$E2E_LOGS/kube-scheduler-$label.log
  : >"$EXT_SCHED_LOG"
  printf '  $ kube-scheduler %s   (log: %s)\n' "$*" "$EXT_SCHED_LOG"
  start_bg kube-scheduler "$EXT_SCHED_LOG" "$K8S_BIN/kube-scheduler" --secure-port=0 --v=2 "$@"
}
ext_sched_has_extender() { grep -q "Creating extender with config.*URLPrefix:$EXT_URL/" "$EXT_SCHED_LOG"; }

# --- nodes ------------------------------------------------------------------------
ext_fake_node() {  # ext_fake_node NAME GPUS GIB_PER_GPU
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kc apply -f - <<EOF | sed 's/^/    /'
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/hostname: $1, gpupool-e2e: fake, gpushare: "true"}
status:
  capacity: &res {cpu: "8", memory: 32Gi, pods: "110", aliyun.com/gpu-mem: "$(($2 * $3))", aliyun.com/gpu-count: "$2"}
  allocatable: *res
  conditions:
  - {type: Ready, status: "True", reason: KubeletReady, message: "fake node (no kubelet)", lastHeartbeatTime: $now, lastTransitionTime: $now}
EOF
  # The TaintNodesByCondition admission plugin taints every new node
  # not-ready; only the node-lifecycle controller (not running) would lift it.
  kc taint node "$1" node.kubernetes.io/not-ready:NoSchedule- | sed 's/^/    /'
}
ext_node_res() { kc get node "$1" -o jsonpath="{.status.allocatable.aliyun\.com/gpu-mem}/{.status.allocatable.aliyun\.com/gpu-count}" 2>/dev/null; }
ext_fake_nodes_clean() {
  [[ "$(kc get node "${EXT_FAKE_NODES[@]}" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{.spec.taints}{" "}{end}')" == "True True " ]]
}
ext_node_res_is() { [[ "$(ext_node_res "$1")" == "$2" ]]; }

# --- pods -----------------------------------------------------------------------
ext_pod() {  # ext_pod NAME GIB [NODE [GPUS]]  -- NODE ("" = any) pins it; GPUS splits GIB
  local sel="" count=""
  [[ -n ${3:-} ]] && sel="  nodeSelector: {kubernetes.io/hostname: $3}"
  [[ -n ${4:-} ]] && count=", aliyun.com/gpu-count: \"$4\""
  kc apply -f - <<EOF | sed 's/^/    /'
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {app: gpupool-e2e-extender}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
$sel
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "trap 'exit 0' TERM; echo READY; sleep 3600 & wait \$!"]
    resources:
      limits: {aliyun.com/gpu-mem: "$2"$count}
EOF
}
ext_pod_node() { kc get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
ext_pod_bound() { [[ -n "$(ext_pod_node "$1")" ]]; }
ext_ann() { kc get pod "$1" -o jsonpath="{.metadata.annotations.$2}" 2>/dev/null; }
ext_unschedulable() {
  [[ "$(kc get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}' 2>/dev/null)" == Unschedulable ]]
}
ext_events() { kc get events --field-selector "involvedObject.name=$1,reason=FailedScheduling" -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null; }
# The reason the extender itself gives for NODE, from its own filter verb,
# for the pod as the API server has it.
ext_reason() {  # ext_reason POD NODE
  local pod
  pod=$(kc get pod "$1" -o json) || return 1
  printf '{"Pod":%s,"Nodes":null,"NodeNames":["%s"]}' "$pod" "$2" |
    ext_http -H 'Content-Type: application/json' --data-binary @- "$EXT_URL$EXT_PREFIX/filter" |
    /usr/bin/python3 -c 'import json,sys; print((json.load(sys.stdin).get("FailedNodes") or {}).get(sys.argv[1], ""))' "$2"
}
ext_pending() { [[ -z "$(ext_pod_node "$1")" ]] && pod_phase_is "$1" Pending; }
ext_both_running() { pod_phase_is "$1" Running && pod_phase_is "$2" Running; }
# grep reads to the end: `grep -q` would exit early and, under pipefail,
# the SIGPIPE of the writer could fail the check now and then.
ext_event_has() { ext_events "$1" | grep -F -- "$2" >/dev/null; }

# ext_bound_ok POD GIB [NODE...]  -- bound (to one of NODEs if given) with
# gpushare annotations that agree with the node and the request.
ext_bound_ok() {
  local pod=$1 gib=$2 node idx dev podmem assigned t n
  shift 2
  node=$(ext_pod_node "$pod")
  [[ -n $node ]] || { echo "    $pod: not bound"; return 1; }
  if (($# > 0)); then
    local ok=0
    for n in "$@"; do [[ $node == "$n" ]] && ok=1; done
    ((ok)) || { echo "    $pod: on $node, expected one of $*"; return 1; }
  fi
  idx=$(ext_ann "$pod" ALIYUN_COM_GPU_MEM_IDX)
  dev=$(ext_ann "$pod" ALIYUN_COM_GPU_MEM_DEV)
  podmem=$(ext_ann "$pod" ALIYUN_COM_GPU_MEM_POD)
  assigned=$(ext_ann "$pod" ALIYUN_COM_GPU_MEM_ASSIGNED)
  t=$(ext_ann "$pod" ALIYUN_COM_GPU_MEM_ASSUME_TIME)
  printf '    %-16s node=%-20s IDX=%s POD=%s DEV=%s ASSIGNED=%s ASSUME_TIME=%s\n' \
    "$pod" "$node" "$idx" "$podmem" "$dev" "$assigned" "$t"
  [[ $idx =~ ^[0-9]+$ ]] && ((idx < ${EXT_COUNT[$node]:-0})) &&
    [[ $podmem == "$gib" && $dev == "${EXT_DEV[$node]:-x}" && $assigned == false && $t =~ ^[0-9]{15,}$ ]]
}

ext_multi_ok() {
  local node idx
  node=$(ext_pod_node "$1")
  idx=$(ext_ann "$1" ALIYUN_COM_GPU_MEM_IDX)
  printf '    %-16s node=%-20s IDX=%s POD=%s DEV=%s\n' "$1" "$node" "$idx" \
    "$(ext_ann "$1" ALIYUN_COM_GPU_MEM_POD)" "$(ext_ann "$1" ALIYUN_COM_GPU_MEM_DEV)"
  [[ $node == gpupool-e2e-fake-[12] && $idx =~ ^([0-9]+),([0-9]+)$ ]] &&
    [[ ${BASH_REMATCH[1]} != "${BASH_REMATCH[2]}" ]] &&
    ((BASH_REMATCH[1] < EXT_COUNT[$node] && BASH_REMATCH[2] < EXT_COUNT[$node])) &&
    [[ $(ext_ann "$1" ALIYUN_COM_GPU_MEM_POD) == 16 && $(ext_ann "$1" ALIYUN_COM_GPU_MEM_DEV) == "${EXT_DEV[$node]}" ]]
}

# Usage per GPU from the annotations of every bound pod of ours ("node idx GiB"
# lines, sorted) and the same from the extender's /inspect.
ext_usage_annotations() {
  kc get pods -l app=gpupool-e2e-extender -o json | /usr/bin/python3 -c '
import json, sys
use = {}
for p in json.load(sys.stdin)["items"]:
    a = p["metadata"].get("annotations") or {}
    n = p["spec"].get("nodeName")
    if not n or "ALIYUN_COM_GPU_MEM_IDX" not in a:
        continue
    for i in a["ALIYUN_COM_GPU_MEM_IDX"].split(","):
        k = (n, int(i))
        use[k] = use.get(k, 0) + int(a["ALIYUN_COM_GPU_MEM_POD"]) // len(a["ALIYUN_COM_GPU_MEM_IDX"].split(","))
for (n, i), v in sorted(use.items()):
    print(n, i, v)'
}
ext_usage_inspect() {
  ext_http "$EXT_URL$EXT_PREFIX/inspect" | /usr/bin/python3 -c '
import json, sys
for n in json.load(sys.stdin).get("nodes", []):
    for d in n.get("devs", []):
        if d.get("usedGPU"):
            print(n["name"], d["id"], d["usedGPU"])' | sort
}
ext_inspect_empty() { local u; u=$(ext_usage_inspect) && [[ -z $u ]]; }
ext_usage_agrees() { [[ "$(ext_usage_annotations)" == "$(ext_usage_inspect)" ]]; }
ext_no_overcommit() {  # every GPU's usage <= its memory
  local n i v bad=0
  while read -r n i v; do
    ((v <= ${EXT_DEV[$n]:-0})) || { echo "    over-committed: $n GPU $i holds $v GiB > ${EXT_DEV[$n]:-?}"; bad=1; }
  done < <(ext_usage_annotations)
  ((bad == 0))
}
ext_delete_pods() {
  kc delete pods -l app=gpupool-e2e-extender --grace-period=0 --force --wait=false >/dev/null 2>&1
  wait_for 60 "extender test pods deleted" bash -c "! $K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pods -l app=gpupool-e2e-extender -o name | grep -q ."
}

# --- one phase: the same scenarios under a scheduler configuration ---------------
ext_phase() {  # ext_phase TAG
  local p=$1 a b reason

  # 1. two pods pinned to the real node: each 5 GiB, so one per 8 GiB GPU.
  ext_pod "$p-real-a" 5 localhost
  wait_for 30 "$p-real-a bound" ext_pod_bound "$p-real-a"
  ext_pod "$p-real-b" 5 localhost
  wait_for 30 "$p-real-b bound" ext_pod_bound "$p-real-b"
  wait_for 90 "$p-real-a and $p-real-b Running (real kubelet)" ext_both_running "$p-real-a" "$p-real-b"
  kshow get pods -l app=gpupool-e2e-extender -o wide
  check "[$p] $p-real-a bound to localhost with gpushare annotations (POD=5, DEV=8)" ext_bound_ok "$p-real-a" 5 localhost
  check "[$p] $p-real-b bound to localhost with gpushare annotations" ext_bound_ok "$p-real-b" 5 localhost
  a=$(ext_ann "$p-real-a" ALIYUN_COM_GPU_MEM_IDX)
  b=$(ext_ann "$p-real-b" ALIYUN_COM_GPU_MEM_IDX)
  check "[$p] 5+5 GiB > 8: the two pods got different GPUs (IDX $a, $b)" test "$a" != "$b"
  check "[$p] $p-real-a Running on the real kubelet" pod_phase_is "$p-real-a" Running

  # 2. fragmentation: localhost has 6 GiB free in total (the scheduler's own
  #    fit passes) but 3 GiB per GPU: the extender must refuse 4 GiB.
  ext_pod "$p-frag" 4 localhost
  wait_for 60 "$p-frag Unschedulable" ext_unschedulable "$p-frag"
  reason=$(ext_reason "$p-frag" localhost)
  echo "    extender's reason for localhost: $reason"
  wait_for 30 "FailedScheduling event of $p-frag carries it" ext_event_has "$p-frag" "${reason:-<none>}"
  kshow get events --field-selector "involvedObject.name=$p-frag"
  check "[$p] $p-frag (4 GiB, 3+3 free) stays Pending, unbound" ext_pending "$p-frag"
  check "[$p] the extender gives a reason for localhost" test -n "$reason"
  check "[$p] $p-frag's FailedScheduling event carries the extender's reason" ext_event_has "$p-frag" "${reason:-<none>}"

  # 3. multi-GPU: 16 GiB over 2 GPUs is 8 GiB on each of two GPUs (localhost
  #    has 3+3 free: only the fake nodes can hold it).
  ext_pod "$p-multi" 16 "" 2
  wait_for 30 "$p-multi bound" ext_pod_bound "$p-multi"
  check "[$p] $p-multi (gpu-mem 16, gpu-count 2) on two distinct GPUs with 8 GiB each" ext_multi_ok "$p-multi"

  # 4. unpinned pods, largest first (each waits for its bind, so the outcome
  #    does not depend on the policy): 16, 12 and 10 GiB fit only on the
  #    16 GiB GPUs of fake-1 (at least 4 of its 6 are still empty); 6 and 3
  #    fit in several places.
  local sz
  for sz in 16 12 10 6 3; do
    ext_pod "$p-u$sz" "$sz"
    wait_for 30 "$p-u$sz bound" ext_pod_bound "$p-u$sz"
  done
  check "[$p] $p-u16 on fake-1 with consistent annotations" ext_bound_ok "$p-u16" 16 gpupool-e2e-fake-1
  check "[$p] $p-u12 on fake-1 with consistent annotations" ext_bound_ok "$p-u12" 12 gpupool-e2e-fake-1
  check "[$p] $p-u10 on fake-1 with consistent annotations" ext_bound_ok "$p-u10" 10 gpupool-e2e-fake-1
  check "[$p] $p-u6 bound with consistent annotations" ext_bound_ok "$p-u6" 6
  check "[$p] $p-u3 bound with consistent annotations" ext_bound_ok "$p-u3" 3
  a=$(for sz in 16 12 10; do ext_ann "$p-u$sz" ALIYUN_COM_GPU_MEM_IDX; echo; done | sort -u | wc -l)
  check "[$p] 16, 12 and 10 GiB got three different GPUs of fake-1" test "$a" = 3

  # 5. over-full: 20 GiB is more than any GPU. fake-1 still has >= 49 GiB in
  #    total, so only the extender can refuse it there.
  ext_pod "$p-big" 20
  wait_for 60 "$p-big Unschedulable" ext_unschedulable "$p-big"
  reason=$(ext_reason "$p-big" gpupool-e2e-fake-1)
  echo "    extender's reason for gpupool-e2e-fake-1: $reason"
  wait_for 30 "FailedScheduling event of $p-big carries it" ext_event_has "$p-big" "${reason:-<none>}"
  kshow get events --field-selector "involvedObject.name=$p-big"
  check "[$p] $p-big (20 GiB) stays Pending, unbound" ext_pending "$p-big"
  check "[$p] $p-big's FailedScheduling event carries the extender's reason" ext_event_has "$p-big" "${reason:-<none>}"

  # 6. accounting.
  echo "    GPU usage from the annotations (node GPU GiB):"
  ext_usage_annotations | sed 's/^/      /'
  check "[$p] no GPU over-committed" ext_no_overcommit
  wait_for 20 "extender /inspect agrees with the annotations" ext_usage_agrees
  check "[$p] the extender's /inspect shows the same usage per GPU" ext_usage_agrees
}

# ================================================================================
section "9. scheduler extender: nodes and kube-scheduler v1beta1 config"
EXT_T0=$SECONDS
EXT_V1B1=$REPO_ROOT/deploy/scheduler/scheduler-config-v1beta1.yaml
EXT_POLICY=$REPO_ROOT/deploy/scheduler/scheduler-policy-config.json
ext_ready=1
for f in "$EXTENDER_BIN" "$EXT_V1B1" "$EXT_POLICY"; do
  [[ -e $f ]] || { fail "extender e2e: $f missing"; ext_ready=0; }
done
if ((ext_ready)); then
  # Leftovers of an interrupted standalone run.
  stop_pid scheduler-extender 10
  ext_delete_pods
  # The real node: capacity set through the status subresource, as gpushare's
  # device plugin does; the kubelet keeps extended resources it does not
  # manage and copies them to allocatable.
  printf '  $ PATCH /api/v1/nodes/localhost/status   aliyun.com/gpu-mem=16 aliyun.com/gpu-count=2\n'
  ext_api PATCH /api/v1/nodes/localhost/status application/json-patch+json \
    '[{"op":"add","path":"/status/capacity/aliyun.com~1gpu-mem","value":"16"},
      {"op":"add","path":"/status/capacity/aliyun.com~1gpu-count","value":"2"},
      {"op":"add","path":"/status/allocatable/aliyun.com~1gpu-mem","value":"16"},
      {"op":"add","path":"/status/allocatable/aliyun.com~1gpu-count","value":"2"}]' >/dev/null
  ext_fake_node gpupool-e2e-fake-1 6 16
  ext_fake_node gpupool-e2e-fake-2 2 8
  wait_for 30 "localhost allocatable gpu-mem 16, gpu-count 2" ext_node_res_is localhost 16/2
  check "fake nodes are Ready and untainted" ext_fake_nodes_clean
  kshow get nodes -o 'custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,GPU-MEM:.status.allocatable.aliyun\.com/gpu-mem,GPU-COUNT:.status.allocatable.aliyun\.com/gpu-count,TAINTS:.spec.taints[*].key'
  check "localhost advertises aliyun.com/gpu-mem 16 / gpu-count 2" ext_node_res_is localhost 16/2
  check "fake-1 advertises 96 / 6" ext_node_res_is gpupool-e2e-fake-1 96/6
  check "fake-2 advertises 16 / 2" ext_node_res_is gpupool-e2e-fake-2 16/2

  ext_start v1beta1
  check "extender answers /healthz" ext_http -f "$EXT_URL/healthz"
  echo "  $ cat $EXT_V1B1   (as shipped; run with the URL and kubeconfig of this cluster)"
  sed 's/^/    /' "$EXT_V1B1"
  ext_localize "$EXT_V1B1" "$E2E_STATE/scheduler-config.yaml"
  ext_scheduler v1beta1 --config="$E2E_STATE/scheduler-config.yaml"
  wait_for 30 "kube-scheduler logs: Creating extender with config" ext_sched_has_extender
  grep -m1 'Creating extender' "$EXT_SCHED_LOG" | cut -c1-400 | sed 's/^/  kube-scheduler.log: /'
  check "[v1beta1] kube-scheduler created the extender from the shipped config" ext_sched_has_extender

  section "9a. extender with KubeSchedulerConfiguration v1beta1"
  ext_phase v1b1
  check "[v1b1] kube-scheduler still running" is_running kube-scheduler
  # -- /ui in headless Chromium and /metrics (brief K; test/e2e/ui-check.sh) --
  check "[v1b1] /ui shows the pool in headless Chromium, /metrics parses" \
    "$(dirname "${BASH_SOURCE[0]}")/ui-check.sh" "$EXT_URL" "http://127.0.0.1:39998" \
    "${GP_ARTIFACT_DIR:-$BUILD/e2e-artifacts}"

  # ==============================================================================
  section "9b. extender restart: usage rebuilt from the pod annotations"
  before=$(ext_usage_inspect)
  ext_stop
  check "extender exits 0 on SIGTERM" test "$EXT_RC" = 0
  ext_start restarted
  after=$(ext_usage_inspect)
  echo "    /inspect before: $(echo "$before" | tr '\n' ';')"
  echo "    /inspect after:  $(echo "$after" | tr '\n' ';')"
  check "after a restart the extender shows the same usage per GPU" test "$before" = "$after"
  check "... and it is the annotations' usage" ext_usage_agrees
  ext_delete_pods
  wait_for 30 "extender's /inspect shows no usage" ext_inspect_empty
  check "the extender saw the deletions: /inspect shows no usage" ext_inspect_empty

  # ==============================================================================
  section "9c. extender with the legacy Policy (--policy-config-file)"
  echo "  $ cat $EXT_POLICY   (as shipped; run with the URL of this cluster)"
  sed 's/^/    /' "$EXT_POLICY"
  ext_localize "$EXT_POLICY" "$E2E_STATE/scheduler-policy.json"
  ext_scheduler policy --kubeconfig="$KUBECONFIG" --leader-elect=false --port=0 \
    --policy-config-file="$E2E_STATE/scheduler-policy.json" --use-legacy-policy-config=true
  wait_for 30 "kube-scheduler logs: Creating extender with config" ext_sched_has_extender
  grep -m1 'Creating extender' "$EXT_SCHED_LOG" | cut -c1-400 | sed 's/^/  kube-scheduler.log: /'
  check "[policy] kube-scheduler created the extender from the shipped Policy" ext_sched_has_extender
  ext_phase pol
  check "[pol] kube-scheduler still running" is_running kube-scheduler

  # ==============================================================================
  section "9d. extender: clean up, default scheduler back"
  ext_delete_pods
  kc delete node "${EXT_FAKE_NODES[@]}" --wait=false >/dev/null 2>&1
  check "extender still running after both phases" ext_alive
  ext_stop
  check "extender exits 0 on SIGTERM" test "$EXT_RC" = 0
  # The plain scheduler of up.sh, so that later scenarios see the usual cluster.
  ext_scheduler plain --kubeconfig="$KUBECONFIG" --leader-elect=false --port=0 --bind-address=127.0.0.1
fi
T_EXT=$((SECONDS - EXT_T0))
e2e_log "extender scenarios took ${T_EXT}s"

if [[ -n ${EXT_STANDALONE:-} ]]; then
  ext_stop
  if ((E2E_FAILED > 0)); then printf 'Failures:\n'; printf '  - %s\n' "${E2E_FAILURES[@]}"; fi
  echo "$E2E_PASSED passed, $E2E_FAILED failed"
  ((E2E_FAILED == 0))
fi
