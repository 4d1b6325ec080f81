"""The extender's live web view (/ui, /ui/pool.json) and its Prometheus /metrics.

The real gpupool-scheduler-extender runs against the fake API server
(test/fakeapi) with a small heterogeneous pool: one node described by
gpupool.io/gpus, one marked unhealthy by gpushare's ConfigMap, one CPU-only
node. /metrics is read with prometheus_client's own text parser (Debian
python3-prometheus-client), not with a regex of ours.

The browser test loads /ui in headless Chromium (Debian chromium), reads the
rendered DOM and saves a screenshot to $GP_ARTIFACT_DIR (default: the pytest
tmp dir); it is skipped when chromium is not installed.
"""

import html.parser
import json
import os
import shutil
import subprocess

import pytest

from conftest import scaled
from test_extender import (EXTENDER_BIN, Extender, bind_args, filter_args, free_port, node, pod,  # noqa: F401,E501
                           add_pod)
from fake_agent import start_agents
from fake_apiserver import FakeApiServer

GIB = 1 << 30
PREFIX = "/gpupool-scheduler"


def gpus_annotation(*gpus):
    return json.dumps([{"index": i, "memory": m, "model": model} for i, (m, model) in enumerate(gpus)])


V100 = "Tesla-V100-SXM2-16GB"
T4 = "Tesla-T4"


def fixture_objects():
    nodes = [
        node("n1", 32, 2, extra_annotations={"gpupool.io/gpus": gpus_annotation((16, V100), (16, V100))}),
        node("n2", 16, 1),
        node("n3", 32, 2, extra_annotations={"gpupool.io/gpus": gpus_annotation((16, T4), (16, T4))}),
        node("cpu1", 0, 0),
    ]
    pods = [
        pod("old", 10, "n1", "0"),
        pod("train", 6, "n1", "0", ns="ml"),
        pod("infer", 12, "n1", "1", ns="ml"),
        pod("x", 8, "n3", "0"),
        pod("web", 0, "cpu1", cpu="2"),
    ]
    cms = [{"metadata": {"name": "unhealthy-gpu-n2", "namespace": "kube-system"}, "data": {"gpus": "0"}}]
    return {"nodes": nodes, "pods": pods, "configmaps": cms}


# What pool.json must say about the fixture: node -> (model, [(total, used, healthy, {pod: amount})]).
EXPECTED = {
    "n1": (V100, [(16, 16, True, {"default/old": 10, "ml/train": 6}), (16, 12, True, {"ml/infer": 12})]),
    "n2": (None, [(16, 0, False, {})]),
    "n3": (T4, [(16, 8, True, {"default/x": 8}), (16, 0, True, {})]),
}


def expected_totals(expected):
    """The totals and fragmentation as docs/extender.md defines them, computed independently."""
    gpus = [g for _, gs in expected.values() for g in gs]
    shares = sorted(a for g in gpus for a in g[3].values())
    threshold = shares[(len(shares) - 1) // 2] if shares else 0
    free = [max(0, t - u) for t, u, healthy, _ in gpus if healthy]
    fragmented = sum(f for f in free if 0 < f < threshold)
    return {
        "nodes": len(expected), "gpus": len(gpus),
        "unhealthy_gpus": sum(1 for g in gpus if not g[2]),
        "gpus_in_use": sum(1 for g in gpus if g[1] > 0),
        "gpus_full": sum(1 for g in gpus if g[1] >= g[0]),
        "memory_total": sum(g[0] for g in gpus), "memory_used": sum(g[1] for g in gpus),
        "memory_free": sum(free), "memory_free_fragmented": fragmented,
        "gpu_pods": len(shares), "fragmentation_threshold": threshold,
        "fragmentation_percent": 100.0 * fragmented / sum(free) if sum(free) else 0.0,
        # no pod here asks gpupool.io/gpu-cores: 100 per GPU, none booked
        "cores_total": 100 * len(gpus), "cores_used": 0,
    }


@pytest.fixture
def api():
    srv = FakeApiServer(fixture=fixture_objects()).start()
    yield srv
    srv.stop()


@pytest.fixture
def ext(api, tmp_path):
    e = Extender(api, tmp_path, ["--metrics-port", str(free_port())])
    yield e
    rc = e.stop()
    assert rc == 0, e.log()


def metrics_port(e):
    return int(e.argv[e.argv.index("--metrics-port") + 1])


def get(e, path, port=None):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port or e.port, timeout=scaled(30))
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode("utf-8")
    ctype = r.getheader("Content-Type")
    c.close()
    return r.status, ctype, body


