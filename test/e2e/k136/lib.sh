# shellcheck shell=bash disable=SC2034
# Shared helpers for the Kubernetes 1.36 cluster (up.sh, down.sh, dra.sh).
# Source it; it sets no shell options of its own. It sources ../lib.sh (the
# 1.20 suite's helpers: logging, wait_for, pass/fail, pid files) with its own
# state, run and bridge names, so the two clusters never share a file; they
# share the well-known ports, so they run one after the other.
#
# Binaries (all overridable from the environment):
#   K136_TARBALL   a tarball with kubernetes/server/bin/{kube-apiserver,
#                  kube-controller-manager,kube-scheduler,kubelet,kubectl}:
#                  default ../shared/k8s/kubernetes-1.36.2-linux-amd64.tar.xz
#                  next to the repository (it also holds kubernetes/extra/bin/
#                  containerd 2.1.9 and etcd 3.5.30), or an official
#                  kubernetes-server-linux-amd64.tar.gz (then containerd >= 2
#                  and etcd come from K136_EXTRA_BIN or the PATH)
#   K136_SHA256    the tarball's expected sha256 (default: the shared one's,
#                  when K136_TARBALL is the default; none otherwise)
#   K136_CACHE     where it is unpacked once (default /var/cache/gpupool-k8s/
#                  1.36.2 for the shared tarball, .../server-<sha> otherwise)
#   K136_EXTRA_BIN containerd, containerd-shim-runc-v2, ctr, etcd (default the
#                  tarball's kubernetes/extra/bin when it has one, else PATH)

K136_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_DIR=$(cd "$K136_DIR/.." && pwd)
REPO_ROOT=${REPO_ROOT:-$(cd "$E2E_DIR/../.." && pwd)}

K136_DEFAULT_TARBALL=$REPO_ROOT/../shared/k8s/kubernetes-1.36.2-linux-amd64.tar.xz
K136_DEFAULT_SHA256=ab3bf805995257e643940af9702883c74a5d4648c401fac35836ad36ab275ea5
K136_TARBALL=${K136_TARBALL:-$K136_DEFAULT_TARBALL}
if [[ $K136_TARBALL -ef $K136_DEFAULT_TARBALL ]]; then
  K136_SHA256=${K136_SHA256:-$K136_DEFAULT_SHA256}
  K136_CACHE=${K136_CACHE:-/var/cache/gpupool-k8s/1.36.2}
else
  K136_SHA256=${K136_SHA256:-}
  # K136_CACHE for another tarball is set by k136_unpack (named by its hash).
fi

# This cluster's own places (never the 1.20 cluster's, whatever the caller
# exported for that one).
E2E_STATE=${K136_STATE:-/var/lib/gpupool-e2e-k136}
E2E_RUN=${K136_RUN:-/run/gpupool-e2e-k136}
E2E_LOGS=${K136_LOGS:-/var/tmp/gpupool-e2e-k136/logs/current}
export E2E_STATE E2E_RUN E2E_LOGS
. "$E2E_DIR/lib.sh"
CNI_BRIDGE=gpuk136
POD_SUBNET=10.89.0.0/24
# CDI spec directories containerd 2 reads (its defaults, named in its config).
CDI_DIRS=(/etc/cdi /var/run/cdi)

# k136_bins  -- sets K8S_BIN and K136_EXTRA_BIN from K136_CACHE, puts the
# extra binaries first on the PATH (containerd finds its shim there).
k136_bins() {
  K8S_BIN=$K136_CACHE/kubernetes/server/bin
  if [[ -z ${K136_EXTRA_BIN:-} && -x $K136_CACHE/kubernetes/extra/bin/containerd ]]; then
    K136_EXTRA_BIN=$K136_CACHE/kubernetes/extra/bin
  fi
  if [[ -n ${K136_EXTRA_BIN:-} ]]; then
    PATH=$K136_EXTRA_BIN:$PATH
  fi
  export K8S_BIN PATH
}

# k136_find_cache  -- K136_CACHE for a tarball that is not the shared one:
# named by its sha256, so two different tarballs never share a cache.
k136_find_cache() {
  [[ -n ${K136_CACHE:-} ]] && return 0
  [[ -f $K136_TARBALL ]] || e2e_die "K136_TARBALL=$K136_TARBALL: no such file"
  local sum
  sum=$(sha256sum "$K136_TARBALL" | cut -c1-64)
  K136_CACHE=/var/cache/gpupool-k8s/server-${sum:0:16}
}

# k136_unpack  -- unpacks K136_TARBALL into K136_CACHE once (the stamp holds
# the tarball's sha256), checking K136_SHA256 when one is expected.
k136_unpack() {
  k136_find_cache
  local stamp=$K136_CACHE/.unpacked c sum tmp
  if [[ -f $stamp ]]; then
    local ok=1
    for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
      [[ -x $K136_CACHE/kubernetes/server/bin/$c ]] || ok=0
    done
    # A cache unpacked from the expected tarball is trusted without hashing
    # the tarball again (it may be gone: only the cache is needed then).
    if ((ok)) && [[ -z $K136_SHA256 || $(cat "$stamp") == "$K136_SHA256" ]]; then
      k136_bins
      return 0
    fi
  fi
  [[ -f $K136_TARBALL ]] || e2e_die "K136_TARBALL=$K136_TARBALL: no such file (and no cache in $K136_CACHE)"
  sum=$(sha256sum "$K136_TARBALL" | cut -c1-64)
  if [[ -n $K136_SHA256 && $sum != "$K136_SHA256" ]]; then
    e2e_die "$K136_TARBALL: sha256 $sum, expected $K136_SHA256"
  fi
  e2e_log "unpacking $K136_TARBALL into $K136_CACHE"
  mkdir -p "$(dirname "$K136_CACHE")"
  tmp=$(mktemp -d "$K136_CACHE.tmp.XXXXXX")
  # Official server tarballs also hold container images and sources: skipped.
  if ! tar -xf "$K136_TARBALL" -C "$tmp" --no-same-owner \
      --exclude='*.tar' --exclude='*.tar.gz' --exclude='*.docker_tag' --exclude='kubernetes/addons'; then
    rm -rf "$tmp"
    e2e_die "cannot unpack $K136_TARBALL"
  fi
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    [[ -x $tmp/kubernetes/server/bin/$c ]] || { rm -rf "$tmp"; e2e_die "$K136_TARBALL has no kubernetes/server/bin/$c"; }
  done
  echo "$sum" >"$tmp/.unpacked"
  rm -rf "$K136_CACHE"
  mv "$tmp" "$K136_CACHE"
  k136_bins
}

# ctr of the cluster's containerd (the tarball's 2.x one when there is one).
ctr_() { timeout 60 ctr --address "$CTRD_SOCK" -n k8s.io "$@"; }

# --- the kubelet (1.36: runtime endpoint in the config file, no
# --container-runtime / --pod-infra-container-image flags any more) --------
kubelet_cmd() {
  KUBELET_CMD=("$K8S_BIN/kubelet"
    --kubeconfig="$KUBECONFIG"
    --config="$E2E_STATE/kubelet-config.yaml"
    --root-dir="$KUBELET_ROOT"
    --cert-dir="$E2E_STATE/kubelet-pki"
    --hostname-override="$NODE_NAME"
    --v=2)
}
