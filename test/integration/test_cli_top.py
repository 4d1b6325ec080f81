"""`kubectl gpupool top` and `inspect -o wide` against the fake API server,
with fake node agents serving /metrics reached through its node proxy.

Each fake agent listens on its own loopback address (127.0.0.N, the node's
InternalIP) at one shared port, as real agents do on their nodes; the fake
API server's /api/v1/nodes/<node>:<port>/proxy/metrics forwards there.

    GP_BUILD_DIR  build tree holding bin/kubectl-gpupool (default ./build)
"""

import http.server
import json
import os
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))

from conftest import scaled  # noqa: E402
from fake_agent import start_agents  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from test_cli import GPUPOOL, node, pod, run, write_kubeconfig  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(GPUPOOL), reason="kubectl-gpupool not built")

GiB = 1 << 30
MiB = 1 << 20

GPUS_A = json.dumps([
    {"index": 0, "memory": 16, "model": "Tesla-V100-SXM2-16GB", "healthy": True},
    {"index": 1, "memory": 32, "model": "Tesla-V100-SXM2-32GB", "healthy": True},
])

# gpu-a: the contract's series, the older per-GPU ones beside them, a
# process of no pod, and a line a newer agent might send that this reader
# does not know how to parse.
METRICS_A = """# HELP gpupool_container_gpu_memory_used_bytes GPU memory a container uses.
# TYPE gpupool_container_gpu_memory_used_bytes gauge
gpupool_container_gpu_memory_used_bytes{namespace="ml",pod="trainer",container="main",gpu_uuid="GPU-a1"} %d
gpupool_container_gpu_memory_used_bytes{namespace="ml",pod="trainer",container="side",gpu_uuid="GPU-a1"} %d
gpupool_container_gpu_memory_used_bytes{namespace="ml",pod="small",container="main",gpu_uuid="GPU-a0"} %d
# TYPE gpupool_container_gpu_memory_limit_bytes gauge
gpupool_container_gpu_memory_limit_bytes{namespace="ml",pod="trainer",container="main",gpu_uuid="GPU-a1"} %d
gpupool_container_gpu_memory_limit_bytes{namespace="ml",pod="small",container="main",gpu_uuid="GPU-a0"} %d
gpupool_process_gpu_memory_used_bytes{namespace="ml",pod="trainer",container="main",gpu_uuid="GPU-a1",pid="100"} %d
gpupool_process_gpu_sm_utilization_ratio{namespace="ml",pod="trainer",container="main",gpu_uuid="GPU-a1",pid="100"} 0.5
gpupool_process_gpu_sm_utilization_ratio{namespace="ml",pod="trainer",container="side",gpu_uuid="GPU-a1",pid="101"} 0.25
gpupool_process_gpu_memory_utilization_ratio{namespace="ml",pod="trainer",container="main",gpu_uuid="GPU-a1",pid="100"} 0.125
gpupool_process_gpu_sm_utilization_ratio{namespace="",pod="",container="",gpu_uuid="GPU-a0",pid="7"} 0.1
gpupool_gpu_healthy{gpu="0",uuid="GPU-a0",model="Tesla-V100-SXM2-16GB"} 1
gpupool_gpu_healthy{gpu="1",uuid="GPU-a1",model="Tesla \\"V100\\" 32GB"} 1
gpupool_gpu_memory_used_bytes{gpu_uuid="GPU-a0",model="Tesla-V100-SXM2-16GB"} %d
gpupool_gpu_memory_used_bytes{gpu_uuid="GPU-a1",model="Tesla-V100-SXM2-32GB"} %d 1700000000000
gpupool_gpu_utilization_ratio{gpu="0",uuid="GPU-a0",model="Tesla-V100-SXM2-16GB"} 0.05
gpupool_gpu_sm_utilization_ratio{gpu_uuid="GPU-a1",model="Tesla-V100-SXM2-32GB"} 0.8
gpupool_future_series{a="b" 1
""" % (12 * GiB, 1 * GiB, 512 * MiB, 20 * GiB, 4 * GiB, 13 * GiB, 1 * GiB, 27 * GiB // 2)

# whole: no regions (whole GPUs), NVML's per-process figures only.
METRICS_WHOLE = """gpupool_gpu_healthy{gpu="0",uuid="GPU-w0",model="NVIDIA-A100"} 1
gpupool_gpu_memory_total_bytes{gpu="0",uuid="GPU-w0",model="NVIDIA-A100"} %d
gpupool_gpu_memory_used_bytes{gpu="0",uuid="GPU-w0",model="NVIDIA-A100"} %d
gpupool_gpu_sm_utilization_ratio{gpu_uuid="GPU-w0",model="NVIDIA-A100"} 0.9
gpupool_process_gpu_memory_used_bytes{namespace="default",pod="cuda",container="main",gpu_uuid="GPU-w0",pid="55"} %d
gpupool_process_gpu_sm_utilization_ratio{namespace="default",pod="cuda",container="main",gpu_uuid="GPU-w0",pid="55"} 0.9
""" % (40 * GiB, 10 * GiB, 10 * GiB)


def fixture():
    a = node("gpu-a", "127.0.0.2", 48, 2, {"gpupool.io/gpus": GPUS_A})
    a["metadata"]["labels"] = {"pool": "train"}
    return {
        "nodes": [
            a,
            node("gpu-b", "127.0.0.3", 16, 1),                     # its agent is down
            node("whole", "127.0.0.4", extra={"nvidia.com/gpu": "1"}),
            node("slow", "127.0.0.5", 16, 1),
        ],
        "pods": [
            pod("ml", "trainer", "gpu-a", 20, "1"),
            pod("ml", "small", "gpu-a", 4, "0"),
            pod("ml", "idle", "gpu-b", 2, "0"),
            pod("default", "cuda", "whole", limits={"nvidia.com/gpu": "1"}),
            pod("batch", "late", "slow", 3, "0"),
        ],
    }


@pytest.fixture
def cluster(tmp_path):
    srv = FakeApiServer(fixture=fixture()).start()
    agents = start_agents([("127.0.0.2", METRICS_A), ("127.0.0.4", METRICS_WHOLE),
                           ("127.0.0.5", "gpupool_gpu_healthy{gpu=\"0\",uuid=\"GPU-s0\"} 1\n",
                            4.0)])
    a = agents[0]
    cfg = write_kubeconfig(str(tmp_path / "config"), srv.url)
    yield srv, cfg, a.port, agents
    for x in agents:
        x.stop()
    srv.stop()


def proxied(srv):
    """The node-proxy requests (the agents read through the API server)."""
    return sorted(r["path"] for r in srv.requests() if r["path"].startswith("/api/v1/nodes/")
                  and "/proxy/" in r["path"])


EXTENDER_USAGE = ("/api/v1/namespaces/kube-system/services/gpupool-scheduler-extender:http"
                  "/proxy/ui/usage.json")


def extender_asked(srv):
    return [r["path"] for r in srv.requests() if "/services/" in r["path"]]


def top(cfg, port, *args):
    return run(GPUPOOL, ["top"] + list(args) + ["--metrics-port", str(port),
                                                "--metrics-timeout", "2s"], cfg)


def rows(stdout):
    lines = stdout.splitlines()
    return {tuple(l.split()[:2]): l.split() for l in lines[1:]}


def test_top_pods_used_beside_booked(cluster):
    srv, cfg, port, _ = cluster
    start = time.monotonic()
    proc = top(cfg, port, "pods", "-A")
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == [
        "NAMESPACE", "NAME", "NODE", "GPU", "BOOKED", "LIMIT", "USED", "SM"]
    r = rows(proc.stdout)
    # Regions summed over the pod's containers; SM over its processes.
    assert r[("ml", "trainer")][2:] == ["gpu-a", "1", "20.0GiB", "20.0GiB", "13.0GiB", "75%"]
    assert r[("ml", "small")][2:] == ["gpu-a", "0", "4.0GiB", "4.0GiB", "512MiB", "no", "data"]
    # Whole GPU: no booking of memory, no region; NVML's process figure.
    assert r[("default", "cuda")][2:] == ["whole", "nvidia.com/gpu:1", "-", "no", "data",
                                          "10.0GiB", "90%"]
    # Agent down, or too slow: "no data", and the reason on stderr.
    assert r[("ml", "idle")][2:] == ["gpu-b", "0", "2.0GiB"] + ["no", "data"] * 3
    assert r[("batch", "late")][5:] == ["no", "data"] * 3
    assert "warning: no metrics from node gpu-b: HTTP 503" in proc.stderr
    assert "no metrics from node slow" in proc.stderr
    # The slow agent (4 s) costs the deadline (2 s), not its delay.
    # (scaled: a valgrind wrapper slows the program's own start, not the agent)
    assert took < scaled(3.8), took
    assert proxied(srv) == ["/api/v1/nodes/%s:%d/proxy/metrics" % (n, port)
                            for n in ("gpu-a", "gpu-b", "slow", "whole")]
    # --from auto (the default) asked the extender's Service first: there is
    # none here (404), so every agent was read, and nothing said about it.
    assert extender_asked(srv) == [EXTENDER_USAGE]
    assert "extender" not in proc.stderr


def test_top_auto_falls_back_quietly_and_says_why_at_v1(cluster):
    srv, cfg, port, _ = cluster
    # A Service whose endpoint does not answer: the proxy's 503.
    srv.store.create("services", "kube-system", {
        "metadata": {"name": "gpupool-scheduler-extender", "namespace": "kube-system"},
        "spec": {"clusterIP": "127.0.0.9", "ports": [{"name": "http", "port": 1}]}})
    proc = top(cfg, port, "gpus", "--node", "gpu-a", "-v", "1")
    assert proc.returncode == 0, proc.stderr
    assert "the extender's figures not read" in proc.stderr and "reading the node agents" in \
        proc.stderr, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    assert proxied(srv) == ["/api/v1/nodes/gpu-a:%d/proxy/metrics" % port]
    assert rows(proc.stdout)[("gpu-a", "1")][5] == "13.5GiB"
    # --from extender keeps its strict meaning: a warning, and no agent asked.
    before = len(proxied(srv))
    strict = top(cfg, port, "gpus", "--node", "gpu-a", "--from", "extender")
    assert strict.returncode == 0, strict.stderr
    assert "warning: the extender's figures not read" in strict.stderr
    assert len(proxied(srv)) == before
    # --from agents never asks the extender.
    asked = len(extender_asked(srv))
    agents = top(cfg, port, "gpus", "--node", "gpu-a", "--from", "agents")
    assert agents.returncode == 0 and len(extender_asked(srv)) == asked


def test_top_pods_namespace_sort_and_json(cluster):
    srv, cfg, port, _ = cluster
    proc = top(cfg, port, "pods", "-n", "ml", "--sort-by", "used", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "GPUPoolTopPods"
    pods = doc["pods"]
    # Largest use first; "no data" after every figure.
    assert [p["name"] for p in pods] == ["trainer", "small", "idle"]
    t = pods[0]
    assert t["usedBytes"] == 13 * GiB and t["limitBytes"] == 20 * GiB
    assert t["bookedBytes"] == 20 * GiB and t["gpus"] == [1] and t["node"] == "gpu-a"
    assert t["smUtilization"] == pytest.approx(0.75)
    assert t["memoryUtilization"] == pytest.approx(0.125)
    assert t["processMemoryBytes"] == 13 * GiB and t["nodeMetrics"] is True
    assert pods[2]["usedBytes"] is None and pods[2]["nodeMetrics"] is False
    # The namespace's pods only, and only their nodes' agents asked.
    lists = [r for r in srv.requests() if r["path"].endswith("/pods")]
    assert [r["path"] for r in lists] == ["/api/v1/namespaces/ml/pods"]
    assert proxied(srv) == ["/api/v1/nodes/gpu-a:%d/proxy/metrics" % port,
                            "/api/v1/nodes/gpu-b:%d/proxy/metrics" % port]


def test_top_pods_default_namespace_is_the_contexts(cluster):
    srv, cfg, port, _ = cluster
    proc = top(cfg, port)          # "top" alone: pods of the context's namespace
    assert proc.returncode == 0, proc.stderr
    assert [k for k in rows(proc.stdout)] == [("default", "cuda")]
    assert proxied(srv) == ["/api/v1/nodes/whole:%d/proxy/metrics" % port]


def test_top_pods_label_selector_goes_to_the_list(cluster):
    srv, cfg, port, _ = cluster
    proc = top(cfg, port, "pods", "-A", "-l", "app=none")
    assert proc.returncode == 0, proc.stderr
    assert "No GPU pods found" in proc.stdout
    lists = [r for r in srv.requests() if r["path"] == "/api/v1/pods"]
    assert lists and all(r["query"].get("labelSelector") == "app=none" for r in lists)
    assert proxied(srv) == [] and extender_asked(srv) == []


def test_top_gpus(cluster):
    srv, cfg, port, _ = cluster
    proc = top(cfg, port, "gpus", "--sort-by", "sm", "-o", "wide")
    assert proc.returncode == 0, proc.stderr
    lines = [l.split() for l in proc.stdout.splitlines()]
    assert lines[0] == ["NODE", "GPU", "MODEL", "TOTAL", "BOOKED", "USED", "SM", "PODS", "UUID",
                        "USED(#)/BOOKED(=)"]
    # Highest SM first: the whole GPU (90%), gpu-a's GPU 1 (80%), GPU 0 (the older series, 5%).
    assert [l[:2] for l in lines[1:4]] == [["whole", "0"], ["gpu-a", "1"], ["gpu-a", "0"]]
    assert lines[1][2:] == ["NVIDIA-A100", "40.0GiB", "-", "10.0GiB", "90%", "-", "GPU-w0",
                            "[#####...............]"]
    assert lines[2][3:] == ["32.0GiB", "20.0GiB", "13.5GiB", "80%", "1", "GPU-a1",
                            "[########====........]"]
    assert lines[3][3:8] == ["16.0GiB", "4.0GiB", "1.0GiB", "5%", "1"]
    rest = {l[0]: l for l in lines[4:]}
    assert rest["gpu-b"][3:] == ["16.0GiB", "2.0GiB", "no", "data", "no", "data", "1", "-",
                                 "[==..................]"]
    doc = json.loads(top(cfg, port, "gpus", "--node", "gpu-a", "-o", "json").stdout)
    assert [(g["index"], g["uuid"], g["usedBytes"], g["bookedBytes"], g["totalBytes"])
            for g in doc["gpus"]] == [(0, "GPU-a0", GiB, 4 * GiB, 16 * GiB),
                                      (1, "GPU-a1", 27 * GiB // 2, 20 * GiB, 32 * GiB)]
    assert doc["gpus"][1]["smUtilization"] == pytest.approx(0.8)


def test_top_gpus_node_selector_and_one_node(cluster):
    srv, cfg, port, _ = cluster
    proc = top(cfg, port, "gpus", "-l", "pool=train")
    assert proc.returncode == 0, proc.stderr
    assert {l.split()[0] for l in proc.stdout.splitlines()[1:]} == {"gpu-a"}
    nodes = [r for r in srv.requests() if r["path"] == "/api/v1/nodes"]
    assert nodes and all(r["query"].get("labelSelector") == "pool=train" for r in nodes)
    assert proxied(srv) == ["/api/v1/nodes/gpu-a:%d/proxy/metrics" % port]


def test_inspect_wide_used_and_sm(cluster):
    srv, cfg, port, _ = cluster
    proc = run(GPUPOOL, ["inspect", "-o", "wide", "--metrics-port", str(port),
                         "--metrics-timeout", "2s"], cfg)
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[0].split()
    assert head[4:9] == ["MEMORY(ALLOCATED/TOTAL)", "USED", "SM", "PODS", "HEALTH"]
    a = [l.split() for l in proc.stdout.splitlines() if l.startswith("gpu-a ")]
    assert a[0][4:] == ["4/16", "GiB", "(25%)", "1.0GiB", "5%", "1", "Healthy"]
    assert a[1][4:] == ["20/32", "GiB", "(62%)", "13.5GiB", "80%", "1", "Healthy"]
    b = [l.split() for l in proc.stdout.splitlines() if l.startswith("gpu-b ")]
    assert b[0][7:] == ["no", "data", "no", "data", "1", "Healthy"]
    # --metrics=false: the booked view alone, no agent asked.
    before = len(proxied(srv))
    off = run(GPUPOOL, ["inspect", "-o", "wide", "--metrics=false"], cfg)
    assert off.returncode == 0, off.stderr
    assert len(proxied(srv)) == before
    assert "no data" in off.stdout and "warning" not in off.stderr


def test_top_usage_errors(cluster):
    _, cfg, port, _ = cluster
    bad = run(GPUPOOL, ["top", "nodes"], cfg)
    assert bad.returncode == 2 and "unknown view \"nodes\"" in bad.stderr
    bad = run(GPUPOOL, ["top", "pods", "--sort-by", "size"], cfg)
    assert bad.returncode == 2 and "sort-by" in bad.stderr


def test_top_help_describes_the_default_read_path():
    """--help says what the default (--from auto) does: --node's figures come from the
    extender's sweep when it covers the node, and --metrics-timeout also bounds the read
    of the extender (and the wait for its first sweep), not only the agents'."""
    proc = run(GPUPOOL, ["top", "--help"])
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "one agent read" not in text
    assert "only this node's pods or GPUs (its figures from the extender's sweep, else from its agent)" in text
    assert "time for the used figures: the extender's answer (and its first sweep" in text


def test_top_v2_names_every_node_the_extenders_sweep_failed(cluster):
    """More than three nodes without figures: three are named, the rest counted with
    "(-v 2 names them)", and -v 2 does name them, also when the failures come from the
    extender's sweep (no agent read here, so the agents' reader logs nothing)."""
    srv, cfg, port, _ = cluster
    for i in (1, 2):
        srv.store.create("nodes", None, node("x%d" % i, "127.0.0.%d" % (20 + i), 16, 1))
    swept = ["gpu-a", "gpu-b", "slow", "x1", "x2"]
    usage = json.dumps({"port": port, "from": "direct", "interval_ms": 15000, "age_ms": 100,
                        "refreshing": False,
                        "nodes": {n: {"error": "HTTP 503: %s down" % n} for n in swept}}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/ui/usage.json" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(usage)))
            self.end_headers()
            self.wfile.write(usage)

        def log_message(self, *a):
            pass

    ext = http.server.ThreadingHTTPServer(("127.0.0.9", 0), Handler)
    threading.Thread(target=ext.serve_forever, daemon=True).start()
    try:
        srv.store.create("services", "kube-system", {
            "metadata": {"name": "gpupool-scheduler-extender", "namespace": "kube-system"},
            "spec": {"clusterIP": "127.0.0.9",
                     "ports": [{"name": "http", "port": ext.server_address[1]}]}})
        quiet = top(cfg, port, "gpus", "--from", "extender")
        assert quiet.returncode == 0, quiet.stderr
        assert quiet.stderr.count("warning: no metrics from node ") == 3, quiet.stderr
        assert "warning: no metrics from 3 more nodes (-v 2 names them)" in quiet.stderr
        loud = top(cfg, port, "gpus", "--from", "extender", "-v", "2")
        assert loud.returncode == 0, loud.stderr
        for n in swept + ["whole"]:  # whole: not in the sweep (not a GPU-sharing node)
            assert "no metrics from node %s: " % n in loud.stderr, (n, loud.stderr)
        assert proxied(srv) == []
    finally:
        ext.shutdown()
        ext.server_close()
