#!/usr/bin/env bash
# gpupool end-to-end suite: a real one-node Kubernetes v1.20.2 cluster
# (kubelet, kube-apiserver, kube-scheduler, containerd) on this machine, with
# gpupool-device-plugin on the node against the fake NVML (4 fake GPUs) and
# the real /var/lib/kubelet/device-plugins/. Checks with real pods.
#
#   test/e2e/run.sh BUILD_DIR        (what `make e2e` runs; root only)
#
# BUILD_DIR holds bin/gpupool-device-plugin and test/fakenvml/libnvidia-ml.so.1.
# Steps: install e2e packages -> build-k8s.sh (cached) -> images -> up.sh ->
# scenarios -> down.sh (always, via trap). Every component's log is kept in
# /var/tmp/gpupool-e2e/logs/<run>/ (printed on failure). The output ends with
# the line "N passed, N failed"; the exit status is non-zero on any failure.
#
# Environment: PLUGIN_BIN (default BUILD_DIR/bin/gpupool-device-plugin),
# FAKENVML_DIR, FAKE_NVML_INVENTORY, RECOVERY_PROBES (default 25),
# K8S_CACHE (default /var/cache/gpupool-k8s), E2E_KEEP_UP=1 (leave the
# cluster running), E2E_SKIP_DEPS=1 (skip install-deps).
set -uo pipefail

E2E_DIR=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "run.sh: build dir $1 not found" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run.sh: the e2e suite starts a kubelet and containerd; run it as root" >&2; exit 2; }

# Keep a copy of everything this script prints next to the component logs.
if [[ -z ${E2E_INNER:-} ]]; then
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  export E2E_LOGS=/var/tmp/gpupool-e2e/logs/$stamp
  mkdir -p "$E2E_LOGS"
  ln -sfn "$stamp" /var/tmp/gpupool-e2e/logs/latest
  # keep the last 10 runs' logs
  ls -1d /var/tmp/gpupool-e2e/logs/20*/ 2>/dev/null | head -n -10 | xargs -r rm -rf
  # The tee ignores INT and TERM: on Ctrl-C or a CI timeout it must outlive
  # the suite's teardown, or the suite dies of SIGPIPE before cleaning up.
  E2E_INNER=1 "$0" "$@" 2>&1 | (trap '' INT TERM; exec tee "$E2E_LOGS/e2e.log")
  exit "${PIPESTATUS[0]}"
fi

. "$E2E_DIR/lib.sh"
T_START=$SECONDS
section() { printf '\n==== %s (%s, +%ss) ====\n' "$*" "$(date +%H:%M:%S)" "$((SECONDS - T_START))"; }

# --- the build under test ---------------------------------------------------
PLUGIN_BIN=${PLUGIN_BIN:-$BUILD/bin/gpupool-device-plugin}
if [[ -z ${FAKENVML_DIR:-} ]]; then
  lib=$(find "$BUILD" -name libnvidia-ml.so.1 -not -path '*/CMakeFiles/*' 2>/dev/null | head -n1)
  FAKENVML_DIR=${lib:+$(dirname "$lib")}
fi
if [[ -z ${FAKE_NVML_INVENTORY:-} ]]; then
  FAKE_NVML_INVENTORY=$REPO_ROOT/test/fakenvml/inventories/4gpu.json
  [[ -f $FAKE_NVML_INVENTORY ]] || FAKE_NVML_INVENTORY=$E2E_DIR/inventory-4gpu.json
fi
RECOVERY_PROBES=${RECOVERY_PROBES:-25}
CONTROL=$E2E_STATE/fake-nvml-control
DP_DIR=$KUBELET_ROOT/device-plugins
mapfile -t UUIDS < <(/usr/bin/python3 -c 'import json,sys; [print(g["uuid"]) for g in json.load(open(sys.argv[1]))["gpus"]]' "$FAKE_NVML_INVENTORY")

