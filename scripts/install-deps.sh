#!/usr/bin/env bash
# Installs every Debian 12 package gpupool needs to build, test and run its
# end-to-end suite. Idempotent: packages already present are not fetched again,
# and `apt-get update` runs only when something is missing.
#
#   scripts/install-deps.sh          build + unit/integration test packages
#   scripts/install-deps.sh --e2e    also the local Kubernetes cluster packages (and --image's)
#   scripts/install-deps.sh --image  also the image builders of `make image` (scripts/image.sh)
#   scripts/install-deps.sh --cross  also the arm64 cross toolchain, the arm64 (multiarch)
#                                    libraries and qemu-user (`make cross`, scripts/cross.sh)
# Options combine (`--e2e --cross`). Another apt or dpkg run (unattended-upgrades,
# a second engineer) is waited for, up to GP_APT_LOCK_TIMEOUT seconds (default 600),
# instead of failing on its lock.
set -euo pipefail

build_pkgs=(
  build-essential cmake pkg-config git
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libjansson-dev libyaml-dev libcurl4-openssl-dev libmicrohttpd-dev
  libcmocka-dev valgrind clang-format
  clang libclang-rt-14-dev  # make fuzz: clang's -fsanitize=fuzzer links libclang_rt.fuzzer from it
  python3 python3-grpcio python3-grpc-tools python3-protobuf python3-pytest python3-yaml
  python3-prometheus-client
  # what the integration tests would otherwise skip without (a skip fails CI):
  chromium           # headless check of the extender's /ui (test_extender_ui.py)
  kubernetes-client  # kubectl kustomize of deploy/ (test_deploy_manifests.py)
  openssl            # certificates for the TLS tests (test_kube_client.py)
  prometheus         # promtool: deploy/monitoring's rules and queries (test_deploy_kit.py);
                     # the server it brings is not started by the tests
)
e2e_pkgs=(
  golang-go rsync containerd runc etcd-server containernetworking-plugins
  busybox-static openssl iptables iproute2 curl dpkg-dev
  golang-github-modern-go-reflect2-dev wrk time  # time: peak RSS in bench/inspect_bench.py
)
# OCI images without a Docker daemon: a Debian rootfs (mmdebstrap) packed by umoci.
image_pkgs=(mmdebstrap umoci)
# arm64 from this amd64 host: Debian's cross compilers, the :arm64 -dev package of
# every library we link (multiarch: they install beside the amd64 ones), and
# qemu-user to run the results (also what mmdebstrap needs for arm64 images).
cross_pkgs=(
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static
  libgrpc-dev:arm64 libprotobuf-c-dev:arm64 libjansson-dev:arm64 libyaml-dev:arm64
  libcurl4-openssl-dev:arm64 libmicrohttpd-dev:arm64 libcmocka-dev:arm64
)

want=("${build_pkgs[@]}")
cross=0
for arg in "$@"; do
  case $arg in
    --e2e) want+=("${e2e_pkgs[@]}" "${image_pkgs[@]}") ;;
    --image) want+=("${image_pkgs[@]}") ;;
    --cross) want+=("${cross_pkgs[@]}") && cross=1 ;;
    *) echo "install-deps: unknown option $arg (--e2e, --image, --cross)" >&2 && exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  # Any kubectl will do for the kustomize test; another vendor's kubectl
  # package (Google's, a snap) owns /usr/bin/kubectl and would refuse Debian's.
  [[ $p == kubernetes-client ]] && command -v kubectl >/dev/null 2>&1 && continue
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
# Another apt or dpkg may be running. apt-get install waits for the dpkg lock
# itself (DPkg::Lock::Timeout); apt-get update (the lists lock) and dpkg
# --add-architecture fail at once in Debian 12, so they are retried.
lock_timeout=${GP_APT_LOCK_TIMEOUT:-600}
lock_deadline=$((SECONDS + lock_timeout))
apt_opts=(-o "DPkg::Lock::Timeout=$lock_timeout")
# when_unlocked CMD...  -- runs CMD; while it fails on a lock another process
# holds, says so once and runs it again every 5 s until the deadline.
when_unlocked() {
  local errf rc said=0
  errf=$(mktemp)
  while :; do
    rc=0
    "$@" 2>"$errf" || rc=$?
    if ((rc != 0)) && grep -qiE 'could not get lock|unable to lock|lock was locked' "$errf" &&
       ((SECONDS < lock_deadline)); then
      ((said)) || echo "install-deps: waiting for another apt/dpkg to finish ($(head -n1 "$errf"))" >&2
      said=1
      sleep 5
      continue
    fi
    cat "$errf" >&2
    rm -f "$errf"
    return "$rc"
  done
}
if ((cross)) && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  when_unlocked dpkg --add-architecture arm64
fi
when_unlocked apt-get "${apt_opts[@]}" update -qq
when_unlocked apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
