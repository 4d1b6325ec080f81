#!/usr/bin/env bash
# shellcheck disable=SC2016
# gpupool's DRA driver end to end on a real one-node Kubernetes 1.36 cluster
# (test/e2e/k136/up.sh: kubelet, kube-apiserver, kube-scheduler,
# kube-controller-manager, containerd 2 with CDI), gpupool-dra-plugin on the
# node against the fake NVML (4 fake 16 GiB GPUs), containers that reach the
# fake libcuda through libgpupool-cuda. Checks with real pods and claims:
#
#   1  the plugin registers with the kubelet and publishes its ResourceSlice
#      (time from the plugin's start to the slice, measured); the
#      DeviceClasses of deploy/ applied; an XID takes its GPU out of the
#      slice, recovery brings it back
#   2  claims of 4 GiB and 8 GiB on one GPU both Running; in each container
#      the probe reads total = its share, gets it to the byte and
#      CUDA_ERROR_OUT_OF_MEMORY one MiB past it; a third claim of 8 GiB stays
#      Pending until the 4 GiB one is deleted, then runs with its own share;
#      two containers of one pod share one claim (one limit across both); a
#      whole-GPU claim runs unlimited; `nvidia.com/gpu: 1` is served through
#      the DeviceClass with extendedResourceName
#   3  the plugin killed (SIGKILL) between a claim's prepare and its
#      container's start, the kubelet restarted, the plugin started again: the
#      pod runs with its share, nothing prepared twice (one CDI spec, one
#      region directory, one checkpoint entry), the running pods untouched,
#      the slice back within 1 s of the kubelet deleting it
#   4  every pod and claim deleted: no CDI spec, region directory or
#      checkpoint entry left; the plugin exits 0 on SIGTERM
#   5  deploy/overlays/dra applied with kubectl apply -k: the DaemonSet's
#      plugin takes over and prepares a share; delete -k removes it
#
#   test/e2e/dra.sh BUILD_DIR        (what `make e2e-dra` runs; root only)
#
# BUILD_DIR holds bin/gpupool-dra-plugin, lib/libgpupool-cuda.so,
# test/fakenvml/libnvidia-ml.so.1, test/fakecuda/libcuda.so.1 and
# test/cuda/gpupool-cudaprobe. The cluster: k136/lib.sh (K136_TARBALL takes
# an official kubernetes-server-linux-amd64.tar.gz too). The output ends with
# "N passed, N failed"; the exit status is non-zero on any failure. Logs of
# every component: /var/tmp/gpupool-e2e-k136/logs/<run>/.
#
# Environment: DRA_PLUGIN_BIN, DRA_DRIVER (default gpu.gpupool.io),
# DRA_PLUGIN_ARGS (extra plugin flags), DRA_NVIDIA_CTK (the CDI hooks'
# program, default /bin/true), FAKENVML_DIR, E2E_SKIP_DEPS=1 (skip
# install-deps), E2E_KEEP_UP=1 (leave the cluster running).
set -uo pipefail

E2E_DIR=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "dra.sh: build dir $1 not found" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "dra.sh: the suite starts a kubelet and containerd; run it as root" >&2; exit 2; }

# Keep a copy of everything this script prints next to the component logs.
if [[ -z ${DRA_INNER:-} ]]; then
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  export K136_LOGS=/var/tmp/gpupool-e2e-k136/logs/$stamp
  mkdir -p "$K136_LOGS"
  ln -sfn "$stamp" /var/tmp/gpupool-e2e-k136/logs/latest
  ls -1d /var/tmp/gpupool-e2e-k136/logs/20*/ 2>/dev/null | head -n -10 | xargs -r rm -rf
  # The tee ignores INT and TERM: it must outlive the suite's teardown.
  DRA_INNER=1 "$0" "$@" 2>&1 | (trap '' INT TERM; exec tee "$K136_LOGS/e2e-dra.log")
  exit "${PIPESTATUS[0]}"
fi

. "$E2E_DIR/k136/lib.sh"
T_START=$SECONDS
section() { printf '\n==== %s (%s, +%ss) ====\n' "$*" "$(date +%H:%M:%S)" "$((SECONDS - T_START))"; }

# --- the build under test and the contract's names (docs/dra.md) --------------
DRA_PLUGIN_BIN=${DRA_PLUGIN_BIN:-$BUILD/bin/gpupool-dra-plugin}
DRIVER=${DRA_DRIVER:-gpu.gpupool.io}
if [[ -z ${FAKENVML_DIR:-} ]]; then
  lib=$(find "$BUILD" -name libnvidia-ml.so.1 -path '*/fakenvml/*' -not -path '*/v1only/*' -not -path '*/root/*' 2>/dev/null | head -n1)
  FAKENVML_DIR=${lib:+$(dirname "$lib")}
fi
INVENTORY=$K136_DIR/inventory-4gpu-16gb.json
mapfile -t UUIDS < <(/usr/bin/python3 -c 'import json,sys; [print(g["uuid"]) for g in json.load(open(sys.argv[1]))["gpus"]]' "$INVENTORY")
GIB=1073741824
MIB=1048576
GPU_BYTES=$((16 * GIB))
CONTROL=$E2E_STATE/fake-nvml-control
ISO_DIR=$E2E_STATE/isolation          # --isolation-dir; claims' regions in claims/<uid>
CDI_ROOT=/var/run/cdi
PLUGIN_DIR=$KUBELET_ROOT/plugins/$DRIVER
REG_SOCK=$KUBELET_ROOT/plugins_registry/$DRIVER-reg.sock
CHECKPOINT=$PLUGIN_DIR/checkpoint.json
OUT=$E2E_LOGS/dra
GATE=$E2E_STATE/gate     # dra-crash's init container waits for $GATE/open
# The CDI hooks' program: no NVIDIA Container Toolkit on this machine, and the
# fake driver needs no symlinks or ld cache; /bin/true runs as the hook.
NVIDIA_CTK=${DRA_NVIDIA_CTK:-/bin/true}
CLASS_WHOLE=gpu.gpupool.io
CLASS_MEM=gpu-mem.gpupool.io
CLASS_MIG=mig.gpupool.io

# --- teardown (always) ----------------------------------------------------------
PLUGIN_PID=
WATCH_PID=
DOWN_DONE=0
teardown() {
  ((DOWN_DONE)) && return 0
  DOWN_DONE=1
  stop_slice_watch
  if [[ ${E2E_KEEP_UP:-0} == 1 ]]; then
    e2e_log "E2E_KEEP_UP=1: cluster left running (KUBECONFIG=$KUBECONFIG); stop it with test/e2e/k136/down.sh"
    return 0
  fi
  section "down"
  local t=$SECONDS
  "$K136_DIR/down.sh" || fail "k136/down.sh left something behind"
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
  echo "figures: ResourceSlice ${T_SLICE_MS:-?} ms after the plugin's start; rewritten ${T_HEALTH_MS:-?} ms after an XID; after a kubelet restart, back ${T_REPUB_MS:-?} ms after the kubelet deleted it"
  echo "timings: setup ${T_SETUP:-?}s, up ${T_UP:-?}s, scenarios ${T_SCEN:-?}s, down ${T_DOWN:-?}s, total $((SECONDS - T_START))s"
  echo "$E2E_PASSED passed, $E2E_FAILED failed"
  ((E2E_FAILED == 0))
}
trap 'finish; exit $?' EXIT
trap 'trap "" PIPE; fail "interrupted"; exit 130' INT TERM

