"""kubectl-gpupool and kubectl-inspect-gpushare against the fake API server.

The gpushare tables are compared byte for byte: their alignment follows Go's
text/tabwriter (padding 2), separators are as long as the first row + 20
(summary) or the first node's pod rows + 10 (detail), percentages truncate.

    GP_BUILD_DIR       build tree holding bin/kubectl-gpupool (default ./build)
    GP_PLUGIN_WRAPPER  command line kubectl-gpupool runs under (valgrind); see conftest.py
"""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))

from conftest import run_program  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402

BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
GPUPOOL = os.path.join(BUILD, "bin", "kubectl-gpupool")
GPUSHARE = os.path.join(BUILD, "bin", "kubectl-inspect-gpushare")

pytestmark = pytest.mark.skipif(not os.path.exists(GPUPOOL), reason="kubectl-gpupool not built")

GPUS_ANNOTATION = json.dumps([
    {"index": 0, "memory": 16, "model": "Tesla-V100-SXM2-16GB", "healthy": True},
    {"index": 1, "memory": 32, "model": "Tesla-V100-SXM2-32GB", "healthy": True},
])


def node(name, ip, mem=None, count=None, annotations=None, extra=None):
    alloc = {"cpu": "8", "memory": "32Gi"}
    if mem is not None:
        alloc["aliyun.com/gpu-mem"] = str(mem)
    if count is not None:
        alloc["aliyun.com/gpu-count"] = str(count)
    alloc.update(extra or {})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annotations or {}},
            "status": {"addresses": [{"type": "Hostname", "address": name},
                                     {"type": "InternalIP", "address": ip}],
                       "capacity": dict(alloc), "allocatable": alloc}}


def pod(ns, name, node_name, mem=None, idx=None, phase="Running", limits=None, annotations=None):
    ann = dict(annotations or {})
    if idx is not None:
        ann["ALIYUN_COM_GPU_MEM_IDX"] = idx
    lim = dict(limits or {})
    if mem is not None:
        lim["aliyun.com/gpu-mem"] = str(mem)
    spec = {"containers": [{"name": "main", "image": "x", "resources": {"limits": lim}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": ann},
            "spec": spec, "status": {"phase": phase}}


def fixture():
    return {
        "nodes": [
            node("gpu-a", "192.168.0.70", 30, 2),
            node("gpu-b", "192.168.0.71", 48, 2, {"gpupool.io/gpus": GPUS_ANNOTATION}),
            node("gpu-c", "192.168.0.72", 8, 1),
            node("whole", "192.168.0.73", extra={"nvidia.com/gpu": "4"}),
            node("cpu-only", "192.168.0.74"),
        ],
        "pods": [
            pod("default", "binpack-1", "gpu-a", 3, "0"),
            pod("default", "binpack-2", "gpu-a", 5, "1"),
            pod("ml", "trainer", "gpu-b", 20, "1"),
            pod("ml", "split", "gpu-b", 8, "0,1"),
            pod("ml", "waiting", "gpu-c", 2),                 # bound, no index yet
            pod("ml", "finished", "gpu-c", 4, "0", phase="Succeeded"),
            pod("ml", "unscheduled", None, 4),
            pod("default", "cuda", "whole", limits={"nvidia.com/gpu": "3"}),
            pod("default", "web", "cpu-only"),
        ],
        "configmaps": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "unhealthy-gpu-gpu-a", "namespace": "kube-system"},
             "data": {"gpus": "1"}},
        ],
    }


def write_kubeconfig(path, server, context="test", extra_contexts=()):
    contexts = [(context, "fake")] + list(extra_contexts)
    lines = ["apiVersion: v1", "kind: Config", "clusters:",
             "- name: fake", "  cluster:", "    server: %s" % server,
             "- name: nowhere", "  cluster:", "    server: http://127.0.0.1:1",
             "users:", "- name: u", "  user:", "    token: t0k3n", "contexts:"]
    for name, cluster in contexts:
        lines += ["- name: %s" % name, "  context:", "    cluster: %s" % cluster, "    user: u"]
    lines.append("current-context: %s" % context)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


@pytest.fixture
def api():
    srv = FakeApiServer(fixture=fixture()).start()
    yield srv
    srv.stop()


@pytest.fixture
def kubeconfig(api, tmp_path):
    return write_kubeconfig(str(tmp_path / "config"), api.url,
                            extra_contexts=[("broken", "nowhere")])


