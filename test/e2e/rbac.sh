# shellcheck shell=bash disable=SC2016
# 10d: least privilege, enforced. up.sh's API server authorizes with
# Node,RBAC, the ServiceAccount admission plugin and the token controller
# are on, so every deployed gpupool pod calls the API with its own
# ServiceAccount's token and nothing more than the rules of
# deploy/overlays/gpu-mem/*-rbac.yaml:
#   - the pod's credentials: the token mounted from the host's view of the
#     container (its JWT names the ServiceAccount), no KUBECONFIG;
#   - `kubectl auth can-i --as=system:serviceaccount:kube-system:<sa>`: every
#     verb the component uses answers yes, a list it must not have answers no;
#   - the component's log (kept as deploy-<pod>.log) holds no 403.
# The whole-gpu plugin has no token at all (automountServiceAccountToken:
# false) and its ServiceAccount (kube-system/default) may do nothing.
#
# Sourced by deploy.sh (needs its dep_* helpers, `check`, `kc`); the
# functions run while the overlay's pods are up.

RBAC_SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount

# rbac_can_i WANT SA ARGS...  -- kubectl auth can-i ARGS as the ServiceAccount
# kube-system/SA answers WANT (yes|no); prints the question and the answer.
rbac_can_i() {
  local want=$1 sa=$2 got
  shift 2
  got=$(kc auth can-i "$@" --as="system:serviceaccount:$DEP_NS:$sa" 2>/dev/null)
  got=${got%% *}
  printf '    %-3s (want %-3s) %s: can-i %s\n' "${got:-?}" "$want" "$sa" "$*"
  [[ $got == "$want" ]]
}
# rbac_expect WANT SA "ARGS" ...  -- one check per question.
rbac_expect() {
  local want=$1 sa=$2 q
  shift 2
  for q in "$@"; do
    # shellcheck disable=SC2086  # q is a word list on purpose
    check "[rbac] $sa can-i $q: $want" rbac_can_i "$want" "$sa" $q
  done
}

# rbac_token_sa POD  -- the ServiceAccount named by the token in POD's
# container ("namespace:name"), read from the host through /proc/PID/root.
rbac_token_sa() {
  local pid
  pid=$(dep_pid_of "$1") || return 1
  [[ -r /proc/$pid/root$RBAC_SA_DIR/token ]] || return 1
  /usr/bin/python3 - "/proc/$pid/root$RBAC_SA_DIR/token" <<'EOF'
import base64, json, sys
payload = open(sys.argv[1]).read().strip().split(".")[1]
claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
print(claims["sub"].removeprefix("system:serviceaccount:"))
EOF
}
rbac_token_is() {  # rbac_token_is POD NAMESPACE:SA
  local got
  got=$(rbac_token_sa "$1")
  echo "    $1: token of ServiceAccount ${got:-<none>}"
  [[ $got == "$2" ]]
}
rbac_no_token() {  # rbac_no_token POD: no service-account mount in the container
  local pid
  pid=$(dep_pid_of "$1") || return 1
  if [[ -e /proc/$pid/root$RBAC_SA_DIR ]]; then
    echo "    $1: $RBAC_SA_DIR is mounted"
    return 1
  fi
  echo "    $1: no $RBAC_SA_DIR"
}
rbac_no_kubeconfig() {  # rbac_no_kubeconfig POD: no KUBECONFIG in its environment
  local pid env
  pid=$(dep_pid_of "$1") || return 1
  env=$(tr '\0' '\n' <"/proc/$pid/environ") || return 1
  ! grep -q '^KUBECONFIG=' <<<"$env"
}
# rbac_log_clean POD LABEL  -- keeps the pod's log as deploy-LABEL.log and
# fails on any authorization error in it.
rbac_log_clean() {
  local f=$E2E_LOGS/deploy-$2.log hits
  dep_kc logs "$1" >"$f" 2>&1 || return 1
  hits=$(grep -ciE 'forbidden|(status|HTTP|code)[ =:]*403' "$f")
  echo "    $f: $(wc -l <"$f") lines, ${hits:-0} with 403/Forbidden"
  grep -iE 'forbidden|(status|HTTP|code)[ =:]*403' "$f" | head -n 5 | cut -c1-240 | sed 's/^/      /'
  [[ ${hits:-0} == 0 ]]
}

