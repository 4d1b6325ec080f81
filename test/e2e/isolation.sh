# shellcheck shell=bash disable=SC2016
# GPU-memory limits enforced inside real containers (issue 15 item 5):
# section 11f of the gpu-mem scenarios. The plugin of gpumem.sh runs with
# --isolation=memory and the built libgpupool-cuda.so, so every gpu-mem
# container gets the library as /etc/ld.so.preload, its limit in
# CUDA_DEVICE_MEMORY_LIMIT_0 and its region directory at /run/gpupool-cuda.
#
#   - image $CUDAPROBE_IMAGE (images.sh cudaprobe: glibc, the fake
#     libcuda.so.1 on the loader's default path, gpupool-cudaprobe, busybox)
#   - every other gpu-mem pod deleted; every GPU but one of 16 GiB taken by a
#     busybox filler of its size (the default `gpupool` policy would otherwise
#     spread the two pods over both 16 GiB GPUs); then gi-a (4 GiB) and gi-b
#     (8 GiB), created at once, share the one left. Each runs the probe
#     against a fake 16 GiB device with its GPU's UUID: total = its share, the
#     share allocated to the byte, 1 MiB more is CUDA_ERROR_OUT_OF_MEMORY,
#     1 MiB freed, then it holds share - 1 MiB
#   - /etc/ld.so.preload names the library, the holding probe maps it, the
#     region file region.<uuid> is in the pod's host directory
#   - a second probe (kubectl exec) in the same container sees free = 1 MiB
#     (share - held: one region for the container), gets that MiB and is
#     refused the next
#   - the pods (fillers too) deleted gracefully: the plugin's per-container directories,
#     these and those of every earlier gpu-mem pod, are gone within 30 s
#
# Sourced by gpumem.sh after 11e (its plugin, extender, gm_* helpers and
# counters); runs standalone only as part of gpumem.sh.

GI_ISO=$GM_STATE/isolation
GI_LIB_PATH=/usr/local/gpupool/libgpupool-cuda.so
GI_MIB=1048576
GI_GIB_BYTES=1073741824
GI_PODS=(gi-a gi-b)
# What NVML says inside the containers (11f, issue 26 item 3): the fake NVML's
# inventory and control file there, a host directory every gi pod mounts.
GI_NVML_DIR=$E2E_STATE/gi-nvml
declare -A GI_UNITS=([gi-a]=4 [gi-b]=8)
# Compute shares booked beside the memory (gpupool.io/gpu-cores, issue 25):
# 30 + 70 on the one GPU both pods share.
declare -A GI_CORES=([gi-a]=30 [gi-b]=70)

# gi_pod_yaml NAME UNITS  -- one container that prints what it was given, then
# runs the probe and holds its memory until TERM.
gi_pod_yaml() {
  local share=$(($2 * GI_GIB_BYTES))
  sed -e "s/@NAME@/$1/" -e "s/@UNITS@/$2/" -e "s/@CORES@/$3/" -e "s/@IMAGE@/${CUDAPROBE_IMAGE//\//\\/}/" \
    -e "s/@NODE@/$NODE_NAME/" -e "s/@FIRST@/$((share - GI_MIB))/" -e "s#@NVMLDIR@#$GI_NVML_DIR#" <<'EOF'
---
apiVersion: v1
kind: Pod
metadata:
  name: @NAME@
  labels: {app: gpupool-e2e-gpumem}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: @NODE@}
  containers:
  - name: c
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    resources:
      limits: {aliyun.com/gpu-mem: "@UNITS@", gpupool.io/gpu-cores: "@CORES@"}
    command:
    - sh
    - -c
    - |
      trap 'exit 0' TERM
      echo "UUID=$NVIDIA_VISIBLE_DEVICES"
      echo "LIMIT=$CUDA_DEVICE_MEMORY_LIMIT_0"
      echo "CACHE=$CUDA_DEVICE_MEMORY_SHARED_CACHE"
      echo "SM=$CUDA_DEVICE_SM_LIMIT"
      echo PROBE
      FAKECUDA_DEVICES="$NVIDIA_VISIBLE_DEVICES=16g" gpupool-cudaprobe init info total alloc @FIRST@ alloc 1m alloc 1m free info hold 2>&1 &
      wait $!
    volumeMounts:
    - {name: nvml, mountPath: /e2e-nvml, readOnly: true}
  volumes:
  - name: nvml
    hostPath: {path: @NVMLDIR@, type: Directory}
