"""gpupool-scheduler-extender against the fake API server (test/fakeapi).

The real binary ($GP_BUILD_DIR/bin/gpupool-scheduler-extender) is started on
a kubeconfig that points at an in-process FakeApiServer; tests drive the
extender over HTTP as kube-scheduler would and read back what the API server
recorded (annotation PATCHes, Bindings). Under ASan (make
asan-integration-test) a sanitizer report or exit status fails the test.
"""

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import http.client

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fakeapi"))

from conftest import (BUILD, SANITIZER_ENV_DEFAULTS, SANITIZER_REPORT,  # noqa: E402
                      WRAPPER, error_exitcodes, run_program, scaled)
from fake_apiserver import FakeApiServer, make_certs  # noqa: E402

EXTENDER_BIN = os.path.join(BUILD, "bin", "gpupool-scheduler-extender")
PREFIX = "/gpupool-scheduler"
GPUSHARE = "/gpushare-scheduler"


# ---------------------------------------------------------------- objects

def node(name, memory=32, count=2, cpu="8", extra_annotations=None):
    cap = {"cpu": cpu, "memory": "64Gi", "pods": "110"}
    if memory:
        cap.update({"aliyun.com/gpu-mem": str(memory), "aliyun.com/gpu-count": str(count)})
    return {"metadata": {"name": name, "annotations": extra_annotations or {}},
            "status": {"capacity": cap, "allocatable": dict(cap)}}


def pod(name, memory=0, node_name=None, idx=None, cpu="1", ns="default", count=None):
    limits = {}
    if memory:
        limits["aliyun.com/gpu-mem"] = str(memory)
    if count:
        limits["aliyun.com/gpu-count"] = str(count)
    p = {"metadata": {"name": name, "namespace": ns, "annotations": {}},
         "spec": {"containers": [{"name": "c", "image": "x",
                                  "resources": {"requests": {"cpu": cpu}, "limits": limits}}]},
         "status": {"phase": "Running" if node_name else "Pending"}}
    if node_name:
        p["spec"]["nodeName"] = node_name
    if idx is not None:
        p["metadata"]["annotations"].update({"ALIYUN_COM_GPU_MEM_IDX": idx,
                                             "ALIYUN_COM_GPU_MEM_POD": str(memory)})
    return p


