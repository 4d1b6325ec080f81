#!/usr/bin/env bash
# Stops the Kubernetes 1.36 cluster of k136/up.sh and removes what it left:
# the DRA plugin(s) the suite started, kubelet, scheduler, controller-manager,
# pod containers, containerd 2 (and its shims), apiserver, etcd; mounts, pod
# network namespaces, the CNI bridge, the CDI specs of claims, sockets, pid
# files and the cluster state. Keeps the logs and the unpacked binaries.
# Idempotent; exits 1 (saying what) when something is left behind.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || e2e_die "must run as root"
t0=$SECONDS
k136_find_cache 2>/dev/null && k136_bins

# 1. The plugins the suite started, then the node and control-plane daemons
#    that talk to containerd.
for f in "$E2E_RUN"/pids/plugin*.pid; do
  [[ -f $f ]] && stop_pid "$(basename "$f" .pid)" 10
done
# dra.sh's ResourceSlice watch: a session of its own (loop + kubectl).
if [[ -f $(pidfile slice-watch) ]]; then
  kill -- -"$(cat "$(pidfile slice-watch)")" 2>/dev/null
  rm -f "$(pidfile slice-watch)"
fi
stop_pid kube-controller-manager 10
stop_pid kubelet 15
stop_pid kube-scheduler 10

# 2. Pod containers: kill tasks, delete containers (and their snapshots).
down_pod_containers

# 3. containerd and any shim it left, then the apiserver and etcd.
down_containerd_apiserver_etcd

# 4. Mounts: kubelet root (it bind-mounts itself), pod volumes, netns and
#    rootfs mounts under containerd's state/root. Deepest first.
umount_under "$KUBELET_ROOT"
umount_under "$E2E_RUN"
umount_under "$E2E_STATE"

# 5. Network: the bridge (veths went with the pod netns).
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && ip link delete "$CNI_BRIDGE" 2>/dev/null

# 6. Cgroups the kubelet created (empty once every pod process is gone).
for ctl in /sys/fs/cgroup/*/; do
  [[ -d ${ctl}kubepods ]] || continue
  find "${ctl}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# 7. CDI specs of claims the suite's plugin left (kind k8s.<driver>/claim,
#    our driver's only; the suite counts those as leaks before it gets here).
kind="k8s.${DRA_DRIVER:-gpu.gpupool.io}/claim"
for d in "${CDI_DIRS[@]}"; do
  for f in "$d"/*; do
    [[ -f $f ]] && grep -qF "\"$kind\"" "$f" 2>/dev/null && rm -f "$f"
  done
done

# 8. Files: state, run dir (sockets, pid files), the kubelet root we made.
rm -rf "$E2E_STATE" "$E2E_RUN"
if [[ -f $KUBELET_ROOT/.gpupool-e2e ]]; then
  rm -rf "$KUBELET_ROOT"
fi
# libcni's result cache: entries of our network, then the dirs if empty.
for f in /var/lib/cni/results/gpupool-e2e-k136-*; do
  [[ -e $f ]] || continue
  id=${f#/var/lib/cni/results/gpupool-e2e-k136-}
  id=${id%-eth0}
  rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
done
rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true

# Report anything left behind.
left=()
for n in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet containerd; do
  [[ -f $(pidfile "$n") ]] && left+=("pidfile:$n")
done
if awk -v a="$KUBELET_ROOT" -v b="$E2E_RUN" -v c="$E2E_STATE" \
     'index($2, a) == 1 || index($2, b) == 1 || index($2, c) == 1 {f = 1} END {exit !f}' /proc/self/mounts; then
  left+=("mounts")
fi
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && left+=("bridge:$CNI_BRIDGE")
for port in 2379 2380 6443 10248 10250; do
  ss -Hltn "sport = :$port" | grep -q . && left+=("port:$port")
done
if ((${#left[@]})); then
  e2e_log "down: left behind: ${left[*]}"
  exit 1
fi
e2e_log "cluster down in $((SECONDS - t0))s"
