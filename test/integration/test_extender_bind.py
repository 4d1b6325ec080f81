"""The bind verb's guarantees against the fake API server (issue 16, D1/D2).

Each test is a reproduction from shared/research/reliability-review.md
(appendix A) turned into an assertion: a Binding whose outcome is unknown
keeps its charge, a PodUID that belongs to another pod is refused before
anything is written, and a refused Binding never changes the pod. One
write per bind: the Binding carries gpushare's annotations itself.
"""

import json
import time

import pytest

from conftest import scaled
from test_extender import (PREFIX, bind_args, node, pod, started, used, wait_for)  # noqa: F401
from fake_apiserver import FakeApiServer

GPU_KEYS = ("ALIYUN_COM_GPU_MEM_IDX", "ALIYUN_COM_GPU_MEM_POD", "ALIYUN_COM_GPU_MEM_DEV",
            "ALIYUN_COM_GPU_MEM_ASSIGNED", "ALIYUN_COM_GPU_MEM_ASSUME_TIME")


@pytest.fixture
def api():
    """The reviewer's fixture: n1, n2 with 2 GPUs x 16; p000..p005 pending, 16 each."""
    srv = FakeApiServer(fixture={
        "nodes": [node("n1", 32, 2), node("n2", 32, 2)],
        "pods": [pod("p%03d" % i, 16) for i in range(6)],
    }).start()
    yield srv
    srv.stop()


def get(api, name):
    return api.store.get("pods", "default", name)


def bind(ext, api, name, node_name, uid=None):
    args = bind_args(get(api, name), node_name)
    if uid is not None:
        args["PodUID"] = uid
    status, r = ext.post(PREFIX + "/bind", args)
    assert status == 200, r
    return r["Error"]


def gpu_annotations(api, name):
    a = get(api, name)["metadata"].get("annotations") or {}
    return {k: a[k] for k in GPU_KEYS if k in a}


def node_used(ext, name):
    status, text = ext.request("GET", "/inspect/" + name)
    assert status == 200, text
    return json.loads(text)["nodes"][0]["usedGPU"]


def test_one_write_per_bind(api, started):
    """The Binding is the only write and carries the five annotations."""
    ext = started(api)
    api.clear_requests()
    assert bind(ext, api, "p000", "n1") == ""
    writes = [x for x in api.requests() if x["method"] != "GET"]
    assert [(x["method"], x["path"]) for x in writes] == \
        [("POST", "/api/v1/namespaces/default/pods/p000/binding")]
    body = json.loads(writes[0]["body"])
    assert body["metadata"]["uid"] == get(api, "p000")["metadata"]["uid"]
    assert set(body["metadata"]["annotations"]) == set(GPU_KEYS)
    ann = gpu_annotations(api, "p000")
    assert get(api, "p000")["spec"]["nodeName"] == "n1"
    assert ann["ALIYUN_COM_GPU_MEM_POD"] == "16" and ann["ALIYUN_COM_GPU_MEM_DEV"] == "16"
    assert ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert ann["ALIYUN_COM_GPU_MEM_IDX"] in ("0", "1")


def test_d1_binding_that_outlives_the_timeout_keeps_its_charge(api, started):
    """D1: p001's Binding times out on our side but lands at 4 s; p002 must
    not be given the same GPU in the meantime."""
    ext = started(api, "--api-timeout", "2s")
    assert bind(ext, api, "p000", "n1") == ""
    api.add_fault(method="POST", path="/p001/binding$", action="delay", delay_ms=4000)
    err = bind(ext, api, "p001", "n1")
    assert "timed out" in err or "Timeout" in err or "not known" in err, err
    assert node_used(ext, "n1") == 32, "the charge of a bind with an unknown outcome was released"
    err = bind(ext, api, "p002", "n1")
    assert "does not fit" in err, err
    wait_for(lambda: get(api, "p001")["spec"].get("nodeName") == "n1", "p001's late Binding")
    time.sleep(scaled(0.5))
    placed = {n: gpu_annotations(api, n).get("ALIYUN_COM_GPU_MEM_IDX")
              for n in ("p000", "p001", "p002") if get(api, n)["spec"].get("nodeName") == "n1"}
    assert sorted(placed) == ["p000", "p001"], placed
    assert sorted(placed.values()) == ["0", "1"], placed
    assert node_used(ext, "n1") == 32
    # The retried p001 is refused (bound already): nothing else is written.
    api.clear_requests()
    assert "already" in bind(ext, api, "p001", "n1")
    assert [x for x in api.requests() if x["method"] != "GET"] == []


def test_d1_retry_to_the_same_node_reuses_the_held_charge(api, started):
    """kube-scheduler retries a bind whose outcome is unknown (an API outage,
    a failover) on the same node: the held charge is re-used, so the pod
    lands at once instead of after the hold, and whichever of the two
    Bindings the API server applies (a pod binds once), the charge is the
    same: nothing is charged twice, nothing over-commits."""
    ext = started(api, "--api-timeout", "1s", "--bind-unknown-hold", "60s")
    api.add_fault(method="POST", path="/p003/binding$", action="delay", delay_ms=2500)
    assert bind(ext, api, "p003", "n2") != ""
    assert node_used(ext, "n2") == 16
    assert bind(ext, api, "p003", "n2") == ""
    assert get(api, "p003")["spec"]["nodeName"] == "n2"
    assert node_used(ext, "n2") == 16
    held = gpu_annotations(api, "p003")["ALIYUN_COM_GPU_MEM_IDX"]
    # The first Binding arrives late and is refused (already assigned).
    time.sleep(scaled(2.0))
    assert gpu_annotations(api, "p003")["ALIYUN_COM_GPU_MEM_IDX"] == held
    assert bind(ext, api, "p004", "n2") == ""
    assert bind(ext, api, "p005", "n2") != ""
    assert node_used(ext, "n2") == 32
    assert gpu_annotations(api, "p004")["ALIYUN_COM_GPU_MEM_IDX"] != held