# --- teardown (always) --------------------------------------------------------
DOWN_DONE=0
teardown() {
  ((DOWN_DONE)) && return 0
  DOWN_DONE=1
  if [[ ${E2E_KEEP_UP:-0} == 1 ]]; then
    if [[ -z $PLUGIN_PID && -x $PLUGIN_BIN ]] && is_running kubelet; then
      start_plugin kept-up --device-list-strategy envvar
    fi
    e2e_log "E2E_KEEP_UP=1: cluster left running with the plugin (KUBECONFIG=$KUBECONFIG); stop it with test/e2e/down.sh"
    return 0
  fi
  section "down"
  local t=$SECONDS
  "$E2E_DIR/down.sh" || fail "down.sh left something behind"
  T_DOWN=$((SECONDS - t))
}
finish() {
  teardown
  if ((E2E_FAILED > 0)); then
    echo
    echo "Failures:"
    printf '  - %s\n' "${E2E_FAILURES[@]}"
    echo "Logs of every component (kubelet, kube-apiserver, kube-scheduler, containerd, etcd, plugin): $E2E_LOGS"
  fi
  echo "timings: setup ${T_SETUP:-?}s, up ${T_UP:-?}s, scenarios ${T_SCEN:-?}s, down ${T_DOWN:-?}s, total $((SECONDS - T_START))s"
  echo "$E2E_PASSED passed, $E2E_FAILED failed"
  ((E2E_FAILED == 0))
}
trap 'finish; exit $?' EXIT
# On INT/TERM, ignore SIGPIPE first: the tee may be gone, teardown must still run.
trap 'trap "" PIPE; fail "interrupted"; exit 130' INT TERM

# --- plugin control -------------------------------------------------------------
PLUGIN_N=0
PLUGIN_PID=
PLUGIN_LOG=
# start_plugin LABEL [FLAGS...]  -- starts gpupool-device-plugin on the node.
start_plugin() {
  local label=$1
  shift
  PLUGIN_N=$((PLUGIN_N + 1))
  PLUGIN_LOG=$E2E_LOGS/plugin-$PLUGIN_N-$label.log
  local args=(--health-recovery-probes "$RECOVERY_PROBES" --health-probe-interval 1s "$@")
  printf '  $ gpupool-device-plugin %s   (log: %s)\n' "${args[*]}" "$PLUGIN_LOG"
  touch "$CONTROL"
  mkdir -p "$E2E_RUN/pids"
  LD_LIBRARY_PATH=$FAKENVML_DIR FAKE_NVML_INVENTORY=$FAKE_NVML_INVENTORY FAKE_NVML_CONTROL=$CONTROL \
    setsid "$PLUGIN_BIN" "${args[@]}" </dev/null >>"$PLUGIN_LOG" 2>&1 &
  PLUGIN_PID=$!
  echo "$PLUGIN_PID" >"$(pidfile plugin)"
}
# stop_plugin  -- SIGTERM; sets PLUGIN_RC to its exit status (137 if it had to be killed).
stop_plugin() {
  PLUGIN_RC=
  [[ -n $PLUGIN_PID ]] || return 0
  stop_child "$PLUGIN_PID" 15
  PLUGIN_RC=$STOP_RC
  rm -f "$(pidfile plugin)"
  e2e_log "plugin pid $PLUGIN_PID exited with status $PLUGIN_RC"
  PLUGIN_PID=
}
plugin_alive() { [[ -n $PLUGIN_PID ]] && alive "$PLUGIN_PID"; }
# The plugin's own socket(s) in the device-plugin dir (anything but kubelet.sock).
plugin_sockets() { find "$DP_DIR" -maxdepth 1 -type s ! -name kubelet.sock -printf '%f %i %C@\n' 2>/dev/null | sort; }

# Registrations the kubelet accepted for nvidia.com/gpu (its own log line,
# kubelet v1.20 manager.go: "Registered endpoint &{... nvidia.com/gpu ...}").
registrations() {
  local n
  n=$(grep -c 'Registered endpoint .* nvidia.com/gpu ' "$E2E_LOGS/kubelet.log" 2>/dev/null)
  echo "${n:-0}"
}
# wait_registered N_BEFORE  -- waits until the kubelet has registered the plugin again.
wait_registered() {
  local before=$1
  registered_since() { (( $(registrations) > before )); }
  wait_for 60 "kubelet: Registered endpoint for nvidia.com/gpu" registered_since || return 1
  grep 'Registered endpoint .* nvidia.com/gpu \|registration request .*nvidia.com/gpu' "$E2E_LOGS/kubelet.log" |
    tail -n 2 | cut -c1-200 | sed 's/^/  kubelet.log: /'
}