# --- the plugin -----------------------------------------------------------------
PLUGIN_N=0
# start_plugin LABEL  -- gpupool-dra-plugin on the node; PLUGIN_T0 = its start
# (EPOCHREALTIME, just before the fork).
start_plugin() {
  PLUGIN_N=$((PLUGIN_N + 1))
  PLUGIN_LOG=$E2E_LOGS/dra-plugin-$PLUGIN_N-$1.log
  local args=(--driver-name "$DRIVER" --node-name "$NODE_NAME" --kubeconfig "$KUBECONFIG"
    --kubelet-root-dir "$KUBELET_ROOT" --cdi-root "$CDI_ROOT"
    --isolation-dir "$ISO_DIR" --isolation-library "$BUILD/lib/libgpupool-cuda.so"
    --dev-root "$DEV_ROOT" --nvidia-ctk-path "$NVIDIA_CTK"
    --health-probe-interval 1s --health-recovery-probes 2)
  # shellcheck disable=SC2206
  args+=(${DRA_PLUGIN_ARGS:-})
  printf '  $ gpupool-dra-plugin %s   (inventory %s, log: %s)\n' "${args[*]}" "$(basename "$INVENTORY")" "$PLUGIN_LOG"
  touch "$CONTROL"
  mkdir -p "$E2E_RUN/pids" "$ISO_DIR"
  PLUGIN_T0=$EPOCHREALTIME
  NODE_NAME=$NODE_NAME LD_LIBRARY_PATH=$FAKENVML_DIR FAKE_NVML_INVENTORY=$INVENTORY FAKE_NVML_CONTROL=$CONTROL \
    setsid "$DRA_PLUGIN_BIN" "${args[@]}" </dev/null >>"$PLUGIN_LOG" 2>&1 &
  PLUGIN_PID=$!
  echo "$PLUGIN_PID" >"$(pidfile plugin-dra)"   # k136/down.sh stops plugin*.pid
}
stop_plugin() {  # stop_plugin [SIGNAL]  -- TERM (or SIGNAL); PLUGIN_RC = exit status
  PLUGIN_RC=
  [[ -n $PLUGIN_PID ]] || return 0
  if [[ ${1:-TERM} == KILL ]]; then
    kill -KILL "$PLUGIN_PID" 2>/dev/null
    wait "$PLUGIN_PID"
    PLUGIN_RC=$?
  else
    stop_child "$PLUGIN_PID" 15
    PLUGIN_RC=$STOP_RC
  fi
  rm -f "$(pidfile plugin-dra)"
  e2e_log "plugin pid $PLUGIN_PID exited with status $PLUGIN_RC"
  PLUGIN_PID=
}
plugin_alive() { [[ -n $PLUGIN_PID ]] && alive "$PLUGIN_PID"; }

# --- ResourceSlices: one watch for the whole run, each event stamped --------------
SLICE_EVENTS=$OUT/slice-events.txt
start_slice_watch() {
  : >"$SLICE_EVENTS"
  # Its own session, so stop_slice_watch ends the loop and its kubectl
  # together. No --request-timeout: the watch lasts the run.
  setsid bash -c '
    while :; do
      "$1" --kubeconfig "$2" get resourceslices --watch-only --output-watch-events \
        -o jsonpath="{.type} {.object.metadata.name} {.object.spec.driver} {.object.spec.pool.generation}{\"\n\"}" |
        while read -r ev name drv gen; do
          [[ $drv == "$3" ]] && echo "$EPOCHREALTIME $ev $name $gen"
        done
      sleep 0.2
    done' slice-watch "$K8S_BIN/kubectl" "$KUBECONFIG" "$DRIVER" >>"$SLICE_EVENTS" 2>/dev/null </dev/null &
  WATCH_PID=$!
  echo "$WATCH_PID" >"$(pidfile slice-watch)"   # k136/down.sh ends it too
}
stop_slice_watch() {
  [[ -n $WATCH_PID ]] || return 0
  kill -- -"$WATCH_PID" 2>/dev/null
  wait "$WATCH_PID" 2>/dev/null
  rm -f "$(pidfile slice-watch)"
  WATCH_PID=
}
# first_event_after T TYPE  -- the stamp of the first TYPE event after T ("" if none)
first_event_after() { awk -v t="$1" -v ty="$2" '$1 > t && $2 == ty {print $1; exit}' "$SLICE_EVENTS"; }
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%d", (b - a) * 1000 + 0.5}'; }
our_slices() {  # names of this node's slices of our driver
  kc get resourceslices -o jsonpath="{range .items[?(@.spec.driver==\"$DRIVER\")]}{.spec.nodeName} {.metadata.name}{\"\n\"}{end}" 2>/dev/null |
    awk -v n="$NODE_NAME" '$1 == n {print $2}'
}
slice_count_is() { [[ $(our_slices | grep -c .) == "$1" ]]; }
slice_json() { kc get resourceslice "$(our_slices | head -n1)" -o json 2>/dev/null; }

# --- claims and pods ------------------------------------------------------------------
kapply() {  # kapply FILE  -- kubectl apply, output shown
  kc apply -f "$1" 2>&1 | sed 's/^/    /'
  return "${PIPESTATUS[0]}"
}
sel_uuid() { printf 'device.attributes["%s"].uuid == "%s"' "$DRIVER" "$1"; }
# claim_yaml NAME CLASS UUID [MEMORY]  -- a ResourceClaim for one device of CLASS on
# the GPU with UUID; MEMORY (e.g. 4Gi) asks that much of its consumable memory.
claim_yaml() {
  cat <<EOF
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: $1
  labels: {app: gpupool-e2e-dra}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: $2
        selectors:
        - cel:
            expression: '$(sel_uuid "$3")'
EOF
  [[ -z ${4:-} ]] || printf '        capacity:\n          requests:\n            memory: %s\n' "$4"
}
# probe_cmd SHARE_BYTES  -- the container's command: the probe itself, no
# shell in between (what a shell does to the plugin's variables is checked
# on its own, shell_keeps_limit): total, the share to the byte, 1 MiB past it,
# 1 MiB freed, then it holds share - 1 MiB until it is killed.
probe_cmd() {
  printf '[gpupool-cudaprobe, init, info, total, alloc, "%s", alloc, 1m, alloc, 1m, free, info, hold]' "$(($1 - MIB))"
}
# An idle container (probed with kubectl exec).
IDLE_CMD="[sh, -c, \"trap 'exit 0' TERM; echo holding; while :; do sleep 1 & wait \$!; done\"]"
# pod_yaml NAME CLAIM UUID COMMAND [INIT_GATE]  -- one container "c" holding CLAIM
# (as "gpu") running COMMAND (a YAML flow list); INIT_GATE=1 adds an init container that waits for
# $GATE/open on the host (the claim is prepared before it runs).
pod_yaml() {
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {app: gpupool-e2e-dra}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  resourceClaims:
  - name: gpu
    resourceClaimName: $2
EOF
  if [[ ${5:-0} == 1 ]]; then
    cat <<EOF
  volumes:
  - name: gate
    hostPath: {path: $GATE, type: Directory}
  initContainers:
  - name: gate
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'until [ -e /gate/open ]; do sleep 0.1; done']
    volumeMounts: [{name: gate, mountPath: /gate}]
