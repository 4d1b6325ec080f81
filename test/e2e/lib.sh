# shellcheck shell=bash disable=SC2034
# Shared helpers for the gpupool end-to-end suite. Source it; it sets no
# shell options of its own.
#
# Layout (all overridable from the environment):
#   $K8S_CACHE/bin        kubelet, kube-apiserver, kube-scheduler, kubectl (build-k8s.sh)
#   $K8S_CACHE/images     busybox + pause (+ cudaprobe) docker-archive tarballs (images.sh)
#   $E2E_STATE            etcd data, certs, kubeconfig, containerd root; wiped by up/down
#   $E2E_RUN              pid files, containerd state + socket, pod netns; wiped by down
#   $E2E_LOGS             every component's log for this run (kept after down)
#   /var/lib/kubelet      the kubelet's real root dir, so the device plugin uses the
#                         real /var/lib/kubelet/device-plugins/kubelet.sock

E2E_DIR=${E2E_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
REPO_ROOT=${REPO_ROOT:-$(cd "$E2E_DIR/../.." && pwd)}
K8S_CACHE=${K8S_CACHE:-/var/cache/gpupool-k8s}
K8S_BIN=${K8S_BIN:-$K8S_CACHE/bin}
E2E_STATE=${E2E_STATE:-/var/lib/gpupool-e2e}
E2E_RUN=${E2E_RUN:-/run/gpupool-e2e}
E2E_LOGS=${E2E_LOGS:-/var/tmp/gpupool-e2e/logs/current}
KUBELET_ROOT=/var/lib/kubelet
NODE_NAME=localhost
CTRD_SOCK=$E2E_RUN/containerd/containerd.sock
CNI_BRIDGE=gpue2e0
POD_SUBNET=10.88.0.0/24
BUSYBOX_IMAGE=localhost/gpupool-e2e/busybox:1.35
PAUSE_IMAGE=localhost/gpupool-e2e/pause:3.2
CUDAPROBE_IMAGE=localhost/gpupool-e2e/cudaprobe:1
DRAPLUGIN_IMAGE=localhost/gpupool-e2e/dra-plugin:test
KUBECONFIG=$E2E_STATE/kubeconfig
export KUBECONFIG

e2e_log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
e2e_die() { printf '%s FATAL: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

kc() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" --request-timeout=20s "$@"; }
# Runs kubectl and echoes the command and its output, so the checks are
# observable in the suite's log.
kshow() {
  printf '  $ kubectl %s\n' "$*"
  kc "$@" 2>&1 | sed 's/^/    /'
  return "${PIPESTATUS[0]}"
}
ctr_() { timeout 60 ctr --address "$CTRD_SOCK" -n k8s.io "$@"; }

# wait_for TIMEOUT_S DESCRIPTION CMD...  -- polls CMD every second until it
# succeeds; returns 1 (after saying so) when TIMEOUT_S elapses first.
wait_for() {
  local timeout=$1 what=$2 start=$SECONDS
  shift 2
  while ! "$@" >/dev/null 2>&1; do
    if ((SECONDS - start >= timeout)); then
      e2e_log "timed out after ${timeout}s waiting for: $what"
      return 1
    fi
    sleep 1
  done
  e2e_log "ok after $((SECONDS - start))s: $what"
}

# --- pass/fail accounting -------------------------------------------------
E2E_PASSED=${E2E_PASSED:-0}
E2E_FAILED=${E2E_FAILED:-0}
E2E_FAILURES=()
pass() { E2E_PASSED=$((E2E_PASSED + 1)); printf 'PASS: %s\n' "$*"; }
fail() { E2E_FAILED=$((E2E_FAILED + 1)); E2E_FAILURES+=("$*"); printf 'FAIL: %s\n' "$*"; }
# check DESCRIPTION CMD...  -- pass if CMD succeeds, fail otherwise.
check() {
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}

# --- process bookkeeping --------------------------------------------------
pidfile() { echo "$E2E_RUN/pids/$1.pid"; }
# alive PID -- true while PID runs (a zombie counts as dead).
alive() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $st && ${st:0:1} != Z ]]
}
is_running() {
  local f
  f=$(pidfile "$1")
  [[ -f $f ]] && alive "$(cat "$f")"
}
# start_bg NAME LOGFILE CMD...  -- starts CMD detached, records its pid.
start_bg() {
  local name=$1 logf=$2
  shift 2
  mkdir -p "$E2E_RUN/pids" "$(dirname "$logf")"
  setsid "$@" </dev/null >>"$logf" 2>&1 &
  echo $! >"$(pidfile "$name")"
}
# stop_pid NAME [TIMEOUT_S]  -- TERM, wait, then KILL.
stop_pid() {
  local name=$1 timeout=${2:-15} f pid i
  f=$(pidfile "$name")
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      e2e_log "$name (pid $pid) ignored TERM for ${timeout}s; killing"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  rm -f "$f"
}