def pool_view(e):
    status, ctype, body = get(e, "/ui/pool.json")
    assert status == 200 and ctype == "application/json", body
    return json.loads(body)


def as_expected(view):
    """pool.json reduced to the EXPECTED shape."""
    out = {}
    for n in view["nodes"]:
        # Each GPU (index = position) is [total, used, healthy, [[namespace, name, amount,
        # cores], ...], cores_total, cores_used]; cores are test_extender_cores.py's.
        out[n["name"]] = (n["model"], [
            (g[0], g[1], g[2], {p[0] + "/" + p[1]: p[2] for p in g[3]})
            for g in n["gpus"]])
    return out


def bind_new_pod(api, e, memory, node_name):
    p = add_pod(api, pod("fresh", memory))
    status, r = e.post(PREFIX + "/filter", filter_args(p, ["n1", "n2", "n3", "cpu1"]))
    assert status == 200 and "n1" in r["NodeNames"], r
    status, r = e.post(PREFIX + "/bind", bind_args(p, node_name))
    assert (status, r["Error"]) == (200, ""), r


# ---------------------------------------------------------------- /ui

def test_ui_page_is_self_contained(ext):
    for path in ("/ui", "/ui/"):
        status, ctype, page = get(ext, path)
        assert status == 200 and ctype.startswith("text/html"), (status, ctype)
        assert page.lstrip().lower().startswith("<!doctype html>")
        low = page.lower()
        for ref in ("http://", "https://", "//cdn", "<link", "src=", "@import", "url("):
            assert ref not in low, "external reference %r in /ui" % ref
        assert "pool.json" in page and "<script>" in page and "<style>" in page


def test_pool_json_matches_fixture_and_follows_a_bind(api, ext):
    view = pool_view(ext)
    assert view["unit"] == "GiB" and view["policy"] == "gpupool"
    assert [n["name"] for n in view["nodes"]] == ["n1", "n2", "n3"], "sorted, GPU nodes only"
    assert as_expected(view) == EXPECTED
    assert view["totals"] == pytest.approx(expected_totals(EXPECTED))
    assert 0 < view["totals"]["fragmentation_percent"] < 100

    bind_new_pod(api, ext, 3, "n1")   # only n1's GPU 1 (4 free) takes it on n1
    after = dict(EXPECTED)
    after["n1"] = (V100, [EXPECTED["n1"][1][0], (16, 15, True, {"ml/infer": 12, "default/fresh": 3})])
    view = pool_view(ext)
    assert as_expected(view) == after
    assert view["totals"] == pytest.approx(expected_totals(after))


def test_pool_json_in_mib(api, tmp_path):
    e = Extender(api, tmp_path, ["--metrics-port", "0", "--gpu-memory-unit", "MiB"])
    try:
        assert pool_view(e)["unit"] == "MiB"
        assert "metrics at" not in e.log(), "--metrics-port 0 must open no metrics port"
    finally:
        assert e.stop() == 0


# ---------------------------------------------------------------- /metrics

