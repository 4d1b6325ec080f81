#!/usr/bin/env bash
# shellcheck disable=SC2016
# GPU-memory shares end to end (issue 9 item 6): the real kube-scheduler with
# gpupool-scheduler-extender -> bind -> the real kubelet -> gpupool-device-plugin
# in --resource-mode=gpu-mem (fake NVML with GPUs of different memory:
# 2 x 16 GiB + 2 x 40 GiB by default) -> the container. Sections:
#   11   plugin + extender + scheduler up; the node advertises aliyun.com/gpu-mem,
#        aliyun.com/gpu-count and gpupool.io/gpus
#   11a  20 equal pods at once + two equal multi-container pods + an init
#        container pod + a 2-GPU pod: every container's NVIDIA_VISIBLE_DEVICES
#        and ALIYUN_COM_GPU_MEM_IDX are the GPU(s) of the pod's annotation;
#        no GPU over-committed; the extender's /inspect agrees
#   11b  a pod that does not fit stays Pending with a reason
#   11c  the 20 deleted: their memory is free again (20 new equal pods fit and
#        get exact identity)
#   11d  kubelet restart, 11e plugin restart: running pods keep their
#        containers and GPUs, new equal pods still get exact identity
#   11e2 plugin and kubelet restarted back to back, then 5 pods at once:
#        none fails admission (issue 17)
#   11f  libgpupool-cuda in real containers (isolation.sh): a 4 and an 8 GiB
#        pod read total = their share, are refused 1 MiB past it, a second
#        process shares the count; their directories go with the pods
# Each container prints its environment to its log; the checks compare the
# logs with the annotations the extender wrote (one `kubectl get -o json` and
# one `kubectl logs` per container).
#
# Sourced by run.sh after extender.sh (shares its counters, `section`,
# `check`, teardown and the ext_* helpers). Standalone, on a cluster from
# up.sh (nothing else using it):
#   test/e2e/gpumem.sh BUILD_DIR
# Environment: GPUMEM_INVENTORY (default test/fakenvml/inventories/4gpu-mixed-memory.json),
# GPUMEM_PODS (20), GPUMEM_SIZE (GiB per equal pod, 3), PLUGIN_BIN,
# EXTENDER_BIN, FAKENVML_DIR, GPUMEM_SKIP=1 (skip all of it).

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then   # standalone
  set -uo pipefail
  [[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
  BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "gpumem.sh: build dir $1 not found" >&2; exit 2; }
  . "$(dirname "$0")/lib.sh"
  T_START=$SECONDS
  section() { printf '\n==== %s (%s, +%ss) ====\n' "$*" "$(date +%H:%M:%S)" "$((SECONDS - T_START))"; }
  mkdir -p "$E2E_LOGS"
  # extender.sh's helpers (ext_start, ext_scheduler, ...) without its scenarios.
  # shellcheck source=/dev/null
  . <(sed '/^# --- one phase/,$d' "$E2E_DIR/extender.sh")
  trap 'gm_cleanup; if ((E2E_FAILED > 0)); then printf "Failures:\n"; printf "  - %s\n" "${E2E_FAILURES[@]}"; fi; echo "$E2E_PASSED passed, $E2E_FAILED failed"; exit $((E2E_FAILED > 0))' EXIT
fi

GM_INVENTORY=${GPUMEM_INVENTORY:-$REPO_ROOT/test/fakenvml/inventories/4gpu-mixed-memory.json}
GM_PODS=${GPUMEM_PODS:-20}
GM_SIZE=${GPUMEM_SIZE:-3}
GM_PLUGIN_BIN=${PLUGIN_BIN:-$BUILD/bin/gpupool-device-plugin}
GM_FAKENVML=${FAKENVML_DIR:-}
if [[ -z $GM_FAKENVML ]]; then
  GM_LIB=$(find "$BUILD" -name libnvidia-ml.so.1 -not -path '*/CMakeFiles/*' -not -path '*/v1only/*' -not -path '*/root/*' 2>/dev/null | head -n1)
  GM_FAKENVML=${GM_LIB:+$(dirname "$GM_LIB")}
fi
GM_LABEL=app=gpupool-e2e-gpumem
GM_STATE=$E2E_STATE/gpumem-state
GM_CONTROL=$E2E_STATE/fake-nvml-control-gpumem
GM_OUT=$E2E_LOGS/gpumem
GM_N=0
GM_PLUGIN_PID=
GM_PLUGIN_LOGS=()
GM_UP=0
GM_PY=/usr/bin/python3
GM_METRICS_PORT=9401

# --- the plugin in gpu-mem mode --------------------------------------------------
gm_start_plugin() {  # gm_start_plugin LABEL
  GM_N=$((GM_N + 1))
  GM_PLUGIN_LOG=$E2E_LOGS/plugin-gpumem-$GM_N-$1.log
  GM_PLUGIN_LOGS+=("$GM_PLUGIN_LOG")
  : >"$GM_PLUGIN_LOG"
  # --metrics-addr: section 11f reads it through the API server's node proxy
  # (kubectl gpupool top), as deploy/ runs it.
  local args=(--resource-mode=gpu-mem --kubeconfig "$KUBECONFIG" --state-dir "$GM_STATE" -v 4
    --metrics-addr "0.0.0.0:$GM_METRICS_PORT")
  # --isolation=memory (the default) installs the library from the build;
  # without it the section runs unlimited, and says so.
  if [[ -f $BUILD/lib/libgpupool-cuda.so ]]; then
    args+=(--isolation-library "$BUILD/lib/libgpupool-cuda.so")
  else
    args+=(--isolation=none)
    e2e_log "gpu-mem: $BUILD/lib/libgpupool-cuda.so not built: plugin runs with --isolation=none"
  fi
  printf '  $ NODE_NAME=%s gpupool-device-plugin %s   (inventory %s, log: %s)\n' \
    "$NODE_NAME" "${args[*]}" "$(basename "$GM_INVENTORY")" "$GM_PLUGIN_LOG"
  touch "$GM_CONTROL"
  mkdir -p "$E2E_RUN/pids"
  NODE_NAME=$NODE_NAME LD_LIBRARY_PATH=$GM_FAKENVML FAKE_NVML_INVENTORY=$GM_INVENTORY FAKE_NVML_CONTROL=$GM_CONTROL \
    setsid "$GM_PLUGIN_BIN" "${args[@]}" </dev/null >>"$GM_PLUGIN_LOG" 2>&1 &
  GM_PLUGIN_PID=$!
  echo "$GM_PLUGIN_PID" >"$(pidfile plugin-gpumem)"   # down.sh stops plugin*.pid
}
gm_stop_plugin() {  # sets GM_PLUGIN_RC (137: had to be killed)
  GM_PLUGIN_RC=
  [[ -n $GM_PLUGIN_PID ]] || return 0
  stop_child "$GM_PLUGIN_PID" 15
  GM_PLUGIN_RC=$STOP_RC
  rm -f "$(pidfile plugin-gpumem)"
  e2e_log "gpu-mem plugin pid $GM_PLUGIN_PID exited with status $GM_PLUGIN_RC"
  GM_PLUGIN_PID=
}
gm_plugin_alive() { [[ -n $GM_PLUGIN_PID ]] && alive "$GM_PLUGIN_PID"; }
# kubelet v1.20 manager.go: "Registered endpoint &{... aliyun.com/gpu-mem ...}"
gm_registrations() {
  local n
  n=$(grep -c 'Registered endpoint .* aliyun.com/gpu-mem ' "$E2E_LOGS/kubelet.log" 2>/dev/null)
  echo "${n:-0}"
}
gm_wait_registered() {  # gm_wait_registered N_BEFORE
  local before=$1
  gm_registered_since() { (($(gm_registrations) > before)); }
  wait_for 60 "kubelet: Registered endpoint for aliyun.com/gpu-mem" gm_registered_since
}

# --- what the inventory says ---------------------------------------------------------
mapfile -t GM_GIB < <($GM_PY -c 'import json,sys; [print(g["memory_mib"] // 1024) for g in json.load(open(sys.argv[1]))["gpus"]]' "$GM_INVENTORY" 2>/dev/null)
GM_TOTAL=0
for g in "${GM_GIB[@]}"; do GM_TOTAL=$((GM_TOTAL + g)); done

# The node as the extender needs it: capacity from the kubelet (device
# plugin), gpu-count and gpupool.io/gpus from the plugin's API writer.
gm_node_state() {
  kc get node "$NODE_NAME" -o jsonpath='{.status.allocatable.aliyun\.com/gpu-mem}/{.status.allocatable.aliyun\.com/gpu-count} {.metadata.annotations.gpupool\.io/gpus}' 2>/dev/null
}
gm_node_ok() {
  local st
  st=$(gm_node_state) || return 1
  [[ ${st%% *} == "$GM_TOTAL/${#GM_GIB[@]}" ]] || return 1
  # the annotation: index i has memory GM_GIB[i], healthy
  $GM_PY -c '
import json, sys
gpus = json.loads(sys.argv[1])
want = [int(x) for x in sys.argv[2:]]
ok = sorted(g["index"] for g in gpus) == list(range(len(want))) and all(
    g["memory"] == want[g["index"]] and g.get("healthy", True) for g in gpus)
sys.exit(0 if ok else 1)' "${st#* }" "${GM_GIB[@]}"
}

# --- pods --------------------------------------------------------------------------------
# Every container prints the gpu-mem environment, then READY; app containers
# then sleep. gm_container NAME GIB [GPU_COUNT [init]]
gm_container() {
  local cmd="env | grep -E '^(NVIDIA_VISIBLE_DEVICES|ALIYUN_COM_GPU_MEM)' | sort; echo READY"
  [[ ${4:-} == init ]] || cmd="trap 'exit 0' TERM; $cmd; sleep 3600 & wait \$!"
  cat <<EOF
  - name: $1
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "$cmd"]
    resources:
      limits: {aliyun.com/gpu-mem: "$2"${3:+, aliyun.com/gpu-count: \"$3\"}}
EOF
}
# gm_pod_yaml NAME APPS [INITS [GPU_COUNT]]  -- APPS/INITS: "c1:3,c2:2"
gm_pod_yaml() {
  local c
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {app: gpupool-e2e-gpumem}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
EOF
  if [[ -n ${3:-} ]]; then
    echo "  initContainers:"
    for c in ${3//,/ }; do gm_container "${c%%:*}" "${c#*:}" "" init; done
  fi
  echo "  containers:"
  for c in ${2//,/ }; do gm_container "${c%%:*}" "${c#*:}" "${4:-}"; done
}
# gm_apply YAML_FILE  -- all pods of the file in one `kubectl apply` (at once)
gm_apply() {
  printf '  $ kubectl apply -f %s   (%s pods)\n' "$1" "$(grep -c '^kind: Pod' "$1")"
  kc apply -f "$1" | sed 's/^/    /'
}
gm_phases() { kc get pods -l "$GM_LABEL" -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}' 2>/dev/null; }
# gm_running NAME...  -- every named pod Running (or Failed: then stop waiting)
gm_running() {
  local ph n
  ph=$(gm_phases)
  for n in "$@"; do grep -qx "$n=Running" <<<"$ph" || return 1; done
}
gm_names() { local p=$1 n=$2 i; for ((i = 0; i < n; i++)); do printf '%s%02d ' "$p" "$i"; done; }
gm_show_not_running() {
  local n ph
  ph=$(gm_phases)
  for n in "$@"; do
    grep -qx "$n=Running" <<<"$ph" && continue
    echo "    not Running: $n ($(grep "^$n=" <<<"$ph"))"
    kc get pod "$n" -o jsonpath='    {.status.reason}: {.status.message}{"\n"}' 2>/dev/null
    kc get events --field-selector "involvedObject.name=$n" -o jsonpath='{range .items[*]}      {.reason}: {.message}{"\n"}{end}' 2>/dev/null | tail -n 3
  done
}

# gm_collect NAME...  -- every gpu-mem container's log to $GM_OUT/<pod>.<container>.log,
# waiting for its READY line; the pod objects to $GM_OUT/pods.json.
gm_collect() {
  local p c
  for p in "$@"; do
    for c in $(kc get pod "$p" -o jsonpath='{.spec.initContainers[*].name} {.spec.containers[*].name}' 2>/dev/null); do
      gm_log_ready() { kc logs "$p" -c "$c" >"$GM_OUT/$p.$c.log" 2>&1 && grep -qx READY "$GM_OUT/$p.$c.log"; }
      gm_log_ready || wait_for 30 "$p/$c printed READY" gm_log_ready
    done
  done
  kc get pods -l "$GM_LABEL" -o json >"$GM_OUT/pods.json"
}

# gm_identity NAME...  -- for every gpu-mem container of the named pods (init and
# app): the env it got from Allocate is the pod's annotation, exactly.
gm_identity() {
  $GM_PY - "$GM_OUT" "$GM_INVENTORY" "$@" <<'EOF'
import json, os, sys
out, inv_file, names = sys.argv[1], sys.argv[2], set(sys.argv[3:])
gpus = json.load(open(inv_file))["gpus"]
pods = {p["metadata"]["name"]: p for p in json.load(open(os.path.join(out, "pods.json")))["items"]}
checked = bad = 0
for name in sorted(names):
    p = pods.get(name)
    if p is None:
        print(f"    {name}: gone"); bad += 1; continue
    a = p["metadata"].get("annotations") or {}
    idx, podmem = a.get("ALIYUN_COM_GPU_MEM_IDX", ""), a.get("ALIYUN_COM_GPU_MEM_POD")
    try:
        gi = [int(i) for i in idx.split(",")]
        want_vis = ",".join(gpus[i]["uuid"] for i in gi)
        want_dev = str(gpus[gi[0]]["memory_mib"] // 1024)
    except (ValueError, IndexError):
        gi, want_vis, want_dev = [], None, None
    for kind in ("initContainers", "containers"):
        for c in p["spec"].get(kind) or []:
            limit = ((c.get("resources") or {}).get("limits") or {}).get("aliyun.com/gpu-mem")
            if limit is None:
                continue
            checked += 1
            env = {}
            try:
                with open(os.path.join(out, f"{name}.{c['name']}.log")) as f:
                    for line in f:
                        k, eq, v = line.rstrip("\n").partition("=")
                        if eq:
                            env[k] = v
            except OSError:
                pass
            problems = []
            if not gi:
                problems.append(f"annotation ALIYUN_COM_GPU_MEM_IDX={idx!r} names no GPU of the node")
            for key, want in (("ALIYUN_COM_GPU_MEM_IDX", idx), ("NVIDIA_VISIBLE_DEVICES", want_vis),
                              ("ALIYUN_COM_GPU_MEM_CONTAINER", limit), ("ALIYUN_COM_GPU_MEM_POD", podmem),
                              ("ALIYUN_COM_GPU_MEM_DEV", want_dev)):
                if env.get(key) != want:
                    problems.append(f"{key}={env.get(key)!r}, annotation says {want!r}")
            if a.get("ALIYUN_COM_GPU_MEM_ASSIGNED") != "true":
                problems.append(f"ALIYUN_COM_GPU_MEM_ASSIGNED={a.get('ALIYUN_COM_GPU_MEM_ASSIGNED')!r}")
            short = ",".join(u[4:12] for u in (env.get("NVIDIA_VISIBLE_DEVICES") or "?").split(","))
            print(f"    {name:<12} {kind[:4]}/{c['name']:<3} {limit:>2} GiB  annotation IDX={idx:<4} "
                  f"env IDX={env.get('ALIYUN_COM_GPU_MEM_IDX', '-'):<4} NVIDIA_VISIBLE_DEVICES={short:<18} "
                  + ("ok" if not problems else "MISMATCH: " + "; ".join(problems)))
            bad += bool(problems)
print(f"    {checked} containers checked, {bad} wrong")
sys.exit(0 if checked and not bad else 1)
EOF
}

# GPU usage from the annotations of every bound, non-terminal pod of ours:
# "idx used total" lines. Exit 1 when a GPU is over-committed.
gm_usage() {
  kc get pods -l "$GM_LABEL" -o json | $GM_PY -c '
import json, sys
gib = [int(x) for x in sys.argv[1:]]
use = [0] * len(gib)
for p in json.load(sys.stdin)["items"]:
    a = p["metadata"].get("annotations") or {}
    if not p["spec"].get("nodeName") or p["status"].get("phase") in ("Succeeded", "Failed") or "ALIYUN_COM_GPU_MEM_IDX" not in a:
        continue
    idx = [int(i) for i in a["ALIYUN_COM_GPU_MEM_IDX"].split(",")]
    for i in idx:
        use[i] += -(-int(a["ALIYUN_COM_GPU_MEM_POD"]) // len(idx))
for i, (u, t) in enumerate(zip(use, gib)):
    print(i, u, t)
sys.exit(0 if all(u <= t for u, t in zip(use, gib)) else 1)' "${GM_GIB[@]}"
}
gm_no_overcommit() {
  local i u t rc
  gm_usage >"$GM_OUT/usage.txt"
  rc=$?
  while read -r i u t; do printf '    GPU %s: %2s of %2s GiB used (annotations)\n' "$i" "$u" "$t"; done <"$GM_OUT/usage.txt"
  return "$rc"
}
# The extender's /inspect for this node, "idx used total" lines.
gm_inspect() {
  ext_http "$EXT_URL$EXT_PREFIX/inspect/$NODE_NAME" | $GM_PY -c '
import json, sys
d = json.load(sys.stdin)
nodes = d.get("nodes") or [d]
for n in nodes:
    for dev in n.get("devs", []):
        print(dev["id"], dev.get("usedGPU", 0), dev.get("totalGPU", 0))'
}
gm_inspect_agrees() { [[ "$(gm_usage)" == "$(gm_inspect)" ]]; }
# gm_wait_inspect TAG  -- waits for /inspect to agree; checks it, shows both on failure.
gm_wait_inspect() {
  if ! wait_for 30 "extender /inspect agrees with the annotations" gm_inspect_agrees; then
    echo "    annotations (GPU used total): $(gm_usage | tr '\n' ';')"
    echo "    /inspect    (GPU used total): $(gm_inspect | tr '\n' ';')"
    ext_http "$EXT_URL$EXT_PREFIX/inspect/$NODE_NAME" | cut -c1-3000 | sed 's/^/    /'
  fi
  check "[gpu-mem] the extender's /inspect shows the same usage per GPU as the annotations ($1)" gm_inspect_agrees
}
gm_delete() {  # gm_delete NAME...  (or nothing: every pod of ours)
  if (($# > 0)); then
    kc delete pod "$@" --grace-period=0 --force --wait=false >/dev/null 2>&1
  else
    kc delete pods -l "$GM_LABEL" --grace-period=0 --force --wait=false >/dev/null 2>&1
  fi
  gm_gone() { local n; n=$(kc get pods -l "$GM_LABEL" -o name 2>/dev/null | sed 's#^pod/##'); for p in "$@"; do grep -qx "$p" <<<"$n" && return 1; done; [[ $# -gt 0 || -z $n ]]; }
  wait_for 60 "gpu-mem test pods deleted" gm_gone "$@"
}
# gm_batch TAG PREFIX N  -- N equal pods of GM_SIZE GiB, created at once;
# waits until all run, then checks every container's identity.
gm_batch() {
  local tag=$1 prefix=$2 n=$3 names f t
  names=$(gm_names "$prefix" "$n")
  f=$GM_OUT/$prefix.yaml
  : >"$f"
  for p in $names; do gm_pod_yaml "$p" "c:$GM_SIZE" >>"$f"; done
  t=$SECONDS
  gm_apply "$f"
  # shellcheck disable=SC2086
  wait_for 240 "$n pods of $GM_SIZE GiB Running" gm_running $names || gm_show_not_running $names
  e2e_log "$n pods Running after $((SECONDS - t))s"
  # shellcheck disable=SC2086
  check "[$tag] $n equal pods ($GM_SIZE GiB) created at once all Running" gm_running $names
  # shellcheck disable=SC2086
  gm_collect $names
  # shellcheck disable=SC2086
  check "[$tag] in all $n pods NVIDIA_VISIBLE_DEVICES and ALIYUN_COM_GPU_MEM_IDX are the GPU of the pod's annotation" gm_identity $names
}
# The containers of the running pods: "pod container-id restarts" lines.
gm_containers() {
  kc get pods -l "$GM_LABEL" -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name} {.status.containerStatuses[*].containerID} {.status.containerStatuses[*].restartCount}{"\n"}{end}' 2>/dev/null | sort
}

# What the plugin logs say: Allocates answered, waits, failures, and the
# plugin's own time per Allocate (-v 4), over every gpu-mem plugin run.
gm_plugin_stats() {
  cat "${GM_PLUGIN_LOGS[@]}" 2>/dev/null | $GM_PY -c '
import re, sys
ok = waits = failed = 0
us = []
for line in sys.stdin:
    if re.search(r"Allocate \S+: \d+ units for pod", line): ok += 1
    elif "units: waiting:" in line: waits += 1
    elif re.search(r"Allocate \d+ units of \S+ failed", line): failed += 1
    m = re.search(r"answered in (\d+) us", line)
    if m: us.append(int(m.group(1)))
us.sort()
q = lambda f: us[min(len(us) - 1, int(f * len(us)))] if us else 0
print(f"    plugin: {ok} Allocate calls answered, {waits} waited for certainty, {failed} failed; "
      f"time per Allocate p50 {q(0.5)} us, p99 {q(0.99)} us, max {us[-1] if us else 0} us")'
}

gm_cleanup() {
  ((GM_UP)) || return 0
  GM_UP=0
  gm_delete
  gm_stop_plugin
  ext_stop
  # the plain scheduler of up.sh for the scenarios that follow
  ext_scheduler plain --kubeconfig="$KUBECONFIG" --leader-elect=false --port=0 --bind-address=127.0.0.1
}

# =====================================================================================
GM_T0=$SECONDS
gm_ready=1
if [[ ${GPUMEM_SKIP:-0} == 1 ]]; then
  gm_ready=0
else
  section "11. gpu-mem end to end: kube-scheduler -> extender -> kubelet -> plugin (gpu-mem) -> container"
  for f in "$GM_PLUGIN_BIN" "$EXTENDER_BIN" "$GM_INVENTORY" "$GM_FAKENVML/libnvidia-ml.so.1" "$REPO_ROOT/deploy/scheduler/scheduler-config-v1beta1.yaml"; do
    [[ -e $f ]] || { fail "gpu-mem e2e: $f missing"; gm_ready=0; }
  done
  if ((gm_ready)) && ! "$GM_PLUGIN_BIN" --help 2>&1 | grep -q -- '--resource-mode'; then
    fail "gpu-mem e2e: $GM_PLUGIN_BIN has no --resource-mode"
    gm_ready=0
  fi
fi
if ((gm_ready)); then
  GM_UP=1
  mkdir -p "$GM_OUT"
  rm -rf "$GM_STATE"
  gm_delete   # leftovers of an interrupted standalone run
  echo "  inventory $GM_INVENTORY: ${#GM_GIB[@]} GPUs of ${GM_GIB[*]} GiB (total $GM_TOTAL)"
  regs=$(gm_registrations)
  gm_start_plugin gpu-mem
  gm_wait_registered "$regs"
  check "[gpu-mem] the kubelet registered the plugin for aliyun.com/gpu-mem" test "$(gm_registrations)" -gt "$regs"
  wait_for 60 "node: allocatable aliyun.com/gpu-mem $GM_TOTAL, gpu-count ${#GM_GIB[@]}, gpupool.io/gpus" gm_node_ok
  kshow get node "$NODE_NAME" -o jsonpath='{"allocatable: "}{.status.allocatable}{"\ngpupool.io/gpus: "}{.metadata.annotations.gpupool\.io/gpus}{"\n"}'
  check "[gpu-mem] node allocatable aliyun.com/gpu-mem=$GM_TOTAL, gpu-count=${#GM_GIB[@]}; gpupool.io/gpus lists ${GM_GIB[*]} GiB, healthy" gm_node_ok

  ext_start gpumem
  ext_localize "$REPO_ROOT/deploy/scheduler/scheduler-config-v1beta1.yaml" "$E2E_STATE/scheduler-config-gpumem.yaml"
  ext_scheduler gpumem --config="$E2E_STATE/scheduler-config-gpumem.yaml"
  wait_for 30 "kube-scheduler logs: Creating extender with config" ext_sched_has_extender
  check "[gpu-mem] kube-scheduler runs with the extender (shipped v1beta1 config)" ext_sched_has_extender
  gm_inspect_total() { [[ "$(gm_inspect | awk '{print $3}' | tr '\n' ' ')" == "${GM_GIB[*]} " ]]; }
  wait_for 30 "extender /inspect shows GPUs of ${GM_GIB[*]} GiB" gm_inspect_total
  check "[gpu-mem] the extender sees $NODE_NAME's GPUs as ${GM_GIB[*]} GiB (/inspect)" gm_inspect_total

  # ===================================================================================
  section "11a. $GM_PODS equal pods at once + multi-container, init-container and 2-GPU pods"
  f=$GM_OUT/mixed.yaml
  {
    gm_pod_yaml gm-mc-a "c1:2,c2:3"           # two equal multi-container pods:
    gm_pod_yaml gm-mc-b "c1:2,c2:3"           # one Allocate per container each
    gm_pod_yaml gm-init "c1:2" "i1:2"         # init container first, then the app
    gm_pod_yaml gm-multi "c1:8" "" 2          # 4 GiB on each of 2 GPUs
  } >"$f"
  GM_MIXED="gm-mc-a gm-mc-b gm-init gm-multi"
  names=$(gm_names gm-eq- "$GM_PODS")
  for p in $names; do gm_pod_yaml "$p" "c:$GM_SIZE" >>"$f"; done
  t=$SECONDS
  gm_apply "$f"
  # shellcheck disable=SC2086
  wait_for 240 "$GM_PODS + 4 pods Running" gm_running $names $GM_MIXED || gm_show_not_running $names $GM_MIXED
  e2e_log "$((GM_PODS + 4)) pods Running after $((SECONDS - t))s"
  kshow get pods -l "$GM_LABEL" -o wide
  # shellcheck disable=SC2086
  check "[gpu-mem] $GM_PODS equal pods ($GM_SIZE GiB) created at once all Running" gm_running $names
  # shellcheck disable=SC2086
  check "[gpu-mem] multi-container, init-container and 2-GPU pods Running" gm_running $GM_MIXED
  # shellcheck disable=SC2086
  gm_collect $names $GM_MIXED
  # shellcheck disable=SC2086
  check "[gpu-mem] in every container of the $GM_PODS equal pods: env = the GPU of the pod's annotation" gm_identity $names
  # shellcheck disable=SC2086
  check "[gpu-mem] in every container (init too) of the multi-container/init/2-GPU pods: env = annotation" gm_identity $GM_MIXED
  gm_two_gpus() { [[ $(kc get pod gm-multi -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_IDX}') =~ ^[0-9]+,[0-9]+$ ]]; }
  check "[gpu-mem] gm-multi (gpu-count 2) got two GPUs ($(kc get pod gm-multi -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_IDX}'))" gm_two_gpus
  check "[gpu-mem] no GPU over-committed (sum of annotations <= GPU memory)" gm_no_overcommit
  gm_wait_inspect "first batch"

  # ===================================================================================
  section "11b. a pod that does not fit stays Pending with a reason"
  # One GiB more than the largest free GPU: the node as a whole may still have
  # room (then only the extender refuses), no single GPU has.
  gm_usage >"$GM_OUT/usage.txt"
  need=$(awk '{f = $3 - $2; if (f > m) m = f} END {print m + 1}' "$GM_OUT/usage.txt")
  free=$(awk '{f += $3 - $2} END {print f}' "$GM_OUT/usage.txt")
  echo "    free per GPU: $(awk '{printf "%s ", $3 - $2}' "$GM_OUT/usage.txt")(total $free): the pod asks for $need"
  gm_pod_yaml gm-nofit "c:$need" >"$GM_OUT/nofit.yaml"
  gm_apply "$GM_OUT/nofit.yaml"
  wait_for 60 "gm-nofit Unschedulable" ext_unschedulable gm-nofit
  gm_nofit_event() { ext_events gm-nofit | grep . >/dev/null; }
  wait_for 30 "gm-nofit has a FailedScheduling event" gm_nofit_event
  kshow get events --field-selector involvedObject.name=gm-nofit
  check "[gpu-mem] gm-nofit ($need GiB) stays Pending, unbound" ext_pending gm-nofit
  if ((need <= free)); then
    reason=$(ext_reason gm-nofit "$NODE_NAME")
    echo "    extender's reason for $NODE_NAME: $reason"
    check "[gpu-mem] gm-nofit's FailedScheduling event carries the extender's reason" ext_event_has gm-nofit "${reason:-<none>}"
  else
    check "[gpu-mem] gm-nofit's FailedScheduling event says Insufficient aliyun.com/gpu-mem" ext_event_has gm-nofit "Insufficient aliyun.com/gpu-mem"
  fi
  gm_delete gm-nofit

  # ===================================================================================
  section "11c. the $GM_PODS pods deleted: their memory is free again"
  # shellcheck disable=SC2086
  gm_delete $names
  gm_wait_inspect "the $GM_PODS pods deleted"
  gm_no_overcommit
  echo "    before the deletion $free GiB were free; the new pods need $((GM_PODS * GM_SIZE))"
  gm_batch gpu-mem gm-new- "$GM_PODS"
  check "[gpu-mem] no GPU over-committed after the second batch" gm_no_overcommit
  gm_wait_inspect "second batch"

  # ===================================================================================
  section "11d. kubelet restart: running pods keep their GPUs, new pods get exact identity"
  # make room for the pods after the restarts
  # shellcheck disable=SC2046
  gm_delete $(gm_names gm-new- $((GM_PODS / 2)))
  before=$(gm_containers)
  echo "    $(grep -c . <<<"$before") running pods before (pod container-ids restarts):"
  head -n 4 <<<"$before" | cut -c1-160 | sed 's/^/      /'
  regs=$(gm_registrations)
  e2e_log "stopping the kubelet (TERM) and starting it again with the same flags"
  stop_pid kubelet 20
  start_kubelet
  wait_for 60 "kubelet healthz" kubelet_healthy
  gm_wait_registered "$regs"
  check "[gpu-mem] the restarted kubelet registered the plugin again (same process)" gm_plugin_alive
  wait_for 60 "node: allocatable aliyun.com/gpu-mem $GM_TOTAL again" gm_node_ok
  check "[gpu-mem] after kubelet restart: allocatable aliyun.com/gpu-mem=$GM_TOTAL" gm_node_ok
  after=$(gm_containers)
  check "[gpu-mem] every running pod keeps its containers, no restarts" test "$before" = "$after"
  kshow exec gm-mc-a -c c2 -- sh -c 'echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES ALIYUN_COM_GPU_MEM_IDX=$ALIYUN_COM_GPU_MEM_IDX'
  gm_exec_same() {
    [[ "$(kc exec gm-mc-a -c c2 -- sh -c 'echo $ALIYUN_COM_GPU_MEM_IDX' 2>/dev/null)" == "$(kc get pod gm-mc-a -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_IDX}')" ]]
  }
  check "[gpu-mem] gm-mc-a still sees the GPU of its annotation (kubectl exec)" gm_exec_same
  gm_batch gpu-mem gm-ak- 5
  check "[gpu-mem] no GPU over-committed after the kubelet restart" gm_no_overcommit
  gm_wait_inspect "after the kubelet restart"

  # ===================================================================================
  section "11e. plugin restart: nothing lost"
  before=$(gm_containers)
  gm_stop_plugin
  check "[gpu-mem] plugin exits 0 on SIGTERM" test "$GM_PLUGIN_RC" = 0
  regs=$(gm_registrations)
  gm_start_plugin gpu-mem-again
  gm_wait_registered "$regs"
  check "[gpu-mem] the restarted plugin registered again" test "$(gm_registrations)" -gt "$regs"
  wait_for 60 "node: allocatable aliyun.com/gpu-mem $GM_TOTAL again" gm_node_ok
  after=$(gm_containers)
  check "[gpu-mem] every running pod keeps its containers, no restarts" test "$before" = "$after"
  gm_batch gpu-mem gm-ap- 5
  check "[gpu-mem] no GPU over-committed after the plugin restart" gm_no_overcommit
  # shellcheck disable=SC2046
  gm_collect $(kc get pods -l "$GM_LABEL" -o name | sed 's#^pod/##')
  # shellcheck disable=SC2046
  check "[gpu-mem] at the end, every container of every pod still matches its annotation" \
    gm_identity $(kc get pods -l "$GM_LABEL" -o name | sed 's#^pod/##')
  gm_wait_inspect "after the plugin restart"

  # ===================================================================================
  # Issue 17: plugin restart, kubelet restart right after it, pods at once:
  # a pod admitted before the plugin registered again fails for good.
  section "11e2. plugin and kubelet restarted back to back, then 5 pods at once: none fails admission"
  gm_stop_plugin
  check "[gpu-mem] plugin exits 0 on SIGTERM" test "$GM_PLUGIN_RC" = 0
  gm_start_plugin gpu-mem-b2b
  e2e_log "stopping the kubelet (TERM) right after the plugin start, and starting it again"
  stop_pid kubelet 20
  start_kubelet
  wait_for 60 "kubelet healthz" kubelet_healthy
  gm_batch gpu-mem gm-b2b- 5
  gm_no_admission_error() {
    ! kc get pods -l "$GM_LABEL" -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.reason} {.status.message}{"\n"}{end}' |
      grep -E 'Failed|UnexpectedAdmissionError' | sed 's/^/    /' | grep .
  }
  check "[gpu-mem] no pod failed admission (UnexpectedAdmissionError)" gm_no_admission_error
  check "[gpu-mem] no GPU over-committed after the back-to-back restarts" gm_no_overcommit
  # shellcheck disable=SC2046
  gm_delete $(gm_names gm-b2b- 5)
  gm_wait_inspect "after the back-to-back restarts"
  # kubectl gpupool reads the same pool back from the API server.
  gm_cli_lists() {
    local out
    out=$(KUBECONFIG=$KUBECONFIG timeout 60 "$BUILD/bin/kubectl-gpupool" inspect localhost -d 2>&1)
    local rc=$?
    printf '%s\n' "$out" | head -n 40 | sed 's/^/    /'
    ((rc == 0)) && [[ -n ${1:-} && $out == *"$1"* ]]
  }
  echo "  \$ kubectl gpupool inspect localhost -d"
  # shellcheck disable=SC2046
  check "[gpu-mem] kubectl gpupool inspect -d shows the node's gpu-mem pods" \
    gm_cli_lists $(kc get pods -l "$GM_LABEL" -o name | sed -n '1s#^pod/##p')

  # ===================================================================================
  # 11f. the memory limits inside the containers (issue 15): sourced, shares
  # the gm_* helpers, the plugin and the counters.
  # shellcheck source=test/e2e/isolation.sh
  . "$E2E_DIR/isolation.sh"

  section "11g. gpu-mem: clean up"
  gm_plugin_stats
  gm_no_failed_allocate() { ! grep -h 'Allocate [0-9]* units of .* failed' "${GM_PLUGIN_LOGS[@]}"; }
  check "[gpu-mem] the plugin never failed an Allocate" gm_no_failed_allocate
  # The kubelet's checkpoint survives its restart: no container is allocated twice.
  gm_no_repeat() { ! grep -h 'repeated by the kubelet' "${GM_PLUGIN_LOGS[@]}"; }
  check "[gpu-mem] no container was allocated twice (the kubelet restart re-used its checkpoint)" gm_no_repeat
  gm_cleanup
  check "[gpu-mem] plugin exits 0 on SIGTERM" test "$GM_PLUGIN_RC" = 0
fi
T_GPUMEM=$((SECONDS - GM_T0))
e2e_log "gpu-mem scenarios took ${T_GPUMEM}s"
