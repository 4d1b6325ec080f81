"""The DRA driver's ResourceSlices (src/deviceplugin/dra/dra_slices.c) against the fake
API server (test/fakeapi), driven through the test-only program test/dra/dra_slices_driver.

    GP_BUILD_DIR      build tree holding test/dra/dra_slices_driver (default ./build)
    GP_KUBE_WRAPPER   command line the driver runs under (default: GP_PLUGIN_WRAPPER)
    GP_TIMEOUT_SCALE  factor for every wait (default 1, 10 under a wrapper)

Waits are generous upper bounds, except the "back within 1 s" checks, which are the
issue's goal for a slice the kubelet deleted (skipped under a wrapper, which is slow).
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))

from fake_apiserver import FakeApiServer  # noqa: E402
# The client tests' build, wrapper, time scale and sanitizer settings: one place for both.
from test_kube_client import BUILD, SAN_ENV, SAN_MARKERS, SCALE, WRAPPER  # noqa: E402

DRIVER = os.path.join(BUILD, "test", "dra", "dra_slices_driver")
NODE = "n1"
DRV = "gpu.gpupool.io"
GIB = 1 << 30

pytestmark = pytest.mark.skipif(not os.path.exists(DRIVER),
                                reason="dra_slices_driver not built in %s" % BUILD)


class Driver:
    """One dra_slices_driver process; lines on stdout are queued."""

    def __init__(self, kubeconfig, *args):
        env = dict(os.environ)
        for k, v in SAN_ENV.items():
            env.setdefault(k, v)
        env.pop("KUBECONFIG", None)
        self.p = subprocess.Popen(WRAPPER + [DRIVER, "--kubeconfig", kubeconfig, "--node", NODE]
                                  + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.lines = queue.Queue()
        self.stderr = []
        self.pumps = [threading.Thread(target=self._pump, args=(self.p.stdout, self.lines.put),
                                       daemon=True),
                      threading.Thread(target=self._pump, args=(self.p.stderr, self.stderr.append),
                                       daemon=True)]
        for t in self.pumps:
            t.start()
        assert self.next_line() == "READY", "".join(self.stderr)

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))

    def next_line(self, timeout=20):
        try:
            return self.lines.get(timeout=timeout * SCALE)
        except queue.Empty:
            raise AssertionError("no line from the driver; stderr: %s" % "\n".join(self.stderr))

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def ask(self, line):
        self.send(line)
        return self.next_line()

    def status(self):
        out = self.ask("status")
        assert out.startswith("STATUS "), out
        return {k: int(v) for k, v in (kv.split("=") for kv in out.split()[1:])}

    def stop(self, remove=False):
        self.send("stop-remove" if remove else "stop")
        rc = self.p.wait(timeout=30 * SCALE)
        for t in self.pumps:      # the last lines may still be on their way
            t.join(timeout=10 * SCALE)
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get())
        err = "\n".join(self.stderr)
        assert not any(m in err for m in SAN_MARKERS), err
        assert rc not in (23, 24, 99), "sanitizer/valgrind error status %d: %s" % (rc, err)
        return rc, rest


@pytest.fixture
def api(tmp_path):
    srv = FakeApiServer().start()
    srv.put_object("nodes", {"metadata": {"name": NODE}})
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
           "clusters": [{"name": "c", "cluster": {"server": srv.url}}],
           "contexts": [{"name": "t", "context": {"cluster": "c"}}]}
    srv.kubeconfig = str(tmp_path / "kubeconfig")
    with open(srv.kubeconfig, "w") as f:
        json.dump(cfg, f)
    yield srv
    srv.stop()


def slices(srv):
    with srv.store.lock:
        return [json.loads(json.dumps(o)) for _, o in srv.store.select("resourceslices", None, [], [])]


def devices(srv):
    return sorted((d for s in slices(srv) for d in s["spec"]["devices"]), key=lambda d: d["name"])


def wait_until(condition, what, timeout=20):
    deadline = time.monotonic() + timeout * SCALE
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.01)


def test_slice_published_with_the_contract_format(api):
    d = Driver(api.kubeconfig, "--gpus", "2", "--cuda-driver-version", "12040")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    [s] = slices(api)
    node_uid = api.store.get("nodes", None, NODE)["metadata"]["uid"]
    assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
    assert s["metadata"]["name"].startswith("n1-gpu.gpupool.io-")
    assert s["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                 "uid": node_uid, "controller": True}]
    spec = s["spec"]
    assert spec["driver"] == DRV and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    gpu0 = spec["devices"][0]
    assert [x["name"] for x in spec["devices"]] == ["gpu-0", "gpu-1"]
    a = gpu0["attributes"]
    assert a["type"] == {"string": "gpu"}
    assert a["uuid"] == {"string": "GPU-00000000-1111-2222-3333-444444444444"}
    assert a["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert a["architecture"] == {"string": "Ampere"}
    assert a["cudaComputeCapability"] == {"version": "8.0.0"}
    assert a["driverVersion"] == {"version": "535.104.5"}     # semver: no leading zero
    assert a["cudaDriverVersion"] == {"version": "12.4.0"}
    assert a["pciBusID"] == {"string": "0000:10:00.0"}
    assert a["resource.kubernetes.io/pciBusID"] == {"string": "0000:10:00.0"}
    assert a["index"] == {"int": 0} and a["minor"] == {"int": 0}
    # The fake keeps consumable capacity (a 1.36 server): auto found it on.
    assert gpu0["allowMultipleAllocations"] is True
    assert gpu0["capacity"]["memory"] == {
        "value": str(16 * GIB),
        "requestPolicy": {"default": str(16 * GIB), "validRange": {"min": "1Mi", "step": "1Mi"}}}
    # compute in percent of the GPU: a claim that asks memory only consumes none
    assert gpu0["capacity"]["cores"] == {
        "value": "100",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}}
    st = d.status()
    assert st["consumable"] == 1 and st["known"] == 1 and st["gen"] == 1
    rc, rest = d.stop()
    assert rc == 0 and rest[-1] == "RESULT OK"
    assert len(slices(api)) == 1     # a plain stop leaves them for the next run


def test_health_change_bumps_the_generation_and_drops_the_gpu(api):
    d = Driver(api.kubeconfig, "--gpus", "3")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    name = slices(api)[0]["metadata"]["name"]
    t0 = time.monotonic()
    d.send("unhealthy 1")
    wait_until(lambda: [x["name"] for x in devices(api)] == ["gpu-0", "gpu-2"], "gpu-1 gone")
    took = time.monotonic() - t0
    [s] = slices(api)
    assert s["metadata"]["name"] == name       # replaced in place, not a new object
    assert s["spec"]["pool"]["generation"] == 2
    d.send("healthy 1")
    wait_until(lambda: [x["name"] for x in devices(api)] == ["gpu-0", "gpu-1", "gpu-2"],
               "gpu-1 back")
    assert slices(api)[0]["spec"]["pool"]["generation"] == 3
    # No write without a change: the echo of our own writes costs nothing.
    assert d.ask("wait 5000") == "PUBLISHED 1"
    before = len([r for r in api.requests() if "resourceslices" in r["path"]
                  and r["method"] in ("PUT", "POST", "DELETE")])
    time.sleep(0.3)
    after = len([r for r in api.requests() if "resourceslices" in r["path"]
                 and r["method"] in ("PUT", "POST", "DELETE")])
    assert before == after == 3
    if not WRAPPER:
        assert took < 1.0, took
    assert d.stop()[0] == 0


def test_lost_gpu_and_mig_devices(api):
    d = Driver(api.kubeconfig, "--gpus", "3", "--mig-gpu", "1", "--lost-gpu", "2",
               "--consumable", "off")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    devs = devices(api)
    assert [x["name"] for x in devs] == ["gpu-0", "gpu-1-mig-7-0", "gpu-1-mig-8-0"]
    mig = devs[1]
    assert mig["attributes"]["type"] == {"string": "mig"}
    assert mig["attributes"]["parentUUID"] == {"string": "GPU-00000001-1111-2222-3333-444444444444"}
    assert mig["attributes"]["profile"] == {"string": "1g.5gb"}
    assert mig["capacity"]["memory"] == {"value": str(5 * GIB)}
    assert "cores" not in mig["capacity"]     # NVML measures no process inside a MIG device
    assert devs[0]["capacity"]["cores"] == {"value": "100"}   # no policy without consumable
    assert all("allowMultipleAllocations" not in x for x in devs)   # --consumable off
    assert d.stop()[0] == 0


def test_deleted_slices_come_back_fast(api):
    """A kubelet restart deletes every slice of its node: they are back within 1 s."""
    d = Driver(api.kubeconfig, "--gpus", "2")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    [old] = slices(api)
    t0 = time.monotonic()
    api.store.delete("resourceslices", None, old["metadata"]["name"])
    [new] = wait_until(lambda: slices(api), "the slice back")
    took = time.monotonic() - t0
    assert [x["name"] for x in new["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert new["spec"]["pool"]["generation"] == 2
    if not WRAPPER:
        assert took < 1.0, took
    assert d.stop()[0] == 0


def test_many_devices_split_into_several_slices(api):
    d = Driver(api.kubeconfig, "--gpus", "5", "--per-slice", "2")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    ss = slices(api)
    assert len(ss) == 3
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in ss} == {3}
    assert sorted(len(s["spec"]["devices"]) for s in ss) == [1, 2, 2]
    # Two GPUs fail: the pool shrinks to two slices, the third is deleted.
    d.send("unhealthy 3")
    d.send("unhealthy 4")
    wait_until(lambda: len(slices(api)) == 2 and len(devices(api)) == 3, "two slices left")
    ss = slices(api)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in ss} == {2}
    assert len({s["spec"]["pool"]["generation"] for s in ss}) == 1
    assert d.stop()[0] == 0


def test_server_without_consumable_capacity_gets_whole_device_slices(api):
    api.consumable_capacity = False
    d = Driver(api.kubeconfig, "--gpus", "2")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    st = wait_until(lambda: (lambda s: s if s["known"] and s["gen"] >= 2 else None)(d.status()),
                    "the second round")
    assert st["consumable"] == 0
    [s] = slices(api)
    assert s["spec"]["pool"]["generation"] == 2
    assert all("allowMultipleAllocations" not in x and "requestPolicy" not in x["capacity"]["memory"]
               for x in s["spec"]["devices"])
    # The second write sent no consumable fields at all.
    last = [r for r in api.requests() if "resourceslices" in r["path"] and r["method"] == "PUT"][-1]
    assert "allowMultipleAllocations" not in last["body"]
    # ... and stays quiet afterwards (no rewrite loop over the dropped fields).
    n = len([r for r in api.requests() if r["method"] in ("PUT", "POST")])
    time.sleep(0.3)
    assert len([r for r in api.requests() if r["method"] in ("PUT", "POST")]) == n
    assert d.stop()[0] == 0


def test_forced_on_against_a_dropping_server_does_not_loop(api):
    api.consumable_capacity = False
    d = Driver(api.kubeconfig, "--gpus", "1", "--consumable", "on")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    time.sleep(0.3)
    writes = [r for r in api.requests() if "resourceslices" in r["path"]
              and r["method"] in ("PUT", "POST")]
    assert len(writes) == 1 and "allowMultipleAllocations" in writes[0]["body"]
    assert d.stop()[0] == 0


def test_refused_writes_back_off_post_an_event_then_land(api):
    api.add_fault(method="POST", path="resourceslices$", status=403, reason="Forbidden",
                  message='resourceslices.resource.k8s.io is forbidden: User "x" cannot create',
                  count=4)
    d = Driver(api.kubeconfig, "--gpus", "1")
    assert d.ask("wait 20000") == "PUBLISHED 1"
    posts = [r for r in api.requests() if r["path"].endswith("resourceslices")
             and r["method"] == "POST"]
    assert len(posts) == 5
    gaps = [b["time"] - a["time"] for a, b in zip(posts, posts[1:])]
    assert gaps[-1] > gaps[0]          # backing off, not hammering
    with api.store.lock:
        events = [o for (res, _, _), o in api.store.objects.items() if res == "events"]
    assert len(events) == 1, events
    ev = events[0]
    assert ev["type"] == "Warning" and ev["reason"] == "ResourceSlicePublishFailed"
    assert ev["involvedObject"]["kind"] == "Node" and ev["involvedObject"]["name"] == NODE
    assert "forbidden" in ev["message"]
    st = d.status()
    assert st["failures"] == 4 and st["rounds"] == 1
    assert len(slices(api)) == 1
    assert d.stop()[0] == 0


def test_slices_of_an_earlier_run_are_taken_over(api):
    d = Driver(api.kubeconfig, "--gpus", "2")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    [first] = slices(api)
    assert d.stop()[0] == 0
    # A duplicate left behind (two slices of the pool), and another driver's slice on this node.
    dup = json.loads(json.dumps(first))
    dup["metadata"] = {"name": "n1-gpu.gpupool.io-dup"}
    api.put_object("resourceslices", dup)
    other = {"metadata": {"name": "other"}, "spec": {"driver": "gpu.nvidia.com",
                                                     "nodeName": NODE, "devices": []}}
    api.put_object("resourceslices", other)
    api.clear_requests()
    d = Driver(api.kubeconfig, "--gpus", "2")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    ours = [s for s in slices(api) if s["spec"]["driver"] == DRV]
    # One of the two is replaced in place (which one is the LIST's order), the other deleted.
    assert len(ours) == 1
    assert ours[0]["metadata"]["name"] in (first["metadata"]["name"], "n1-gpu.gpupool.io-dup")
    writes = [r["method"] for r in api.requests() if "resourceslices" in r["path"]
              and r["method"] in ("POST", "PUT", "DELETE")]
    assert sorted(writes) == ["DELETE", "PUT"], writes
    assert ours[0]["spec"]["pool"]["generation"] == 2
    assert api.store.get("resourceslices", None, "other")     # not ours: untouched
    assert d.stop()[0] == 0


def test_stop_with_remove_and_remove_and_exit(api):
    d = Driver(api.kubeconfig, "--gpus", "2", "--per-slice", "1")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    assert len(slices(api)) == 2
    rc, rest = d.stop(remove=True)
    assert rc == 0 and rest[-1] == "RESULT OK"
    assert slices(api) == []
    # --remove-and-exit: the uninstall path of a program that is not running.
    d = Driver(api.kubeconfig, "--gpus", "1")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    assert d.stop()[0] == 0
    p = subprocess.run(WRAPPER + [DRIVER, "--kubeconfig", api.kubeconfig, "--node", NODE,
                                  "--remove-and-exit"], capture_output=True, text=True,
                       timeout=30 * SCALE)
    assert p.returncode == 0 and "RESULT OK" in p.stdout, p.stdout + p.stderr
    assert slices(api) == []
    dels = [r for r in api.requests() if r["method"] == "DELETE"]
    assert all(json.loads(r["body"])["preconditions"]["uid"] for r in dels)


def test_api_server_gone_for_a_while_is_survived(api):
    d = Driver(api.kubeconfig, "--gpus", "1")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    api.add_fault(method="*", path="resourceslices", action="close", for_s=1.5)
    d.send("unhealthy 0")
    time.sleep(0.2)
    api.store.delete("resourceslices", None, slices(api)[0]["metadata"]["name"])
    wait_until(lambda: slices(api) and devices(api) == [], "the empty pool written", timeout=30)
    assert d.stop()[0] == 0


def test_slice_deleted_right_after_a_write_comes_back(api):
    """The watch's DELETED event can overtake the answer of the write it deletes (the kubelet
    wiping slices the moment they change): the deleted slice must not be taken for present."""
    d = Driver(api.kubeconfig, "--gpus", "4")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    for i in range(6):
        gen = slices(api)[0]["spec"]["pool"]["generation"]
        # The PUT is stored and watched at once, its answer leaves 300 ms later.
        api.add_fault(method="PUT", path="resourceslices/", action="late_answer", delay_ms=300)
        d.send(("unhealthy %d" if i % 2 == 0 else "healthy %d") % (i // 2))
        s = wait_until(lambda: [x for x in slices(api) if x["spec"]["pool"]["generation"] > gen],
                       "the health change written")[0]
        api.store.delete("resourceslices", None, s["metadata"]["name"])
        wait_until(lambda: slices(api), "the slice back after deletion %d" % i, timeout=5)
    assert d.stop()[0] == 0


def test_following_the_node_state_with_mig_devices_on_their_own(api):
    """dra_slices_follow: the health comes from state/node_state; a failed MIG instance drops
    that MIG device only, a failed GPU all of its devices."""
    d = Driver(api.kubeconfig, "--gpus", "2", "--mig-gpu", "1", "--state")
    assert d.ask("wait 10000") == "PUBLISHED 1"
    names = lambda: [x["name"] for x in devices(api)]     # noqa: E731
    assert names() == ["gpu-0", "gpu-1-mig-7-0", "gpu-1-mig-8-0"]
    d.send("mig 1 0 0")
    wait_until(lambda: names() == ["gpu-0", "gpu-1-mig-8-0"], "the failed MIG device gone")
    d.send("gpu 0 0")
    wait_until(lambda: names() == ["gpu-1-mig-8-0"], "gpu-0 gone")
    d.send("gpu 1 0")
    wait_until(lambda: names() == [], "every device of gpu-1 gone")
    d.send("gpu 1 1")
    d.send("gpu 0 1")
    wait_until(lambda: names() == ["gpu-0", "gpu-1-mig-7-0", "gpu-1-mig-8-0"], "all back")
    assert d.stop()[0] == 0