EOF
}

gi_log() { kc logs "$1" 2>/dev/null; }
gi_holding() { gi_log "$1" | grep -qx holding; }
gi_env() { gi_log "$1" | sed -n "s/^$2=//p" | head -n1; }
gi_uid() { kc get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
# The probe's lines in the container log must be exactly these.
gi_expected() {
  local s=$(($1 * GI_GIB_BYTES))
  printf '%s\n' "init CUDA_SUCCESS" "info CUDA_SUCCESS free=$s total=$s" "total CUDA_SUCCESS bytes=$s" \
    "alloc CUDA_SUCCESS" "alloc CUDA_SUCCESS" "alloc CUDA_ERROR_OUT_OF_MEMORY" "free CUDA_SUCCESS" \
    "info CUDA_SUCCESS free=$GI_MIB total=$s" "holding"
}
gi_probe_ok() {
  local got
  got=$(gi_log "$1" | sed '1,/^PROBE$/d')
  [[ $got == "$(gi_expected "$2")" ]] && return 0
  diff <(gi_expected "$2") <(printf '%s\n' "$got") | sed 's/^/      expected<  >got: /'
  return 1
}
gi_env_ok() {  # the plugin's variables, as the container saw them
  [[ $(gi_env "$1" LIMIT) == $(($2 * GI_GIB_BYTES)) && $(gi_env "$1" CACHE) == /run/gpupool-cuda/region ]]
}
# /etc/ld.so.preload names the library, and the holding probe has it mapped.
gi_preload_ok() {
  local out
  out=$(kc exec "$1" -- sh -c 'cat /etc/ld.so.preload; grep -c libgpupool-cuda.so /proc/$(pidof gpupool-cudaprobe)/maps' 2>&1)
  printf '%s\n' "$out" | sed 's/^/      /'
  [[ $(sed -n 1p <<<"$out") == "$GI_LIB_PATH" && $(sed -n 2p <<<"$out") -ge 1 ]]
}
gi_region_ok() {  # gi_region_ok POD  -- its host directory holds region.<its GPU's uuid>
  local f
  f=$GI_ISO/containers/$(gi_uid "$1")_0/region.$(gi_env "$1" UUID)
  ls -l "$f" 2>&1 | sed 's/^/      /'
  [[ -f $f && -s $f ]]
}
# A second process in the same container: sees the first one's use.
gi_second_ok() {
  local s=$(($2 * GI_GIB_BYTES)) out want
  out=$(kc exec "$1" -- sh -c 'FAKECUDA_DEVICES="$NVIDIA_VISIBLE_DEVICES=16g" gpupool-cudaprobe init info alloc 1m alloc 1m 2>&1' 2>&1)
  printf '%s\n' "$out" | sed 's/^/      /'
  want=$(printf '%s\n' "init CUDA_SUCCESS" "info CUDA_SUCCESS free=$GI_MIB total=$s" "alloc CUDA_SUCCESS" "alloc CUDA_ERROR_OUT_OF_MEMORY")
  [[ $out == "$want" ]]
}
gi_dirs_gone() {  # gi_dirs_gone UID...  -- no containers/<uid>_* left
  local u
  for u in "$@"; do compgen -G "$GI_ISO/containers/${u}_*" >/dev/null && return 1; done
  return 0
}
gi_containers_empty() { [[ -d $GI_ISO/containers && -z $(ls -A "$GI_ISO/containers") ]]; }

# =====================================================================================
section "11f. GPU-memory limits inside the containers: libgpupool-cuda over the fake libcuda"
gi_ready=1
for f in "$BUILD/lib/libgpupool-cuda.so" "$BUILD/test/cuda/gpupool-cudaprobe" "$BUILD/test/fakecuda/libcuda.so.1" \
  "$BUILD/test/fakenvml/libnvidia-ml.so.1"; do
  [[ -f $f ]] || { fail "[isolation] $f not built"; gi_ready=0; }
done
if ((gi_ready)) && ! "$E2E_DIR/images.sh" cudaprobe "$BUILD"; then
  fail "[isolation] images.sh cudaprobe (the glibc probe image)"
  gi_ready=0
fi
if ((gi_ready)); then
  GI_T0=$SECONDS
  gm_delete   # every earlier gpu-mem pod: the GPUs are empty
  gi_inspect_empty() { ! gm_inspect | awk '$2 != 0 {bad = 1} END {exit !bad}'; }
  wait_for 30 "the extender's /inspect shows every GPU empty" gi_inspect_empty
  # Both probe pods on one GPU: every other GPU is filled first by a busybox
  # pod of its size, largest first, each bound before the next (a 40 GiB pod
  # fits only a 40 GiB GPU, so the last 16 GiB filler cannot take the target's
  # place on a larger one).
  gi_target=-1
  for i in "${!GM_GIB[@]}"; do
    ((GM_GIB[i] >= 12)) && ((gi_target < 0 || GM_GIB[i] < GM_GIB[gi_target])) && gi_target=$i
  done
  GI_FILL=()
  while read -r i; do
    if [[ -z $i ]] || ((gi_target < 0 || i == gi_target)); then continue; fi
    p=gi-fill-$i
    GI_FILL+=("$p")
    gm_pod_yaml "$p" "c:${GM_GIB[i]}" >"$GM_OUT/$p.yaml"
    gm_apply "$GM_OUT/$p.yaml"
    gi_bound() { [[ -n $(kc get pod "$1" -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_IDX}' 2>/dev/null) ]]; }
    wait_for 30 "$p (${GM_GIB[i]} GiB) bound" gi_bound "$p"
    echo "    $p: GPU $(kc get pod "$p" -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_IDX}' 2>/dev/null)"
  done < <(for i in "${!GM_GIB[@]}"; do echo "$i ${GM_GIB[i]}"; done | sort -k2,2nr -k1,1n | cut -d' ' -f1)
  rm -rf "$GI_NVML_DIR"
  mkdir -p "$GI_NVML_DIR"
  : >"$GI_NVML_DIR/control"
  f=$GM_OUT/isolation.yaml
  for p in "${GI_PODS[@]}"; do gi_pod_yaml "$p" "${GI_UNITS[$p]}" "${GI_CORES[$p]}"; done >"$f"
  gm_apply "$f"
  gi_all_holding() { local p; gm_running "${GI_PODS[@]}" || return 1; for p in "${GI_PODS[@]}"; do gi_holding "$p" || return 1; done; }
  wait_for 90 "gi-a and gi-b Running, their probes holding" gi_all_holding || gm_show_not_running "${GI_PODS[@]}"
  kshow get pods "${GI_PODS[@]}" -o wide
  declare -A GI_IDX=() GI_UID=()
  for p in "${GI_PODS[@]}"; do
    GI_IDX[$p]=$(kc get pod "$p" -o jsonpath='{.metadata.annotations.ALIYUN_COM_GPU_MEM_IDX}' 2>/dev/null)
    GI_UID[$p]=$(gi_uid "$p")
    echo "    $p (${GI_UNITS[$p]} GiB): GPU ${GI_IDX[$p]:-?} (${GM_GIB[${GI_IDX[$p]:-0}]:-?} GiB), $(gi_env "$p" UUID), container log:"
    gi_log "$p" | sed 's/^/      /'
  done
  gi_one_gpu() { [[ -n ${GI_IDX[gi-a]} && ${GI_IDX[gi-a]} == "${GI_IDX[gi-b]}" ]]; }
  check "[isolation] gi-a (4 GiB) and gi-b (8 GiB) share one GPU (${GI_IDX[gi-a]:-?}, ${GI_IDX[gi-b]:-?}), the only one the fillers left free" gi_one_gpu
  # Used beside booked, as an operator reads it: kubectl gpupool top through
  # the real API server's node proxy to the agent's /metrics (issue 26) --
  # before the second processes below, whose 1 MiB stays charged to a slot
  # of a dead process until the next charge in that container reaps it.
  gi_top_ok() {  # gi_top_ok POD UNITS  -- booked = limit = share, used = share - 1 MiB
    local s=$(($2 * GI_GIB_BYTES))
    KUBECONFIG=$KUBECONFIG timeout 60 "$BUILD/bin/kubectl-gpupool" top pods -A -o json 2>"$GM_OUT/top.err" |
      "$GM_PY" -c '
import json, sys
name, share = sys.argv[1], int(sys.argv[2])
rows = [p for p in json.load(sys.stdin)["pods"] if p["name"] == name]
print("      " + json.dumps(rows))
sys.exit(not (len(rows) == 1 and rows[0]["bookedBytes"] == share and rows[0]["limitBytes"] == share
              and rows[0]["usedBytes"] == share - (1 << 20) and rows[0]["nodeMetrics"] is True))' "$1" "$s"
  }
  echo "    \$ kubectl gpupool top pods -A -o json"
  for p in "${GI_PODS[@]}"; do
    wait_for 30 "$p in kubectl gpupool top with its use" gi_top_ok "$p" "${GI_UNITS[$p]}"
    check "[isolation] kubectl gpupool top: $p booked = limit = ${GI_UNITS[$p]} GiB, used = the probe's share - 1 MiB (the agent's region, through the node proxy)" gi_top_ok "$p" "${GI_UNITS[$p]}"
  done
  KUBECONFIG=$KUBECONFIG timeout 60 "$BUILD/bin/kubectl-gpupool" top gpus 2>&1 | sed 's/^/      /'

  # NVML inside the container (issue 26 item 3), on a real runtime's pid
  # namespaces: the driver (the fake NVML) lists both probes by their host
  # pids, with 41 % and 77 % SM; in gi-a, nvmlDeviceGetComputeRunningProcesses
  # lists only gi-a's probe, by the pid gi-a sees, with what its region holds,
  # and nvmlDeviceGetProcessUtilization only gi-a's sample, renamed through
  # the pid map the agent writes into gi-a's region directory.
  gi_host_pid() {  # gi_host_pid POD  -- the holding probe's pid on the host
    local pid
    for pid in $(pgrep -f '^gpupool-cudaprobe init info total'); do
      grep -q "pod${GI_UID[$1]}" "/proc/$pid/cgroup" 2>/dev/null && { echo "$pid"; return 0; }
    done
    return 1
  }
  declare -A GI_HOST=()
  for p in "${GI_PODS[@]}"; do GI_HOST[$p]=$(gi_host_pid "$p"); done
  gi_uuid=$(gi_env gi-a UUID)
  gi_nvml_lines() {
    printf 'process %s %s 4095 41 3\nprocess %s %s 8191 77 5\n' "$gi_uuid" "${GI_HOST[gi-a]}" "$gi_uuid" "${GI_HOST[gi-b]}"
  }
  printf '{"gpus": [{"uuid": "%s", "memory_mib": 16384}]}\n' "$gi_uuid" >"$GI_NVML_DIR/inventory.json"
  gi_nvml_lines >>"$GI_NVML_DIR/control"
  gi_nvml_lines >>"$GM_CONTROL"   # the agent's NVML: the same two processes
  echo "    host pids: gi-a ${GI_HOST[gi-a]:-?}, gi-b ${GI_HOST[gi-b]:-?}; the driver lists both on $gi_uuid"
  gi_map=$GI_ISO/containers/${GI_UID[gi-a]}_0/pids
  gi_inner() { [[ -f $gi_map ]] && awk -v h="${GI_HOST[gi-a]}" '$1 == h {print $2}' "$gi_map"; }
  gi_mapped() { [[ -n ${GI_HOST[gi-a]} && -n $(gi_inner) ]]; }
  wait_for 15 "the agent's pid map for gi-a names its probe" gi_mapped
  sed 's/^/      pids: /' "$gi_map" 2>/dev/null
  gi_nvml() {  # gi_nvml POD CMD  -- the probe's NVML query inside POD's container
    kc exec "$1" -- env LD_LIBRARY_PATH=/usr/local/fakenvml FAKE_NVML_INVENTORY=/e2e-nvml/inventory.json \
      FAKE_NVML_CONTROL=/e2e-nvml/control sh -c "FAKECUDA_DEVICES=\$NVIDIA_VISIBLE_DEVICES=16g gpupool-cudaprobe init $2" 2>&1 |
      grep "^$2 "
  }
  gi_procs_ok() {
    local out
    out=$(gi_nvml gi-a nvml-procs)
    echo "      gi-a\$ nvidia-smi's process list: $out"
    [[ $out == *" n=1 "* && $out == *" pids=$(gi_inner) "* && $out == *" used=$((4 * GI_GIB_BYTES - GI_MIB)) "* ]]
  }
  check "[isolation] inside gi-a, nvmlDeviceGetComputeRunningProcesses lists its own probe only, by its pid there ($(gi_inner); host ${GI_HOST[gi-a]:-?}), holding 4 GiB - 1 MiB -- not gi-b's on the same GPU" gi_procs_ok
  gi_util_ok() {
    local out
    out=$(gi_nvml gi-a nvml-util)
    echo "      gi-a\$ nvmlDeviceGetProcessUtilization: $out"
    [[ $out == *" samples=$(gi_inner):41" ]]
  }
  check "[isolation] inside gi-a, nvmlDeviceGetProcessUtilization answers its probe's sample only (41 % SM), renamed to its pid through the agent's map -- gi-b's 77 % never shown" gi_util_ok
  printf 'process %s %s gone\nprocess %s %s gone\n' "$gi_uuid" "${GI_HOST[gi-a]}" "$gi_uuid" "${GI_HOST[gi-b]}" >>"$GM_CONTROL"

  for p in "${GI_PODS[@]}"; do
    u=${GI_UNITS[$p]}
    check "[isolation] $p: CUDA_DEVICE_MEMORY_LIMIT_0=$((u * GI_GIB_BYTES)) and the region prefix /run/gpupool-cuda/region in the container" gi_env_ok "$p" "$u"
    gi_sm_ok() { [[ $(gi_env "$1" SM) == "$2" ]]; }
    check "[isolation] $p: gpupool.io/gpu-cores ${GI_CORES[$p]} booked beside the memory, CUDA_DEVICE_SM_LIMIT=${GI_CORES[$p]} in the container (the compute share, issue 25)" gi_sm_ok "$p" "${GI_CORES[$p]}"
    check "[isolation] $p: the probe reads total = $u GiB (device 16 GiB), gets the share to the byte, CUDA_ERROR_OUT_OF_MEMORY 1 MiB past it" gi_probe_ok "$p" "$u"
    echo "    \$ kubectl exec $p -- sh -c 'cat /etc/ld.so.preload; grep -c libgpupool-cuda.so /proc/\$(pidof gpupool-cudaprobe)/maps'"
    check "[isolation] $p: /etc/ld.so.preload names $GI_LIB_PATH and the probe has it mapped" gi_preload_ok "$p"
    check "[isolation] $p: region.<GPU uuid> in the pod's host directory containers/<uid>_0" gi_region_ok "$p"
    echo "    \$ kubectl exec $p -- gpupool-cudaprobe init info alloc 1m alloc 1m   (while the first probe holds $u GiB - 1 MiB)"
    check "[isolation] $p: a second process sees free = 1 MiB (share - held), gets it, is refused the next" gi_second_ok "$p" "$u"
  done

  # Graceful deletion: the kubelet stops the containers, then the API object goes.
  printf '  $ kubectl delete pod %s\n' "${GI_PODS[*]} ${GI_FILL[*]}"
  kc delete pod "${GI_PODS[@]}" "${GI_FILL[@]}" --timeout=60s 2>&1 | sed 's/^/    /'
  t=$SECONDS
  wait_for 30 "the plugin removed containers/<uid>_* of gi-a and gi-b" gi_dirs_gone "${GI_UID[@]}"
  e2e_log "per-container directories gone $((SECONDS - t))s after the pods"
  check "[isolation] gi-a's and gi-b's per-container directories removed within 30 s of the pods' deletion" gi_dirs_gone "${GI_UID[@]}"
  wait_for 30 "$GI_ISO/containers empty" gi_containers_empty
  echo "    \$ ls -A $GI_ISO/containers"
  ls -A "$GI_ISO/containers" 2>&1 | head -n 5 | sed 's/^/      /'
  check "[isolation] no per-container directory left of any gpu-mem pod of section 11" gi_containers_empty
  e2e_log "isolation section took $((SECONDS - GI_T0))s"
fi
