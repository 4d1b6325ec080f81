"""gpupool.io/gpu-cores through the extender's HTTP API (issue 25 item 4).

A pod asking gpu-mem and gpu-cores gets GPUs on which both fit, so the
cores booked on a GPU never pass 100; a pod asking gpu-mem only books no
cores and is placed on memory alone, as before; a node whose gpupool.io/gpus
annotation predates cores (or that has none) offers 100 per GPU. Driven
over HTTP as kube-scheduler drives the extender, against the fake API
server; /inspect, /ui/pool.json and /metrics must show the cores booked.
"""

import json

import pytest

from test_extender import (PREFIX, add_pod, bind_args, filter_args, free_port, node,  # noqa: F401
                           pod, started)
from fake_apiserver import FakeApiServer

CORES = "gpupool.io/gpu-cores"


def cores_pod(name, memory, cores, node_name=None, idx=None, count=None):
    p = pod(name, memory, node_name=node_name, idx=idx, count=count)
    p["spec"]["containers"][0]["resources"]["limits"][CORES] = str(cores)
    return p


def gpus_annotation(entries):
    return {"gpupool.io/gpus": json.dumps(entries)}


@pytest.fixture
def api():
    """n1: 2 GPUs x 16 from aliyun.com/gpu-count (no gpupool.io/gpus at all);
    old1: 1 GPU, an annotation written before cores existed; half1: 1 GPU
    whose annotation offers 50 cores; busy1: 1 GPU holding a bound 70-core
    pod that the API shows (a restart must charge it)."""
    old = gpus_annotation([{"index": 0, "memory": 16, "model": "T4", "healthy": True}])
    half = gpus_annotation([{"index": 0, "memory": 16, "model": "T4", "healthy": True,
                             "cores": 50}])
    srv = FakeApiServer(fixture={
        "nodes": [node("n1", 32, 2), node("old1", 16, 1, extra_annotations=old),
                  node("half1", 16, 1, extra_annotations=half), node("busy1", 16, 1)],
        "pods": [cores_pod("running", 4, 70, node_name="busy1", idx="0")],
    }).start()
    yield srv
    srv.stop()


def bind(ext, api, p, node_name):
    status, r = ext.post(PREFIX + "/bind", bind_args(p, node_name))
    assert status == 200
    return r["Error"]


def gpu_of(api, name):
    return api.store.get("pods", "default", name)["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"]


def devs(ext, node_name):
    status, view = ext.request("GET", "/inspect/" + node_name)
    assert status == 200, view
    return json.loads(view)["nodes"][0]["devs"]


def test_two_60_core_pods_never_share_a_gpu(api, started):
    # binpack would put both on the fuller GPU on memory alone (2 + 2 of 16)
    for policy in ("binpack", "gpupool"):
        ext = started(api, "--policy", policy)
        a = add_pod(api, cores_pod("a-" + policy, 2, 60))
        b = add_pod(api, cores_pod("b-" + policy, 2, 60))
        assert bind(ext, api, a, "n1") == ""
        assert bind(ext, api, b, "n1") == ""
        assert {gpu_of(api, "a-" + policy), gpu_of(api, "b-" + policy)} == {"0", "1"}
        d = devs(ext, "n1")
        assert [g["usedCores"] for g in d] == [60, 60]
        assert [g["totalCores"] for g in d] == [100, 100]
        assert [p["usedCores"] for g in d for p in g["pods"]] == [60, 60]
        # a third one: memory is plentiful (14 free on each GPU), cores are not
        c = add_pod(api, cores_pod("c-" + policy, 2, 60))
        status, r = ext.post(PREFIX + "/filter", filter_args(c, ["n1"]))
        assert status == 200 and r["NodeNames"] == [], r
        assert "Insufficient GPU cores in one device" in r["FailedNodes"]["n1"]
        assert "most free 40 of 100" in r["FailedNodes"]["n1"]
        status, r = ext.post(PREFIX + "/prioritize", filter_args(c, ["n1", "old1"]))
        scores = {h["Host"]: h["Score"] for h in r}
        assert scores["n1"] == 0 and scores["old1"] > 0, scores
        err = bind(ext, api, c, "n1")
        assert "does not fit" in err and "cores" in err
        assert not api.store.get("pods", "default", "c-" + policy)["spec"].get("nodeName")
        # 40 cores still fit beside 60 (exactly 100)
        d40 = add_pod(api, cores_pod("d-" + policy, 2, 40))
        assert bind(ext, api, d40, "n1") == ""
        assert sorted(g["usedCores"] for g in devs(ext, "n1")) == [60, 100]
        ext.stop()
        for name in ("a", "b", "c", "d"):
            api.store.delete("pods", "default", "%s-%s" % (name, policy))


