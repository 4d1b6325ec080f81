"""gpu-mem mode (--resource-mode=gpu-mem): resource, node publishing, exact pod identity.

Every identity test is built so that gpushare's guess (the Pending pod on the node with the
oldest ALIYUN_COM_GPU_MEM_ASSUME_TIME whose total gpu-mem equals the request,
research gpushare-hami.md section 2.3) would hand a container the wrong GPU or fail: the
kubelet model admits pods in an order that disagrees with the assume times, with equal sizes.

Pieces: the real plugin (fake NVML), kubelet_sim (Device Plugin RPCs), gpumem_kubelet (the
kubelet's pod manager, admission order and PodResources List), fake_apiserver (pods, node,
scripted faults).
"""

import errno
import json
import os
import re
import subprocess
import sys
import time

import grpc
import pytest

from conftest import ROOT, scaled

sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
sys.path.insert(0, os.path.join(ROOT, "test", "sim"))
from fake_apiserver import FakeApiServer  # noqa: E402
from gpumem_kubelet import AdmissionError, Kubelet, envs, make_pod  # noqa: E402

RESOURCE = "aliyun.com/gpu-mem"
ENDPOINT = "gpupool-aliyun-gpu-mem.sock"
NODE = "node1"
MIXED = "4gpu-mixed-memory.json"     # 16, 16, 40, 40 GiB


def write_kubeconfig(path, server):
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
           "clusters": [{"name": "c", "cluster": {"server": server}}],
           "contexts": [{"name": "t", "context": {"cluster": "c"}}]}
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


FAKE_LIBRARY = b"\x7fELF not really: libgpupool-cuda.so stand-in for the plugin tests\n"


def fake_isolation_library(workdir):
    path = os.path.join(workdir, "libgpupool-cuda.so")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(FAKE_LIBRARY)
    return path


@pytest.fixture
def api():
    srv = FakeApiServer(fixture={"nodes": [{"metadata": {"name": NODE},
                                            "status": {"capacity": {}, "allocatable": {}}}]})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def gpumem(plugin, api, kubelet, sockdir, workdir):
    """Factory: starts the plugin in gpu-mem mode and returns (plugin, kubelet model)."""
    models = []
    state = os.path.join(workdir, "state")

    def start(inventory=MIXED, args=(), env=None, wait=True, timeout=5, state_dir=state):
        kc = write_kubeconfig(os.path.join(workdir, "kubeconfig"), api.url)
        # --isolation=memory is the default in gpu-mem mode: a real file stands in for
        # libgpupool-cuda.so (the plugin copies it as it is), under the default --isolation-dir.
        e = {"NODE_NAME": NODE, "KUBECONFIG": kc, "GP_RESOURCE_MODE": "gpu-mem",
             "GP_POD_RESOURCES_SOCKET": os.path.join(sockdir, "pod-resources", "kubelet.sock"),
             "GP_STATE_DIR": state_dir,
             "GP_ISOLATION_LIBRARY": fake_isolation_library(workdir)}
        e.update(env or {})
        p = plugin(inventory=inventory, args=list(args), env=e,
                   wait=RESOURCE if wait else None, timeout=timeout)
        if not models:
            models.append(Kubelet(kubelet, api, sockdir))
        if wait:
            p.wait_log(r"gpu-mem: watching the pods of this node", timeout)
        return p, models[0]

    yield start
    for m in models:
        m.stop()


def gpu_uuids(p):
    return [g.uuid for g in p.inventory.gpus]


def create(api, *pods):
    for pod in pods:
        api.put_object("pods", pod)


def wait_annotation(api, name, key, value, ns="default", timeout=5):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        ann = api.store.get("pods", ns, name)["metadata"].get("annotations", {})
        if ann.get(key) == value:
            return
        time.sleep(0.02)
    raise AssertionError("pod %s: %s never became %r (%r)" % (name, key, value, ann))


# ---------------------------------------------------------------- resource and node