EOF
  fi
  cat <<EOF
  containers:
  - name: c
    image: $CUDAPROBE_IMAGE
    imagePullPolicy: IfNotPresent
    resources:
      claims: [{name: gpu}]
    env: [{name: FAKECUDA_DEVICES, value: "$3=16g"}]
    command: $4
EOF
}
pod_log() { kc logs "$1" ${2:+-c "$2"} 2>/dev/null; }
holding() { pod_log "$1" "${2:-}" | grep -qx holding; }
running_and_holding() { pod_phase_is "$1" Running && holding "$1" "${2:-}"; }
all_holding() { local p; for p in "$@"; do running_and_holding "$p" || return 1; done; }
probe_expected() {  # probe_expected SHARE TOTAL
  printf '%s\n' "init CUDA_SUCCESS" "info CUDA_SUCCESS free=$1 total=$2" "total CUDA_SUCCESS bytes=$2" \
    "alloc CUDA_SUCCESS" "alloc CUDA_SUCCESS" "alloc CUDA_ERROR_OUT_OF_MEMORY" "free CUDA_SUCCESS" \
    "info CUDA_SUCCESS free=$MIB total=$2" "holding"
}
probe_ok() {  # probe_ok POD SHARE  -- the probe's lines are exactly these (total = the share)
  local got
  got=$(pod_log "$1")
  [[ $got == "$(probe_expected "$2" "$2")" ]] && return 0
  diff <(probe_expected "$2" "$2") <(printf '%s\n' "$got") | sed 's/^/      expected<  >got: /'
  return 1
}
# second_ok POD CONTAINER SHARE  -- another process in the container sees the
# holder's use: free = 1 MiB, which it gets, and is refused the next MiB.
second_ok() {
  local out want
  out=$(kc exec "$1" -c "$2" -- gpupool-cudaprobe init info alloc 1m alloc 1m 2>&1)
  printf '%s\n' "$out" | sed 's/^/      /'
  want=$(printf '%s\n' "init CUDA_SUCCESS" "info CUDA_SUCCESS free=$MIB total=$3" "alloc CUDA_SUCCESS" "alloc CUDA_ERROR_OUT_OF_MEMORY")
  [[ $out == "$want" ]]
}
# devs_are POD CONTAINER NAME...  -- the GPU device nodes in the container
# (/dev/nvidia<N>; nvidiactl aside) are exactly NAME...
devs_are() {
  local got want
  got=$(kc exec "$1" -c "$2" -- ls /dev 2>/dev/null | grep -x 'nvidia[0-9]*' | sort | tr '\n' ' ')
  want=$(printf '%s\n' "${@:3}" | sort | tr '\n' ' ')
  [[ $got == "$want" ]] && return 0
  echo "      device nodes: got '$got', expected '$want'"
  return 1
}
# shell_keeps_limit POD SHARE  -- a probe started by the image's POSIX shell
# (busybox sh, as entrypoint scripts are) still reads total = the share. The
# plugin's variables must survive a shell: busybox sh and dash drop names
# that are not shell identifiers (a '-' in it) from the environment they pass on.
shell_keeps_limit() {
  local out
  out=$(kc exec "$1" -c c -- sh -c 'env | grep ^CUDA_DEVICE_MEMORY | sort; gpupool-cudaprobe init info 2>&1' 2>&1)
  printf '%s\n' "$out" | sed 's/^/      /'
  grep -qx "info CUDA_SUCCESS free=[0-9]* total=$2" <<<"$out"
}
claim_uid() { kc get resourceclaim "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
claim_allocated() { [[ -n $(kc get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].device}' 2>/dev/null) ]]; }
claim_device() { kc get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].device}' 2>/dev/null; }
claim_consumed() { kc get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].consumedCapacity.memory}' 2>/dev/null; }
bytes() { /usr/bin/python3 -c 'import sys
s = sys.argv[1]
u = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
for k, v in u.items():
    if s.endswith(k):
        print(int(s[:-len(k)]) * v); break
else:
    print(int(s) if s else "")' "$1"; }
cdi_specs_of() { grep -l -- "$1" "$CDI_ROOT"/* 2>/dev/null; }   # cdi_specs_of CLAIM_UID
cdi_claim_specs() { grep -l '"kind": *"k8s\.[^"]*/claim"' "$CDI_ROOT"/* 2>/dev/null; }
region_dir() { echo "$ISO_DIR/claims/$1"; }
ckpt_count() {  # ckpt_count CLAIM_UID  -- how many times the checkpoint names it
  [[ -f $CHECKPOINT ]] || { echo 0; return; }
  grep -o -- "$1" "$CHECKPOINT" | grep -c .
}
# one_prepared CLAIM_UID  -- one CDI spec, one region directory, the checkpoint naming it once
one_prepared() {
  local specs n
  specs=$(cdi_specs_of "$1" | grep -c .)
  n=$(ckpt_count "$1")
  echo "      CDI specs naming $1: $specs; region dir: $(ls -d "$(region_dir "$1")" 2>/dev/null || echo none); checkpoint mentions: $n"
  [[ $specs == 1 && -d $(region_dir "$1") && $n -ge 1 ]]
}
nothing_left_of() {  # nothing_left_of CLAIM_UID...
  local u
  for u in "$@"; do
    [[ -z $(cdi_specs_of "$u") && ! -e $(region_dir "$u") && $(ckpt_count "$u") == 0 ]] || return 1
  done
}
show_not_running() {
  local p
  for p in "$@"; do
    running_and_holding "$p" && continue
    kshow get pod "$p" -o wide
    kc describe pod "$p" 2>&1 | sed -n '/^Events:/,$p' | tail -n 8 | sed 's/^/    /'
    pod_log "$p" | tail -n 12 | sed 's/^/    log: /'
  done
}
cid_of() { kc get pod "$1" -o jsonpath='{range .status.containerStatuses[*]}{.containerID}/{.restartCount} {end}' 2>/dev/null; }

# =============================================================================
section "setup: Kubernetes 1.36 binaries, images, the build under test"
t=$SECONDS
mkdir -p "$OUT"
if [[ ${E2E_SKIP_DEPS:-0} != 1 ]]; then   # runc, CNI plugins, busybox, openssl (present: 0.1 s)
  "$REPO_ROOT/scripts/install-deps.sh" --e2e || { fail "install-deps.sh --e2e"; exit 1; }
fi
k136_unpack || { fail "unpack the Kubernetes tarball"; exit 1; }
"$E2E_DIR/images.sh" build || { fail "images.sh build"; exit 1; }
echo "plugin:     $DRA_PLUGIN_BIN (driver $DRIVER)"
echo "fake NVML:  ${FAKENVML_DIR:-<not found>}/libnvidia-ml.so.1"
echo "inventory:  $INVENTORY (${#UUIDS[@]} GPUs of 16 GiB: ${UUIDS[*]})"
ready=1
for f in "$DRA_PLUGIN_BIN" "$BUILD/lib/libgpupool-cuda.so" "$BUILD/test/cuda/gpupool-cudaprobe" \
         "$BUILD/test/fakecuda/libcuda.so.1" "${FAKENVML_DIR:-/nonexistent}/libnvidia-ml.so.1"; do
  [[ -f $f ]] || { fail "$f not built"; ready=0; }
done
((ready)) || exit 1
T_SETUP=$((SECONDS - t))

section "up: etcd, kube-apiserver, kube-controller-manager, containerd 2, kube-scheduler, kubelet"
t=$SECONDS
"$K136_DIR/down.sh" >/dev/null 2>&1 || true   # leftovers of an interrupted run
"$K136_DIR/up.sh" || { fail "cluster start (k136/up.sh)"; exit 1; }
"$E2E_DIR/images.sh" cudaprobe "$BUILD" || { fail "images.sh cudaprobe (the glibc probe image)"; exit 1; }
T_UP=$((SECONDS - t))
T_SCEN0=$SECONDS
mkdir -p "$GATE"

# The fake NVML's GPUs have no device nodes, and the plugin's CDI specs name
# /dev/nvidia<minor> and /dev/nvidiactl (containerd stats every device node): stand-ins with
# /dev/null's numbers under a --dev-root of the suite's own, so the host's
# /dev is never touched.
DEV_ROOT=$E2E_STATE/dev-root
fake_dev_nodes() {
  local m
  mkdir -p "$DEV_ROOT/dev"
  for m in $(/usr/bin/python3 -c 'import json,sys; [print(g["minor"]) for g in json.load(open(sys.argv[1]))["gpus"]]' "$INVENTORY"); do
    mknod -m 666 "$DEV_ROOT/dev/nvidia$m" c 1 3 || return 1
  done
  # The one control node every GPU container gets (the others only where the host has them).
  mknod -m 666 "$DEV_ROOT/dev/nvidiactl" c 1 3
}
fake_dev_nodes || { fail "mknod $DEV_ROOT/dev/nvidia<minor> stand-ins"; exit 1; }
echo "  fake device nodes: $(ls "$DEV_ROOT/dev" | tr '\n' ' ')"

# =============================================================================
section "1. registration, ResourceSlice, DeviceClasses"
start_slice_watch
sleep 0.5   # the watch is open before the plugin starts
start_plugin first
wait_for 30 "a ResourceSlice of $DRIVER for $NODE_NAME" slice_count_is 1
t_slice=$(first_event_after "$PLUGIN_T0" ADDED)
if [[ -n $t_slice ]]; then
  T_SLICE_MS=$(ms_between "$PLUGIN_T0" "$t_slice")
  e2e_log "ResourceSlice visible ${T_SLICE_MS} ms after the plugin's start (watch event)"
fi
# The kubelet's DRA registration handler says it connected to the driver's socket.
reg_lines() { grep -F "driverName=\"$DRIVER\"" "$E2E_LOGS/kubelet.log" 2>/dev/null | grep -F 'connected=true'; }
reg_seen() { [[ -S $REG_SOCK ]] && reg_lines | grep -q .; }
wait_for 30 "the kubelet connected to $DRIVER" reg_seen
reg_lines | tail -n 1 | cut -c1-240 | sed 's/^/  kubelet.log: /'
check "plugin is running" plugin_alive
check "the kubelet registered the driver (kubelet log: Connection changed ... connected=true)" reg_seen
check "registration socket $REG_SOCK" test -S "$REG_SOCK"
check "DRA socket under $PLUGIN_DIR" bash -c "compgen -G '$PLUGIN_DIR/*.sock' >/dev/null"
check "one ResourceSlice of $DRIVER for node $NODE_NAME" slice_count_is 1
slice_json >"$OUT/slice.json"
echo "  $ kubectl get resourceslice $(our_slices | head -n1) -o json   ($OUT/slice.json)"
/usr/bin/python3 - "$OUT/slice.json" <<'PY' | sed 's/^/    /'
import json, sys
s = json.load(open(sys.argv[1]))
sp = s["spec"]
print("driver", sp.get("driver"), "node", sp.get("nodeName"), "pool", json.dumps(sp.get("pool")))
print("ownerReferences", json.dumps([(o["kind"], o["name"]) for o in s["metadata"].get("ownerReferences", [])]))
for d in sp.get("devices", []):
    a = {k: list(v.values())[0] for k, v in d.get("attributes", {}).items()}
    print(d["name"], "allowMultipleAllocations=%s" % d.get("allowMultipleAllocations"),
          json.dumps(d.get("capacity", {})), json.dumps(a, sort_keys=True))
PY
# slice_ok  -- the contract's fields (docs/dra.md), one device per fake GPU.
slice_ok() {
  /usr/bin/python3 - "$OUT/slice.json" "$DRIVER" "$NODE_NAME" "$GPU_BYTES" "${UUIDS[@]}" <<'PY'
import json, sys
path, driver, node, total, uuids = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
s = json.load(open(path))
sp = s["spec"]
bad = []
def need(c, what):
    if not c:
        bad.append(what)
need(sp.get("driver") == driver, "spec.driver")
need(sp.get("nodeName") == node, "spec.nodeName")
need(sp.get("pool", {}).get("name") == node, "pool.name = node name")
need(sp.get("pool", {}).get("resourceSliceCount") == 1, "pool.resourceSliceCount 1")
need(any(o.get("kind") == "Node" and o.get("name") == node for o in s["metadata"].get("ownerReferences", [])), "ownerReference to the Node")
devs = {d["name"]: d for d in sp.get("devices", [])}
need(sorted(devs) == sorted("gpu-%d" % i for i in range(len(uuids))), "devices gpu-0..gpu-%d" % (len(uuids) - 1))
def q(v):
    u = {"Gi": 2**30, "Mi": 2**20, "Ki": 2**10}
    for k, m in u.items():
        if v.endswith(k):
            return int(v[:-2]) * m
    return int(v)
for i, u in enumerate(uuids):
    d = devs.get("gpu-%d" % i, {})
    a = d.get("attributes", {})
    need(a.get("uuid", {}).get("string") == u, "gpu-%d uuid" % i)
    need(a.get("type", {}).get("string") == "gpu", "gpu-%d type gpu" % i)
    for k in ("productName", "architecture", "cudaComputeCapability", "driverVersion", "index"):
        need(k in a, "gpu-%d attribute %s" % (i, k))
    mem = d.get("capacity", {}).get("memory", {})
    need(q(str(mem.get("value", "0"))) == total, "gpu-%d capacity memory = %d" % (i, total))
    need(d.get("allowMultipleAllocations") is True, "gpu-%d allowMultipleAllocations" % i)
    need("requestPolicy" in mem, "gpu-%d memory requestPolicy" % i)
if bad:
    print("      missing or wrong: " + ", ".join(bad))
sys.exit(1 if bad else 0)
PY
}
check "ResourceSlice: driver, node, pool, owner Node; gpu-0..3 with uuid, type, productName, ..., memory 16 GiB, allowMultipleAllocations and a requestPolicy" slice_ok

mapfile -t CLASS_FILES < <(grep -rlE '^kind: *DeviceClass' "$REPO_ROOT/deploy" 2>/dev/null | sort)
echo "  DeviceClass files in deploy/: ${CLASS_FILES[*]:-none}"
for f in "${CLASS_FILES[@]}"; do
  printf '  $ kubectl apply -f %s\n' "${f#"$REPO_ROOT"/}"
  kapply "$f"
done
class_ok() { kc get deviceclass "$1" >/dev/null 2>&1; }
for c in "$CLASS_WHOLE" "$CLASS_MEM" "$CLASS_MIG"; do
  check "DeviceClass $c applied from deploy/" class_ok "$c"
done
ext_name() { kc get deviceclass "$CLASS_WHOLE" -o jsonpath='{.spec.extendedResourceName}' 2>/dev/null; }
check "DeviceClass $CLASS_WHOLE: extendedResourceName nvidia.com/gpu (kept by the API server)" test "$(ext_name)" = nvidia.com/gpu

# =============================================================================
section "1b. health: an XID on GPU 3 takes gpu-3 out of the slice; recovery brings it back"
slice_devices() { kc get resourceslice "$(our_slices | head -n1)" -o jsonpath='{.spec.devices[*].name}' 2>/dev/null; }
without_gpu3() { [[ -n $(slice_devices) && " $(slice_devices) " != *" gpu-3 "* ]]; }
with_gpu3() { [[ " $(slice_devices) " == *" gpu-3 "* ]]; }
echo "  \$ echo 'xid 3 48' >> \$FAKE_NVML_CONTROL   (recovery after 2 good probes, 1 s apart)"
t_xid=$EPOCHREALTIME
echo "xid 3 48" >>"$CONTROL"
wait_for 15 "gpu-3 gone from the slice" without_gpu3
t_mod=$(first_event_after "$t_xid" MODIFIED)
[[ -n $t_mod ]] && T_HEALTH_MS=$(ms_between "$t_xid" "$t_mod") &&
  e2e_log "slice rewritten ${T_HEALTH_MS} ms after the XID was written (the fake NVML's event, the plugin, the API server)"
echo "    devices: $(slice_devices)"
check "after XID 48 on GPU 3: the slice offers gpu-0, gpu-1, gpu-2 only" without_gpu3
wait_for 30 "gpu-3 back in the slice" with_gpu3
echo "    devices: $(slice_devices)"
check "after recovery: gpu-3 back in the slice" with_gpu3

# =============================================================================
section "2. shares on one GPU, a claim that does not fit, a shared claim, a whole GPU, nvidia.com/gpu: 1"
# gpu-0: share-a 4 GiB + share-b 8 GiB (then share-c 8 GiB, Pending until
# share-a goes); gpu-1: one 6 GiB claim for two containers; gpu-2: a whole-GPU
# claim; gpu-3: left for the nvidia.com/gpu pod (every other GPU holds a claim
# that a whole-GPU allocation cannot share).
f=$OUT/shares.yaml
{
  claim_yaml share-a "$CLASS_MEM" "${UUIDS[0]}" 4Gi
  claim_yaml share-b "$CLASS_MEM" "${UUIDS[0]}" 8Gi
  claim_yaml duo "$CLASS_MEM" "${UUIDS[1]}" 6Gi
  claim_yaml whole "$CLASS_WHOLE" "${UUIDS[2]}"
  pod_yaml dra-a share-a "${UUIDS[0]}" "$(probe_cmd $((4 * GIB)))"
  pod_yaml dra-b share-b "${UUIDS[0]}" "$(probe_cmd $((8 * GIB)))"
  # Whole GPU: the fake device's 16 GiB, no limit below it.
  pod_yaml dra-whole whole "${UUIDS[2]}" "[gpupool-cudaprobe, init, info, alloc, 15g, alloc, 1g, alloc, 1m, info, hold]"
} >"$f"
# Two containers, one claim: c1 holds 6 GiB - 1 MiB, c2 idles (probed by exec).
pod_yaml dra-duo duo "${UUIDS[1]}" "[gpupool-cudaprobe, init, alloc, \"$((6 * GIB - MIB))\", hold]" >>"$f"
cat >>"$f" <<EOF
  - name: c2
    image: $CUDAPROBE_IMAGE
    imagePullPolicy: IfNotPresent
    resources:
      claims: [{name: gpu}]
    env: [{name: FAKECUDA_DEVICES, value: "${UUIDS[1]}=16g"}]
    command: $IDLE_CMD
EOF
echo "  $ kubectl apply -f $f   (4 claims, 4 pods)"
kapply "$f"
POD_SET=(dra-a dra-b dra-whole dra-duo)
duo_up() { running_and_holding dra-duo c && holding dra-duo c2; }
set_up() { all_holding dra-a dra-b dra-whole && duo_up; }
wait_for 120 "dra-a, dra-b, dra-whole, dra-duo Running, their probes holding" set_up || show_not_running "${POD_SET[@]}"
kshow get pods -l app=gpupool-e2e-dra -o wide
kshow get resourceclaims -o wide
for p in dra-a dra-b dra-whole; do echo "    $p:"; pod_log "$p" | sed 's/^/      /'; done
for c in share-a share-b duo whole; do
  printf '    claim %-8s device %-6s consumed memory %s\n' "$c" "$(claim_device "$c")" "$(claim_consumed "$c")"
done

declare -A SHARE=([dra-a]=$((4 * GIB)) [dra-b]=$((8 * GIB)))
declare -A CLAIM_OF=([dra-a]=share-a [dra-b]=share-b)
for p in dra-a dra-b; do
  c=${CLAIM_OF[$p]}
  check "$p Running on claim $c (device $(claim_device "$c"))" pod_phase_is "$p" Running
  check "claim $c on gpu-0, consumedCapacity.memory = $((SHARE[$p] / GIB)) GiB" \
    test "$(claim_device "$c")/$(bytes "$(claim_consumed "$c")")" = "gpu-0/${SHARE[$p]}"
  check "$p: the probe reads total = $((SHARE[$p] / GIB)) GiB (device 16 GiB), gets it to the byte, CUDA_ERROR_OUT_OF_MEMORY 1 MiB past it" \
    probe_ok "$p" "${SHARE[$p]}"
  check "$p: the container has gpu-0's device node /dev/nvidia0 (and no other GPU's)" devs_are "$p" c nvidia0
  echo "    \$ kubectl exec $p -- sh -c 'env | grep ^CUDA_DEVICE_MEMORY; gpupool-cudaprobe init info'"
  check "$p: a probe started by a POSIX shell (busybox sh) also reads total = $((SHARE[$p] / GIB)) GiB" shell_keeps_limit "$p" "${SHARE[$p]}"
  u=$(claim_uid "$c")
  check "$p: one CDI spec and one region directory for claim $c" one_prepared "$u"
done
check "dra-duo: two containers of one pod Running on one claim" duo_up
duo_devs() { devs_are dra-duo c nvidia1 && devs_are dra-duo c2 nvidia1; }
check "dra-duo: both containers have gpu-1's /dev/nvidia1" duo_devs
echo "    \$ kubectl exec dra-duo -c c2 -- gpupool-cudaprobe init info alloc 1m alloc 1m   (while c holds 6 GiB - 1 MiB)"
check "dra-duo: c2 sees c's use (free = 1 MiB of the 6 GiB claim), gets it, is refused the next: one limit across both containers" \
  second_ok dra-duo c2 $((6 * GIB))
whole_ok() {
  local got want
  got=$(pod_log dra-whole)
  want=$(printf '%s\n' "init CUDA_SUCCESS" "info CUDA_SUCCESS free=$GPU_BYTES total=$GPU_BYTES" \
    "alloc CUDA_SUCCESS" "alloc CUDA_SUCCESS" "alloc CUDA_ERROR_OUT_OF_MEMORY" "info CUDA_SUCCESS free=0 total=$GPU_BYTES" "holding")
  [[ $got == "$want" ]] && return 0
  diff <(echo "$want") <(echo "$got") | sed 's/^/      expected<  >got: /'
  return 1
}
check "dra-whole: whole-GPU claim on gpu-2, the probe gets all 16 GiB, no limit" whole_ok
check "dra-whole: the container has gpu-2's /dev/nvidia2" devs_are dra-whole c nvidia2
no_limit_env() { ! kc exec dra-whole -c c -- env 2>/dev/null | grep -q '^CUDA_DEVICE_MEMORY_LIMIT'; }
check "dra-whole: no CUDA_DEVICE_MEMORY_LIMIT* in its environment" no_limit_env

# A third share that does not fit next to 4 + 8 GiB.
f=$OUT/share-c.yaml
{
  claim_yaml share-c "$CLASS_MEM" "${UUIDS[0]}" 8Gi
  pod_yaml dra-c share-c "${UUIDS[0]}" "$(probe_cmd $((8 * GIB)))"
} >"$f"
echo "  $ kubectl apply -f $f   (8 GiB more on gpu-0: 4 + 8 + 8 > 16)"
kapply "$f"
unschedulable() {
  kc get pod dra-c -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].status}' 2>/dev/null | grep -qx False
}
wait_for 30 "dra-c unschedulable" unschedulable
kshow get pod dra-c -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}'
c_pending() { pod_phase_is dra-c Pending && ! claim_allocated share-c; }
check "dra-c Pending, its claim share-c not allocated (4 + 8 + 8 GiB > 16 GiB)" c_pending
check "dra-c: the scheduler says it cannot allocate all claims" \
  bash -c "$K8S_BIN/kubectl --kubeconfig $KUBECONFIG get pod dra-c -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].message}' | grep -q 'cannot allocate all claims'"