def scrape(e):
    from prometheus_client.parser import text_string_to_metric_families
    status, ctype, text = get(e, "/metrics", metrics_port(e))
    assert status == 200, text
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {}
    for f in families.values():
        for s in f.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def check_histograms(families):
    f = families["gpupool_extender_request_duration_seconds"]
    assert f.type == "histogram"
    for verb in ("filter", "prioritize", "bind"):
        mine = [s for s in f.samples if s.labels.get("verb") == verb]
        buckets = [(float(s.labels["le"]), s.value) for s in mine if s.name.endswith("_bucket")]
        assert len(buckets) >= 10 and buckets[-1][0] == float("inf")
        assert [b[0] for b in buckets] == sorted(b[0] for b in buckets)
        counts = [b[1] for b in buckets]
        assert counts == sorted(counts), "%s buckets not cumulative: %s" % (verb, counts)
        count = [s.value for s in mine if s.name.endswith("_count")][0]
        total = [s.value for s in mine if s.name.endswith("_sum")][0]
        assert count == counts[-1] and total >= 0


def test_metrics_parse_and_count(api, ext):
    families, before = scrape(ext)
    check_histograms(families)
    types = {
        "gpupool_extender_binds": "counter", "gpupool_extender_bad_requests": "counter",
        "gpupool_extender_filter_nodes": "counter", "gpupool_extender_cache_nodes": "gauge",
        "gpupool_extender_cache_pods": "gauge", "gpupool_extender_gpu_memory_allocated_bytes": "gauge",
        "gpupool_extender_fragmentation_ratio": "gauge",
    }
    for name, kind in types.items():
        assert families[name].type == kind, name
        assert families[name].documentation, "no HELP for " + name
    assert value(before, "gpupool_extender_cache_nodes") == 4
    assert value(before, "gpupool_extender_cache_gpu_nodes") == 3
    assert value(before, "gpupool_extender_cache_pods") == 5
    assert value(before, "gpupool_extender_unhealthy_gpus") == 1
    for node_name, (_, gpus) in EXPECTED.items():
        for i, (_, used, _, _) in enumerate(gpus):
            assert value(before, "gpupool_extender_gpu_memory_allocated_bytes",
                         node=node_name, gpu=str(i)) == used * GIB
    t = expected_totals(EXPECTED)
    assert value(before, "gpupool_extender_fragmentation_ratio") == pytest.approx(
        t["fragmentation_percent"] / 100)
    assert value(before, "gpupool_extender_cluster_gpu_memory_bytes") == t["memory_total"] * GIB

    bind_new_pod(api, ext, 3, "n1")
    status, _ = ext.post(PREFIX + "/bind", raw=b"{not json")
    assert status == 400
    families, after = scrape(ext)
    check_histograms(families)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)
    assert delta("gpupool_extender_request_duration_seconds_count", verb="filter") == 1
    assert delta("gpupool_extender_request_duration_seconds_count", verb="bind") == 2
    assert delta("gpupool_extender_filter_nodes_total", result="passed") == 2   # n1, n3
    assert delta("gpupool_extender_filter_nodes_total", result="failed") == 2   # n2 unhealthy, cpu1
    assert delta("gpupool_extender_binds_total", result="bound") == 1
    assert delta("gpupool_extender_binds_total", result="bad_request") == 1
    assert delta("gpupool_extender_bad_requests_total", verb="bind") == 1
    assert delta("gpupool_extender_request_duration_seconds_sum", verb="filter") > 0
    assert value(after, "gpupool_extender_gpu_memory_allocated_bytes", node="n1", gpu="1") == 15 * GIB

    # The refused bind of a pod that no longer fits is counted by its reason.
    p = add_pod(api, pod("huge", 14))
    status, r = ext.post(PREFIX + "/bind", bind_args(p, "n1"))
    assert status == 200 and r["Error"]
    _, last = scrape(ext)
    assert value(last, "gpupool_extender_binds_total", result="refused") == \
        value(after, "gpupool_extender_binds_total", result="refused") + 1