def test_units_per_gpu_and_node_publishing(gpumem, api, kubelet):
    p, _ = gpumem()
    devices = kubelet.devices(RESOURCE)
    uuids = gpu_uuids(p)
    per_gpu = {u: 0 for u in uuids}
    for d in devices:
        uuid, _, j = d.ID.rpartition("-_-")
        per_gpu[uuid] += 1
        assert d.health == "Healthy"
    assert [per_gpu[u] for u in uuids] == [16, 16, 40, 40]
    assert kubelet.endpoint(RESOURCE).registration.options.get_preferred_allocation_available is False

    deadline = time.monotonic() + scaled(5)
    while time.monotonic() < deadline:
        node = api.store.get("nodes", None, NODE)
        if "gpupool.io/gpus" in node["metadata"].get("annotations", {}):
            break
        time.sleep(0.05)
    assert node["status"]["capacity"]["aliyun.com/gpu-count"] == "4"
    assert node["status"]["allocatable"]["aliyun.com/gpu-count"] == "4"
    gpus = json.loads(node["metadata"]["annotations"]["gpupool.io/gpus"])
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert [g["memory"] for g in gpus] == [16, 16, 40, 40]
    assert gpus[0]["model"] == "Tesla-V100-SXM2-16GB" and gpus[2]["model"] == "NVIDIA-A100-SXM4-40GB"
    assert all(g["healthy"] for g in gpus)
    # compute shares: 100 per GPU, advertised beside the count and per GPU
    assert node["status"]["capacity"]["gpupool.io/gpu-cores"] == "400"
    assert node["status"]["allocatable"]["gpupool.io/gpu-cores"] == "400"
    assert [g["cores"] for g in gpus] == [100, 100, 100, 100]


def test_xid_marks_exactly_that_gpu_and_is_published(gpumem, api, kubelet):
    p, _ = gpumem(env={"GP_HEALTH_RECOVERY_PROBES": "2", "GP_HEALTH_PROBE_INTERVAL": "100ms"})
    p.health_ready()
    uuids = gpu_uuids(p)
    p.control("xid 2 48")
    snap = kubelet.wait_snapshot(RESOURCE, lambda s: "Unhealthy" in s.health.values())
    bad = {i.rpartition("-_-")[0] for i, h in snap.health.items() if h == "Unhealthy"}
    assert bad == {uuids[2]}
    assert sum(1 for h in snap.health.values() if h == "Unhealthy") == 40

    def published_health():
        ann = api.store.get("nodes", None, NODE)["metadata"].get("annotations", {})
        return [g["healthy"] for g in json.loads(ann.get("gpupool.io/gpus", "[]"))]
    deadline = time.monotonic() + scaled(5)
    while published_health() != [True, True, False, True] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert published_health() == [True, True, False, True]
    # recovery, as whole GPUs: the probes succeed (fake NVML answers), the units come back
    kubelet.wait_snapshot(RESOURCE, lambda s: "Unhealthy" not in s.health.values(), timeout=10)
    deadline = time.monotonic() + scaled(5)
    while published_health() != [True] * 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert published_health() == [True] * 4


def test_mib_on_big_gpus_is_a_clear_startup_error(gpumem):
    p, _ = gpumem(inventory="8a100-80gb.json", args=["--gpu-memory-unit", "MiB"], wait=False)
    assert p.wait_exit(10) != 0
    log = p.log()
    assert "655360 MiB devices of aliyun.com/gpu-mem make a ListAndWatch message of" in log
    assert "more than the kubelet accepts (4194304): use --gpu-memory-unit=GiB" in log


def test_mib_on_small_gpus_is_served(gpumem, kubelet):
    p, _ = gpumem(inventory="2gpu-16gb.json", args=["--gpu-memory-unit=MiB"])
    assert len(kubelet.devices(RESOURCE)) == 2 * 16384
    assert "deprecated" not in p.log()


