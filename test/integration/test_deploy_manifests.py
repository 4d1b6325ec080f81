"""The shipped manifests, checked without a cluster.

kube-scheduler 1.25+ reads only what kubescheduler.config.k8s.io/v1 defines,
and the e2e cluster (1.20) cannot load a v1 file, so the v1 files are checked
here against the v1 field list (written from Kubernetes'
staging/src/k8s.io/kube-scheduler/config/v1/types.go and
component-base/config/v1alpha1/types.go): an unknown or misspelt key, a wrong
type or a bad duration fails. The same extender must be configured in every
file (v1, v1beta1, Policy, the secondary scheduler's v1 and its e2e twin),
and every overlay must build with the kustomize inside kubectl (skipped when
no kubectl is found: K8S_BIN, /var/cache/gpupool-k8s/bin, PATH).
"""

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
V1_FILE = os.path.join(DEPLOY, "scheduler", "scheduler-config-v1.yaml")
V1BETA1_FILE = os.path.join(DEPLOY, "scheduler", "scheduler-config-v1beta1.yaml")
POLICY_FILE = os.path.join(DEPLOY, "scheduler", "scheduler-policy-config.json")
SECOND_FILE = os.path.join(DEPLOY, "overlays", "secondary-scheduler", "gpupool-scheduler-config.yaml")
TWIN_FILE = os.path.join(ROOT, "test", "e2e", "gpupool-scheduler-v1beta1.yaml")
OVERLAYS = ["whole-gpu", "time-slicing", "gpu-mem", "gpu-mem-ha", "secondary-scheduler", "gpushare",
            "dra"]
CLUSTER_IP = "10.96.0.39"

DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")

# v1 schema: key -> type, or a nested dict, or [dict] for a list of objects.
EXTENDER_V1 = {
    "urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str,
    "weight": int, "bindVerb": str, "enableHTTPS": bool,
    "tlsConfig": {"insecure": bool, "serverName": str, "certFile": str, "keyFile": str,
                  "caFile": str, "certData": str, "keyData": str, "caData": str},
    "httpTimeout": "duration", "nodeCacheCapable": bool,
    "managedResources": [{"name": str, "ignoredByScheduler": bool}],
    "ignorable": bool,
}
LEADER_ELECTION = {
    "leaderElect": bool, "leaseDuration": "duration", "renewDeadline": "duration",
    "retryPeriod": "duration", "resourceLock": str, "resourceName": str, "resourceNamespace": str,
}
CLIENT_CONNECTION = {"kubeconfig": str, "acceptContentTypes": str, "contentType": str,
                     "qps": float, "burst": int}
PLUGIN_SET = {"enabled": [{"name": str, "weight": int}], "disabled": [{"name": str, "weight": int}]}
PLUGINS = {k: PLUGIN_SET for k in (
    "preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve",
    "permit", "preBind", "bind", "postBind", "multiPoint")}
PROFILE = {"schedulerName": str, "percentageOfNodesToScore": int, "plugins": PLUGINS,
           "pluginConfig": [{"name": str, "args": dict}]}
CONFIG_V1 = {
    "apiVersion": str, "kind": str, "parallelism": int, "leaderElection": LEADER_ELECTION,
    "clientConnection": CLIENT_CONNECTION, "enableProfiling": bool,
    "enableContentionProfiling": bool, "percentageOfNodesToScore": int,
    "podInitialBackoffSeconds": int, "podMaxBackoffSeconds": int, "profiles": [PROFILE],
    "extenders": [EXTENDER_V1], "delayCacheUntilActive": bool,
}