# nvidia.com/gpu: 1 through the DeviceClass's extendedResourceName: only gpu-3 is free.
f=$OUT/ext.yaml
cat >"$f" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: dra-ext
  labels: {app: gpupool-e2e-dra}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
  - name: c
    image: $CUDAPROBE_IMAGE
    imagePullPolicy: IfNotPresent
    resources:
      limits: {nvidia.com/gpu: 1}
    command: $IDLE_CMD
EOF
echo "  $ kubectl apply -f $f   (limits nvidia.com/gpu: 1, no claim)"
kapply "$f"
wait_for 60 "dra-ext Running" running_and_holding dra-ext || show_not_running dra-ext
kshow get pod dra-ext -o jsonpath='{.status.extendedResourceClaimStatus}{"\n"}'
ext_claim() { kc get pod dra-ext -o jsonpath='{.status.extendedResourceClaimStatus.resourceClaimName}' 2>/dev/null; }
kshow logs dra-ext
check "dra-ext (nvidia.com/gpu: 1) Running" pod_phase_is dra-ext Running
ext_on_gpu3() { local c; c=$(ext_claim) && [[ -n $c && $(claim_device "$c") == gpu-3 ]]; }
check "dra-ext: served by a claim the scheduler made ($(ext_claim)), on gpu-3" ext_on_gpu3
check "dra-ext: the container has gpu-3's device node /dev/nvidia3 (and no other GPU's)" devs_are dra-ext c nvidia3