@pytest.mark.parametrize("old", [{"args": ["--memory-unit=MiB"]},
                                 {"env": {"GP_MEMORY_UNIT": "MiB"}}], ids=["flag", "env"])
def test_gpushare_unit_name_still_works_and_warns(gpumem, kubelet, old):
    """The setting is --gpu-memory-unit in both programs; gpushare's name still sets it."""
    p, _ = gpumem(inventory="2gpu-16gb.json", **old)
    assert len(kubelet.devices(RESOURCE)) == 2 * 16384
    name = "--memory-unit" if "args" in old else "$GP_MEMORY_UNIT"
    assert re.search(r"^W.*%s is deprecated: use --gpu-memory-unit \(GP_GPU_MEMORY_UNIT\)"
                     % re.escape(name), p.log(), re.M), p.log()


def test_node_name_is_required(gpumem):
    p, _ = gpumem(env={"NODE_NAME": ""}, wait=False)
    assert p.wait_exit(10) == 1
    assert "needs this node's name: set NODE_NAME" in p.log()


def test_gpu_mem_mode_refuses_whole_gpu_features(gpumem):
    p, _ = gpumem(args=["--mig-strategy=mixed"], wait=False)
    assert p.wait_exit(10) == 1
    assert "cannot be combined with --mig-strategy single/mixed" in p.log()


# ---------------------------------------------------------------- identity

def test_equal_pods_admitted_against_assume_order(gpumem, api):
    """gpushare: the Allocate of b (admitted first) takes a (older assume time, same size)."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    create(api, make_pod("a", 4, idx=0, assume_time=t), make_pod("b", 4, idx=2, assume_time=t + 1000))
    (_, _, rb), = k.admit("default", "b")
    (_, _, ra), = k.admit("default", "a")
    assert envs(rb)["NVIDIA_VISIBLE_DEVICES"] == uuids[2]
    assert envs(rb)["ALIYUN_COM_GPU_MEM_IDX"] == "2"
    assert envs(rb)["ALIYUN_COM_GPU_MEM_DEV"] == "40"
    assert envs(ra)["NVIDIA_VISIBLE_DEVICES"] == uuids[0]
    assert envs(ra)["ALIYUN_COM_GPU_MEM_DEV"] == "16"
    assert envs(ra)["ALIYUN_COM_GPU_MEM_POD"] == "4" and envs(ra)["ALIYUN_COM_GPU_MEM_CONTAINER"] == "4"
    wait_annotation(api, "a", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true")
    wait_annotation(api, "b", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true")


def test_gpu_cores_become_the_containers_sm_limit(gpumem, api):
    """A container asking gpupool.io/gpu-cores gets CUDA_DEVICE_SM_LIMIT = its own request
    (requests before limits, as the scheduler counts it); one asking none gets no limit."""
    p, k = gpumem()
    pod = make_pod("c", containers=[("a", 2), ("b", 2), ("m", 2)], idx=1)
    res = [c["resources"] for c in pod["spec"]["containers"]]
    res[0]["limits"]["gpupool.io/gpu-cores"] = "30"
    res[1]["requests"] = {"gpupool.io/gpu-cores": "25"}
    res[1]["limits"]["gpupool.io/gpu-cores"] = "25"
    create(api, pod)
    results = k.admit("default", "c")
    got = {name: envs(r).get("CUDA_DEVICE_SM_LIMIT") for name, _, r in results}
    assert got == {"a": "30", "b": "25", "m": None}, got
    assert all(envs(r)["ALIYUN_COM_GPU_MEM_IDX"] == "1" for _, _, r in results)


def test_many_equal_pods_in_random_admission_order(gpumem, api):
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    pods = [make_pod("p%02d" % i, 2, idx=i % 4, assume_time=t + i) for i in range(20)]
    create(api, *pods)
    order = [7, 3, 19, 0, 12, 5, 18, 1, 9, 14, 2, 16, 4, 11, 6, 17, 8, 15, 10, 13]
    for i in order:
        (_, _, r), = k.admit("default", "p%02d" % i)
        assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[i % 4], "pod p%02d" % i
        assert envs(r)["ALIYUN_COM_GPU_MEM_IDX"] == str(i % 4)


def test_multi_container_pod_one_allocate_per_container(gpumem, api):
    """gpushare compares the pod's total (5) with each call's request (2, then 3) and fails."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    create(api, make_pod("multi", containers=[("c1", 2), ("side", 0), ("c2", 3)], idx=3,
                         assume_time=t),
           make_pod("single", 2, idx=1, assume_time=t - 1000))
    results = k.admit("default", "multi")
    assert [c for c, _, _ in results] == ["c1", "c2"]
    for c, _, r in results:
        e = envs(r)
        assert e["NVIDIA_VISIBLE_DEVICES"] == uuids[3] and e["ALIYUN_COM_GPU_MEM_IDX"] == "3"
        assert e["ALIYUN_COM_GPU_MEM_POD"] == "5"
    assert [envs(r)["ALIYUN_COM_GPU_MEM_CONTAINER"] for _, _, r in results] == ["2", "3"]
    (_, _, r), = k.admit("default", "single")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[1]