# ---------------------------------------------------------------- the process

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Extender:
    """One gpupool-scheduler-extender process; its log is drained in a thread."""

    def __init__(self, api, tmp_path, args=(), port=0, env=None, wait=True, tls=None):
        if not os.access(EXTENDER_BIN, os.X_OK):
            pytest.fail("extender not built: %s (run make, or set GP_BUILD_DIR)" % EXTENDER_BIN)
        self.api = api
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            "clusters: [{name: t, cluster: {server: '%s'}}]\n"
            "users: [{name: u, user: {token: test-token}}]\n"
            "contexts: [{name: t, context: {cluster: t, user: u}}]\n" % api.url)
        full_env = {k: v for k, v in os.environ.items()
                    if k not in ("PORT", "KUBECONFIG", "LOG_LEVEL") and not k.startswith("GP_")}
        for k, v in SANITIZER_ENV_DEFAULTS.items():
            full_env.setdefault(k, v)
        full_env.update(env or {})
        self.argv = WRAPPER + [EXTENDER_BIN, "--kubeconfig", str(kubeconfig), "--port", str(port),
                               "-v", "2"]
        self.argv += list(args)
        self.tls = tls
        self.lines = []
        self.port = None
        self.ready = threading.Event()
        self.proc = subprocess.Popen(self.argv, env=full_env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace")
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()
        if wait:
            self.wait_ready()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            if "serving" in line and " on port " in line:
                self.port = int(line.split(" on port ")[1].split()[0])
                self.ready.set()

    def wait_ready(self, timeout=20):
        if not self.ready.wait(scaled(timeout)):
            pytest.fail("extender did not start serving:\n" + self.log())

    def log(self):
        return "".join(self.lines)

    def connection(self):
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls)
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=scaled(30), context=ctx)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=scaled(30))

    def request(self, method, path, body=None, raw=None, conn=None):
        c = conn or self.connection()
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        if conn is None:
            c.close()
        return r.status, text

    def post(self, path, body=None, raw=None, conn=None):
        status, text = self.request("POST", path, body, raw, conn)
        try:
            return status, json.loads(text)
        except ValueError:
            pytest.fail("%s answered %d with non-JSON %r" % (path, status, text[:200]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(scaled(20))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail("extender ignored SIGTERM:\n" + self.log())
        self.reader.join(scaled(10))
        report = SANITIZER_REPORT.search(self.log())
        if report or self.proc.returncode in error_exitcodes():
            pytest.fail("extender exited %d with a sanitizer report:\n%s"
                        % (self.proc.returncode, self.log()))
        return self.proc.returncode


@pytest.fixture
def api():
    srv = FakeApiServer(fixture={
        "nodes": [node("n1", 32, 2), node("n2", 16, 1), node("cpu1", 0, 0)],
        "pods": [pod("old", 10, "n1", "0"), pod("web", 0, "cpu1", cpu="2")],
    }).start()
    yield srv
    srv.stop()


@pytest.fixture
def started(request, tmp_path):
    """start(api, ...) -> Extender; every one is stopped (and checked) at the end."""
    procs = []

    def start(api_server, *args, **kw):
        e = Extender(api_server, tmp_path, args, **kw)
        procs.append(e)
        return e
    yield start
    failures = []
    for e in procs:
        if e.proc.poll() is not None and e.proc.returncode != 0 and not getattr(e, "expect_exit", False):
            failures.append("extender died with %d:\n%s" % (e.proc.returncode, e.log()))
        else:
            try:
                rc = e.stop()
                if rc != 0 and not getattr(e, "expect_exit", False):
                    failures.append("extender exited %d on SIGTERM:\n%s" % (rc, e.log()))
            except pytest.fail.Exception as ex:
                failures.append(str(ex))
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def add_pod(api, p):
    return api.put_object("pods", p)


def wait_for(cond, what, timeout=10):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    pytest.fail("timed out waiting for " + what)


def filter_args(p, names=None, nodes=None):
    if nodes is not None:
        return {"Pod": p, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    return {"Pod": p, "Nodes": None, "NodeNames": names}


def bind_args(p, node_name):
    m = p["metadata"]
    return {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node_name}


def used(ext, node_name, dev):
    status, view = ext.request("GET", "/inspect/" + node_name)
    assert status == 200, view
    return json.loads(view)["nodes"][0]["devs"][dev]["usedGPU"]


# ---------------------------------------------------------------- tests

def test_sync_before_port_opens(api, started):
    """The port opens only after nodes, pods and ConfigMaps are listed."""
    api.add_fault(method="GET", path="^/api/v1/pods$", watch=False, action="delay", delay_ms=1500)
    port = free_port()
    ext = started(api, port=port, wait=False)
    deadline = time.monotonic() + 1.0
    refused = 0
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                refused += 1
        time.sleep(0.05)
    assert refused > 0, "the port was open while the pods LIST was still running"
    ext.wait_ready()
    status, text = ext.request("GET", "/healthz")
    assert (status, text) == (200, "ok")
    lists = [r["path"] for r in api.requests() if r["method"] == "GET" and "watch" not in r["query"]]
    assert {"/api/v1/nodes", "/api/v1/pods", "/api/v1/namespaces/kube-system/configmaps"} <= set(lists)
    status, text = ext.request("GET", "/version")
    assert status == 200 and text.strip()


def test_filter_both_modes_and_gpushare_paths(api, started):
    ext = started(api)
    p = add_pod(api, pod("p1", 8))
    for prefix in (PREFIX, GPUSHARE):
        status, r = ext.post(prefix + "/filter", filter_args(p, ["n1", "n2", "cpu1", "ghost"]))
        assert status == 200
        assert r["NodeNames"] == ["n1", "n2"] and r["Error"] == ""
        assert r["Nodes"] is None
        assert "not for GPU share" in r["FailedNodes"]["cpu1"]
        assert "not in the extender's cache" in r["FailedNodes"]["ghost"]
    # nodeCacheCapable false: full Node objects in, full Node objects out.
    nodes = [api.store.get("nodes", None, n) for n in ("n1", "n2", "cpu1")]
    status, r = ext.post(PREFIX + "/filter", filter_args(p, nodes=nodes))
    assert status == 200
    assert [n["metadata"]["name"] for n in r["Nodes"]["items"]] == ["n1", "n2"]
    assert r["Nodes"]["items"][0] == nodes[0]
    assert set(r["FailedNodes"]) == {"cpu1"}


def test_over_full_request_fails_with_reason_per_node(api, started):
    ext = started(api)
    big = add_pod(api, pod("big", 17))
    status, r = ext.post(PREFIX + "/filter", filter_args(big, ["n1", "n2"]))
    assert status == 200 and r["NodeNames"] == []
    for n in ("n1", "n2"):
        assert "Insufficient GPU Memory in one device" in r["FailedNodes"][n]
    # n1 GPU 0 holds "old" (10 of 16): 7 fits only on GPU 1 or n2.
    odd = add_pod(api, pod("odd", 7, count=2))
    status, r = ext.post(PREFIX + "/filter", filter_args(odd, ["n1"]))
    assert "not divisible" in r["FailedNodes"]["n1"]


def test_prioritize_prefers_the_fuller_node(api, started):
    ext = started(api, "--policy", "binpack")
    p = add_pod(api, pod("p1", 4))
    status, r = ext.post(PREFIX + "/prioritize", filter_args(p, ["n1", "n2", "cpu1"]))
    assert status == 200
    scores = {h["Host"]: h["Score"] for h in r}
    assert scores["n1"] == 10 and scores["n1"] > scores["n2"] and scores["cpu1"] == 0


def test_bind_writes_one_binding_with_the_annotations(api, started):
    ext = started(api)
    p = add_pod(api, pod("p1", 6))
    api.clear_requests()
    status, r = ext.post(PREFIX + "/bind", bind_args(p, "n1"))
    assert (status, r) == (200, {"Error": ""})
    reqs = [x for x in api.requests() if x["method"] in ("PATCH", "POST")]
    assert [x["method"] for x in reqs] == ["POST"]
    assert reqs[0]["path"] == "/api/v1/namespaces/default/pods/p1/binding"
    binding = json.loads(reqs[0]["body"])
    assert binding["target"]["name"] == "n1"
    assert binding["metadata"]["uid"] == p["metadata"]["uid"]
    assert binding["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_POD"] == "6"
    stored = api.store.get("pods", "default", "p1")
    ann = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == "n1"
    # GPU 0 has 6 free (16 - 10): best fit puts 6 there.
    assert ann["ALIYUN_COM_GPU_MEM_IDX"] == "0"
    assert ann["ALIYUN_COM_GPU_MEM_POD"] == "6"
    assert ann["ALIYUN_COM_GPU_MEM_DEV"] == "16"
    assert ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert int(ann["ALIYUN_COM_GPU_MEM_ASSUME_TIME"]) > 1.6e18
    assert used(ext, "n1", 0) == 16
    status, r = ext.post(PREFIX + "/bind", bind_args(p, "n1"))
    assert "already bound" in r["Error"]
    # GPU 0 is full now: 4 on each of two GPUs no longer fits n1 (gpushare path).
    p2 = add_pod(api, pod("p2", 8, count=2))
    status, r = ext.post(GPUSHARE + "/bind", bind_args(p2, "n1"))
    assert status == 200 and "does not fit" in r["Error"]
    assert "spec" not in api.store.get("pods", "default", "p2") or \
        not api.store.get("pods", "default", "p2")["spec"].get("nodeName")


def test_multi_gpu_share(api, started):
    ext = started(api)
    p = add_pod(api, pod("two", 8, count=2))
    status, r = ext.post(PREFIX + "/filter", filter_args(p, ["n1", "n2"]))
    assert r["NodeNames"] == ["n1"]
    assert "needs 2 GPUs" in r["FailedNodes"]["n2"] or "GPU" in r["FailedNodes"]["n2"]
    status, r = ext.post(PREFIX + "/bind", bind_args(p, "n1"))
    assert r == {"Error": ""}
    ann = api.store.get("pods", "default", "two")["metadata"]["annotations"]
    assert ann["ALIYUN_COM_GPU_MEM_IDX"] == "0,1" and ann["ALIYUN_COM_GPU_MEM_POD"] == "8"
    assert used(ext, "n1", 0) == 14 and used(ext, "n1", 1) == 4


@pytest.mark.parametrize("status_code", [409, 403])
def test_refused_binding_rolls_back(api, started, status_code):
    ext = started(api)
    p1 = add_pod(api, pod("p1", 16))
    api.add_fault(method="POST", path="/pods/p1/binding$", status=status_code, count=1)
    status, r = ext.post(PREFIX + "/bind", bind_args(p1, "n2"))
    assert status == 200 and "fake fault" in r["Error"]
    assert used(ext, "n2", 0) == 0
    # A refused Binding wrote nothing: no annotations, nothing to take back.
    assert "ALIYUN_COM_GPU_MEM_IDX" not in \
        api.store.get("pods", "default", "p1")["metadata"]["annotations"]
    assert [x["method"] for x in api.requests() if x["method"] == "PATCH"] == []
    # A second pod can now use the whole GPU.
    p2 = add_pod(api, pod("p2", 16))
    status, r = ext.post(PREFIX + "/bind", bind_args(p2, "n2"))
    assert r == {"Error": ""}
    assert api.store.get("pods", "default", "p2")["spec"]["nodeName"] == "n2"


@pytest.mark.parametrize("name, namespace, node", [
    ("..", "default", "n1"), (".", "default", "n1"), ("p1", "..", "n1"),
    ("p1", ".", "n1"), ("p1", "default", ".."), (".p1", "default", "n1"),
    ("p1", "a.b", "n1"),
])
def test_bind_refuses_names_kubernetes_never_gives(api, started, name, namespace, node):
    """D7: "." and ".." (and other non-DNS-1123 names) are refused with a
    400 before any API call; libcurl folded them into other API paths."""
    ext = started(api)
    add_pod(api, pod("p1", 4))
    before = used(ext, "n1", 0)
    api.clear_requests()
    status, r = ext.post(PREFIX + "/bind", {"PodName": name, "PodNamespace": namespace,
                                            "Node": node})
    assert status == 400 and "is not a valid object name" in r["Error"], (status, r)
    # the cache's own list/watch may run meanwhile: no request names a pod
    assert [x for x in api.requests() if "/pods/" in x["path"] or x["method"] != "GET"] == []
    assert used(ext, "n1", 0) == before


def test_bind_of_deleted_pod(api, started):
    ext = started(api)
    p = add_pod(api, pod("gone", 4))
    api.store.delete("pods", "default", "gone")
    status, r = ext.post(PREFIX + "/bind", bind_args(p, "n1"))
    assert status == 200 and "not found" in r["Error"], r
    assert used(ext, "n1", 1) == 0


def test_concurrent_binds_never_overcommit(api, started):
    ext = started(api)
    pods = [add_pod(api, pod("c%02d" % i, 4)) for i in range(12)]
    results = [None] * len(pods)

    def bind(i):
        results[i] = ext.post(PREFIX + "/bind", bind_args(pods[i], "n2"))[1]["Error"]
    threads = [threading.Thread(target=bind, args=(i,)) for i in range(len(pods))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [r for r in results if r == ""]
    assert len(ok) == 4, results            # n2: one GPU of 16
    assert all("does not fit" in r for r in results if r)
    bound = [x for x in (api.store.get("pods", "default", p["metadata"]["name"]) for p in pods)
             if x["spec"].get("nodeName") == "n2"]
    assert sum(int(x["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_POD"]) for x in bound) == 16
    assert used(ext, "n2", 0) == 16


def test_restart_rebuilds_usage_from_annotations(api, started):
    ext = started(api)
    p = add_pod(api, pod("p1", 5))
    assert ext.post(PREFIX + "/bind", bind_args(p, "n1"))[1] == {"Error": ""}
    before = [used(ext, "n1", 0), used(ext, "n1", 1)]
    assert ext.stop() == 0
    again = started(api)
    assert [used(again, "n1", 0), used(again, "n1", 1)] == before
    assert sum(before) == 15


def test_api_faults_while_filtering(api, started):
    ext = started(api)
    p = add_pod(api, pod("p1", 4))
    args = filter_args(p, ["n1", "n2"])
    # Slow API server, 500s, dropped watches, 410 Gone: filter answers from the cache.
    api.add_fault(method="GET", path="^/api/v1/", action="delay", delay_ms=300, count=-1)
    api.add_fault(method="GET", path="^/api/v1/pods$", watch=False, status=500, count=3)
    api.drop_watches()
    for _ in range(5):
        status, r = ext.post(PREFIX + "/filter", args)
        assert status == 200 and r["NodeNames"] == ["n1", "n2"]
    api.store.compact()
    api.add_fault(method="GET", path="^/api/v1/nodes$", watch=True, action="watch_error", status=410,
                  count=1)
    api.drop_watches()
    for _ in range(5):
        status, r = ext.post(PREFIX + "/filter", args)
        assert status == 200 and r["Error"] == ""
    api.clear_faults()
    # Changes made during the trouble arrive: a new node and a full GPU.
    api.put_object("nodes", node("n3", 8, 1))
    add_pod(api, pod("hog", 16, "n2", "0"))
    wait_for(lambda: ext.post(PREFIX + "/filter", filter_args(p, ["n2", "n3"]))[1]["NodeNames"] == ["n3"],
             "the cache to catch up after the faults", timeout=30)
    assert ext.proc.poll() is None


def test_unhealthy_gpu_configmap(api, started):
    ext = started(api)
    p = add_pod(api, pod("p1", 16))
    assert ext.post(PREFIX + "/filter", filter_args(p, ["n2"]))[1]["NodeNames"] == ["n2"]
    api.put_object("configmaps", {"metadata": {"name": "unhealthy-gpu-n2", "namespace": "kube-system"},
                                  "data": {"gpus": "0"}})
    r = wait_for(lambda: (lambda r: r if r["NodeNames"] == [] else None)(
        ext.post(PREFIX + "/filter", filter_args(p, ["n2"]))[1]), "the ConfigMap to count")
    assert "0 healthy of 1" in r["FailedNodes"]["n2"]
    status, view = ext.request("GET", GPUSHARE + "/inspect/n2")
    assert json.loads(view)["nodes"][0]["devs"][0]["healthy"] is False
    api.store.delete("configmaps", "kube-system", "unhealthy-gpu-n2")
    wait_for(lambda: ext.post(PREFIX + "/filter", filter_args(p, ["n2"]))[1]["NodeNames"] == ["n2"],
             "the ConfigMap deletion to count")


def test_heterogeneous_gpus_annotation(api, started):
    gpus = json.dumps([{"index": 0, "memory": 8, "model": "Tesla-T4"},
                       {"index": 1, "memory": 24, "model": "Tesla-T4", "healthy": True}])
    api.put_object("nodes", node("mixed", 32, 2, extra_annotations={"gpupool.io/gpus": gpus}))
    ext = started(api)
    p = add_pod(api, pod("p20", 20))
    r = ext.post(PREFIX + "/filter", filter_args(p, ["mixed", "n1"]))[1]
    assert r["NodeNames"] == ["mixed"]
    model = add_pod(api, dict(pod("needs-a100", 4), metadata={
        "name": "needs-a100", "namespace": "default", "annotations": {"gpupool.io/gpu-model": "A100"}}))
    r = ext.post(PREFIX + "/filter", filter_args(model, ["mixed"]))[1]
    assert "GPU model" in r["FailedNodes"]["mixed"]


MALFORMED = [
    b"",
    b"not json",
    b"{\"Pod\": ",
    b"[]",
    b"42",
    b"{\"Pod\": \"x\", \"NodeNames\": [\"n1\"]}",
    b"{\"Pod\": {}, \"NodeNames\": \"n1\"}",
    b"{\"Pod\": {}, \"NodeNames\": [1, 2]}",
    b"{\"Pod\": {}, \"Nodes\": {\"items\": 5}}",
    b"{\"Pod\": {}}",
    b"{\"Pod\": {\"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"aliyun.com/gpu-mem\": \"lots\"}}}]}},"
    b" \"NodeNames\": []}",
    b"{\"Pod\": {\"metadata\": []}, \"NodeNames\": []}",
    b"[" * 100000,
    b"{\"a\":" * 5000 + b"1" + b"}" * 5000,
    b"\xff\xfe\x00garbage",
    b"{\"Pod\": {}, \"NodeNames\": [\"\xc3\x28\"]}",
]


def test_malformed_bodies_get_4xx_json_error(api, started):
    ext = started(api, "--max-request-bytes", "65536")
    conn = ext.connection()
    for verb in ("filter", "prioritize", "bind"):
        for body in MALFORMED:
            status, r = ext.post(PREFIX + "/" + verb, raw=body)
            assert 400 <= status < 500, (verb, body[:40], status, r)
            assert isinstance(r, dict) and r.get("Error"), (verb, body[:40], r)
    bad_binds = [{"PodName": "p"}, {"PodName": 1, "PodNamespace": "d", "Node": "n1"},
                 {"PodName": "../../x", "PodNamespace": "default", "Node": "n1"}]
    for b in bad_binds:
        status, r = ext.post(PREFIX + "/bind", b)
        assert status == 400 and r["Error"]
    # Oversized: 413 with a JSON Error, announced or chunked.
    status, r = ext.post(PREFIX + "/filter", raw=b"{" + b" " * 70000 + b"}")
    assert status == 413 and r["Error"]
    c = ext.connection()
    c.putrequest("POST", PREFIX + "/filter")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for _ in range(20):
        c.send(b"1000\r\n" + b" " * 4096 + b"\r\n")
    c.send(b"0\r\n\r\n")
    resp = c.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["Error"]
    c.close()
    # Wrong methods and paths.
    assert ext.request("GET", PREFIX + "/filter")[0] == 405
    assert ext.request("GET", "/nothing")[0] == 404
    assert ext.request("DELETE", "/healthz")[0] == 405
    # Still serving, on a reused connection too.
    p = add_pod(api, pod("p1", 4))
    for _ in range(3):
        status, r = ext.post(PREFIX + "/filter", filter_args(p, ["n1"]), conn=conn)
        assert status == 200 and r["NodeNames"] == ["n1"]
    conn.close()
    assert ext.request("GET", "/healthz") == (200, "ok")


def test_inspect_matches_gpushare_shape(api, started):
    ext = started(api)
    status, text = ext.request("GET", GPUSHARE + "/inspect")
    view = json.loads(text)
    assert status == 200 and "error" not in view
    n1 = [n for n in view["nodes"] if n["name"] == "n1"][0]
    assert (n1["totalGPU"], n1["usedGPU"]) == (32, 10)
    assert n1["devs"][0]["pods"] == [{"name": "old", "namespace": "default", "usedGPU": 10,
                                      "usedCores": 0}]
    assert (n1["devs"][0]["totalCores"], n1["devs"][0]["usedCores"]) == (100, 0)
    assert {n["name"] for n in view["nodes"]} == {"n1", "n2"}
    status, text = ext.request("GET", "/inspect/nope")
    assert status == 404 and json.loads(text)["error"]


def test_https(api, started, tmp_path):
    certs = make_certs(str(tmp_path / "certs"))
    ext = started(api, "--tls-cert", os.path.join(certs, "server.crt"),
                  "--tls-key", os.path.join(certs, "server.key"),
                  tls=os.path.join(certs, "ca.crt"))
    p = add_pod(api, pod("p1", 4))
    status, r = ext.post(PREFIX + "/filter", filter_args(p, ["n1"]))
    assert status == 200 and r["NodeNames"] == ["n1"]


def test_bad_flags_are_refused(tmp_path):
    if not os.access(EXTENDER_BIN, os.X_OK):
        pytest.fail("extender not built: %s" % EXTENDER_BIN)
    for args, want in ((["--port", "x"], "--port"), (["--policy", "best"], "--policy"),
                       (["--tls-cert", "/c"], "--tls-key"), (["--prefix", "nope"], "--prefix")):
        r = run_program([EXTENDER_BIN] + args, timeout=20)
        assert r.returncode == 2 and want in r.stderr, (args, r.stderr)
    r = run_program([EXTENDER_BIN, "--help"], timeout=20)
    assert r.returncode == 0 and "--kubeconfig" in r.stdout and "LOG_LEVEL" in r.stdout