def test_metrics_only_on_their_port(ext):
    status, _, _ = get(ext, "/metrics")
    assert status == 404, "/metrics belongs on --metrics-port, not the scheduler's port"
    status, _, _ = get(ext, "/ui", metrics_port(ext))
    assert status == 404


# ---------------------------------------------------------------- headless Chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class DomReader(html.parser.HTMLParser):
    """Collects the rendered rows: node -> [{gpu attrs, pods: {pod: amount}}]."""

    def __init__(self):
        super().__init__()
        self.nodes, self.texts, self._gpu = {}, {}, None
        self._node = None
        self._id = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if "node" in cls and "data-node" in a:
            self._node = self.nodes.setdefault(a["data-node"], [])
        elif "gpu" in cls and "data-gpu" in a and self._node is not None:
            self._gpu = {"index": int(a["data-gpu"]), "used": int(a["data-used"]),
                         "total": int(a["data-total"]), "healthy": a["data-healthy"] == "true",
                         "unhealthy_marked": "unhealthy" in cls, "pods": {}}
            self._node.append(self._gpu)
        elif "pod" in cls and "data-pod" in a and self._gpu is not None:
            self._gpu["pods"][a["data-pod"]] = int(a["data-amount"])
        self._id = a.get("id")

    def handle_data(self, data):
        if self._id and data.strip():
            self.texts[self._id] = data.strip()


