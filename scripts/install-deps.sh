#!/usr/bin/env bash
# Installs every Debian 12 package gpupool needs to build, test and run its
# end-to-end suite. Idempotent: packages already present are not fetched again,
# and `apt-get update` runs only when something is missing.
#
#   scripts/install-deps.sh          build + unit/integration test packages
#   scripts/install-deps.sh --e2e    also the local Kubernetes cluster packages (and --image's)
#   scripts/install-deps.sh --image  also the image builders of `make image` (scripts/image.sh)
set -euo pipefail

build_pkgs=(
  build-essential cmake pkg-config git
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libjansson-dev libyaml-dev libcurl4-openssl-dev libmicrohttpd-dev
  libcmocka-dev valgrind clang-format
  python3 python3-grpcio python3-grpc-tools python3-protobuf python3-pytest python3-yaml
  python3-prometheus-client
  # what the integration tests would otherwise skip without (a skip fails CI):
  chromium           # headless check of the extender's /ui (test_extender_ui.py)
  kubernetes-client  # kubectl kustomize of deploy/ (test_deploy_manifests.py)
  openssl            # certificates for the TLS tests (test_kube_client.py)
)
e2e_pkgs=(
  golang-go rsync containerd runc etcd-server containernetworking-plugins
  busybox-static openssl iptables iproute2 curl dpkg-dev
  golang-github-modern-go-reflect2-dev wrk time  # time: peak RSS in bench/inspect_bench.py
)
# OCI images without a Docker daemon: a Debian rootfs (mmdebstrap) packed by umoci.
image_pkgs=(mmdebstrap umoci)

want=("${build_pkgs[@]}")
case "${1:-}" in
  --e2e) want+=("${e2e_pkgs[@]}" "${image_pkgs[@]}") ;;
  --image) want+=("${image_pkgs[@]}") ;;
esac

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