def test_equal_multi_container_pods(gpumem, api):
    """Two pods of two equal containers each, admitted against the assume order."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    create(api, make_pod("m1", containers=[("x", 2), ("y", 2)], idx=0, assume_time=t),
           make_pod("m2", containers=[("x", 2), ("y", 2)], idx=1, assume_time=t + 5))
    for name, gpu in (("m2", 1), ("m1", 0)):
        for _, _, r in k.admit("default", name):
            assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[gpu], name


def test_init_container_then_app_container(gpumem, api):
    """Init containers are never in PodResources List: the ledger carries the count."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    create(api, make_pod("withinit", containers=[("app", 2)], init_containers=[("setup", 2)],
                         idx=2, assume_time=t + 10),
           make_pod("plain", 2, idx=0, assume_time=t))
    results = k.admit("default", "withinit")
    assert [(c, init) for c, init, _ in results] == [("setup", True), ("app", False)]
    for _, _, r in results:
        assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[2]
    (_, _, r), = k.admit("default", "plain")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[0]


def test_init_only_gpu_pod_does_not_confuse_later_equal_pods(gpumem, api):
    p, k = gpumem()
    uuids = gpu_uuids(p)
    create(api, make_pod("initonly", containers=[("app", 0)], init_containers=[("prep", 3)], idx=1))
    (_, _, r), = k.admit("default", "initonly")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
    create(api, make_pod("later", 3, idx=3))
    (_, _, r), = k.admit("default", "later")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[3]