def chromium(args, timeout):
    """Runs headless Chromium with the flags that keep it off the network."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", "--hide-scrollbars"] + args
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=scaled(timeout), stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (scripts/install-deps.sh)")
def test_ui_in_headless_chromium(api, ext, tmp_path):
    url = "http://127.0.0.1:%d/ui" % ext.port
    # The virtual time budget lets the page fetch pool.json and render before the dump.
    r = chromium(["--user-data-dir=%s" % (tmp_path / "profile-dom"), "--virtual-time-budget=8000",
                  "--dump-dom", url], 120)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = DomReader()
    dom.feed(r.stdout)
    assert 'data-loaded="true"' in r.stdout, "the page never rendered pool.json:\n" + r.stdout[-3000:]
    seen = {name: [(g["total"], g["used"], g["healthy"], g["pods"]) for g in sorted(gpus, key=lambda g: g["index"])]
            for name, gpus in dom.nodes.items()}
    assert seen == {n: gpus for n, (_, gpus) in EXPECTED.items()}
    assert all(g["unhealthy_marked"] == (not g["healthy"]) for gpus in dom.nodes.values() for g in gpus)
    assert dom.texts.get("t-nodes") == "3"
    assert dom.texts.get("t-bad") == "1"
    assert dom.texts.get("t-frag", "").endswith("%")

    artifacts = os.environ.get("GP_ARTIFACT_DIR") or str(tmp_path)
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, "extender-ui.png")
    r = chromium(["--user-data-dir=%s" % (tmp_path / "profile-shot"), "--virtual-time-budget=8000",
                  "--window-size=1280,520", "--screenshot=%s" % shot, url], 120)
    assert r.returncode == 0 and os.path.getsize(shot) > 5000, r.stderr[-2000:]
    print("extender /ui screenshot: %s" % shot)


# ---------------------------------------------------------------- used beside booked

# What the node agents say (issue 26's series), through the fake node proxy:
# n1 GPU0 uses less than booked, GPU1 more (a pod past its booking); n3's
# GPU1 idle; n2's agent unreachable (no address).
USED = {"n1": {0: (9 * GIB, 0.4), 1: (14 * GIB, 0.95)}, "n3": {0: (2 * GIB, 0.1), 1: (0, 0.0)}}


PODS_N1 = ('gpupool_container_gpu_memory_used_bytes{namespace="default",pod="old",container="c",'
           'gpu_uuid="GPU-0"} %d\n'
           'gpupool_container_gpu_memory_limit_bytes{namespace="default",pod="old",container="c",'
           'gpu_uuid="GPU-0"} %d\n'
           'gpupool_process_gpu_sm_utilization_ratio{namespace="default",pod="old",container="c",'
           'gpu_uuid="GPU-0",pid="9"} 0.3\n' % (5 * GIB, 10 * GIB))


def agent_text(gpus, extra=""):
    lines = [extra] if extra else []
    for i, (used, sm) in gpus.items():
        lines.append('gpupool_gpu_healthy{gpu="%d",uuid="GPU-%d"} 1' % (i, i))
        lines.append('gpupool_gpu_memory_used_bytes{gpu_uuid="GPU-%d"} %d' % (i, used))
        lines.append('gpupool_gpu_sm_utilization_ratio{gpu_uuid="GPU-%d"} %s' % (i, sm))
    return "\n".join(lines) + "\n"


class UsedCluster:
    """The fixture's cluster with node addresses and fake agents at them:
    n1 at 127.0.0.2, n3 at 127.0.0.3 (n2 has no address, so no agent), and
    with `whole` a whole-GPU node (nvidia.com/gpu, not tracked by the
    extender) at 127.0.0.4; the extender with --ui-node-metrics-port and
    `args`."""

    def __init__(self, tmp_path, args=(), whole=False, n1_delay=0.0):
        objs = fixture_objects()
        for n in objs["nodes"]:
            ip = {"n1": "127.0.0.2", "n3": "127.0.0.3"}.get(n["metadata"]["name"])
            if ip:
                # Hostname first: the extender must still pick the InternalIP.
                n["status"]["addresses"] = [{"type": "Hostname", "address": "localhost"},
                                            {"type": "InternalIP", "address": ip}]
        specs = [("127.0.0.2", agent_text(USED["n1"], PODS_N1), n1_delay),
                 ("127.0.0.3", agent_text(USED["n3"]))]
        if whole:
            w = node("w1", 0, 0)
            w["status"]["capacity"]["nvidia.com/gpu"] = "1"
            w["status"]["allocatable"]["nvidia.com/gpu"] = "1"
            w["status"]["addresses"] = [{"type": "InternalIP", "address": "127.0.0.4"}]
            objs["nodes"].append(w)
            objs["pods"].append(whole_gpu_pod("cuda", "w1"))
            specs.append(("127.0.0.4", WHOLE_TEXT))
        self.srv = FakeApiServer(fixture=objs).start()
        self.agents = start_agents(specs)
        self.port = self.agents[0].port
        self.ext = Extender(self.srv, tmp_path, ["--metrics-port", str(free_port()),
                                                 "--ui-node-metrics-port", str(self.port)] +
                            list(args))

    def node_proxied(self):
        return sorted(r["path"] for r in self.srv.requests()
                      if r["path"].startswith("/api/v1/nodes/") and "/proxy/" in r["path"])

    def stop(self):
        rc = self.ext.stop()
        for a in self.agents:
            a.stop()
        self.srv.stop()
        assert rc == 0, self.ext.log()


WHOLE_TEXT = ('gpupool_gpu_healthy{gpu="0",uuid="GPU-w0",model="NVIDIA-A100"} 1\n'
              'gpupool_gpu_memory_used_bytes{gpu="0",uuid="GPU-w0",model="NVIDIA-A100"} %d\n'
              'gpupool_gpu_sm_utilization_ratio{gpu_uuid="GPU-w0",model="NVIDIA-A100"} 0.9\n'
              % (10 * GIB))


def whole_gpu_pod(name, node_name):
    p = pod(name, 0, node_name)
    for c in p["spec"]["containers"]:
        c.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = "1"
    return p


@pytest.fixture
def used_cluster(tmp_path):
    c = UsedCluster(tmp_path)
    yield c.srv, c.ext, c.port
    c.stop()


def usage_view(e):
    status, ctype, body = get(e, "/ui/usage.json")
    assert status == 200 and ctype == "application/json", body
    return json.loads(body)


def settled_usage(e):
    """usage.json once the first background sweep has ended."""
    import time
    deadline = time.monotonic() + scaled(20)
    while True:
        u = usage_view(e)
        if u["age_ms"] >= 0 or time.monotonic() > deadline:
            return u
        time.sleep(0.05)


def assert_used_figures(nodes):
    for name, gpus in USED.items():
        assert {int(k): (v[0], v[1]) for k, v in nodes[name]["gpus"].items()} == \
            {i: (used, pytest.approx(sm)) for i, (used, sm) in gpus.items()}


def test_usage_json_is_off_by_default(ext):
    status, _, body = get(ext, "/ui/usage.json")
    assert status == 404 and "--ui-node-metrics-port" in body


def test_usage_is_swept_directly_in_the_background(tmp_path):
    """Default --ui-node-metrics-from direct: every GPU-sharing node's agent
    is read at the node's InternalIP, with no credentials and without the
    API server, and again every interval, whether anyone asks or not."""
    import time
    c = UsedCluster(tmp_path, ["--ui-node-metrics-interval", "2s"])
    try:
        a1, a3 = c.agents
        # Nobody asks: the first sweep still runs, once the cache is synced.
        deadline = time.monotonic() + scaled(10)
        while (a1.hits == 0 or a3.hits == 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a1.hits >= 1 and a3.hits >= 1
        time.sleep(0.5)
        u = usage_view(c.ext)          # the first request finds a warm snapshot
        assert u["from"] == "direct" and u["interval_ms"] == 2000 and u["port"] == c.port
        assert 0 <= u["age_ms"] < 2000, u
        assert_used_figures(u["nodes"])
        assert "no address" in u["nodes"]["n2"]["error"]
        assert set(u["nodes"]) == {"n1", "n2", "n3"}   # GPU-sharing nodes only
        # Not through the API server, and never the extender's token.
        assert c.node_proxied() == []
        assert a1.authorization and set(a1.authorization + a3.authorization) == {None}
        # The next sweep comes by itself within the interval.
        hits = a1.hits
        deadline = time.monotonic() + scaled(6)
        while a1.hits == hits and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a1.hits > hits, "no second sweep without a request"
        assert usage_view(c.ext)["age_ms"] < 2000 + scaled(1000)
    finally:
        c.stop()


def test_usage_requests_never_start_sweeps(tmp_path):
    import time
    c = UsedCluster(tmp_path, ["--ui-node-metrics-interval", "60s"])
    try:
        u = settled_usage(c.ext)
        assert u["age_ms"] >= 0 and u["refreshing"] is False
        hits = (c.agents[0].hits, c.agents[1].hits)
        assert hits == (1, 1)
        for _ in range(5):
            assert usage_view(c.ext)["nodes"] == u["nodes"]
        time.sleep(0.3)
        assert (c.agents[0].hits, c.agents[1].hits) == hits
    finally:
        c.stop()


def test_stopping_the_extender_cancels_a_sweep_in_flight(tmp_path):
    """SIGTERM while an agent is slow to answer: the sweep's read is let go at
    once (not after its 10 s deadline), the thread joined, nothing leaked."""
    import time
    c = UsedCluster(tmp_path, n1_delay=30.0)
    try:
        deadline = time.monotonic() + scaled(10)
        while c.agents[0].hits == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.agents[0].hits == 1
        time.sleep(0.3)
        assert usage_view(c.ext)["refreshing"] is True
        start = time.monotonic()
        rc = c.ext.stop()
        took = time.monotonic() - start
        assert rc == 0, c.ext.log()
        assert took < scaled(4), took
    finally:
        c.stop()


def test_usage_through_the_node_proxy(tmp_path):
    c = UsedCluster(tmp_path, ["--ui-node-metrics-from", "proxy"])
    try:
        u = settled_usage(c.ext)
        assert u["from"] == "proxy" and u["age_ms"] >= 0
        assert_used_figures(u["nodes"])
        assert "503" in u["nodes"]["n2"]["error"]
        # One sweep: one request per GPU-sharing node, through the node proxy.
        assert c.node_proxied() == ["/api/v1/nodes/%s:%d/proxy/metrics" % (n, c.port)
                                    for n in ("n1", "n2", "n3")]
        for _ in range(3):
            assert usage_view(c.ext)["nodes"] == u["nodes"]
        assert len(c.node_proxied()) == 3
    finally:
        c.stop()


class UsedReader(DomReader):
    """DomReader plus each GPU's used figure (data-mem-used, data-sm)."""

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        a = dict(attrs)
        if "gpu" in (a.get("class") or "").split() and "data-gpu" in a and self._gpu is not None:
            self._gpu["mem_used"] = int(a["data-mem-used"]) if "data-mem-used" in a else None
            self._gpu["sm"] = float(a["data-sm"]) if "data-sm" in a else None
            self._gpu["over"] = None
        if "use" in (a.get("class") or "").split() and self._gpu is not None:
            self._gpu["over"] = "over" in a["class"].split()
            self._gpu["nodata"] = "nodata" in a["class"].split()


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (scripts/install-deps.sh)")
def test_ui_used_vs_booked_in_headless_chromium(used_cluster, tmp_path):
    srv, e, _ = used_cluster
    settled_usage(e)            # the page then gets figures on its first load
    url = "http://127.0.0.1:%d/ui" % e.port
    r = chromium(["--user-data-dir=%s" % (tmp_path / "profile-dom"), "--virtual-time-budget=8000",
                  "--dump-dom", url], 120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'data-usage="true"' in r.stdout, "the page never rendered usage.json:\n" + r.stdout[-3000:]
    dom = UsedReader()
    dom.feed(r.stdout)
    seen = {name: {g["index"]: (g["mem_used"], g["sm"], g["over"]) for g in gpus}
            for name, gpus in dom.nodes.items()}
    # Booked (EXPECTED): n1 16 and 12 GiB, n3 8 and 0: GPU1 of n1 uses more than booked.
    assert seen["n1"] == {0: (9 * GIB, pytest.approx(0.4), False),
                          1: (14 * GIB, pytest.approx(0.95), True)}
    assert seen["n3"] == {0: (2 * GIB, pytest.approx(0.1), False), 1: (0, 0.0, False)}
    assert seen["n2"] == {0: (None, None, False)}
    assert [g["nodata"] for g in dom.nodes["n2"]] == [True]
    # Used of booked, over the GPUs with figures: 25 of 36 GiB.
    assert dom.texts.get("t-real") == "25 / 36 GiB"

    artifacts = os.environ.get("GP_ARTIFACT_DIR") or str(tmp_path)
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, "extender-ui-used.png")
    r = chromium(["--user-data-dir=%s" % (tmp_path / "profile-shot"), "--virtual-time-budget=8000",
                  "--window-size=1280,520", "--screenshot=%s" % shot, url], 120)
    assert r.returncode == 0 and os.path.getsize(shot) > 5000, r.stderr[-2000:]
    print("extender /ui used-vs-booked screenshot: %s" % shot)