# dra-a deleted: the resourceclaim controller takes it out of share-a's
# reservedFor and deallocates the claim; share-c fits now.
A_UID=$(claim_uid share-a)
echo "  \$ kubectl delete pod dra-a"
kc delete pod dra-a --wait=false 2>&1 | sed 's/^/    /'
wait_for 90 "dra-c Running, its probe holding" running_and_holding dra-c || show_not_running dra-c
pod_log dra-c | sed 's/^/      /'
check "dra-c Running once dra-a is deleted (share-a deallocated)" pod_phase_is dra-c Running
check "dra-c: the probe reads total = 8 GiB, CUDA_ERROR_OUT_OF_MEMORY 1 MiB past it" probe_ok dra-c $((8 * GIB))
check "dra-b still Running beside it" running_and_holding dra-b
wait_for 30 "share-a unprepared (CDI spec, region directory, checkpoint entry gone)" nothing_left_of "$A_UID"
check "share-a: no CDI spec, region directory or checkpoint entry left" nothing_left_of "$A_UID"

# =============================================================================
section "3. plugin killed between prepare and container start, kubelet restarted"
f=$OUT/crash.yaml
{
  claim_yaml crash "$CLASS_MEM" "${UUIDS[1]}" 4Gi
  pod_yaml dra-crash crash "${UUIDS[1]}" "$(probe_cmd $((4 * GIB)))" 1
} >"$f"
mkdir -p "$GATE"
rm -f "$GATE/open"
echo "  $ kubectl apply -f $f   (an init container waits for $GATE/open: the claim is prepared, the container not started)"
kapply "$f"
crash_prepared() { local u; u=$(claim_uid crash) && [[ -n $u && -n $(cdi_specs_of "$u") ]]; }
wait_for 60 "claim crash prepared (its CDI spec written)" crash_prepared
CRASH_UID=$(claim_uid crash)
kshow get pod dra-crash
CIDS_BEFORE=$(for p in dra-b dra-c dra-whole dra-duo dra-ext; do echo "$p $(cid_of "$p")"; done)
e2e_log "SIGKILL to the plugin (pid $PLUGIN_PID)"
stop_plugin KILL
e2e_log "stopping the kubelet (TERM) and starting it again with the same flags"
stop_pid kubelet 20
t_kubelet=$EPOCHREALTIME
start_kubelet
wait_for 60 "kubelet healthz" kubelet_healthy
gone_after() { [[ -n $(first_event_after "$1" DELETED) ]]; }
wait_for 15 "the kubelet deleted the node's ResourceSlice" gone_after "$t_kubelet"
echo "    slice events since the kubelet restart:"
awk -v t="$t_kubelet" '$1 > t' "$SLICE_EVENTS" | sed 's/^/      /'
start_plugin after-crash
wait_for 30 "ResourceSlice published again" slice_count_is 1
t_slice=$(first_event_after "$PLUGIN_T0" ADDED)
[[ -n $t_slice ]] && e2e_log "ResourceSlice visible $(ms_between "$PLUGIN_T0" "$t_slice") ms after the plugin's restart"
touch "$GATE/open"
wait_for 90 "dra-crash Running, its probe holding" running_and_holding dra-crash || show_not_running dra-crash
pod_log dra-crash | sed 's/^/      /'
check "dra-crash Running after the plugin's crash and the kubelet's restart" pod_phase_is dra-crash Running
check "dra-crash: the probe reads total = 4 GiB, CUDA_ERROR_OUT_OF_MEMORY 1 MiB past it" probe_ok dra-crash $((4 * GIB))
check "claim crash prepared once: one CDI spec, one region directory" one_prepared "$CRASH_UID"
prepared_lines() { cat "$E2E_LOGS"/dra-plugin-*.log 2>/dev/null | grep -c "Prepared claim .*($1)"; }
echo "    the plugins' logs: $(prepared_lines "$CRASH_UID") 'Prepared claim ... ($CRASH_UID)' line(s)"
check "claim crash prepared once across the killed and the new plugin (their logs)" test "$(prepared_lines "$CRASH_UID")" = 1
CIDS_AFTER=$(for p in dra-b dra-c dra-whole dra-duo dra-ext; do echo "$p $(cid_of "$p")"; done)
echo "$CIDS_AFTER" | sed 's/^/    /'
check "the other pods: same containers, no restart" test "$CIDS_BEFORE" = "$CIDS_AFTER"
echo "    \$ kubectl exec dra-b -c c -- gpupool-cudaprobe init info alloc 1m alloc 1m   (region kept: the holder's use still counted)"
check "dra-b's region survived (a second process sees free = 1 MiB of 8 GiB)" second_ok dra-b c $((8 * GIB))