def test_d1_unknown_outcome_released_only_after_readback(api, started):
    """A Binding that never lands: the charge is held until --bind-unknown-hold
    after the bind's deadline, then the pod's retry reads it back (unbound)
    and binds it."""
    ext = started(api, "--api-timeout", "1s", "--bind-unknown-hold", "3s")
    api.add_fault(method="POST", path="/p001/binding$", action="stall", delay_ms=1500)
    t0 = time.monotonic()
    err = bind(ext, api, "p001", "n2")
    assert err, "a stalled Binding was reported bound"
    assert node_used(ext, "n2") == 16
    # kube-scheduler retries elsewhere at once: still unknown, refused,
    # nothing written, nothing more charged.
    api.clear_requests()
    err = bind(ext, api, "p001", "n1")
    assert "not known" in err, err
    assert [x for x in api.requests() if x["method"] != "GET"] == []
    assert node_used(ext, "n2") == 16 and node_used(ext, "n1") == 0
    # A 5xx is just as unknown: p002's charge is kept too.
    api.add_fault(method="POST", path="/p002/binding$", status=504, count=1)
    t2 = time.monotonic()
    assert "fake fault" in bind(ext, api, "p002", "n2")
    assert node_used(ext, "n2") == 32
    # After the hold (from the 1 s deadline on) the retry reads the pod
    # back (unbound) and binds it.
    time.sleep(max(0, t0 + 1 + 3 + scaled(0.3) - time.monotonic()))
    assert bind(ext, api, "p001", "n2") == ""
    assert get(api, "p001")["spec"]["nodeName"] == "n2"
    assert node_used(ext, "n2") == 32
    time.sleep(max(0, t2 + 1 + 3 + scaled(0.3) - time.monotonic()))
    assert bind(ext, api, "p002", "n2") == ""
    assert node_used(ext, "n2") == 32
    assert sorted(gpu_annotations(api, p)["ALIYUN_COM_GPU_MEM_IDX"] for p in ("p001", "p002")) == ["0", "1"]


def test_d1_refusal_releases_at_once(api, started):
    """A 4xx Status is definite: the charge goes back, nothing to undo."""
    ext = started(api)
    api.add_fault(method="POST", path="/p001/binding$", status=409, count=1)
    api.clear_requests()
    assert "fake fault" in bind(ext, api, "p001", "n2")
    assert node_used(ext, "n2") == 0
    assert [x["method"] for x in api.requests() if x["method"] != "GET"] == ["POST"]
    assert gpu_annotations(api, "p001") == {}
    assert bind(ext, api, "p001", "n2") == ""


def test_d2_uid_of_another_pod_is_refused(api, started):
    """D2: PodUID of pending p001 + PodName of running p000: refused before
    any write; p000 keeps its annotations and its memory."""
    ext = started(api)
    assert bind(ext, api, "p000", "n1") == ""
    wait_for(lambda: node_used(ext, "n1") == 16, "p000 charged")
    before = gpu_annotations(api, "p000")
    api.clear_requests()
    err = bind(ext, api, "p000", "n1", uid=get(api, "p001")["metadata"]["uid"])
    assert "UID" in err or "uid" in err, err
    assert [x for x in api.requests() if x["method"] != "GET"] == []
    time.sleep(scaled(0.5))
    assert gpu_annotations(api, "p000") == before
    assert node_used(ext, "n1") == 16
    # The same with a pending named pod (1.20 would bind the named pod).
    err = bind(ext, api, "p003", "n1", uid=get(api, "p001")["metadata"]["uid"])
    assert err and not get(api, "p003")["spec"].get("nodeName")
    assert node_used(ext, "n1") == 16
    # And a UID nobody has: the pod is read back and refused.
    err = bind(ext, api, "p004", "n1", uid="00000000-0000-0000-0000-000000000000")
    assert "re-created" in err or "UID" in err, err
    assert not get(api, "p004")["spec"].get("nodeName")


def test_d2b_pod_bound_elsewhere_while_the_watch_lags(api, started):
    """D2b: p000 bound by another scheduler while our pod watch stalls; our
    bind gets 409 "already assigned" and must not touch the running pod."""
    ext = started(api)
    uid = get(api, "p000")["metadata"]["uid"]
    api.add_fault(path="/api/v1/pods", watch=True, action="stall", delay_ms=4000, count=-1)
    api.drop_watches()
    time.sleep(scaled(0.5))
    api.store.update("pods", "default", "p000", lambda p: (
        p["metadata"].setdefault("annotations", {}).update({
            "ALIYUN_COM_GPU_MEM_IDX": "1", "ALIYUN_COM_GPU_MEM_POD": "16",
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "true"}),
        p["spec"].__setitem__("nodeName", "n1"), p)[-1])
    theirs = gpu_annotations(api, "p000")
    err = bind(ext, api, "p000", "n1", uid=uid)
    assert "already assigned" in err, err
    assert gpu_annotations(api, "p000") == theirs
    api.clear_faults()
    api.drop_watches()
    wait_for(lambda: node_used(ext, "n1") == 16, "the watch showing p000 on n1", timeout=20)
    time.sleep(scaled(0.5))
    assert gpu_annotations(api, "p000") == theirs
    assert node_used(ext, "n1") == 16