# stop_child PID [TIMEOUT_S]  -- TERM a child of this shell, KILL it after
# TIMEOUT_S (15), reap it; STOP_RC = its exit status (137 if killed). Polls
# instead of forking a watchdog subshell: a `(sleep; kill) &` killed right
# after its fork can still run this shell's traps (EXIT: the teardown).
stop_child() {
  local pid=$1 timeout=${2:-15} i
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < timeout * 10; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  alive "$pid" && kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  STOP_RC=$?
}

# --- the kubelet (started by up.sh and restarted by the scenarios) ---------
kubelet_cmd() {
  # up.sh's choice: the machine's first global address, or none (loopback).
  local E2E_NODE_IP
  E2E_NODE_IP=$(cat "$E2E_STATE/node-ip" 2>/dev/null) || E2E_NODE_IP=
  KUBELET_CMD=("$K8S_BIN/kubelet"
    --kubeconfig="$KUBECONFIG"
    --config="$E2E_STATE/kubelet-config.yaml"
    --root-dir="$KUBELET_ROOT"
    --cert-dir="$E2E_STATE/kubelet-pki"
    --container-runtime=remote
    --container-runtime-endpoint="unix://$CTRD_SOCK"
    --runtime-request-timeout=2m
    --hostname-override="$NODE_NAME"
    ${E2E_NODE_IP:+--node-ip="$E2E_NODE_IP"}
    --pod-infra-container-image="$PAUSE_IMAGE"
    --v=2)
}
start_kubelet() {
  kubelet_cmd
  echo "=== kubelet start $(date -u +%FT%TZ) ===" >>"$E2E_LOGS/kubelet.log"
  start_bg kubelet "$E2E_LOGS/kubelet.log" "${KUBELET_CMD[@]}"
}
kubelet_healthy() { curl -fsS --max-time 2 http://127.0.0.1:10248/healthz >/dev/null 2>&1; }

# --- node helpers ----------------------------------------------------------
# node_res capacity|allocatable RESOURCE  -- prints the quantity ("" if absent)
node_res() {
  local esc=${2//./\\.}
  kc get node "$NODE_NAME" -o jsonpath="{.status.$1.$esc}" 2>/dev/null
}
node_res_is() { [[ "$(node_res "$1" "$2")" == "$3" ]]; }
node_ready() {
  [[ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
pod_phase() { kc get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
pod_phase_is() { [[ "$(pod_phase "$1")" == "$2" ]]; }
pod_log_has() { kc logs "$1" 2>/dev/null | grep -- "$2" >/dev/null; }
pod_gone() { ! kc get pod "$1" >/dev/null 2>&1; }

# ---- teardown steps both clusters' down.sh share (CTRD_SOCK, ctr_ of the caller's lib) ----
# Pod containers: kill tasks, delete containers (and their snapshots).
down_pod_containers() {
  local tasks t c
  [[ -S $CTRD_SOCK ]] && ctr --address "$CTRD_SOCK" version >/dev/null 2>&1 || return 0
  tasks=$(ctr_ tasks ls -q 2>/dev/null || true)
  for t in $tasks; do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
  for t in $tasks; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      ctr_ tasks delete "$t" >/dev/null 2>&1 && break
      sleep 0.3
    done
  done
  for c in $(ctr_ containers ls -q 2>/dev/null || true); do
    ctr_ containers delete "$c" >/dev/null 2>&1 || true
  done
}
# containerd and any shim it left (ours only: their command line names our
# socket), then the apiserver and etcd.
down_containerd_apiserver_etcd() {
  local p
  stop_pid containerd 15
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q "containerd-shim.*-address $CTRD_SOCK"; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  stop_pid kube-apiserver 15
  stop_pid etcd 15
}
# Every mount at or under a prefix, deepest first (the kubelet bind-mounts
# its root; pod volumes, netns and rootfs mounts under containerd's dirs).
umount_under() {
  local prefix=$1 m ms
  for _ in 1 2 3; do
    mapfile -t ms < <(awk -v p="$prefix" '$2 == p || index($2, p "/") == 1 {print $2}' /proc/self/mounts | sort -r)
    ((${#ms[@]})) || return 0
    for m in "${ms[@]}"; do
      m=$(printf '%b' "${m//\\/\\0}")   # \040 etc. as written in /proc/mounts
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
}
