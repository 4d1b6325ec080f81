"""NVML absent, NVML errors during enumeration (issue 2 items 2, 7)."""

import glob
import os
import re
import time

import grpc
import pytest

from conftest import RESOURCE, scaled
from inventory import INVENTORY_DIR

ERR = "NVML_ERROR_UNKNOWN"         # fake NVML control: fail <function> <ERROR_NAME> [gpu]
ERR_TEXT = r"Unknown Error"        # nvmlErrorString(NVML_ERROR_UNKNOWN)


def real_nvml_installed():
    pats = ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so*", "/usr/lib64/libnvidia-ml.so*",
            "/lib/x86_64-linux-gnu/libnvidia-ml.so*", "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so*"]
    return any(glob.glob(p) for p in pats)


@pytest.fixture
def no_nvml(workdir):
    if real_nvml_installed():
        pytest.skip("a real libnvidia-ml is installed on this machine")
    d = os.path.join(workdir, "empty-lib")
    os.makedirs(d)
    return d


def test_no_nvml_fails_by_default(plugin, kubelet, no_nvml):
    p = plugin(lib_dir=no_nvml, args=["--driver-root", no_nvml], wait=None)
    rc = p.wait_exit(5)
    assert rc != 0
    log = p.log()
    assert re.search(r"(?i)nvml|libnvidia-ml|driver", log), log
    assert kubelet.registrations == []
    assert not os.path.exists(p.socket())


# (Go/urfave boolean flags take "--flag=false"; "--flag false" is a positional argument.)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_no_nvml_waits_indefinitely(plugin, kubelet, no_nvml, how):
    args = ["--driver-root", no_nvml]
    env = {}
    if how == "flag":
        args += ["--fail-on-init-error=false"]
    else:
        env["FAIL_ON_INIT_ERROR"] = "false"
    p = plugin(lib_dir=no_nvml, args=args, env=env, wait=None)
    p.wait_log(r"No devices found\. Waiting indefinitely\.", 5)
    time.sleep(scaled(0.2))
    assert p.alive()
    assert kubelet.registrations == []
    assert p.stop() == 0


def test_init_failure_injected(plugin, kubelet, workdir):
    """nvmlInit fails (inventory `init_error`, as a missing kernel module would)."""
    import json
    inv = json.load(open(os.path.join(INVENTORY_DIR, "4gpu.json")))
    inv["init_error"] = "DRIVER_NOT_LOADED"
    path = os.path.join(workdir, "init-error.json")
    json.dump(inv, open(path, "w"))
    p = plugin(path, wait=None)
    assert p.wait_exit(5) != 0
    assert re.search(r"(?i)driver not loaded|DRIVER_NOT_LOADED", p.log()), p.log()
    assert kubelet.registrations == []


def test_init_failure_no_fail_on_init(plugin, kubelet, workdir):
    import json
    inv = json.load(open(os.path.join(INVENTORY_DIR, "4gpu.json")))
    inv["init_error"] = "DRIVER_NOT_LOADED"
    path = os.path.join(workdir, "init-error.json")
    json.dump(inv, open(path, "w"))
    p = plugin(path, wait=None, args=["--fail-on-init-error=false"])
    p.wait_log(r"No devices found\. Waiting indefinitely\.", 5)
    assert p.alive() and kubelet.registrations == []


# An NVML error in one GPU's identity (issue 7) must not take the node's other GPUs down: the
# GPU is advertised Unhealthy and never allocated. Its ID is its UUID when NVML gave it, else
# "GPU-unknown-" + its PCI address (a handle exists) or + "index-N" (none): never a real UUID.
# PCI info only feeds the NUMA node: a warning, the GPU is served Healthy.
DERIVED = {"nvmlDeviceGetUUID": "GPU-unknown-00000000:47:00.0",   # 4gpu.json GPU 2's bus id
           "nvmlDeviceGetHandleByIndex_v2": "GPU-unknown-index-2"}


def health_of(kubelet):
    snap = kubelet.endpoint().snapshots[-1]
    return snap.health


@pytest.mark.parametrize("func,lost", [
    ("nvmlDeviceGetUUID", True), ("nvmlDeviceGetMinorNumber", True),
    ("nvmlDeviceGetHandleByIndex_v2", True), ("nvmlDeviceGetPciInfo_v3", False)])
@pytest.mark.parametrize("fail_on_init", [True, False])
def test_error_mid_enumeration_names_gpu(plugin, kubelet, func, lost, fail_on_init):
    args = [] if fail_on_init else ["--fail-on-init-error=false"]
    p = plugin(control=["fail %s %s 2" % (func, ERR)], args=args)
    inv = p.inventory
    gpu2 = DERIVED.get(func, inv.gpus[2].uuid)
    want = {u: "Healthy" for u in inv.uuids}
    del want[inv.gpus[2].uuid]
    want[gpu2] = "Unhealthy" if lost else "Healthy"
    assert health_of(kubelet) == want
    log = p.log()
    assert re.search(r"(?m)^W.*GPU 2 .*%s.*Unknown Error" % func.split("_")[0], log), log
    if lost:
        with pytest.raises(grpc.RpcError) as e:
            kubelet.allocate(RESOURCE, [gpu2])
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert gpu2 in e.value.details()
    assert kubelet.allocate(RESOURCE, [inv.uuids[3]]).envs["NVIDIA_VISIBLE_DEVICES"] == inv.uuids[3]


def test_gpu_lost_at_start_serves_the_others(plugin, kubelet):
    """Issue 7: a GPU already off the bus when the plugin starts (every NVML call about it
    answers GPU_IS_LOST) is listed Unhealthy under a derived ID; the three others serve, and
    health checks run for them."""
    p = plugin(control=["lost 2"])
    inv = p.inventory
    want = {u: "Healthy" for u in inv.uuids if u != inv.gpus[2].uuid}
    want["GPU-unknown-index-2"] = "Unhealthy"
    assert health_of(kubelet) == want
    assert re.search(r"(?m)^W.*GPU 2 .*GPU is lost", p.log())
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, ["GPU-unknown-index-2"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    p.health_ready()
    n = len(kubelet.endpoint().snapshots)
    p.control("xid 1 48")
    kubelet.wait_for(lambda: len(kubelet.endpoint().snapshots) > n, 3, "XID on GPU 1")
    assert kubelet.endpoint().snapshots[n].health[inv.gpus[1].uuid] == "Unhealthy"


def test_device_count_failure(plugin, kubelet):
    p = plugin(control=["fail nvmlDeviceGetCount_v2 %s" % ERR], wait=None)
    assert p.wait_exit(5) != 0
    assert re.search(ERR_TEXT, p.log(), re.I) or ERR in p.log()