# The kubelet restarted under a running plugin: the slice it deletes must come back.
e2e_log "restarting the kubelet under the running plugin"
stop_pid kubelet 20
t_kubelet=$EPOCHREALTIME
start_kubelet
wait_for 60 "kubelet healthz" kubelet_healthy
back_after_delete() {
  local d
  d=$(first_event_after "$t_kubelet" DELETED) && [[ -n $d && -n $(first_event_after "$d" ADDED) ]]
}
wait_for 30 "the kubelet deleted the slice and the plugin published it again" back_after_delete
awk -v t="$t_kubelet" '$1 > t' "$SLICE_EVENTS" | sed 's/^/      /'
t_del=$(first_event_after "$t_kubelet" DELETED)
t_add=${t_del:+$(first_event_after "$t_del" ADDED)}
if [[ -n $t_add ]]; then
  T_REPUB_MS=$(ms_between "$t_del" "$t_add")
  e2e_log "slice back ${T_REPUB_MS} ms after the kubelet deleted it"
fi
check "after a kubelet restart the slice is back within 1 s of its deletion (${T_REPUB_MS:-never} ms)" \
  test -n "${T_REPUB_MS:-}" -a "${T_REPUB_MS:-99999}" -le 1000
check "plugin still running (pid $PLUGIN_PID)" plugin_alive
check "the pods still run the same containers" test "$CIDS_BEFORE" = "$(for p in dra-b dra-c dra-whole dra-duo dra-ext; do echo "$p $(cid_of "$p")"; done)"