# 10a: the whole-GPU plugin never calls the API.
rbac_whole_gpu() {  # rbac_whole_gpu PLUGIN_POD
  echo "  least privilege: the whole-gpu plugin has no API credentials"
  check "[rbac] whole-gpu plugin pod $1: no service-account token mounted" rbac_no_token "$1"
  rbac_expect no default "get pods -n default" "list nodes" "patch nodes" "get secrets -n kube-system" \
    "list configmaps -n kube-system"
}

# 10c/10d: the gpu-mem plugin and the extender, under their ServiceAccounts.
rbac_gpu_mem() {  # rbac_gpu_mem PLUGIN_POD EXTENDER_POD
  local dp=$1 ep=$2 p=gpupool-device-plugin e=gpupool-scheduler-extender
  section "10d. least privilege, enforced: Node,RBAC + the pods' ServiceAccount tokens"
  kshow -n "$DEP_NS" get clusterroles,roles -l app.kubernetes.io/part-of=gpupool -o wide
  check "[rbac] plugin pod authenticates as kube-system:$p (its token)" rbac_token_is "$dp" "kube-system:$p"
  check "[rbac] plugin pod has no KUBECONFIG" rbac_no_kubeconfig "$dp"
  check "[rbac] extender pod authenticates as kube-system:$e (its token)" rbac_token_is "$ep" "kube-system:$e"
  check "[rbac] extender pod has no KUBECONFIG" rbac_no_kubeconfig "$ep"

  # What each calls (docs/deploy.md); -A: cluster-wide, as the code asks.
  rbac_expect yes "$p" "patch nodes" "patch nodes --subresource=status" "get nodes" \
    "list pods -A" "watch pods -A" "patch pods -n default" "create events -n default"
  rbac_expect no "$p" "get pods -n default" "create pods -n default" "delete pods -n default" \
    "create pods --subresource=binding -n default" "list nodes" "update nodes" "delete nodes" \
    "get secrets -n kube-system" "list secrets -A" "list configmaps -n kube-system" "update events -n default"
  rbac_expect yes "$e" "list nodes" "watch nodes" "get pods -n default" "list pods -A" "watch pods -A" \
    "create pods --subresource=binding -n default" \
    "list configmaps -n kube-system" "watch configmaps -n kube-system" \
    "create leases.coordination.k8s.io -n kube-system" \
    "get leases.coordination.k8s.io/gpupool-scheduler-extender -n kube-system" \
    "update leases.coordination.k8s.io/gpupool-scheduler-extender -n kube-system"
  rbac_expect no "$e" "get leases.coordination.k8s.io/kube-scheduler -n kube-system" \
    "update leases.coordination.k8s.io/kube-scheduler -n kube-system" \
    "get configmaps -n kube-system" "list configmaps -n default" "get nodes" "patch nodes" \
    "create pods -n default" "delete pods -n default" "update pods -n default" "patch pods -n default" \
    "get secrets -n kube-system" "create events -n default"

  # The GFD labels: GET + merge PATCH of the node, under the plugin's rules.
  labelled() { [[ -n "$(kc get node "$NODE_NAME" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.count}' 2>/dev/null)" ]]; }
  wait_for 30 "node label nvidia.com/gpu.count (plugin --node-labels)" labelled
  kshow get node "$NODE_NAME" -o jsonpath='{.metadata.labels}{"\n"}'
  check "[rbac] the plugin labelled its node (GET + PATCH nodes/$NODE_NAME)" labelled
  check "[rbac] plugin log: no 403" rbac_log_clean "$dp" gpu-mem-plugin
  check "[rbac] extender log: no 403" rbac_log_clean "$ep" gpu-mem-extender
}