KUBECTL_GPUPOOL = os.path.join(os.path.dirname(EXTENDER_BIN), "kubectl-gpupool")


def extender_service(srv, e):
    srv.store.create("services", "kube-system", {
        "metadata": {"name": "gpupool-scheduler-extender", "namespace": "kube-system"},
        "spec": {"clusterIP": "127.0.0.1", "ports": [{"name": "http", "port": e.port}]}})


def cli_kubeconfig(srv, tmp_path):
    cfg = tmp_path / "cli-config"
    cfg.write_text("apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                   "clusters: [{name: t, cluster: {server: '%s'}}]\n"
                   "users: [{name: u, user: {token: t}}]\n"
                   "contexts: [{name: t, context: {cluster: t, user: u}}]\n" % srv.url)
    return cfg


def run_top(cfg, port, *args):
    from conftest import run_program
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = run_program([KUBECTL_GPUPOOL, "top"] + list(args) +
                       ["--kubeconfig", str(cfg), "--metrics-port", str(port),
                        "--metrics-timeout", "5s"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Sanitizer" not in proc.stderr, proc.stderr
    return proc


SERVICE_USAGE = ("/api/v1/namespaces/kube-system/services/gpupool-scheduler-extender:http"
                 "/proxy/ui/usage.json")


@pytest.mark.skipif(not os.path.exists(KUBECTL_GPUPOOL), reason="kubectl-gpupool not built")
def test_top_by_default_reads_the_extender_and_only_uncovered_nodes_from_agents(tmp_path):
    c = UsedCluster(tmp_path, whole=True)
    try:
        srv, e = c.srv, c.ext
        extender_service(srv, e)
        cfg = cli_kubeconfig(srv, tmp_path)
        settled_usage(e)
        proc = run_top(cfg, c.port, "gpus", "-o", "json")
        assert proc.stderr.splitlines() == [
            "warning: no metrics from node n2: the Node has no address (status.addresses) "
            "(the extender's last sweep)"], proc.stderr
        gpus = json.loads(proc.stdout)["gpus"]
        got = {(g["node"], g["index"]): (g["usedBytes"], g["smUtilization"]) for g in gpus}
        assert got[("n1", 0)] == (9 * GIB, pytest.approx(0.4))
        assert got[("n1", 1)] == (14 * GIB, pytest.approx(0.95))
        assert got[("n3", 1)] == (0, 0.0) and got[("n2", 0)] == (None, None)
        # w1 (whole GPU) is not in the extender's sweep: its agent, and only it, read
        # through the node proxy.
        assert got[("w1", 0)] == (10 * GIB, pytest.approx(0.9))
        assert c.node_proxied() == ["/api/v1/nodes/w1:%d/proxy/metrics" % c.port]
        pods = {p["name"]: p for p in json.loads(run_top(cfg, c.port, "pods", "-A", "-o",
                                                         "json").stdout)["pods"]}
        old = pods["old"]
        assert (old["usedBytes"], old["limitBytes"]) == (5 * GIB, 10 * GIB)
        assert old["smUtilization"] == pytest.approx(0.3) and pods["train"]["usedBytes"] is None
        svc = [r["path"] for r in srv.requests() if "/services/" in r["path"]]
        assert svc == [SERVICE_USAGE] * 2
        # --from extender: the sweep only; w1 is named as not covered.
        before = len(c.node_proxied())
        strict = run_top(cfg, c.port, "gpus", "--from", "extender")
        assert "no metrics from node w1: not in the extender's sweep" in strict.stderr
        assert len(c.node_proxied()) == before
    finally:
        c.stop()


@pytest.mark.skipif(not os.path.exists(KUBECTL_GPUPOOL), reason="kubectl-gpupool not built")
def test_top_reads_the_agents_when_the_extender_has_node_metrics_off(api, ext, tmp_path):
    extender_service(api, ext)
    cfg = cli_kubeconfig(api, tmp_path)
    proc = run_top(cfg, 9401, "gpus", "-v", "1")
    # The extender answered 404 (no --ui-node-metrics-port): every agent asked,
    # through the node proxy (none answers here: the nodes have no address).
    assert "the extender's figures not read" in proc.stderr and "HTTP 404" in proc.stderr
    assert sorted(r["path"] for r in api.requests() if r["path"].startswith("/api/v1/nodes/")
                  and "/proxy/" in r["path"]) == \
        ["/api/v1/nodes/%s:9401/proxy/metrics" % n for n in ("n1", "n2", "n3")]
    quiet = run_top(cfg, 9401, "gpus")
    assert "extender" not in quiet.stderr