def run(binary, args, kubeconfig=None, env_kubeconfig=None):
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["HOME"] = "/nonexistent"
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    if env_kubeconfig:
        env["KUBECONFIG"] = env_kubeconfig
    argv = [binary] + list(args)
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    proc = run_program(argv, env=env)
    assert "Sanitizer" not in proc.stderr, proc.stderr
    return proc


SUMMARY = (
    "NAME   IPADDRESS     GPU0(Allocated/Total)  GPU1(Allocated/Total)  PENDING(Allocated)  GPU Memory(GiB)\n"
    "gpu-a  192.168.0.70  3/15                   5/15                                       8/30\n"
    "gpu-b  192.168.0.71  4/16                   24/32                                      28/48\n"
    "gpu-c  192.168.0.72  0/8                    0/0                    2                   2/8\n"
    + "-" * (len("gpu-a\t192.168.0.70\t3/15\t5/15\t\t8/30\n") + 20) + "\n"
    "Allocated/Total GPU Memory In Cluster:\n"
    "38/86 (44%)  \n")


def test_gpushare_summary_byte_exact(kubeconfig):
    proc = run(GPUSHARE, [], env_kubeconfig=kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == SUMMARY


DETAILS = (
    "\n"
    "NAME:       gpu-a\n"
    "IPADDRESS:  192.168.0.70\n"
    "\n"
    "NAME         NAMESPACE  GPU0(Allocated)  GPU1(Allocated)  \n"
    "binpack-1    default    3                0                \n"
    "binpack-2    default    0                5                \n"
    "Allocated :  8 (26%)    \n"
    "Total :      30         \n"
    + "-" * (2 * len("binpack-1\tdefault\t3\t0\t\n") + 10) + "\n"
    "\n"
    "NAME:       gpu-b\n"
    "IPADDRESS:  192.168.0.71\n"
    "\n"
    "NAME         NAMESPACE  GPU0(Allocated)  GPU1(Allocated)  \n"
    "split        ml         4                4                \n"
    "trainer      ml         0                20               \n"
    "Allocated :  28 (58%)   \n"
    "Total :      48         \n"
    + "-" * (2 * len("binpack-1\tdefault\t3\t0\t\n") + 10) + "\n"
    "\n"
    "NAME:       gpu-c\n"
    "IPADDRESS:  192.168.0.72\n"
    "\n"
    "NAME         NAMESPACE  GPU0(Allocated)  Pending(Allocated)  \n"
    "waiting      ml         0                2                   \n"
    "Allocated :  2 (25%)    \n"
    "Total :      8          \n"
    + "-" * (2 * len("binpack-1\tdefault\t3\t0\t\n") + 10) + "\n"
    "\n"
    "\n"
    "Allocated/Total GPU Memory In Cluster:  38/86 (44%)  \n")


def test_gpushare_details_byte_exact(kubeconfig):
    proc = run(GPUSHARE, ["-d"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == DETAILS


def test_gpushare_one_node_uses_a_field_selector(api, kubeconfig):
    proc = run(GPUSHARE, ["gpu-a"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("gpu-a  192.168.0.70  3/15")
    assert "gpu-b" not in proc.stdout
    reqs = [(r["method"], r["path"], r["query"]) for r in api.requests()]
    assert ("GET", "/api/v1/nodes/gpu-a", {}) in reqs
    pods = [q for m, p, q in reqs if p == "/api/v1/pods"]
    assert pods and all(q.get("fieldSelector") == "spec.nodeName=gpu-a" for q in pods)
    assert all(p != "/api/v1/nodes" for m, p, q in reqs)


def test_gpupool_table(kubeconfig):
    proc = run(GPUPOOL, ["inspect"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["NAME", "IPADDRESS", "GPUS", "GPU", "MEMORY(ALLOCATED/TOTAL)",
                                "PER", "GPU", "PENDING", "UNHEALTHY",
                                "NVIDIA.COM(REQUESTED/ALLOCATABLE)"]
    rows = {line.split()[0]: line for line in lines[1:5]}
    assert list(rows) == ["gpu-a", "gpu-b", "gpu-c", "whole"]    # sorted; cpu-only is no GPU node
    assert lines[5] == ""
    assert "8/30 GiB (26%)" in rows["gpu-a"] and "3/15 5/15" in rows["gpu-a"]
    assert rows["gpu-a"].split()[-2:] == ["1", "-"]          # unhealthy GPU 1, no nvidia.com
    assert "4/16 24/32" in rows["gpu-b"]
    assert "2 GiB (1 pod)" in rows["gpu-c"]
    assert rows["whole"].split()[-2:] == ["gpu", "3/4"]
    # mixed: 5 GPU-memory GPUs and the 4 whole GPUs of "whole"
    assert "Cluster: 4 nodes, 9 GPUs (1 unhealthy)" in proc.stdout
    assert "GPU memory allocated: 38/86 GiB (44%), 2 GiB pending (1 pod)" in proc.stdout
    assert "nvidia.com/gpu requested: 3/4 (75%)" in proc.stdout


def test_gpupool_wide_shows_models_per_gpu(kubeconfig):
    proc = run(GPUPOOL, ["inspect", "-o", "wide"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    rows = [l.split() for l in proc.stdout.splitlines() if l.startswith("gpu-b")]
    assert rows[0][2:4] == ["0", "Tesla-V100-SXM2-16GB"] and rows[0][4] == "4/16"
    assert rows[1][2:4] == ["1", "Tesla-V100-SXM2-32GB"] and rows[1][4] == "24/32"
    health = [l.split()[-1] for l in proc.stdout.splitlines() if l.startswith("gpu-a  ")]
    assert health == ["Healthy", "Unhealthy"]


def test_gpupool_json(kubeconfig):
    proc = run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "GPUPool" and doc["unit"] == "GiB"
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert sorted(nodes) == ["gpu-a", "gpu-b", "gpu-c", "whole"]
    b = nodes["gpu-b"]
    assert b["address"] == "192.168.0.71" and b["unit"] == "GiB"
    assert b["memory"] == {"allocated": 28, "total": 48, "pending": 0}
    assert [g["memory"] for g in b["gpus"]] == [{"allocated": 4, "total": 16},
                                                {"allocated": 24, "total": 32}]
    assert [g["model"] for g in b["gpus"]] == ["Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB"]
    assert {(p["name"], p["memory"]) for p in b["gpus"][1]["pods"]} == {("trainer", 20), ("split", 4)}
    assert [g["healthy"] for g in nodes["gpu-a"]["gpus"]] == [True, False]
    assert nodes["gpu-c"]["pending"] == [{"namespace": "ml", "name": "waiting", "memory": 2}]
    assert nodes["whole"]["resources"] == [{"name": "nvidia.com/gpu", "requested": 3, "allocatable": 4,
                                            "pods": [{"namespace": "default", "name": "cuda", "count": 3}]}]
    c = doc["cluster"]
    assert c["nodes"] == 4 and c["gpus"] == 5 and c["unhealthyGPUs"] == 1
    assert c["memory"] == {"allocated": 38, "total": 86, "pending": 2, "pendingPods": 1}
    assert c["resources"] == [{"name": "nvidia.com/gpu", "requested": 3, "allocatable": 4}]


def test_namespace_filters_pod_lists_not_totals(kubeconfig):
    doc = json.loads(run(GPUPOOL, ["inspect", "-n", "default", "-o", "json"], kubeconfig).stdout)
    b = {n["name"]: n for n in doc["nodes"]}["gpu-b"]
    assert b["gpus"][1]["pods"] == [] and b["memory"]["allocated"] == 28


def test_details_view_lists_pods(kubeconfig):
    proc = run(GPUPOOL, ["inspect", "gpu-b", "-d"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert "NODE: gpu-b (192.168.0.71)" in proc.stdout
    split = [l.split() for l in proc.stdout.splitlines() if " split " in l][0]
    assert split == ["ml", "split", "0,1", "8", "GiB", "(4+4)"]


def test_cores_booked_per_gpu(api, kubeconfig):
    """gpupool.io/gpu-cores: booked on each GPU of the pod beside its memory; the details
    table gains a CORES column only on a node where some pod books cores."""
    api.put_object("pods", pod("ml", "fast", "gpu-a", 2, "0", limits={"gpupool.io/gpu-cores": "30"}))
    api.put_object("pods", pod("ml", "pair", "gpu-b", 4, "0,1",
                               limits={"gpupool.io/gpu-cores": "20"}))
    doc = json.loads(run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig).stdout)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert [g["cores"] for g in nodes["gpu-a"]["gpus"]] == [{"booked": 30, "total": 100},
                                                            {"booked": 0, "total": 100}]
    assert [g["cores"]["booked"] for g in nodes["gpu-b"]["gpus"]] == [20, 20]
    assert [g["cores"]["booked"] for g in nodes["gpu-c"]["gpus"]] == [0]
    proc = run(GPUPOOL, ["inspect", "gpu-a", "-d"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = [l for l in lines if l.split()[:2] == ["GPU", "MODEL"]][0]
    assert head.split() == ["GPU", "MODEL", "MEMORY(ALLOCATED/TOTAL)", "CORES(BOOKED/TOTAL)",
                            "PODS", "HEALTH"]
    row0 = [l for l in lines if l.startswith("0 ")][0].split()
    assert row0[5] == "30/100", row0
    proc = run(GPUPOOL, ["inspect", "gpu-c", "-d"], kubeconfig)
    assert "CORES" not in proc.stdout


def bulk_nodes(api, count):
    template = node("x", "10.1.0.1", 64, 8)
    del template["metadata"]["name"]
    api_bulk = {"resource": "nodes", "count": count, "prefix": "bulk-", "template": template}
    import urllib.request
    req = urllib.request.Request(api.url + "/_fake/bulk", data=json.dumps(api_bulk).encode(),
                                 method="POST")
    urllib.request.urlopen(req).read()
    api.clear_requests()


def test_watch_cache_lists_in_parallel_and_no_per_node_requests(api, kubeconfig):
    bulk_nodes(api, 1203)
    proc = run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["cluster"]["nodes"] == 1207 and doc["cluster"]["gpus"] == 5 + 1203 * 8
    reqs = api.requests()
    # (and DRA's ResourceSlices, empty here: no claims are then read)
    assert {r["path"] for r in reqs} == {"/api/v1/nodes", "/api/v1/pods",
                                         "/api/v1/namespaces/kube-system/configmaps",
                                         "/apis/resource.k8s.io/v1/resourceslices"}
    # One answer per collection, from the watch cache (resourceVersion=0).
    assert len(reqs) == 4
    assert all(r["query"].get("resourceVersion") == "0" for r in reqs)
    # The pods on a connection of their own, read beside the nodes.
    conn = {r["path"]: r["conn"] for r in reqs}
    assert conn["/api/v1/pods"] != conn["/api/v1/nodes"]
    assert conn["/api/v1/namespaces/kube-system/configmaps"] == conn["/api/v1/nodes"]


def test_cache_false_pages_consistent_reads(api, kubeconfig):
    bulk_nodes(api, 1203)
    cached = run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig)
    api.clear_requests()
    proc = run(GPUPOOL, ["inspect", "-o", "json", "--cache=false"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == cached.stdout
    node_lists = [r for r in api.requests() if r["path"] == "/api/v1/nodes"]
    assert len(node_lists) == 3                     # 1208 nodes, 500 a page
    assert all(r["query"].get("limit") == "500" for r in node_lists)
    assert all("resourceVersion" not in r["query"] for r in api.requests())
    assert [bool(r["query"].get("continue")) for r in node_lists] == [False, True, True]


def test_without_a_watch_cache_lists_still_page(api, kubeconfig):
    api.watch_cache = False
    bulk_nodes(api, 1203)
    proc = run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cluster"]["nodes"] == 1207
    node_lists = [r for r in api.requests() if r["path"] == "/api/v1/nodes"]
    assert [r["query"].get("resourceVersion") for r in node_lists] == ["0", None, None]


def test_pods_list_failure_is_reported(api, kubeconfig):
    api.add_fault(method="GET", path="/api/v1/pods", status=403, reason="Forbidden",
                  message='pods is forbidden: User "u" cannot list resource "pods"', count=-1)
    proc = run(GPUPOOL, ["inspect"], kubeconfig)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ('Error from server (Forbidden): pods is forbidden: User "u" cannot '
                           'list resource "pods"\n'), proc.stderr


def test_list_broken_off_mid_items_starts_over_once(api, kubeconfig):
    whole = run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig)
    assert whole.returncode == 0, whole.stderr
    api.clear_requests()
    api.add_fault(method="GET", path="/api/v1/pods", action="cut", count=1)  # half of it
    again = run(GPUPOOL, ["inspect", "-o", "json", "-v", "1"], kubeconfig)
    assert again.returncode == 0, again.stderr
    assert again.stdout == whole.stdout
    assert "starting over: GET /api/v1/pods" in again.stderr and "broke off after" in again.stderr
    paths = [r["path"] for r in api.requests()]
    assert paths.count("/api/v1/pods") == 2 and paths.count("/api/v1/nodes") == 2
    # Twice in a row: reported, not looped.
    api.add_fault(method="GET", path="/api/v1/pods", action="cut", count=2)
    proc = run(GPUPOOL, ["inspect"], kubeconfig)
    assert proc.returncode == 1 and "broke off after" in proc.stderr, proc.stderr


def test_context_flag_and_unreachable_server(kubeconfig):
    proc = run(GPUPOOL, ["inspect", "--context", "broken"], kubeconfig)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "127.0.0.1 port 1" in proc.stderr, proc.stderr
    proc = run(GPUSHARE, ["--context", "broken"], kubeconfig)
    assert proc.returncode == 1 and proc.stdout.startswith("Failed due to ")
    proc = run(GPUPOOL, ["inspect", "--context", "no-such"], kubeconfig)
    assert proc.returncode == 1 and "no-such" in proc.stderr


def test_forbidden_shows_the_status_message(api, kubeconfig):
    message = 'nodes is forbidden: User "bob" cannot list resource "nodes" in API group "" at the cluster scope'
    api.add_fault(method="GET", path="^/api/v1/nodes$", status=403, reason="Forbidden",
                  message=message, count=-1)
    proc = run(GPUPOOL, ["inspect"], kubeconfig)
    assert proc.returncode == 1
    assert proc.stderr == "Error from server (Forbidden): %s\n" % message
    proc = run(GPUSHARE, [], kubeconfig)
    assert proc.returncode == 1 and proc.stdout == "Failed due to %s\n" % message


def test_configmaps_forbidden_is_a_warning(api, kubeconfig):
    api.add_fault(method="GET", path="configmaps", status=403, reason="Forbidden",
                  message="configmaps is forbidden", count=-1)
    proc = run(GPUPOOL, ["inspect"], kubeconfig)
    assert proc.returncode == 0
    assert "warning: unhealthy-GPU ConfigMaps not readable: configmaps is forbidden" in proc.stderr
    assert "(1 unhealthy)" not in proc.stdout
    proc = run(GPUSHARE, [], kubeconfig)                # gpushare never read them: same table
    assert proc.returncode == 0 and proc.stdout == SUMMARY


def test_bad_kubeconfig(tmp_path):
    bad = tmp_path / "config"
    bad.write_text("apiVersion: v1\nclusters: [\n")
    proc = run(GPUPOOL, ["inspect"], str(bad))
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and str(bad) in proc.stderr
    proc = run(GPUPOOL, ["inspect"], str(tmp_path / "missing"))
    assert proc.returncode == 1 and "missing" in proc.stderr


def test_usage_errors(kubeconfig):
    assert run(GPUPOOL, [], kubeconfig).returncode == 2
    proc = run(GPUPOOL, ["frobnicate"], kubeconfig)
    assert proc.returncode == 2 and 'unknown command "frobnicate"' in proc.stderr
    proc = run(GPUPOOL, ["inspect", "-o", "yaml"], kubeconfig)
    assert proc.returncode == 2 and "yaml" in proc.stderr
    proc = run(GPUPOOL, ["inspect", "a", "b"], kubeconfig)
    assert proc.returncode == 2 and "at most one node" in proc.stderr
    proc = run(GPUPOOL, ["inspect", "--bogus"], kubeconfig)
    assert proc.returncode == 2 and "--bogus" in proc.stderr
    proc = run(GPUPOOL, ["--help"])
    assert proc.returncode == 0 and "kubectl gpupool inspect" in proc.stdout


def test_missing_node(kubeconfig):
    proc = run(GPUPOOL, ["inspect", "nope"], kubeconfig)
    assert proc.returncode == 1
    assert proc.stderr == 'Error from server (NotFound): nodes "nope" not found\n'


PROTOBUF = "application/vnd.kubernetes.protobuf"


@pytest.mark.parametrize("args", [
    ["inspect"], ["inspect", "-o", "wide"], ["inspect", "-o", "json"], ["inspect", "-d"],
    ["inspect", "--cache=false", "-d"], ["inspect", "gpu-b", "-d"]])
def test_protobuf_and_json_answers_print_the_same(api, kubeconfig, args):
    """The node, pod and configmap LISTs ask for protobuf; a server that
    answers JSON instead gives byte-identical output."""
    as_protobuf = run(GPUPOOL, args, kubeconfig)
    # (-o wide also asks the node agents, through the node proxy: text, not lists)
    # (DRA's collections are read as JSON: the client decodes protobuf for core kinds only)
    lists = [r for r in api.requests()
             if r["path"] != "/api/v1/nodes/gpu-b" and "/proxy/" not in r["path"]
             and not r["path"].startswith("/apis/resource.k8s.io/")]
    assert lists and all(PROTOBUF in r["headers"]["Accept"] and r["content_type"] == PROTOBUF
                         for r in lists)
    api.clear_requests()
    api.protobuf = False
    as_json = run(GPUPOOL, args, kubeconfig)
    assert all(r["content_type"] == "application/json" for r in api.requests()
               if "/proxy/" not in r["path"])
    assert as_protobuf.returncode == as_json.returncode == 0, as_protobuf.stderr
    assert as_protobuf.stdout == as_json.stdout and as_protobuf.stdout


def test_gpushare_tables_the_same_from_protobuf(api, kubeconfig):
    summary, details = run(GPUSHARE, [], kubeconfig), run(GPUSHARE, ["-d"], kubeconfig)
    api.protobuf = False
    assert summary.stdout == run(GPUSHARE, [], kubeconfig).stdout == SUMMARY
    assert details.stdout == run(GPUSHARE, ["-d"], kubeconfig).stdout


# ---- whole-GPU and time-slicing clusters (no aliyun.com/gpu-mem) ----

def gfd_node(name, ip, gpus, product, replicas=None, allocatable=None):
    """A node of NVIDIA's plugin with GPU feature discovery labels."""
    n = node(name, ip, extra={"nvidia.com/gpu": str(gpus * (replicas or 1))})
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
    if replicas:
        labels["nvidia.com/gpu.replicas"] = str(replicas)
    n["metadata"]["labels"] = labels
    if allocatable is not None:     # a device unhealthy: capacity stays, allocatable drops
        n["status"]["allocatable"]["nvidia.com/gpu"] = str(allocatable)
    return n


@pytest.fixture
def whole_api():
    srv = FakeApiServer(fixture={
        "nodes": [gfd_node("t4-a", "10.0.0.1", 4, "Tesla-T4", allocatable=3),
                  gfd_node("a100-ts", "10.0.0.2", 2, "NVIDIA-A100-SXM4-40GB", replicas=4)],
        "pods": [pod("ml", "train", "t4-a", limits={"nvidia.com/gpu": "2"}),
                 pod("ml", "share-1", "a100-ts", limits={"nvidia.com/gpu": "1"}),
                 pod("ml", "share-2", "a100-ts", limits={"nvidia.com/gpu": "2"})],
    }).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("protobuf", [True, False])
def test_whole_gpu_cluster_counts_gpus(whole_api, tmp_path, protobuf):
    whole_api.protobuf = protobuf       # labels and capacity come through both encodings
    cfg = write_kubeconfig(str(tmp_path / "config"), whole_api.url)
    proc = run(GPUPOOL, ["inspect"], cfg)
    assert proc.returncode == 0, proc.stderr
    rows = {l.split()[0]: l for l in proc.stdout.splitlines()[1:3]}
    assert rows["t4-a"].split()[2:4] == ["4", "-"]           # 4 GPUs, no GPU memory
    assert rows["a100-ts"].split()[2] == "2"                  # 8 replicas of 2 GPUs
    assert "Cluster: 2 nodes, 6 GPUs\n" in proc.stdout
    assert "GPU memory allocated" not in proc.stdout
    assert "0/0" not in proc.stdout
    assert "nvidia.com/gpu requested: 5/11 (45%)" in proc.stdout

    wide = run(GPUPOOL, ["inspect", "-o", "wide"], cfg)
    assert wide.returncode == 0, wide.stderr
    res = {l.split()[0]: l.split() for l in wide.stdout.splitlines()
           if l.startswith(("t4-a ", "a100-ts "))}
    assert res["t4-a"][1:8] == ["nvidia.com/gpu", "Tesla-T4", "4", "1", "4", "2/3", "(66%)"]
    assert res["a100-ts"][1:8] == ["nvidia.com/gpu", "NVIDIA-A100-SXM4-40GB", "2", "4", "8",
                                   "3/8", "(37%)"]


def test_whole_gpu_details_name_the_model(whole_api, tmp_path):
    cfg = write_kubeconfig(str(tmp_path / "config"), whole_api.url)
    proc = run(GPUPOOL, ["inspect", "a100-ts", "-d"], cfg)
    assert proc.returncode == 0, proc.stderr
    assert "Whole GPUs: 2 x NVIDIA-A100-SXM4-40GB, 4 devices each" in proc.stdout
    assert "GPU memory allocated" not in proc.stdout
    assert "nvidia.com/gpu  8         3/8 (37%)" in proc.stdout


def test_whole_gpu_without_labels_counts_devices(tmp_path):
    srv = FakeApiServer(fixture={"nodes": [node("plain", "10.0.0.9",
                                                extra={"nvidia.com/gpu": "8"})]}).start()
    try:
        cfg = write_kubeconfig(str(tmp_path / "config"), srv.url)
        proc = run(GPUPOOL, ["inspect"], cfg)
        assert proc.returncode == 0, proc.stderr
        assert "Cluster: 1 node, 8 GPUs\n" in proc.stdout
    finally:
        srv.stop()


HOSTILE_MODEL = "T4\x1b[2J\x1b]0;owned\x07\x1b[31mEVIL\nfake-row\tx"


@pytest.mark.parametrize("binary, args", [
    (GPUPOOL, ["inspect"]), (GPUPOOL, ["inspect", "-o", "wide"]), (GPUPOOL, ["inspect", "-d"]),
    (GPUPOOL, ["inspect", "nesc", "-d"]), (GPUSHARE, []), (GPUSHARE, ["-d"])])
def test_api_text_cannot_drive_the_terminal(api, kubeconfig, binary, args):
    """D10: escape sequences and other control characters in a node's
    gpupool.io/gpus models, addresses and pod names are printed as \\xNN,
    never raw (one compromised node may patch every node)."""
    gpus = json.dumps([{"index": 0, "memory": 16, "model": HOSTILE_MODEL},
                       {"index": 1, "memory": 16, "model": "T4"}])
    n = node("nesc", "10.0.0.9\x1b[5m\u009b2J", 32, 2, {"gpupool.io/gpus": gpus})
    api.put_object("nodes", n)
    api.put_object("pods", pod("default", "p\x1b]0;x\x07", "nesc", 4, "0"))
    proc = run(binary, args, kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert "nesc" in proc.stdout
    assert not any(c in proc.stdout for c in "\x1b\x07\x9b\r"), repr(proc.stdout)
    assert "10.0.0.9\\x1b[5m\\xc2\\x9b2J" in proc.stdout, proc.stdout
    assert not [l for l in proc.stdout.splitlines() if l.lstrip().startswith("fake-row")]
    if "-o" in args:
        assert "T4\\x1b[2J\\x1b]0;owned\\x07\\x1b[31mEVIL\\x0afake-row\\x09x" in proc.stdout


def test_protobuf_map_entry_without_value_does_not_crash(api, kubeconfig):
    """D6: the review's protobuf NodeList (status.allocatable {"cpu": <no
    value>}) crashed kubectl-gpupool with SIGSEGV."""
    def field(number, payload):
        def varint(v):
            out = b""
            while True:
                low, v = v & 0x7F, v >> 7
                if not v:
                    return out + bytes([low])
                out += bytes([low | 0x80])
        return varint(number << 3 | 2) + varint(len(payload)) + payload
    item = field(1, field(1, b"n1")) + field(3, field(2, field(1, b"cpu")))
    body = b"k8s\x00" + field(1, field(1, b"v1") + field(2, b"NodeList")) + \
        field(2, field(1, field(2, b"1")) + field(2, item))
    api.add_fault(method="GET", path="/api/v1/nodes", action="malformed", body=body,
                  content_type=PROTOBUF, count=-1)
    proc = run(GPUPOOL, ["inspect"], kubeconfig)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)


def git_head():
    """The commit of the source tree, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@pytest.mark.parametrize("program,argv", [
    ("kubectl-gpupool", ["--version"]),
    ("kubectl-gpupool", ["version"]),
    ("gpupool-device-plugin", ["--version"]),
    ("gpupool-scheduler-extender", ["--version"]),
    ("gpupool-sim", ["--version"]),
])
def test_version_names_the_commit(program, argv):
    """Every program's --version says the commit it was built from (baked in by CMake)."""
    path = os.path.join(BUILD, "bin", program)
    if not os.path.exists(path):
        pytest.skip("%s not built" % program)
    proc = run_program([path] + argv)
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(r"%s version (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)\)\n"
                     % re.escape(program), proc.stdout)
    assert m, proc.stdout
    head = git_head()
    if head is not None:
        assert m.group(2) == head, "built at %s, HEAD is %s: rebuild (CMake re-configures)" % (
            m.group(2), head)


def dra_objects(api):
    """A DRA-only node (no extended resource) with two GPUs in a ResourceSlice, two shared
    claims on gpu-0 and a whole-device claim (no consumedCapacity) on gpu-1."""
    gib = 1 << 30
    api.put_object("nodes", node("dra-a", "192.168.0.80"))

    def dev(name):
        return {"name": name, "allowMultipleAllocations": True,
                "attributes": {"type": {"string": "gpu"}},
                "capacity": {"memory": {"value": str(16 * gib)}}}
    api.put_object("resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "dra-a-gpu.gpupool.io-x1"},
        "spec": {"driver": "gpu.gpupool.io", "nodeName": "dra-a",
                 "pool": {"name": "dra-a", "generation": 1, "resourceSliceCount": 1},
                 "devices": [dev("gpu-0"), dev("gpu-1"), dev("gpu-10")]}})

    def claim(ns, name, device, memory=None):
        result = {"request": "r", "driver": "gpu.gpupool.io", "pool": "dra-a", "device": device}
        if memory is not None:
            result["consumedCapacity"] = {"memory": memory}
        api.put_object("resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [result]}}}})
    claim("ml", "train-8g", "gpu-0", "8Gi")
    claim("default", "infer-4g", "gpu-0", "4Gi")
    claim("ml", "whole", "gpu-1")
    claim("ml", "elsewhere", "gpu-9")        # a device no slice lists: ignored


def test_inspect_details_show_dra_claims_per_gpu(api, kubeconfig):
    dra_objects(api)
    proc = run(GPUPOOL, ["inspect", "dra-a", "-d"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index(next(l for l in lines if l.startswith("DRA DEVICE")))
    rows = [l.split() for l in lines[start + 1:start + 4]]
    assert rows[0][:6] == ["gpu-0", "gpu.gpupool.io", "12Gi/16Gi", "(75%)", "yes",
                           "default/infer-4g=4Gi"]
    assert rows[0][6] == "ml/train-8g=8Gi"
    assert rows[1][:6] == ["gpu-1", "gpu.gpupool.io", "16Gi/16Gi", "(100%)", "yes",
                           "ml/whole=16Gi"]
    assert rows[2][:6] == ["gpu-10", "gpu.gpupool.io", "0/16Gi", "(0%)", "yes", "-"]
    # The node's slices are asked by field selector, the claims once.
    reqs = api.requests()
    slices = [r for r in reqs if r["path"].endswith("/resourceslices")]
    assert slices and all(r["query"].get("fieldSelector") == "spec.nodeName=dra-a" for r in slices)
    assert len([r for r in reqs if r["path"].endswith("/resourceclaims")]) == 1


def test_inspect_whole_pool_includes_dra_nodes_beside_device_plugin_ones(api, kubeconfig):
    dra_objects(api)
    proc = run(GPUPOOL, ["inspect", "-o", "json"], kubeconfig)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert "gpu-a" in nodes and "whole" in nodes          # device-plugin nodes as before
    assert "dra" not in nodes["gpu-a"]
    dra = nodes["dra-a"]["dra"]
    assert [d["name"] for d in dra] == ["gpu-0", "gpu-1", "gpu-10"]
    assert dra[0]["consumedBytes"] == 12 << 30 and dra[0]["memoryBytes"] == 16 << 30
    assert dra[0]["claims"] == [
        {"namespace": "default", "name": "infer-4g", "memoryBytes": 4 << 30},
        {"namespace": "ml", "name": "train-8g", "memoryBytes": 8 << 30}]
    assert dra[1]["claims"] == [{"namespace": "ml", "name": "whole", "memoryBytes": 16 << 30}]


def test_inspect_without_dra_api_or_rights(api, kubeconfig):
    """A 1.20 server (no resource.k8s.io: 404) shows what it showed before; RBAC that hides
    the slices gets a warning, not a failure."""
    before = run(GPUPOOL, ["inspect", "-d"], kubeconfig)
    assert before.returncode == 0 and "DRA DEVICE" not in before.stdout
    api.add_fault(method="GET", path="resourceslices", status=404, reason="NotFound",
                  message="the server could not find the requested resource")
    proc = run(GPUPOOL, ["inspect", "-d"], kubeconfig)
    assert proc.returncode == 0 and proc.stdout == before.stdout and proc.stderr == ""
    api.add_fault(method="GET", path="resourceslices", status=403, reason="Forbidden",
                  message="resourceslices is forbidden", count=-1)
    proc = run(GPUPOOL, ["inspect", "-d"], kubeconfig)
    assert proc.returncode == 0 and proc.stdout == before.stdout
    assert "warning: resourceslices not readable: resourceslices is forbidden" in proc.stderr