def test_allocate_before_watch_has_the_bind(gpumem, api):
    """The kubelet's watch is ahead of the plugin's: the Allocate waits (deferred reply)."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    create(api, make_pod("old", 4, idx=0))
    fresh = make_pod("fresh", 4, idx=3)
    import threading
    out = {}

    def admit():
        try:
            out["r"] = k.admit("default", "fresh", obj=fresh)
        except Exception as e:  # noqa: BLE001
            out["e"] = e
    th = threading.Thread(target=admit)
    th.start()
    time.sleep(0.3)                  # the plugin is waiting: the pod is not in its view
    assert "r" not in out and "e" not in out
    create(api, fresh)               # the bind reaches the plugin's watch
    th.join(scaled(10))
    assert "e" not in out, out.get("e")
    assert envs(out["r"][0][2])["NVIDIA_VISIBLE_DEVICES"] == uuids[3]
    p.wait_log(r"Allocate aliyun.com/gpu-mem: 4 units for pod default/fresh")


def test_pod_never_in_the_watch_fails_with_a_reason(gpumem, api):
    p, k = gpumem(args=["--allocate-timeout=500ms"])
    create(api, make_pod("other", 4, idx=0))
    with pytest.raises(AdmissionError) as ei:
        k.admit("default", "ghost", obj=make_pod("ghost", 4, idx=1))
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "the kubelet holds pod(s) default/ghost that the plugin's watch" in ei.value.details
    k.remove("default", "ghost")     # the kubelet forgets it once the API deletes it
    # the plugin keeps serving
    (_, _, r), = k.admit("default", "other")
    assert envs(r)["ALIYUN_COM_GPU_MEM_IDX"] == "0"


def test_pod_without_extender_annotation_is_refused(gpumem, api):
    p, k = gpumem()
    create(api, make_pod("unplaced", 2, idx=None))
    with pytest.raises(AdmissionError) as ei:
        k.admit("default", "unplaced")
    assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "has no ALIYUN_COM_GPU_MEM_IDX annotation" in ei.value.details
    assert "NVIDIA_VISIBLE_DEVICES" not in ei.value.details


def test_rejected_pod_waits_until_its_status_arrives(gpumem, api):
    """A pod the kubelet rejected stays in its pod manager without devices until the API says
    Failed; an equal pod admitted meanwhile must wait, not guess."""
    p, k = gpumem(args=["--allocate-timeout=5s", "-v", "2"])
    uuids = gpu_uuids(p)
    create(api, make_pod("bad", 2, idx=9), make_pod("good", 2, idx=2))   # GPU 9 does not exist
    with pytest.raises(AdmissionError) as ei:
        k.admit("default", "bad", reject_status_delay=0.5)
    assert "names GPU 9, which this node does not have" in ei.value.details
    (_, _, r), = k.admit("default", "good")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[2]
    assert "could be the one" in p.log()       # it waited for bad's Failed status


def test_plugin_restart_between_bind_and_allocate(gpumem, api, plugin, kubelet):
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    create(api, make_pod("r1", 3, idx=0, assume_time=t), make_pod("r2", 3, idx=2, assume_time=t + 1))
    p.stop()
    p2, _ = gpumem()
    kubelet.wait_registered(RESOURCE, count=2)
    (_, _, r), = k.admit("default", "r2")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[2]
    (_, _, r), = k.admit("default", "r1")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[0]


def test_plugin_restart_between_init_and_app_container(gpumem, api):
    """The ASSIGNED patch fails (500), the plugin restarts after the init container's call:
    only the ledger knows that call was answered."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    api.add_fault(method="PATCH", path="/pods/", status=500, count=-1)
    create(api, make_pod("ip", containers=[("app", 4)], init_containers=[("init", 2)], idx=1))
    entry = k.add("default", "ip")
    init_ids = k.free_units()[:2]
    r = k.sim.allocate(RESOURCE, init_ids)
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
    entry.init_devices["init"] = init_ids
    p.stop()
    api.clear_faults()
    p2, _ = gpumem()
    k.sim.wait_registered(RESOURCE, count=2)
    app_ids = init_ids + [u for u in k.free_units() if u not in init_ids][:2]
    r = k.sim.allocate(RESOURCE, app_ids)
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
    assert envs(r)["ALIYUN_COM_GPU_MEM_CONTAINER"] == "4"
    p2.wait_log(r"4 units for pod default/ip .*call 2 of 2")


