#!/usr/bin/env bash
# Builds kubelet, kube-apiserver, kube-scheduler, kubectl and kube-controller-manager
# (DaemonSets and Deployments of test/e2e/deploy.sh) v1.20.2 from
# Debian's `kubernetes` source package and caches them in $K8S_CACHE/bin.
# A component whose cached binary answers --version is not rebuilt, so a
# second run takes about a second. Cold build: ~17 minutes on 2 cores.
set -euo pipefail

K8S_CACHE=${K8S_CACHE:-/var/cache/gpupool-k8s}
components=(kubelet kube-apiserver kube-scheduler kubectl kube-controller-manager)
here=$(cd "$(dirname "$0")" && pwd)

log() { printf '%s build-k8s: %s\n' "$(date +%H:%M:%S)" "$*"; }

# kubectl has no --version flag (it is `kubectl version --client`).
k8s_version() {
  if [[ $1 == kubectl ]]; then
    "$K8S_CACHE/bin/kubectl" version --client --short 2>/dev/null
  else
    "$K8S_CACHE/bin/$1" --version 2>/dev/null
  fi
}

all_cached() {
  local c
  for c in "${components[@]}"; do
    k8s_version "$c" | grep -q v1.20.2 || return 1
  done
}

if all_cached; then
  log "all components cached in $K8S_CACHE/bin"
  exit 0
fi

# One build at a time (two CI jobs, or make e2e twice in parallel).
mkdir -p "$K8S_CACHE"
exec 9>"$K8S_CACHE/.lock"
if ! flock -n 9; then
  log "another build-k8s.sh holds $K8S_CACHE/.lock; waiting for it"
  flock 9
fi
if all_cached; then
  log "all components cached in $K8S_CACHE/bin (built by the other run)"
  exit 0
fi

"$here/../../scripts/install-deps.sh" --e2e

mkdir -p "$K8S_CACHE/bin" "$K8S_CACHE/src"
src_root="$K8S_CACHE/src"
tree=$(find "$src_root" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
if [[ -z "$tree" || ! -f "$tree/.gpupool-prepared" ]]; then
  log "fetching Debian source package kubernetes"
  rm -rf "${src_root:?}"/*
  srclist=/etc/apt/sources.list.d/gpupool-deb-src.sources
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    cat > "$srclist" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
  fi
  for try in 1 2 3; do
    (cd "$src_root" && apt-get source -qq --download-only kubernetes 2>&1 | grep -v unsandboxed || true)
    ls "$src_root"/kubernetes_*.dsc >/dev/null 2>&1 && break
    log "apt-get source kubernetes failed (try $try); retrying after apt-get update"
    sleep 5
    apt-get update -qq || true
  done
  dsc=$(ls "$src_root"/kubernetes_*.dsc 2>/dev/null | head -n1)
  [[ -n $dsc ]] || { echo "build-k8s: could not download the kubernetes source package" >&2; exit 1; }
  (cd "$src_root" && dpkg-source -x "$dsc" >/dev/null)
  tree=$(find "$src_root" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
  # reflect2 1.0.1 (vendored) panics under Go >= 1.18; Debian ships 1.0.2.
  r2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [[ -d $r2 ]] || { echo "build-k8s: $r2 missing (golang-github-modern-go-reflect2-dev)" >&2; exit 1; }
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -r "$r2" "$tree/vendor/github.com/modern-go/reflect2"
  touch "$tree/.gpupool-prepared"
fi

export KUBE_GIT_VERSION=v1.20.2
for c in "${components[@]}"; do
  if k8s_version "$c" | grep -q v1.20.2; then
    log "$c cached"
    continue
  fi
  log "building $c"
  start=$SECONDS
  (cd "$tree" && make WHAT="cmd/$c" >"$K8S_CACHE/build-$c.log" 2>&1) || {
    tail -n 40 "$K8S_CACHE/build-$c.log" >&2; exit 1; }
  cp "$tree/_output/local/bin/linux/$(dpkg --print-architecture)/$c" "$K8S_CACHE/bin/.$c.tmp"
  mv -f "$K8S_CACHE/bin/.$c.tmp" "$K8S_CACHE/bin/$c"
  log "$c built in $((SECONDS - start)) s"
done
log "done"
