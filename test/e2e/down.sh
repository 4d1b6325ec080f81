#!/usr/bin/env bash
# Stops the e2e cluster started by up.sh and removes what it left: the device
# plugin, kubelet, scheduler, apiserver, pod containers, containerd (and its
# shims), etcd; the kubelet's and containerd's mounts, pod network namespaces,
# the CNI bridge, sockets, pid files and the cluster state. Keeps the logs
# ($E2E_LOGS) and the cached binaries/images. Idempotent.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || e2e_die "must run as root"
t0=$SECONDS

# 1. The device plugin(s) the suite started, then the kubelet.
for f in "$E2E_RUN"/pids/plugin*.pid; do
  [[ -f $f ]] && stop_pid "$(basename "$f" .pid)" 10
done
stop_pid scheduler-extender 10   # extender.sh
stop_pid kube-controller-manager 10   # deploy.sh (DaemonSets, Deployments)
stop_pid kube-controller-manager-sa 10   # up.sh (service accounts, tokens)
stop_pid kubelet 15
stop_pid kube-scheduler 10
stop_pid gpupool-scheduler 10   # deploy.sh 10e (routes.sh)

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
# deploy.sh: the extender Service's ClusterIP stood in for kube-proxy there.
ip addr del 10.96.0.39/32 dev lo 2>/dev/null
# ha.sh (10g): its stand-in for kube-proxy's rules.
iptables -w -D OUTPUT -d 10.96.0.39/32 -p tcp -j REJECT --reject-with tcp-reset 2>/dev/null
iptables -w -t nat -D OUTPUT -d 10.96.0.39/32 -j GPUPOOL-E2E-SVC 2>/dev/null
iptables -w -t nat -F GPUPOOL-E2E-SVC 2>/dev/null
iptables -w -t nat -X GPUPOOL-E2E-SVC 2>/dev/null

# 6. Cgroups the kubelet created (empty once every pod process is gone).
for ctl in /sys/fs/cgroup/*/; do
  [[ -d ${ctl}kubepods ]] || continue
  find "${ctl}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# 7. Files: state, run dir (sockets, pid files), the kubelet root we made.
rm -rf "$E2E_STATE" "$E2E_RUN"
if [[ -f $KUBELET_ROOT/.gpupool-e2e ]]; then
  rm -rf "$KUBELET_ROOT"
fi
# libcni's result cache (containerd does not let us move it): entries of our
# network (left when a pod was torn down without CNI DEL), then the dirs if empty.
for f in /var/lib/cni/results/gpupool-e2e-*; do
  [[ -e $f ]] || continue
  id=${f#/var/lib/cni/results/gpupool-e2e-}
  id=${id%-eth0}
  rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
done
rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true

# Report anything left behind.
left=()
for n in etcd kube-apiserver kube-scheduler kubelet containerd; do
  [[ -f $(pidfile "$n") ]] && left+=("pidfile:$n")
done
if awk -v a="$KUBELET_ROOT" -v b="$E2E_RUN" -v c="$E2E_STATE" \
     'index($2, a) == 1 || index($2, b) == 1 || index($2, c) == 1 {f = 1} END {exit !f}' /proc/self/mounts; then
  left+=("mounts")
fi
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && left+=("bridge:$CNI_BRIDGE")
if ((${#left[@]})); then
  e2e_log "down: left behind: ${left[*]}"
  exit 1
fi
e2e_log "cluster down in $((SECONDS - t0))s"