def test_kubelet_restart_without_checkpoint_reallocates_the_same_gpus(gpumem, api, kubelet):
    p, k = gpumem()
    uuids = gpu_uuids(p)
    t = time.time_ns()
    create(api, make_pod("k1", 2, idx=0, assume_time=t), make_pod("k2", 2, idx=3, assume_time=t + 1))
    k.admit("default", "k1")
    k.admit("default", "k2")
    wait_annotation(api, "k2", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true")
    order = k.restart(keep_checkpoint=False)
    kubelet.wait_registered(RESOURCE, count=2)
    create(api, make_pod("k3", 2, idx=2, assume_time=t - 5))   # a new equal pod in the batch
    for ns, name in [("default", "k3")] + list(reversed(order)):
        (_, _, r), = k.admit(ns, name)
        want = {"k1": 0, "k2": 3, "k3": 2}[name]
        assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[want], name
    assert "repeated by the kubelet" in p.log()


def test_kubelet_restart_with_checkpoint_needs_no_call(gpumem, api, kubelet):
    p, k = gpumem()
    uuids = gpu_uuids(p)
    create(api, make_pod("c1", 2, idx=1))
    k.admit("default", "c1")
    k.restart(keep_checkpoint=True)
    kubelet.wait_registered(RESOURCE, count=2)
    create(api, make_pod("c2", 2, idx=2))
    (_, _, r), = k.admit("default", "c2")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[2]


# ---------------------------------------------------------------- env strategies

def test_index_strategy_and_multi_gpu_pod(gpumem, api):
    p, k = gpumem(args=["--device-id-strategy=index"])
    create(api, make_pod("two", 8, idx="1,3"))
    (_, _, r), = k.admit("default", "two")
    e = envs(r)
    assert e["NVIDIA_VISIBLE_DEVICES"] == "1,3"
    assert e["ALIYUN_COM_GPU_MEM_IDX"] == "1,3"
    assert e["ALIYUN_COM_GPU_MEM_POD"] == "8"


def test_volume_mounts_and_cdi_strategies(gpumem, api, workdir):
    p, k = gpumem(args=["--device-list-strategy=volume-mounts,cdi-annotations",
                        "--cdi-spec-dir", os.path.join(workdir, "cdi")])
    uuids = gpu_uuids(p)
    create(api, make_pod("vm", 2, idx=2))
    (_, _, r), = k.admit("default", "vm")
    assert [m.container_path for m in r.mounts] == [
        "/var/run/nvidia-container-devices/" + uuids[2],
        # --isolation=memory (the default) adds its three and the node's priority directory
        # (test_gpumem_isolation.py)
        "/usr/local/gpupool/libgpupool-cuda.so", "/etc/ld.so.preload", "/run/gpupool-cuda",
        "/run/gpupool-priority"]
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    (value,) = dict(r.annotations).values()
    assert value == "k8s.device-plugin.nvidia.com/gpu=" + uuids[2]


# ---------------------------------------------------------------- API faults

def test_assigned_patch_conflict_and_500_are_retried(gpumem, api):
    p, k = gpumem()
    api.add_fault(method="PATCH", path="/pods/f1$", status=409, reason="Conflict", count=2)
    api.add_fault(method="PATCH", path="/pods/f1$", status=500, count=1)
    create(api, make_pod("f1", 2, idx=0))
    k.admit("default", "f1")
    wait_annotation(api, "f1", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true", timeout=10)
    patches = [r for r in api.requests() if r["method"] == "PATCH" and r["path"].endswith("/pods/f1")]
    assert [r["status"] for r in patches] == [409, 409, 500, 200]


def test_slow_api_does_not_delay_allocate(gpumem, api):
    """The ASSIGNED patch never gets an answer (the client's 10 s timeout): the replies, which
    the kubelet model waits for with a 5 s deadline, must not depend on it."""
    p, k = gpumem()
    uuids = gpu_uuids(p)
    api.add_fault(method="PATCH", path="/pods/", action="stall", delay_ms=0, count=-1)
    create(api, make_pod("s1", 2, idx=0), make_pod("s2", 2, idx=1))
    (_, _, r1), = k.admit("default", "s1")
    (_, _, r2), = k.admit("default", "s2")
    assert [envs(r)["NVIDIA_VISIBLE_DEVICES"] for r in (r1, r2)] == uuids[:2]
    api.clear_faults()


def test_dropped_watch_is_resumed(gpumem, api):
    p, k = gpumem()
    uuids = gpu_uuids(p)
    api.drop_watches()
    create(api, make_pod("after-drop", 5, idx=2))
    (_, _, r), = k.admit("default", "after-drop")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[2]


# ---------------------------------------------------------------- faults on the way out (issue 17 item 4)

def patches_of(api, name):
    return [r for r in api.requests() if r["method"] == "PATCH" and r["path"].endswith("/pods/" + name)]


def pod_events(api, name):
    with api.store.lock:
        evs = [obj for _, obj in api.store.select("events", "default", [], [])]
    return [e for e in evs if e.get("involvedObject", {}).get("name") == name]


def wait_event(api, name, reason, timeout):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        evs = [e for e in pod_events(api, name) if e.get("reason") == reason]
        if evs:
            return evs[0]
        time.sleep(0.1)
    raise AssertionError("pod %s: no Event %s; events: %r" % (name, reason, pod_events(api, name)))


def test_assigned_patch_lands_after_the_api_was_gone_for_60s(gpumem, api):
    """The API server refuses every request for 60 s right after an Allocate: the patch is
    retried with backoff (capped at 10 s, jittered) and lands within one cap of the API's
    return, and the pod's Events say it took retries."""
    p, k = gpumem()
    api.add_fault(method="PATCH", path="/pods/down1$", action="close", for_s=scaled(60))
    t0 = time.monotonic()
    create(api, make_pod("down1", 2, idx=0))
    k.admit("default", "down1")
    api.add_fault(path=".*", action="close", for_s=scaled(59))   # watches, publishes: all gone
    wait_annotation(api, "down1", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true", timeout=60 + 15)
    assert time.monotonic() - t0 < scaled(60) + 12
    ev = wait_event(api, "down1", "GPUMemAssigned", 5)
    assert ev["type"] == "Normal" and ev["involvedObject"]["kind"] == "Pod", ev
    assert ev["involvedObject"]["uid"] == api.store.get("pods", "default", "down1")["metadata"]["uid"]
    assert "failed attempts" in ev["message"] and ev["source"]["component"] == "gpupool-device-plugin", ev
    times = [r["time"] for r in patches_of(api, "down1")]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert 6 <= len(times) <= 20, gaps              # neither a tight loop nor given up
    assert max(gaps) <= 10.5, gaps                  # the cap
    assert len({round(g, 2) for g in gaps[-3:]}) > 1, gaps   # jitter: not in lock-step
    assert p.alive()


def test_assigned_patch_honours_retry_after(gpumem, api):
    """503 + Retry-After: 2 on the patch (which the client itself does not retry: the server may
    have acted) - our own retries wait at least that long, not the 200 ms backoff."""
    p, k = gpumem()
    api.add_fault(method="PATCH", path="/pods/ra1$", status=503, retry_after=2, count=2)
    create(api, make_pod("ra1", 2, idx=0))
    k.admit("default", "ra1")
    wait_annotation(api, "ra1", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true", timeout=10)
    reqs = patches_of(api, "ra1")
    assert [r["status"] for r in reqs] == [503, 503, 200], reqs
    gaps = [b["time"] - a["time"] for a, b in zip(reqs, reqs[1:])]
    assert min(gaps) >= 1.95, gaps
    ev = wait_event(api, "ra1", "GPUMemAssigned", 5)
    assert "2 failed attempts" in ev["message"] and "503" in ev["message"], ev


def test_assigned_patch_on_a_slow_api(gpumem, api):
    """Every patch answered after 5 s: it lands on the first try (the client waits 10 s)."""
    p, k = gpumem()
    api.add_fault(method="PATCH", path="/pods/slow1$", action="delay", delay_ms=5000, count=-1)
    create(api, make_pod("slow1", 2, idx=0))
    k.admit("default", "slow1")
    wait_annotation(api, "slow1", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true", timeout=10)
    assert [r["status"] for r in patches_of(api, "slow1")] == [200]
    assert pod_events(api, "slow1") == []


def test_assigned_patch_gives_up_with_a_warning_event(gpumem, api):
    """500 forever: after --api-write-deadline (3 s here, 5 min by default) an error is logged
    and the pod gets a Warning Event naming the failure."""
    p, k = gpumem(args=["--api-write-deadline", "3s"])
    api.add_fault(method="PATCH", path="/pods/gu1$", status=500, message="etcd is sulking",
                  count=-1)
    create(api, make_pod("gu1", 2, idx=0))
    k.admit("default", "gu1")
    ev = wait_event(api, "gu1", "GPUMemAssignFailed", 10)
    assert ev["type"] == "Warning" and "etcd is sulking" in ev["message"], ev
    p.wait_log(r"giving up on pod default/gu1: .*HTTP 500", 2)
    n = len(patches_of(api, "gu1"))
    assert 3 <= n <= 12, n
    api.clear_faults()


# ---------------------------------------------------------------- a full --state-dir (issue 17 item 4)

METRICS_RE = r"Serving Prometheus metrics on http://(\S+)/metrics"


def write_errors(p):
    import urllib.request
    with urllib.request.urlopen(p.metrics_url, timeout=scaled(5)) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("gpupool_deviceplugin_file_write_errors_total "):
                return int(float(line.split()[1]))
    raise AssertionError("no gpupool_deviceplugin_file_write_errors_total sample")


@pytest.fixture
def tiny_state_dir(workdir):
    """A 256 KiB tmpfs as --state-dir. Mounting needs root, which CI has (.ci/run); elsewhere
    the test says why it cannot run."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    path = os.path.join(workdir, "tiny-state")
    os.makedirs(path)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", path], check=True)
    yield path
    subprocess.run(["umount", "-l", path], check=False)


def fill(path):
    """Writes a file until the filesystem says ENOSPC; returns its name."""
    filler = os.path.join(path, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return filler


def test_full_state_dir_keeps_allocate_answering(gpumem, api, tiny_state_dir):
    """With --state-dir full, Allocate still answers (the count is kept in memory), the error is
    logged, gpupool_deviceplugin_file_write_errors_total counts it, the registration stays, no
    ledger file is left truncated or half-written, and the entry is written once there is room."""
    p, k = gpumem(state_dir=tiny_state_dir, args=["--metrics-addr", "127.0.0.1:0"])
    p.metrics_url = "http://%s/metrics" % p.wait_log(METRICS_RE).group(1)
    uuids = gpu_uuids(p)
    create(api, make_pod("before", 2, idx=0))
    k.admit("default", "before")
    ledger = os.path.join(tiny_state_dir, "gpumem")
    uid_before = api.store.get("pods", "default", "before")["metadata"]["uid"]
    assert open(os.path.join(ledger, uid_before)).read() == "1\n"
    assert write_errors(p) == 0
    regs = len(p.kubelet.registrations)

    filler = fill(tiny_state_dir)
    create(api, make_pod("full", 2, idx=1))
    (_, _, r), = k.admit("default", "full")
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
    p.wait_log(r"gpu-mem: pod default/full: cannot write the gpu-mem ledger .*: No space left on "
               r"device; answering anyway")
    assert write_errors(p) >= 1
    uid_full = api.store.get("pods", "default", "full")["metadata"]["uid"]
    assert sorted(os.listdir(ledger)) == [uid_before]   # no temp file, no empty entry
    assert open(os.path.join(ledger, uid_before)).read() == "1\n"
    wait_annotation(api, "full", "ALIYUN_COM_GPU_MEM_ASSIGNED", "true")
    assert len(p.kubelet.registrations) == regs and p.alive()

    os.unlink(filler)   # room again: the maintenance pass (every 30 s) writes the entry
    deadline = time.monotonic() + scaled(40)
    while not os.path.exists(os.path.join(ledger, uid_full)):
        assert time.monotonic() < deadline, "ledger entry never written: %s" % p.log()[-2000:]
        time.sleep(0.2)
    assert open(os.path.join(ledger, uid_full)).read() == "1\n"