# --- pod helpers ----------------------------------------------------------------
make_pod() {  # make_pod NAME GPUS
  sed -e "s/@NAME@/$1/" -e "s/@GPUS@/$2/" "$E2E_DIR/manifests/gpu-pod.yaml" | kc apply -f - | sed 's/^/    /'
}
pod_ready_line() { pod_phase_is "$1" Running && pod_log_has "$1" '^READY$'; }
pod_uuids() {  # the UUIDs in the pod's NVIDIA_VISIBLE_DEVICES, one a line
  kc logs "$1" 2>/dev/null | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p' | head -n1 | tr ',' '\n' | sed '/^$/d'
}
is_fake_uuid() { local u; for u in "${UUIDS[@]}"; do [[ $u == "$1" ]] && return 0; done; return 1; }
delete_all_pods() {
  kc delete pods -l app=gpupool-e2e --grace-period=0 --force --wait=false >/dev/null 2>&1
  wait_for 60 "all test pods deleted" bash -c "! $K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pods -l app=gpupool-e2e -o name | grep -q ."
}
wait_gpu() {  # wait_gpu CAPACITY ALLOCATABLE TIMEOUT
  wait_for "$3" "node nvidia.com/gpu capacity=$1 allocatable=$2" \
    bash -c "[[ \$($K8S_BIN/kubectl --kubeconfig $KUBECONFIG get node $NODE_NAME -o jsonpath='{.status.capacity.nvidia\\.com/gpu}/{.status.allocatable.nvidia\\.com/gpu}') == $1/$2 ]]"
}
show_gpu() {
  kshow get node "$NODE_NAME" -o jsonpath='{"capacity: "}{.status.capacity}{"\nallocatable: "}{.status.allocatable}{"\n"}'
}

# =============================================================================
section "setup: packages, Kubernetes binaries, images"
t=$SECONDS
if [[ ${E2E_SKIP_DEPS:-0} != 1 ]]; then
  "$REPO_ROOT/scripts/install-deps.sh" --e2e || { fail "install-deps.sh --e2e"; exit 1; }