def schema_errors(value, schema, path="$"):
    """Every place where value does not match schema, as 'path: problem'."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: want an object"]
        errs = []
        for key, sub in value.items():
            if key not in schema:
                errs.append(f"{path}.{key}: not a field of the v1 API")
            else:
                errs += schema_errors(sub, schema[key], f"{path}.{key}")
        return errs
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: want a list"]
        errs = []
        for i, item in enumerate(value):
            errs += schema_errors(item, schema[0], f"{path}[{i}]")
        return errs
    if schema == "duration":
        ok = isinstance(value, str) and DURATION.match(value)
        return [] if ok else [f"{path}: {value!r} is not a duration (e.g. 30s)"]
    if schema is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif schema is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, schema)
    return [] if ok else [f"{path}: {value!r} is not a {schema.__name__}"]


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def extender_semantics(ext):
    """What must agree between files: everything but where the extender is."""
    out = dict(ext)
    out.pop("urlPrefix")
    out["path"] = re.sub(r"^https?://[^/]+", "", ext["urlPrefix"])
    if isinstance(out.get("httpTimeout"), int):  # the Policy file's nanoseconds
        out["httpTimeout"] = f"{out['httpTimeout'] // 1000000000}s"
    if "enableHttps" in out:
        out["enableHTTPS"] = out.pop("enableHttps")
    return out


def check_v1(cfg):
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    errs = schema_errors(cfg, CONFIG_V1)
    assert not errs, "\n".join(errs)
    (ext,) = cfg["extenders"]
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        assert ext[verb], verb
    assert ext["weight"] > 0
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    assert ext["enableHTTPS"] is False and ext["urlPrefix"].startswith("http://")
    assert ext["urlPrefix"].endswith("/gpupool-scheduler")
    managed = {m["name"]: m["ignoredByScheduler"] for m in ext["managedResources"]}
    # kube-scheduler's own fit must keep checking the totals the kubelet admits against.
    assert managed == {"aliyun.com/gpu-mem": False, "aliyun.com/gpu-count": False,
                       "gpupool.io/gpu-cores": False}
    # bind makes two API calls of up to 10 s (--api-timeout): the timeout must cover both.
    assert DURATION.match(ext["httpTimeout"]) and ext["httpTimeout"] == "30s"
    return ext


def test_schema_checker_catches_mistakes():
    bad = {"apiVersion": "x", "kind": "y", "extenders": [dict(urlPrefix="http://a", enableHttps=False,
                                                              httpTimeout=30000000000, weight="5")],
           "healthzBindAddress": "0.0.0.0:10251"}
    errs = "\n".join(schema_errors(bad, CONFIG_V1))
    assert "enableHttps: not a field" in errs  # the Policy spelling
    assert "httpTimeout: 30000000000 is not a duration" in errs
    assert "weight: '5' is not a int" in errs
    assert "healthzBindAddress: not a field" in errs  # removed after v1beta2


def test_v1_configuration_for_kubeadm():
    ext = check_v1(load_yaml(V1_FILE))
    assert ext["urlPrefix"] == f"http://{CLUSTER_IP}:39999/gpupool-scheduler"
    assert load_yaml(V1_FILE)["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"


def test_secondary_scheduler_configuration():
    cfg = load_yaml(SECOND_FILE)
    ext = check_v1(cfg)
    assert cfg["profiles"] == [{"schedulerName": "gpupool-scheduler"}]
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True and le["resourceName"] == "gpupool-scheduler"
    assert le["resourceNamespace"] == "kube-system" and le["resourceLock"] == "leases"
    assert "clientConnection" not in cfg  # in-cluster ServiceAccount
    assert ext["urlPrefix"] == "http://gpupool-scheduler-extender.kube-system.svc:39999/gpupool-scheduler"


def test_every_file_configures_the_same_extender():
    files = {V1_FILE: load_yaml(V1_FILE), V1BETA1_FILE: load_yaml(V1BETA1_FILE),
             SECOND_FILE: load_yaml(SECOND_FILE), TWIN_FILE: load_yaml(TWIN_FILE)}
    with open(POLICY_FILE, encoding="utf-8") as f:
        files[POLICY_FILE] = json.load(f)
    want = extender_semantics(files[V1_FILE]["extenders"][0])
    for path, cfg in files.items():
        assert extender_semantics(cfg["extenders"][0]) == want, path
    # The e2e twin differs from the shipped v1 file only where 1.20 or the test cluster must.
    twin, second = files[TWIN_FILE], files[SECOND_FILE]
    assert twin["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert twin["profiles"] == second["profiles"] and twin["leaderElection"] == second["leaderElection"]
    assert twin["extenders"][0]["urlPrefix"] == f"http://{CLUSTER_IP}:39999/gpupool-scheduler"


def kubectl():
    for cand in (os.path.join(os.environ.get("K8S_BIN", ""), "kubectl"),
                 "/var/cache/gpupool-k8s/bin/kubectl", shutil.which("kubectl") or ""):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def build(overlay):
    exe = kubectl()
    if exe is None:
        pytest.skip("no kubectl to run kustomize")
    out = subprocess.run([exe, "kustomize", os.path.join(DEPLOY, "overlays", overlay)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(docs, kind, name):
    pat = re.compile(re.escape(name) + r"(-[a-z0-9]{10})?$")  # generated ConfigMaps carry a hash
    hits = [d for d in docs if d["kind"] == kind and pat.match(d["metadata"]["name"])]
    assert len(hits) == 1, (kind, name, [d["metadata"]["name"] for d in docs])
    return hits[0]


def env_of(workload):
    c = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in c.get("env", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds(overlay):
    docs = build(overlay)
    text = yaml.safe_dump_all(docs)
    # kubeadm dropped the master label in 1.24: nothing may require it.
    assert "nodeSelector:\n        node-role.kubernetes.io/master" not in text
    for d in docs:
        if d["kind"] == "ConfigMap":
            continue
        assert d["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "gpupool", \
            (d["kind"], d["metadata"]["name"])


def test_gpu_mem_overlay_extender_on_its_service():
    docs = build("gpu-mem")
    dep = find(docs, "Deployment", "gpupool-scheduler-extender")
    svc = find(docs, "Service", "gpupool-scheduler-extender")
    spec = dep["spec"]["template"]["spec"]
    assert not spec.get("hostNetwork") and "nodeSelector" not in spec
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["nodeAffinity"]
    # Every interface, set explicitly (the binary's default is loopback): the Service, the
    # kubelet's probes, scrapes and kubectl port-forward all reach it.
    assert env_of(dep)["GP_ADDRESS"] == "0.0.0.0"
    # Used beside booked on by default, read directly at each node's address:
    # the agent's metrics port is on the node (hostPort), and the extender
    # needs no nodes/proxy (docs/extender.md, "Used beside booked").
    assert env_of(dep)["GP_UI_NODE_METRICS_PORT"] == "9401"
    assert "GP_UI_NODE_METRICS_FROM" not in env_of(dep)       # direct, the default
    plugin = find(docs, "DaemonSet", "gpupool-device-plugin")["spec"]["template"]["spec"]
    (metrics,) = [p for p in plugin["containers"][0]["ports"] if p["name"] == "metrics"]
    assert metrics["containerPort"] == metrics["hostPort"] == 9401
    role = find(docs, "ClusterRole", "gpupool-scheduler-extender")
    assert not any("nodes/proxy" in r["resources"] for r in role["rules"])
    assert svc["spec"]["clusterIP"] == CLUSTER_IP
    ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert ports == {"http": 39999, "metrics": 39998}
    for meta in (dep["spec"]["template"]["metadata"], svc["metadata"]):
        assert meta["annotations"]["prometheus.io/scrape"] == "true"
        assert meta["annotations"]["prometheus.io/port"] == "39998"
    cm = find(docs, "ConfigMap", "gpupool-scheduler-config")
    assert set(cm["data"]) == {"scheduler-config-v1.yaml", "scheduler-config-v1beta1.yaml",
                               "scheduler-policy-config.json"}


def check_extender_ha(docs, replicas, min_available):
    """Several replicas, only the Lease holder binds (docs/ha.md)."""
    dep = find(docs, "Deployment", "gpupool-scheduler-extender")
    assert dep["spec"]["replicas"] == replicas
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert "--leader-elect" in c["args"]
    pod_ip = [e for e in c["env"] if e["name"] == "POD_IP"]
    assert pod_ip and pod_ip[0]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == \
        dep["spec"]["selector"]["matchLabels"]
    pdb = find(docs, "PodDisruptionBudget", "gpupool-scheduler-extender")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == min_available
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    # The Lease: create in kube-system (cannot name a resource), get and
    # update of its own Lease only.
    role = find(docs, "Role", "gpupool-scheduler-extender")
    assert role["metadata"]["namespace"] == "kube-system"
    lease_rules = [r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"]]
    assert {(tuple(r["verbs"]), tuple(r.get("resourceNames", []))) for r in lease_rules} == {
        (("create",), ()), (("get", "update"), ("gpupool-scheduler-extender",))}
    assert all(r["resources"] == ["leases"] for r in lease_rules)
    for d in docs:
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpupool-scheduler-extender":
            assert not [r for r in d["rules"] if "coordination.k8s.io" in r["apiGroups"]]


def test_gpu_mem_overlay_two_replicas_leader_elected():
    check_extender_ha(build("gpu-mem"), replicas=2, min_available=1)


def test_gpu_mem_ha_overlay_three_replicas():
    check_extender_ha(build("gpu-mem-ha"), replicas=3, min_available=2)


def test_secondary_scheduler_overlay():
    docs = build("secondary-scheduler")
    svc = find(docs, "Service", "gpupool-scheduler-extender")
    assert "clusterIP" not in svc["spec"]  # managed clusters have other Service ranges
    dep = find(docs, "Deployment", "gpupool-scheduler")
    spec = dep["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpupool-scheduler"
    assert re.match(r"^registry\.k8s\.io/kube-scheduler:v1\.[0-9]+\.[0-9]+$", spec["containers"][0]["image"])
    cm_name = spec["volumes"][0]["configMap"]["name"]
    cm = find(docs, "ConfigMap", cm_name)
    check_v1(yaml.safe_load(cm["data"]["gpupool-scheduler-config.yaml"]))
    roles = {(d["kind"], d["roleRef"]["name"]) for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and d["subjects"][0]["name"] == "gpupool-scheduler"}
    assert roles == {("ClusterRoleBinding", "system:kube-scheduler"),
                     ("ClusterRoleBinding", "system:volume-scheduler"),
                     ("RoleBinding", "extension-apiserver-authentication-reader"),
                     ("RoleBinding", "gpupool-scheduler-lease")}
    lease = find(docs, "Role", "gpupool-scheduler-lease")
    assert lease["rules"][0]["resourceNames"] == ["gpupool-scheduler"]


def test_gpushare_overlay_serves_gpushares_url():
    docs = build("gpushare")
    assert not [d for d in docs if d["kind"] in ("Deployment", "Service")]
    ds = find(docs, "DaemonSet", "gpupool-scheduler-extender")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert env_of(ds)["GP_ADDRESS"] == "127.0.0.1" and env_of(ds)["PORT"] == "32766"
    with open(os.path.join(ROOT, "test", "e2e", "gpushare", "scheduler-policy-config.json"), encoding="utf-8") as f:
        assert json.load(f)["extenders"][0]["urlPrefix"] == "http://127.0.0.1:32766/gpushare-scheduler"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = sorted(t["matchExpressions"][0]["key"] for t in terms)
    assert keys == ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"]


def test_dra_overlay_runs_the_dra_plugin_instead_of_the_device_plugin():
    docs = build("dra")
    assert not [d for d in docs if d["metadata"]["name"] == "gpupool-device-plugin"]
    ds = find(docs, "DaemonSet", "gpupool-dra-plugin")
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpupool-dra-plugin"
    (c,) = pod["containers"]
    assert c["command"] == ["/usr/bin/gpupool-dra-plugin"]
    # The same image as the device plugin (one image, two programs).
    base = yaml.safe_load(open(os.path.join(DEPLOY, "base", "device-plugin.yaml")))
    assert c["image"] == base["spec"]["template"]["spec"]["containers"][0]["image"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["DRIVER_NAME"]["value"] == "gpu.gpupool.io"
    assert env["GP_CONSUMABLE_CAPACITY"]["value"] == "auto"
    # Every directory the kubelet, the runtime and the containers share is the host's own path.
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    hostpaths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    for path in ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi",
                 "/var/lib/gpupool/isolation"):
        name = next(n for n, m in mounts.items() if m == path)
        assert hostpaths[name] == path, name
    assert env["GP_ISOLATION_DIR"]["value"] == "/var/lib/gpupool/isolation"
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # RBAC: what the plugin calls, nothing more.
    role = find(docs, "ClusterRole", "gpupool-dra-plugin")
    rules = {(g, r): sorted(rule["verbs"]) for rule in role["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == {
        ("resource.k8s.io", "resourceslices"): sorted(["create", "get", "list", "watch", "update",
                                                        "delete"]),
        ("resource.k8s.io", "resourceclaims"): ["get", "list", "watch"],
        ("", "nodes"): ["get"],
        ("", "events"): ["create"],
    }
    binding = find(docs, "ClusterRoleBinding", "gpupool-dra-plugin")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpupool-dra-plugin",
                                    "namespace": "kube-system"}]


def test_dra_device_classes():
    docs = build("dra")
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeviceClass"}
    assert set(classes) == {"gpu.gpupool.io", "gpu-mem.gpupool.io", "mig.gpupool.io"}
    for name, dc in classes.items():
        assert dc["apiVersion"] == "resource.k8s.io/v1"
        (sel,) = dc["spec"]["selectors"]
        expr = sel["cel"]["expression"]
        assert "device.driver == 'gpu.gpupool.io'" in expr
        want = "mig" if name.startswith("mig") else "gpu"
        assert "device.attributes['gpu.gpupool.io'].type == '%s'" % want in expr
    # Plain nvidia.com/gpu pods are served by the whole-GPU class, and only by it.
    assert classes["gpu.gpupool.io"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in classes["gpu-mem.gpupool.io"]["spec"]
    assert "extendedResourceName" not in classes["mig.gpupool.io"]["spec"]


def test_examples_are_pods_with_gpu_requests():
    files = sorted(glob.glob(os.path.join(DEPLOY, "examples", "*.yaml")))
    assert len(files) >= 6
    for path in files:
        pod = load_yaml(path)
        assert pod["kind"] == "Pod", path
        containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
        limits = [c.get("resources", {}).get("limits", {}) for c in containers]
        assert any(set(lim) & {"nvidia.com/gpu", "aliyun.com/gpu-mem"} for lim in limits), path


def test_license_is_apache_2():
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        text = f.read()
    # The text apache.org publishes (also Debian's /usr/share/common-licenses/Apache-2.0).
    assert hashlib.sha256(text).hexdigest() == \
        "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