# =============================================================================
section "4. everything deleted: nothing left"
mapfile -t ALL_UIDS < <(kc get resourceclaims -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' 2>/dev/null)
echo "  $ kubectl delete pods,resourceclaims -l app=gpupool-e2e-dra   (and dra-ext's claim with its pod)"
kc delete pods -l app=gpupool-e2e-dra --wait=false 2>&1 | sed 's/^/    /'
kc delete resourceclaims -l app=gpupool-e2e-dra --wait=false 2>&1 | sed 's/^/    /'
no_claims() { [[ -z $(kc get resourceclaims -o name 2>/dev/null) && -z $(kc get pods -l app=gpupool-e2e-dra -o name 2>/dev/null) ]]; }
wait_for 60 "every pod and claim gone" no_claims
wait_for 30 "every claim unprepared" nothing_left_of "${ALL_UIDS[@]}"
echo "    \$ ls -A $CDI_ROOT $ISO_DIR/claims; cat $CHECKPOINT"
ls -A "$CDI_ROOT" "$ISO_DIR/claims" 2>&1 | sed 's/^/      /'
cut -c1-400 "$CHECKPOINT" 2>&1 | sed 's/^/      /'
echo
check "no pod or claim left" no_claims
check "no CDI spec, region directory or checkpoint entry of any of the ${#ALL_UIDS[@]} claims left" nothing_left_of "${ALL_UIDS[@]}"
check "no claim CDI spec at all in $CDI_ROOT" bash -c "[[ -z \"$(cdi_claim_specs)\" ]]"
check "$ISO_DIR/claims empty" bash -c "[[ -z \$(ls -A '$ISO_DIR/claims' 2>/dev/null) ]]"
stop_plugin
check "plugin exits 0 on SIGTERM" test "$PLUGIN_RC" = 0
# =============================================================================
section "5. deployed: kubectl apply -k deploy/overlays/dra"
# The overlay as shipped, through a test overlay that adds only what this
# cluster lacks: the fake NVML as the driver root and its inventory, the
# stand-in device nodes, /bin/true as the CDI hooks' program, a state
# directory of the suite's own for the isolation files, and -- no kube-proxy
# here -- host network with the API server's loopback address for the
# in-cluster configuration. RBAC, ServiceAccount, DeviceClasses as shipped
# (the API server authorizes with Node,RBAC).
DEP_DIR=$E2E_STATE/deploy
DEP_SEL=app.kubernetes.io/name=gpupool-dra-plugin
DEP_ISO=$E2E_STATE/isolation-ds
SHIPPED_TAR=${DRA_IMAGE_TAR:-$BUILD/images/gpupool-device-plugin.oci.tar}
SHIPPED_REF=$(sed -n 's/^ *image: *//p' "$REPO_ROOT/deploy/dra/dra-plugin.yaml" | head -n1)
mkdir -p "$DEP_DIR/kustomize" "$DEP_DIR/nvml" "$DEP_ISO"
cp "$INVENTORY" "$DEP_DIR/nvml/inventory.json"
touch "$DEP_DIR/nvml/fake-nvml-control"
dep_images=""
if [[ -f $SHIPPED_TAR ]]; then
  # make image's device plugin image (the 1.20 suite's deploy.sh builds it
  # in `make e2e`): the one the DaemonSet names, with the DRA plugin in it.
  printf '  $ ctr -n k8s.io images import %s\n' "$SHIPPED_TAR"
  ctr_ images import "$SHIPPED_TAR" 2>&1 | sed 's/^/    /'
  ref=$(cat "${SHIPPED_TAR%.oci.tar}.ref" 2>/dev/null)
  if [[ -n $ref && $ref != "$SHIPPED_REF" ]]; then
    dep_images=$'images:\n- name: '"${SHIPPED_REF%:*}"$'\n  newName: '"${ref%:*}"$'\n  newTag: '"${ref##*:}"
  fi
  echo "  image: $SHIPPED_TAR (${ref:-$SHIPPED_REF})"
else
  "$E2E_DIR/images.sh" draplugin "$BUILD" || fail "images.sh draplugin"
  dep_images=$'images:\n- name: '"${SHIPPED_REF%:*}"$'\n  newName: '"${DRAPLUGIN_IMAGE%:*}"$'\n  newTag: '"${DRAPLUGIN_IMAGE##*:}"
  echo "  image: no $SHIPPED_TAR (make image): the stand-in $DRAPLUGIN_IMAGE, the build's gpupool-dra-plugin and libgpupool-cuda at the image's paths"
fi
cat >"$DEP_DIR/kustomize/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$DEP_DIR/kustomize" "$REPO_ROOT/deploy/overlays/dra")
$dep_images
patches:
- path: e2e.yaml
EOF
cat >"$DEP_DIR/kustomize/e2e.yaml" <<EOF
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: gpupool-dra-plugin, namespace: kube-system}
spec:
  template:
    spec:
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      containers:
      - name: gpupool-dra-plugin
        env:
        - {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}
        - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
        - {name: NVIDIA_DRIVER_ROOT, value: $FAKENVML_DIR/root}
        - {name: NVIDIA_DEV_ROOT, value: $DEV_ROOT}
        - {name: NVIDIA_CTK_PATH, value: $NVIDIA_CTK}
        - {name: GP_ISOLATION_DIR, value: $DEP_ISO}
        - {name: FAKE_NVML_INVENTORY, value: /e2e/inventory.json}
        - {name: FAKE_NVML_CONTROL, value: /e2e/fake-nvml-control}
        volumeMounts:
        - {name: fakenvml, mountPath: $FAKENVML_DIR, readOnly: true}
        - {name: devroot, mountPath: $DEV_ROOT, readOnly: true}
        - {name: isolation, mountPath: $DEP_ISO}
        - {name: e2e, mountPath: /e2e}
      volumes:
      - {name: fakenvml, hostPath: {path: $FAKENVML_DIR, type: Directory}}
      - {name: devroot, hostPath: {path: $DEV_ROOT, type: Directory}}
      - {name: isolation, hostPath: {path: $DEP_ISO, type: Directory}}
      - {name: e2e, hostPath: {path: $DEP_DIR/nvml, type: Directory}}