def test_memory_only_pods_are_unaffected(api, started):
    ext = started(api)
    full = add_pod(api, cores_pod("full", 4, 100))
    assert bind(ext, api, full, "old1") == ""
    assert devs(ext, "old1")[0]["usedCores"] == 100
    # every core of old1 is booked, 12 GiB of memory is free: a memory-only
    # pod still fits there and books nothing; a 1-core pod does not
    mem = add_pod(api, pod("mem", 8))
    status, r = ext.post(PREFIX + "/filter", filter_args(mem, ["old1"]))
    assert r["NodeNames"] == ["old1"], r
    assert bind(ext, api, mem, "old1") == ""
    d = devs(ext, "old1")[0]
    assert (d["usedGPU"], d["usedCores"]) == (12, 100)
    one = add_pod(api, cores_pod("one", 1, 1))
    status, r = ext.post(PREFIX + "/filter", filter_args(one, ["old1"]))
    assert r["NodeNames"] == [] and "cores" in r["FailedNodes"]["old1"]


def test_node_annotations_with_and_without_cores(api, started):
    ext = started(api)
    p = add_pod(api, cores_pod("p60", 2, 60))
    status, r = ext.post(PREFIX + "/filter", filter_args(p, ["n1", "old1", "half1", "busy1"]))
    assert status == 200
    # no annotation and an annotation without cores: 100 per GPU; half1
    # offers 50; busy1's GPU holds the bound 70-core pod the API listed
    assert sorted(r["NodeNames"]) == ["n1", "old1"], r
    assert "most free 50 of 100" in r["FailedNodes"]["half1"]
    assert "most free 30 of 100" in r["FailedNodes"]["busy1"]
    assert devs(ext, "old1")[0]["totalCores"] == 100
    assert devs(ext, "half1")[0]["totalCores"] == 50
    assert devs(ext, "busy1")[0]["usedCores"] == 70


def test_invalid_cores_requests_fail_with_a_reason(api, started):
    ext = started(api)
    cases = [(cores_pod("too-many", 2, 150), "more than one GPU"),
             (cores_pod("no-memory", 0, 20), "without aliyun.com/gpu-mem")]
    for p, why in cases:
        p = add_pod(api, p)
        status, r = ext.post(PREFIX + "/filter", filter_args(p, ["n1", "old1"]))
        assert status == 200 and r["NodeNames"] == [], r
        for n in ("n1", "old1"):
            assert why in r["FailedNodes"][n], r
        assert why in bind(ext, api, p, "n1")


def test_pool_view_and_metrics_count_cores(api, started):
    metrics = free_port()
    ext = started(api, "--metrics-port", str(metrics))
    p = add_pod(api, cores_pod("seen", 2, 30))
    assert bind(ext, api, p, "n1") == ""
    status, body = ext.request("GET", "/ui/pool.json")
    assert status == 200
    view = json.loads(body)
    n1 = [n for n in view["nodes"] if n["name"] == "n1"][0]
    gpu = int(gpu_of(api, "seen"))
    assert n1["gpus"][gpu][4:] == [100, 30]
    assert n1["gpus"][gpu][3] == [["default", "seen", 2, 30]]
    assert n1["gpus"][1 - gpu][4:] == [100, 0]
    assert view["totals"]["cores_total"] == 450  # n1 200, old1 100, half1 50, busy1 100
    assert view["totals"]["cores_used"] == 100  # 30 + busy1's 70
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", metrics, timeout=30)
    c.request("GET", "/metrics")
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    assert r.status == 200
    assert 'gpupool_extender_gpu_cores_allocated{node="n1",gpu="%d"} 30' % gpu in text
    assert 'gpupool_extender_gpu_cores_allocated{node="busy1",gpu="0"} 70' in text
    assert "gpupool_extender_cluster_gpu_cores_allocated 100" in text