fi
"$E2E_DIR/build-k8s.sh" || { fail "build-k8s.sh (Kubernetes components)"; exit 1; }
"$E2E_DIR/images.sh" build || { fail "images.sh build"; exit 1; }
echo "plugin:     $PLUGIN_BIN"
echo "fake NVML:  ${FAKENVML_DIR:-<not found>}/libnvidia-ml.so.1"
echo "inventory:  $FAKE_NVML_INVENTORY (${#UUIDS[@]} GPUs: ${UUIDS[*]})"
[[ -x $PLUGIN_BIN ]] || { fail "plugin binary $PLUGIN_BIN missing"; exit 1; }
[[ -n $FAKENVML_DIR && -f $FAKENVML_DIR/libnvidia-ml.so.1 ]] || { fail "fake NVML (libnvidia-ml.so.1) not found under $BUILD"; exit 1; }
((${#UUIDS[@]} == 4)) || { fail "inventory $FAKE_NVML_INVENTORY must hold 4 GPUs"; exit 1; }
T_SETUP=$((SECONDS - t))

section "up: etcd, kube-apiserver, containerd, kube-scheduler, kubelet"
t=$SECONDS
"$E2E_DIR/down.sh" >/dev/null 2>&1 || true   # leftovers of an interrupted run
if ! "$E2E_DIR/up.sh"; then
  fail "cluster start (up.sh)"
  exit 1
fi
T_UP=$((SECONDS - t))
T_SCEN0=$SECONDS

# =============================================================================
section "1. registration: node capacity and allocatable nvidia.com/gpu: 4"
regs=$(registrations)
start_plugin envvar --device-list-strategy envvar
wait_registered "$regs"
wait_gpu 4 4 60
show_gpu
check "plugin is running" plugin_alive
check "capacity nvidia.com/gpu = 4" node_res_is capacity nvidia.com/gpu 4
check "allocatable nvidia.com/gpu = 4" node_res_is allocatable nvidia.com/gpu 4
echo "  $ ls -l $DP_DIR"; ls -l "$DP_DIR" | sed 's/^/    /'

# =============================================================================
section "2. allocation: a pod with limits nvidia.com/gpu: 2"
make_pod gpu-two 2
wait_for 90 "pod gpu-two Running and printed its env" pod_ready_line gpu-two
kshow get pod gpu-two -o wide
kshow logs gpu-two
mapfile -t TWO < <(pod_uuids gpu-two)
check "gpu-two is Running" pod_phase_is gpu-two Running
two_ok() {
  ((${#TWO[@]} == 2)) && [[ ${TWO[0]} != "${TWO[1]}" ]] && is_fake_uuid "${TWO[0]}" && is_fake_uuid "${TWO[1]}"
}
check "gpu-two's NVIDIA_VISIBLE_DEVICES holds 2 distinct fake UUIDs (${TWO[*]:-none})" two_ok

section "3. over-subscription: a pod asking for 3 stays Pending"
make_pod gpu-three 3
insufficient() {
  kc get pod gpu-three -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' |
    grep -q 'Insufficient nvidia.com/gpu'
}
wait_for 60 "gpu-three unschedulable for Insufficient nvidia.com/gpu" insufficient
kshow get pod gpu-three -o wide
kshow get pod gpu-three -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}'
kshow get events --field-selector involvedObject.name=gpu-three
check "gpu-three is Pending" pod_phase_is gpu-three Pending
check "gpu-three: 'Insufficient nvidia.com/gpu'" insufficient
kc delete pod gpu-three --grace-period=0 --force --wait=false >/dev/null 2>&1

# =============================================================================
section "4. health: XID 48 on GPU 3 -> allocatable 3; recovery -> 4"
echo "  $ echo 'xid 3 48' >> \$FAKE_NVML_CONTROL   (recovery after $RECOVERY_PROBES probes, 1 s apart)"
echo "xid 3 48" >>"$CONTROL"
wait_gpu 4 3 $((RECOVERY_PROBES + 5))
show_gpu
check "after the XID: allocatable nvidia.com/gpu = 3" node_res_is allocatable nvidia.com/gpu 3
check "after the XID: capacity nvidia.com/gpu = 4" node_res_is capacity nvidia.com/gpu 4
wait_gpu 4 4 $((RECOVERY_PROBES + 60))
show_gpu
check "after recovery: allocatable nvidia.com/gpu = 4" node_res_is allocatable nvidia.com/gpu 4
check "gpu-two still Running" pod_phase_is gpu-two Running

# =============================================================================
section "5. kubelet restart: the plugin re-registers, pods keep their GPUs"
cid_before=$(kc get pod gpu-two -o jsonpath='{.status.containerStatuses[0].containerID}')
socks_before=$(plugin_sockets)
plugin_pid_before=$PLUGIN_PID
echo "  plugin socket before (name inode ctime): $socks_before"
e2e_log "stopping the kubelet (TERM) and starting it again with the same flags"
stop_pid kubelet 20
regs=$(registrations)
start_kubelet
wait_for 60 "kubelet healthz" kubelet_healthy
show_gpu
sock_renewed() { local s; s=$(plugin_sockets); [[ -n $s && $s != "$socks_before" ]]; }
wait_for 60 "plugin socket re-created in $DP_DIR" sock_renewed
wait_registered "$regs"
check "the restarted kubelet registered the plugin again" test "$(registrations)" -gt "$regs"
echo "  plugin socket after (name inode ctime):  $(plugin_sockets)"
echo "  $ ls -l $DP_DIR"; ls -l "$DP_DIR" | sed 's/^/    /'
wait_gpu 4 4 60
show_gpu
check "same plugin process (pid $plugin_pid_before) still running" plugin_alive
check "plugin re-registered: new socket in $DP_DIR" sock_renewed
check "after kubelet restart: capacity nvidia.com/gpu = 4" node_res_is capacity nvidia.com/gpu 4
check "after kubelet restart: allocatable nvidia.com/gpu = 4" node_res_is allocatable nvidia.com/gpu 4
kshow get pod gpu-two -o wide
same_container() {
  [[ "$(kc get pod gpu-two -o jsonpath='{.status.containerStatuses[0].containerID}/{.status.containerStatuses[0].restartCount}')" == "$cid_before/0" ]]
}
check "gpu-two still Running, same container, no restart" same_container
kshow exec gpu-two -- sh -c 'echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES'
exec_env_same() {
  [[ "$(kc exec gpu-two -- sh -c 'echo $NVIDIA_VISIBLE_DEVICES' 2>/dev/null)" == "$(IFS=,; echo "${TWO[*]}")" ]]
}
check "gpu-two still sees ${TWO[*]:-?}" exec_env_same
echo "  kubelet checkpoint ($DP_DIR/kubelet_internal_checkpoint):"
sed 's/^/    /' "$DP_DIR/kubelet_internal_checkpoint" 2>/dev/null | cut -c1-400; echo
make_pod gpu-after-kubelet 2
wait_for 90 "pod gpu-after-kubelet Running" pod_ready_line gpu-after-kubelet
kshow logs gpu-after-kubelet
mapfile -t AK < <(pod_uuids gpu-after-kubelet)
disjoint() {  # disjoint "a b" "c d": two UUIDs each, no overlap
  local a b x y
  read -ra a <<<"$1"
  read -ra b <<<"$2"
  ((${#a[@]} == 2 && ${#b[@]} == 2)) || return 1
  for x in "${a[@]}"; do for y in "${b[@]}"; do [[ $x != "$y" ]] || return 1; done; done
}
check "new pod after kubelet restart gets the other 2 GPUs (${AK[*]:-none})" disjoint "${TWO[*]}" "${AK[*]}"
kc delete pod gpu-after-kubelet --grace-period=0 --force --wait=false >/dev/null 2>&1

# =============================================================================
section "6. plugin restart: SIGTERM, start again, nothing lost"
wait_for 30 "gpu-after-kubelet gone" pod_gone gpu-after-kubelet
stop_plugin
check "plugin exits 0 on SIGTERM" test "$PLUGIN_RC" = 0
echo "  $ ls -l $DP_DIR   (plugin stopped)"; ls -l "$DP_DIR" | sed 's/^/    /'
regs=$(registrations)
start_plugin envvar-again --device-list-strategy envvar
wait_registered "$regs"
check "the restarted plugin registered with the kubelet" test "$(registrations)" -gt "$regs"
wait_gpu 4 4 60
show_gpu
check "after plugin restart: capacity nvidia.com/gpu = 4" node_res_is capacity nvidia.com/gpu 4
check "after plugin restart: allocatable nvidia.com/gpu = 4" node_res_is allocatable nvidia.com/gpu 4
kshow get pod gpu-two -o wide
check "gpu-two still Running, same container, no restart" same_container
make_pod gpu-after-plugin 2
wait_for 90 "pod gpu-after-plugin Running" pod_ready_line gpu-after-plugin
kshow logs gpu-after-plugin
mapfile -t AP < <(pod_uuids gpu-after-plugin)
check "new pod after plugin restart gets the other 2 GPUs (${AP[*]:-none})" disjoint "${TWO[*]}" "${AP[*]}"
make_pod gpu-one-more 1
wait_for 60 "gpu-one-more unschedulable (all 4 GPUs in use)" bash -c \
  "$K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pod gpu-one-more -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].message}' | grep -q 'Insufficient nvidia.com/gpu'"
kshow get pods -o wide
check "a 5th GPU is refused: gpu-one-more Pending" pod_phase_is gpu-one-more Pending
delete_all_pods

# =============================================================================
# Issue 17: the plugin restarted, then the kubelet right after it, then pods
# created at once. A pod admitted before the plugin registered again fails
# for good (UnexpectedAdmissionError: "requested number of devices
# unavailable"); the plugin re-registers within ~100 ms of the kubelet
# listening, before the kubelet answers healthz.
section "6b. plugin and kubelet restarted back to back, then 4 pods at once: none fails admission"
stop_plugin
check "plugin exits 0 on SIGTERM" test "$PLUGIN_RC" = 0
start_plugin envvar-b2b --device-list-strategy envvar
e2e_log "stopping the kubelet (TERM) right after the plugin start, and starting it again"
stop_pid kubelet 20
start_kubelet
wait_for 60 "kubelet healthz" kubelet_healthy
for i in 0 1 2 3; do make_pod "gpu-b2b-$i" 1; done
b2b_running() { local i; for i in 0 1 2 3; do pod_ready_line "gpu-b2b-$i" || return 1; done; }
b2b_settled() { b2b_running || kc get pods -l app=gpupool-e2e -o jsonpath='{.items[*].status.phase}' | grep -q Failed; }
wait_for 120 "4 pods Running (or one Failed)" b2b_settled
kshow get pods -l app=gpupool-e2e -o wide
no_admission_error() {
  ! kc get pods -l app=gpupool-e2e -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.reason} {.status.message}{"\n"}{end}' |
    grep -E 'Failed|UnexpectedAdmissionError' | sed 's/^/    /' | grep .
}
check "none of the 4 pods failed admission (UnexpectedAdmissionError)" no_admission_error
check "all 4 pods Running with a GPU each" b2b_running
delete_all_pods

# =============================================================================
section "7. time-slicing (replicas 2): capacity 8, pods share GPUs"
stop_plugin
echo "  $ cat test/e2e/time-slicing.yaml"; sed 's/^/    /' "$E2E_DIR/time-slicing.yaml"
regs=$(registrations)
start_plugin time-slicing --device-list-strategy envvar --config-file "$E2E_DIR/time-slicing.yaml"
wait_registered "$regs"
wait_gpu 8 8 60
show_gpu
check "time-slicing: capacity nvidia.com/gpu = 8" node_res_is capacity nvidia.com/gpu 8
check "time-slicing: allocatable nvidia.com/gpu = 8" node_res_is allocatable nvidia.com/gpu 8
for i in 0 1 2 3 4 5 6 7; do make_pod "ts-$i" 1; done
all_ts_ready() { local i; for i in 0 1 2 3 4 5 6 7; do pod_ready_line "ts-$i" || return 1; done; }
wait_for 120 "8 one-GPU pods Running" all_ts_ready
kshow get pods -o wide
declare -A TS_COUNT=()
ts_ok=1
for i in 0 1 2 3 4 5 6 7; do
  mapfile -t U < <(pod_uuids "ts-$i")
  printf '    ts-%s: NVIDIA_VISIBLE_DEVICES=%s\n' "$i" "$(IFS=,; echo "${U[*]}")"
  if ((${#U[@]} == 1)) && is_fake_uuid "${U[0]}"; then
    TS_COUNT[${U[0]}]=$((${TS_COUNT[${U[0]}]:-0} + 1))
  else
    ts_ok=0
  fi
done
check "each time-sliced pod sees exactly one fake GPU" test "$ts_ok" = 1
shared=0
for u in "${!TS_COUNT[@]}"; do
  echo "    $u shared by ${TS_COUNT[$u]} pods"
  ((TS_COUNT[$u] >= 2)) && shared=$((shared + 1))
done
check "pods share GPUs: 8 pods on 4 GPUs, each GPU used by exactly 2 pods" \
  bash -c "(( ${#TS_COUNT[@]} == 4 && $shared == 4 ))"
delete_all_pods

# =============================================================================
section "8. --device-list-strategy volume-mounts"
stop_plugin
regs=$(registrations)
start_plugin volume-mounts --device-list-strategy volume-mounts
wait_registered "$regs"
wait_gpu 4 4 60
show_gpu
check "volume-mounts: capacity nvidia.com/gpu = 4" node_res_is capacity nvidia.com/gpu 4
make_pod vm-two 2
wait_for 90 "pod vm-two Running" pod_ready_line vm-two
kshow logs vm-two
kshow exec vm-two -- ls -l /var/run/nvidia-container-devices
mapfile -t VM < <(kc exec vm-two -- ls /var/run/nvidia-container-devices 2>/dev/null)
vm_ok() {
  ((${#VM[@]} == 2)) && [[ ${VM[0]} != "${VM[1]}" ]] && is_fake_uuid "${VM[0]}" && is_fake_uuid "${VM[1]}"
}
check "vm-two sees /var/run/nvidia-container-devices/<uuid> for 2 fake GPUs (${VM[*]:-none})" vm_ok
check "vm-two: NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices" \
  pod_log_has vm-two '^NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices$'
delete_all_pods
stop_plugin
check "plugin exits 0 on SIGTERM" test "$PLUGIN_RC" = 0

# =============================================================================
# 9. the scheduler extender with the real kube-scheduler (both configuration
#    formats); sourced, so it shares the pass/fail counters.
. "$E2E_DIR/extender.sh"

# =============================================================================
# 11. GPU-memory shares end to end: kube-scheduler -> extender -> kubelet ->
#     plugin in gpu-mem mode -> container (sourced, shares counters).
. "$E2E_DIR/gpumem.sh"

# =============================================================================
# 10. deployed for real: `make image` imported into containerd, the
#     deploy/overlays/* applied with kubectl apply -k (sourced, shares counters).
. "$E2E_DIR/deploy.sh"
T_SCEN=$((SECONDS - T_SCEN0))
# finish (trap) tears the cluster down and prints the summary line last.