EOF
echo "  $ cat $DEP_DIR/kustomize/kustomization.yaml"
sed 's/^/    /' "$DEP_DIR/kustomize/kustomization.yaml"
printf '  $ kubectl apply -k %s   (resources: deploy/overlays/dra)\n' "$DEP_DIR/kustomize"
kc apply -k "$DEP_DIR/kustomize" 2>&1 | sed 's/^/    /'
check "kubectl apply -k of deploy/overlays/dra (through the test overlay) succeeds" test "${PIPESTATUS[0]}" = 0
ds_pod() {  # the DaemonSet's pod whose container runs (a pod's phase stays Running through a crash loop)
  kc -n kube-system get pods -l "$DEP_SEL" -o jsonpath='{range .items[*]}{.metadata.name} {.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}' 2>/dev/null |
    awk 'NF == 2 {print $1; exit}'
}
t_reg=$(reg_lines | grep -c .)
ds_registered() { (($(reg_lines | grep -c .) > t_reg)); }
wait_for 60 "the DaemonSet's plugin pod Running and registered" ds_registered || {
  kshow -n kube-system get pods -l "$DEP_SEL" -o wide
  kc -n kube-system describe pods -l "$DEP_SEL" 2>&1 | sed -n '/^Events:/,$p' | tail -n 8 | sed 's/^/    /'
}
DS_POD=$(ds_pod)
kshow -n kube-system get pods -l "$DEP_SEL" -o wide
[[ -n $DS_POD ]] && kc -n kube-system logs "$DS_POD" 2>&1 | tail -n 12 | cut -c1-200 | sed 's/^/    log: /'
check "the gpupool-dra-plugin DaemonSet pod's container runs" test -n "$DS_POD"
check "the kubelet connected to the DaemonSet's plugin" ds_registered
if ds_registered; then
wait_for 30 "the node's ResourceSlice (taken over by the DaemonSet's plugin)" slice_count_is 1
check "one ResourceSlice of $DRIVER for $NODE_NAME" slice_count_is 1
f=$OUT/deployed.yaml
{
  claim_yaml dep-share "$CLASS_MEM" "${UUIDS[0]}" 4Gi
  pod_yaml dra-dep dep-share "${UUIDS[0]}" "$(probe_cmd $((4 * GIB)))"
} >"$f"
echo "  $ kubectl apply -f $f   (a 4 GiB share, prepared by the DaemonSet's plugin)"
kapply "$f"
wait_for 60 "dra-dep Running, its probe holding" running_and_holding dra-dep || show_not_running dra-dep
check "dra-dep (4 GiB claim) Running, prepared by the deployed plugin" pod_phase_is dra-dep Running
check "dra-dep: the probe reads total = 4 GiB, CUDA_ERROR_OUT_OF_MEMORY 1 MiB past it" probe_ok dra-dep $((4 * GIB))
no_forbidden() { [[ -n $DS_POD ]] && ! kc -n kube-system logs "$DS_POD" 2>/dev/null | grep -iE ' 403 |forbidden'; }
check "the deployed plugin's log holds no 403 (its RBAC is enough)" no_forbidden
DEP_UID=$(claim_uid dep-share)
kc delete pod dra-dep --wait=false >/dev/null 2>&1
kc delete resourceclaim dep-share --wait=false >/dev/null 2>&1
dep_claim_gone() { [[ -z $(kc get resourceclaims -o name 2>/dev/null) ]] && nothing_left_of "$DEP_UID"; }
wait_for 60 "dep-share unprepared and gone" dep_claim_gone
check "dep-share: no CDI spec, region directory or checkpoint entry left" nothing_left_of "$DEP_UID"
else
  fail "the deployed plugin's slice, a share through it, its RBAC: not checked (the plugin never registered)"
fi
printf '  $ kubectl delete -k %s\n' "$DEP_DIR/kustomize"
kc delete -k "$DEP_DIR/kustomize" --wait=false 2>&1 | sed 's/^/    /'
ds_gone() { [[ -z $(kc -n kube-system get pods -l "$DEP_SEL" -o name 2>/dev/null) ]]; }
wait_for 60 "the DaemonSet's pod gone" ds_gone
check "kubectl delete -k removes the DaemonSet's pod" ds_gone

T_SCEN=$((SECONDS - T_SCEN0))
# finish (trap) tears the cluster down and prints the summary line last.
