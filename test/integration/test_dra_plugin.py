"""gpupool-dra-plugin: the DRA kubelet plugin over its real sockets.

Pieces: the real program (fake NVML), a test gRPC client playing the kubelet (GetInfo and
NotifyRegistrationStatus on the registration socket, NodePrepareResources /
NodeUnprepareResources in v1 and v1beta1, NodeWatchResources), the fake API server serving
resource.k8s.io/v1 ResourceClaims (and refusing when a test says so). The tests read what a
container runtime would read: the per-claim CDI spec files, the region directories, and the
plugin's checkpoint.

Python stubs are generated from proto/*.proto at import time (python3-grpc-tools, whose protoc
3.5 predates proto3 `optional`: it is stripped, which does not change the wire for a set
string).
"""

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import grpc
import pytest

from conftest import (BUILD, FAKENVML_DIR, PLUGIN_ENV, ROOT, SANITIZER_ENV_DEFAULTS,
                      SANITIZER_REPORT, WRAPPER, error_exitcodes, scaled)

sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
from fake_apiserver import FakeApiServer  # noqa: E402
from inventory import Inventory  # noqa: E402

DRA_BIN = os.path.join(BUILD, "bin", "gpupool-dra-plugin")
DRIVER = "gpu.gpupool.io"
NODE = "node1"
GIB = 1 << 30
INVENTORY = "2gpu-16gb.json"   # two 16 GiB GPUs
FAKE_LIBRARY = b"\x7fELF not really: libgpupool-cuda.so stand-in for the DRA plugin tests\n"


def envname(uuid):
    """A UUID as the plugin spells it in an environment name: '_' for '-' (a shell drops
    names with '-'; docs/isolation.md)."""
    return uuid.replace("-", "_")


def _stubs():
    out = tempfile.mkdtemp(prefix="gp-drastubs-")
    atexit.register(shutil.rmtree, out, True)
    for name in ("dra_v1", "dra_v1beta1", "pluginregistration", "dra_health"):
        with open(os.path.join(ROOT, "proto", name + ".proto")) as f:
            text = re.sub(r"(?m)^  optional ", "  ", f.read())
        with open(os.path.join(out, name + ".proto"), "w") as f:
            f.write(text)
    from grpc_tools import protoc
    for name in ("dra_v1", "dra_v1beta1", "pluginregistration", "dra_health"):
        rc = protoc.main(["grpc_tools.protoc", "-I" + out, "--python_out=" + out,
                          "--grpc_python_out=" + out, os.path.join(out, name + ".proto")])
        assert rc == 0, "protoc failed on %s" % name
    sys.path.insert(0, out)
    try:
        import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc  # noqa: E401
        import pluginregistration_pb2, pluginregistration_pb2_grpc  # noqa: E401
        import dra_health_pb2, dra_health_pb2_grpc  # noqa: E401
    finally:
        sys.path.remove(out)
    return {"v1": (dra_v1_pb2, dra_v1_pb2_grpc), "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
            "reg": (pluginregistration_pb2, pluginregistration_pb2_grpc),
            "health": (dra_health_pb2, dra_health_pb2_grpc)}


STUBS = _stubs()


def write_kubeconfig(path, server):
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
           "clusters": [{"name": "c", "cluster": {"server": server}}],
           "contexts": [{"name": "t", "context": {"cluster": "c"}}]}
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


class DraPlugin:
    """One gpupool-dra-plugin process with its kubelet root, CDI root and isolation dir."""

    def __init__(self, root, workdir, api_url, inventory=INVENTORY, args=(), isolation=True,
                 name="dra", driver=DRIVER):
        self.root = root
        self.driver = driver
        self.kubelet_root = os.path.join(root, "kubelet")
        self.cdi_root = os.path.join(root, "cdi")
        self.isolation_dir = os.path.join(root, "isolation")
        self.state_dir = os.path.join(self.kubelet_root, "plugins", driver)
        self.log_path = os.path.join(workdir, name + ".log")
        self.inventory = Inventory(inventory)
        lib = os.path.join(workdir, "libgpupool-cuda.so")
        with open(lib, "wb") as f:
            f.write(FAKE_LIBRARY)
        driver_root = os.path.join(root, "driver")   # an empty driver: no library to mount
        os.makedirs(driver_root, exist_ok=True)
        self.argv = WRAPPER + [
            DRA_BIN, "--node-name", NODE, "--driver-root", driver_root,
            "--container-driver-root", driver_root,
            "--kubeconfig", write_kubeconfig(os.path.join(workdir, "kubeconfig"), api_url),
            "--kubelet-root-dir", self.kubelet_root, "--cdi-root", self.cdi_root,
            "--isolation-dir", self.isolation_dir,
            "--isolation-library", lib if isolation else ""] + list(args)
        env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
        for k, v in SANITIZER_ENV_DEFAULTS.items():
            env.setdefault(k, v)
        env["LD_LIBRARY_PATH"] = FAKENVML_DIR
        env["FAKE_NVML_INVENTORY"] = self.inventory.path
        self.control_path = os.path.join(workdir, name + ".control")
        open(self.control_path, "a").close()
        env["FAKE_NVML_CONTROL"] = self.control_path
        self.env = env
        self.proc = None

    @property
    def registration(self):
        return os.path.join(self.kubelet_root, "plugins_registry", self.driver + "-reg.sock")

    @property
    def endpoint(self):
        return os.path.join(self.state_dir, "dra.sock")

    def start(self, wait=True):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if wait:
            deadline = time.monotonic() + scaled(10)
            # the log line, not the files: a killed predecessor leaves its sockets behind
            while "Serving DRA driver" not in self.log():
                assert self.proc.poll() is None, "plugin exited:\n" + self.log()
                assert time.monotonic() < deadline, "sockets never appeared:\n" + self.log()
                time.sleep(0.02)
        return self

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(scaled(10))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("plugin ignored signal %d" % sig)
        self._log.close()
        return rc

    def check_clean(self):
        report = SANITIZER_REPORT.search(self.log())
        assert report is None, self.log()
        if self.proc is not None and self.proc.returncode is not None:
            assert self.proc.returncode not in error_exitcodes(), self.log()

    # -- the kubelet's side ---------------------------------------------------------------
    def channel(self, path):
        return grpc.insecure_channel("unix:" + path, options=[("grpc.default_authority",
                                                               "localhost")])

    def get_info(self):
        pb, pbg = STUBS["reg"]
        with self.channel(self.registration) as ch:
            return pbg.RegistrationStub(ch).GetInfo(pb.InfoRequest(), timeout=scaled(5))

    def notify(self, ok, error=""):
        pb, pbg = STUBS["reg"]
        with self.channel(self.registration) as ch:
            return pbg.RegistrationStub(ch).NotifyRegistrationStatus(
                pb.RegistrationStatus(plugin_registered=ok, error=error), timeout=scaled(5))

    def prepare(self, claims, version="v1", timeout=10):
        pb, pbg = STUBS[version]
        req = pb.NodePrepareResourcesRequest(claims=[
            pb.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"],
                     uid=c["metadata"]["uid"]) for c in claims])
        with self.channel(self.endpoint) as ch:
            return pbg.DRAPluginStub(ch).NodePrepareResources(req, timeout=scaled(timeout))

    def unprepare(self, claims, version="v1", timeout=10):
        pb, pbg = STUBS[version]
        req = pb.NodeUnprepareResourcesRequest(claims=[
            pb.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"],
                     uid=c["metadata"]["uid"]) for c in claims])
        with self.channel(self.endpoint) as ch:
            return pbg.DRAPluginStub(ch).NodeUnprepareResources(req, timeout=scaled(timeout))

    # -- what the runtime reads -------------------------------------------------------------
    def spec_path(self, uid):
        return os.path.join(self.cdi_root, "k8s.%s-claim_%s.json" % (self.driver, uid))

    def spec(self, uid):
        with open(self.spec_path(uid)) as f:
            return json.load(f)

    def region_dir(self, uid):
        return os.path.join(self.isolation_dir, "claims", uid)

    def checkpoint(self):
        with open(os.path.join(self.state_dir, "checkpoint.json")) as f:
            return json.load(f)


def claim(name, results, ns="default", config=None, uid=None):
    """A ResourceClaim as the API server returns it once allocated."""
    devices = {"results": results}
    if config is not None:
        devices["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns, "uid": uid or str(uuid.uuid4())},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}},
            "status": {"allocation": {"devices": devices}}}


def result(device, memory=None, request="gpu", driver=DRIVER, pool=NODE, share_id=None,
           cores=None):
    r = {"request": request, "driver": driver, "pool": pool, "device": device}
    if memory is not None:
        r["consumedCapacity"] = {"memory": memory}
    if cores is not None:
        r.setdefault("consumedCapacity", {})["cores"] = cores
    if share_id is not None:
        r["shareID"] = share_id
    return r


def gpu_config(**params):
    p = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuConfig"}
    p.update(params)
    return [{"source": "FromClaim", "requests": [],
             "opaque": {"driver": DRIVER, "parameters": p}}]


@pytest.fixture
def api():
    srv = FakeApiServer(fixture={"nodes": [{"metadata": {"name": NODE}}]})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def dra(api, tmp_path):
    if not os.access(DRA_BIN, os.X_OK):
        pytest.fail("not built: %s" % DRA_BIN)
    root = tempfile.mkdtemp(prefix="gpd-", dir="/tmp")   # socket paths stay short
    started = []

    def start(**kw):
        p = DraPlugin(root, str(tmp_path), api.url, name="dra%d" % len(started), **kw)
        started.append(p)
        return p.start()

    yield start
    for p in started:
        p.stop()
        p.check_clean()
    shutil.rmtree(root, ignore_errors=True)


def put(api, *claims):
    for c in claims:
        api.put_object("resourceclaims", c)
    return claims


def uuids():
    return list(Inventory(INVENTORY).uuids)


def devices_of(resp, uid):
    return [(d.device_name, list(d.cdi_device_ids)) for d in resp.claims[uid].devices]


def env_of(spec):
    out = {}
    for dev in spec["devices"]:
        for e in dev["containerEdits"].get("env", []):
            k, v = e.split("=", 1)
            out[k] = v
    return out


# ---- registration ---------------------------------------------------------------------

def test_get_info_lists_v1_first_then_v1beta1_and_health(dra):
    p = dra()
    info = p.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == p.endpoint
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin",
                                             "v1alpha1.DRAResourceHealth"]
    p.notify(True)
    p.notify(False, "version skew")
    log = p.log()
    assert "Registered DRA driver %s" % DRIVER in log
    assert "refused DRA driver %s: version skew" % DRIVER in log


# ---- prepare / unprepare ----------------------------------------------------------------

def test_shared_claim_gets_limit_library_and_region(dra, api):
    p = dra()
    c, = put(api, claim("share4", [result("gpu-0", "4Gi", share_id="s-1")]))
    uid = c["metadata"]["uid"]
    resp = p.prepare([c])
    assert resp.claims[uid].error == ""
    cdi = "k8s.%s/claim=%s-gpu-0" % (DRIVER, uid)
    assert devices_of(resp, uid) == [("gpu-0", [cdi])]
    dev = resp.claims[uid].devices[0]
    assert dev.pool_name == NODE and list(dev.request_names) == ["gpu"]
    assert dev.share_id == "s-1"          # v1 carries the allocation's shareID

    spec = p.spec(uid)
    assert spec["kind"] == "k8s.%s/claim" % DRIVER
    assert [d["name"] for d in spec["devices"]] == ["%s-gpu-0" % uid]
    gpu0 = uuids()[0]
    env = env_of(spec)
    assert env == {"CUDA_DEVICE_MEMORY_LIMIT_" + envname(gpu0): str(4 * GIB),
                   "CUDA_DEVICE_MEMORY_SHARED_CACHE_" + envname(gpu0):
                       "/run/gpupool-cuda/claims/%s/region" % uid}
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia0"]
    common = spec["containerEdits"]
    assert "/dev/nvidiactl" in [n["path"] for n in common["deviceNodes"]]
    mounts = {m["containerPath"]: m for m in common["mounts"]}
    assert mounts["/usr/local/gpupool/libgpupool-cuda.so"]["hostPath"] == \
        os.path.join(p.isolation_dir, "libgpupool-cuda.so")
    assert "ro" in mounts["/etc/ld.so.preload"]["options"]
    region = mounts["/run/gpupool-cuda/claims/" + uid]
    assert region["hostPath"] == p.region_dir(uid) and "ro" not in region["options"]
    assert os.path.isdir(p.region_dir(uid))
    assert os.stat(p.region_dir(uid)).st_mode & 0o777 == 0o777
    with open(os.path.join(p.isolation_dir, "libgpupool-cuda.so"), "rb") as f:
        assert f.read() == FAKE_LIBRARY
    entry, = p.checkpoint()["claims"]
    assert entry["uid"] == uid and entry["state"] == "PrepareCompleted"


def test_claim_consuming_cores_gets_a_compute_limit(dra, api):
    """consumedCapacity.cores 1..99 becomes CUDA_DEVICE_SM_LIMIT_<UUID>; 0 and 100 are
    none (a memory-only share, all of the GPU's compute)."""
    p = dra()
    c30, c0, c100 = put(api, claim("c30", [result("gpu-0", "4Gi", cores="30")]),
                        claim("c0", [result("gpu-0", "4Gi", cores="0")]),
                        claim("c100", [result("gpu-1", "16Gi", cores="100")]))
    resp = p.prepare([c30, c0, c100])
    g0, g1 = uuids()[0], uuids()[1]
    u30, u0, u100 = (c["metadata"]["uid"] for c in (c30, c0, c100))
    assert all(resp.claims[u].error == "" for u in (u30, u0, u100))
    env = env_of(p.spec(u30))
    assert env["CUDA_DEVICE_SM_LIMIT_" + envname(g0)] == "30"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_" + envname(g0)] == str(4 * GIB)
    assert not any(k.startswith("CUDA_DEVICE_SM_LIMIT") for k in env_of(p.spec(u0)))
    assert env_of(p.spec(u100)) == {}          # the whole GPU, all of its compute
    entry, = [e for e in p.checkpoint()["claims"] if e["uid"] == u30]
    assert entry["devices"][0]["cores"] == 30
    # cores alone (the whole memory) still mounts the library that enforces them
    only, = put(api, claim("only", [result("gpu-1", "16Gi", cores="50")]))
    uo = only["metadata"]["uid"]
    assert p.prepare([only]).claims[uo].error == ""
    env = env_of(p.spec(uo))
    assert env["CUDA_DEVICE_SM_LIMIT_" + envname(g1)] == "50"
    assert "CUDA_DEVICE_MEMORY_LIMIT_" + envname(g1) not in env
    assert "/usr/local/gpupool/libgpupool-cuda.so" in \
        [m["containerPath"] for m in p.spec(uo)["containerEdits"]["mounts"]]
    bad, = put(api, claim("bad", [result("gpu-0", "4Gi", cores="101")]))
    assert "consumedCapacity.cores 101 is not in 0..100" in \
        p.prepare([bad]).claims[bad["metadata"]["uid"]].error


def test_whole_device_claim_gets_device_nodes_only(dra, api):
    p = dra()
    whole, absent = put(api, claim("whole", [result("gpu-1", "16Gi")]),
                        claim("plain", [result("gpu-0")]))
    resp = p.prepare([whole, absent])
    for c, node in ((whole, "/dev/nvidia1"), (absent, "/dev/nvidia0")):
        uid = c["metadata"]["uid"]
        assert resp.claims[uid].error == ""
        spec = p.spec(uid)
        assert env_of(spec) == {}
        assert "mounts" not in spec["containerEdits"]
        # the node's edits (devices/cdi.c) are every claim's: here the compat hook
        hooks = spec["containerEdits"]["hooks"]
        assert any("enable-cuda-compat" in h["args"] for h in hooks), hooks
        assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == [node]
        assert not os.path.exists(p.region_dir(uid))


def test_v1beta1_is_served_by_the_same_handlers_without_share_id(dra, api):
    p = dra()
    c, = put(api, claim("beta", [result("gpu-0", "8Gi", share_id="s-2")]))
    uid = c["metadata"]["uid"]
    resp = p.prepare([c], version="v1beta1")
    assert devices_of(resp, uid) == [("gpu-0", ["k8s.%s/claim=%s-gpu-0" % (DRIVER, uid)])]
    assert resp.claims[uid].devices[0].SerializeToString() == \
        STUBS["v1beta1"][0].Device(request_names=["gpu"], pool_name=NODE, device_name="gpu-0",
                                   cdi_device_ids=["k8s.%s/claim=%s-gpu-0" % (DRIVER, uid)]
                                   ).SerializeToString()
    assert p.unprepare([c], version="v1beta1").claims[uid].error == ""
    assert not os.path.exists(p.spec_path(uid))


def test_prepare_is_idempotent_and_answers_from_the_checkpoint(dra, api):
    p = dra()
    c, = put(api, claim("again", [result("gpu-0", "4Gi")]))
    uid = c["metadata"]["uid"]
    first = p.prepare([c])
    mtime = os.stat(p.spec_path(uid)).st_mtime_ns
    gets = len([r for r in api.requests() if "resourceclaims" in r["path"]])
    second = p.prepare([c, c])           # the same claim twice in one request, too
    assert second.claims[uid] == first.claims[uid]
    assert len(second.claims) == 1
    assert os.stat(p.spec_path(uid)).st_mtime_ns == mtime
    assert len([r for r in api.requests() if "resourceclaims" in r["path"]]) == gets
    assert p.unprepare([c]).claims[uid].error == ""
    assert p.unprepare([c]).claims[uid].error == ""   # unprepare is idempotent
    assert not os.path.exists(p.spec_path(uid)) and not os.path.exists(p.region_dir(uid))
    assert p.checkpoint()["claims"] == []


def test_two_claims_of_one_container_do_not_collide(dra, api):
    """Two shared claims on two GPUs: each claim's edits set its own GPU's variables and mount
    its own region directory, so one container holding both gets both limits."""
    p = dra()
    a, b = put(api, claim("a", [result("gpu-0", "4Gi")]), claim("b", [result("gpu-1", "8Gi")]))
    resp = p.prepare([a, b])
    ua, ub = a["metadata"]["uid"], b["metadata"]["uid"]
    assert resp.claims[ua].error == "" and resp.claims[ub].error == ""
    ea, eb = env_of(p.spec(ua)), env_of(p.spec(ub))
    assert not set(ea) & set(eb)
    g0, g1 = uuids()
    assert ea["CUDA_DEVICE_MEMORY_LIMIT_" + envname(g0)] == str(4 * GIB)
    assert eb["CUDA_DEVICE_MEMORY_LIMIT_" + envname(g1)] == str(8 * GIB)
    ma = {m["containerPath"] for m in p.spec(ua)["containerEdits"]["mounts"]}
    mb = {m["containerPath"] for m in p.spec(ub)["containerEdits"]["mounts"]}
    assert "/run/gpupool-cuda/claims/" + ua in ma and "/run/gpupool-cuda/claims/" + ub in mb
    assert "/run/gpupool-cuda/claims/" + ub not in ma


def test_one_claim_for_two_containers_has_one_region(dra, api):
    """Both containers of a pod get the claim's one CDI device: one region directory, one
    limit across both (a second prepare for the second container changes nothing)."""
    p = dra()
    c, = put(api, claim("pair", [result("gpu-0", "6Gi")]))
    uid = c["metadata"]["uid"]
    p.prepare([c])
    marker = os.path.join(p.region_dir(uid), "region." + uuids()[0])
    with open(marker, "w") as f:
        f.write("in use")
    p.prepare([c])
    assert os.path.exists(marker)
    mounts = [m for m in p.spec(uid)["containerEdits"]["mounts"] if "claims" in m["hostPath"]]
    assert [m["hostPath"] for m in mounts] == [p.region_dir(uid)]


def test_opaque_config_tightens_the_limit(dra, api):
    p = dra()
    shared, whole = put(api, claim("cfg", [result("gpu-0", "8Gi")], config=gpu_config(
        memoryLimit="6Gi")), claim("cfgwhole", [result("gpu-1")], config=gpu_config(
            memoryLimit="10Gi")))
    resp = p.prepare([shared, whole])
    us, uw = shared["metadata"]["uid"], whole["metadata"]["uid"]
    g0, g1 = uuids()
    assert env_of(p.spec(us))["CUDA_DEVICE_MEMORY_LIMIT_" + envname(g0)] == str(6 * GIB)
    assert env_of(p.spec(uw))["CUDA_DEVICE_MEMORY_LIMIT_" + envname(g1)] == str(10 * GIB)
    assert resp.claims[us].error == "" and resp.claims[uw].error == ""


# ---- bad input (issue 24 item 4) ------------------------------------------------------

def nothing_left(p, uid):
    assert not os.path.exists(p.spec_path(uid))
    assert not os.path.exists(p.region_dir(uid))
    assert uid not in [c["uid"] for c in p.checkpoint().get("claims", [])] \
        if os.path.exists(os.path.join(p.state_dir, "checkpoint.json")) else True


@pytest.mark.parametrize("params,expected", [
    ({"memoryLimit": "lots"}, "memoryLimit"),
    ({"memoryLimit": "12Gi"}, "more than the"),
    ({"computeShare": 50}, 'unknown field "computeShare"'),
    ({"kind": "MpsConfig"}, 'kind "MpsConfig" is not GpuConfig'),
    ({"apiVersion": "gpu.nvidia.com/v1beta1"}, "apiVersion"),
])
def test_malformed_opaque_config_is_a_clear_error(dra, api, params, expected):
    p = dra()
    bad, good = put(api, claim("bad", [result("gpu-0", "8Gi")], config=gpu_config(**params)),
                    claim("good", [result("gpu-1", "4Gi")]))
    resp = p.prepare([bad, good])
    ub, ug = bad["metadata"]["uid"], good["metadata"]["uid"]
    assert expected in resp.claims[ub].error
    assert list(resp.claims[ub].devices) == []
    nothing_left(p, ub)
    assert resp.claims[ug].error == ""   # the other claim of the request is served
    assert expected in p.log()


def test_device_this_node_does_not_have(dra, api):
    p = dra()
    c, = put(api, claim("ghost", [result("gpu-0", "4Gi"), result("gpu-7", "4Gi")]))
    uid = c["metadata"]["uid"]
    err = p.prepare([c]).claims[uid].error
    assert 'device "gpu-7" of pool node1 is not a device of this node' in err
    nothing_left(p, uid)


def test_claim_of_another_pool_and_unallocated_claim(dra, api):
    p = dra()
    other, pending = put(api, claim("elsewhere", [result("gpu-0", pool="node2")]),
                         claim("pending", []))
    pending["status"] = {}
    api.put_object("resourceclaims", pending)
    resp = p.prepare([other, pending])
    assert "another pool" in resp.claims[other["metadata"]["uid"]].error
    assert "not allocated" in resp.claims[pending["metadata"]["uid"]].error


def test_uid_mismatch_is_refused(dra, api):
    p = dra()
    c, = put(api, claim("recreated", [result("gpu-0", "4Gi")]))
    asked = dict(c, metadata=dict(c["metadata"], uid=str(uuid.uuid4())))
    uid = asked["metadata"]["uid"]
    err = p.prepare([asked]).claims[uid].error
    assert "has UID %s, not %s" % (c["metadata"]["uid"], uid) in err
    nothing_left(p, uid)


def test_api_server_refusing_and_missing_claims(dra, api):
    p = dra()
    c, = put(api, claim("refused", [result("gpu-0", "4Gi")]))
    gone = claim("gone", [result("gpu-0")])
    api.add_fault(method="GET", path="resourceclaims/refused$", status=403, reason="Forbidden",
                  message="resourceclaims is forbidden", count=-1)
    resp = p.prepare([c, gone])
    uid = c["metadata"]["uid"]
    assert "403 Forbidden" in resp.claims[uid].error
    assert "404 NotFound" in resp.claims[gone["metadata"]["uid"]].error
    nothing_left(p, uid)
    api.clear_faults()
    assert p.prepare([c]).claims[uid].error == ""   # and the retry works


def test_shared_claim_without_isolation_is_refused(dra, api):
    p = dra(isolation=False)
    shared, whole = put(api, claim("s", [result("gpu-0", "4Gi")]), claim("w", [result("gpu-1")]))
    resp = p.prepare([shared, whole])
    assert "enforces no memory limits" in resp.claims[shared["metadata"]["uid"]].error
    assert resp.claims[whole["metadata"]["uid"]].error == ""
    nothing_left(p, shared["metadata"]["uid"])


def test_uid_that_is_no_path_and_empty_fields_are_refused(dra, api):
    p = dra()
    bad = {"metadata": {"namespace": "default", "name": "x", "uid": "../../etc"}}
    empty = {"metadata": {"namespace": "", "name": "y", "uid": str(uuid.uuid4())}}
    resp = p.prepare([bad, empty])
    assert "characters other than [A-Za-z0-9-]" in resp.claims["../../etc"].error
    assert "namespace is empty" in resp.claims[empty["metadata"]["uid"]].error
    assert "not usable in a path" in p.unprepare([bad]).claims["../../etc"].error
    assert os.listdir(p.cdi_root) == [] if os.path.isdir(p.cdi_root) else True
    assert [r for r in api.requests() if "resourceclaims" in r["path"]] == []


def test_garbage_request_is_invalid_argument(dra):
    p = dra()
    with p.channel(p.endpoint) as ch:
        call = ch.unary_unary("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources")
        with pytest.raises(grpc.RpcError) as e:
            call(b"\xff\xff\xff", timeout=scaled(5))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ---- crash safety -------------------------------------------------------------------------

def test_restart_between_prepare_and_unprepare(dra, api):
    p = dra()
    c, = put(api, claim("survivor", [result("gpu-0", "4Gi")]))
    uid = c["metadata"]["uid"]
    first = p.prepare([c])
    p.stop(signal.SIGKILL)
    api.add_fault(method="GET", path="resourceclaims", status=500, count=-1)
    q = dra()
    assert q.prepare([c]).claims[uid] == first.claims[uid]   # from the checkpoint, no GET
    assert q.unprepare([c]).claims[uid].error == ""
    nothing_left(q, uid)


def test_interrupted_prepare_is_rolled_back_at_start(dra, api):
    p = dra()
    c, = put(api, claim("interrupted", [result("gpu-0", "4Gi")]))
    uid = c["metadata"]["uid"]
    p.prepare([c])
    p.stop()
    # As if the plugin died after recording PrepareStarted and creating the region dir.
    path = os.path.join(p.state_dir, "checkpoint.json")
    cp = p.checkpoint()
    cp["claims"][0]["state"] = "PrepareStarted"
    with open(path, "w") as f:
        json.dump(cp, f)
    q = dra()
    nothing_left(q, uid)
    assert "was being prepared when the plugin stopped: rolled back" in q.log()
    assert q.prepare([c]).claims[uid].error == ""


@pytest.mark.parametrize("content,why", [
    ('{"magic": "gpupool.io/dra-checkpoint", "version": 1, "claims": [{"uid"', "not complete JSON"),
    ('{"magic": "gpupool.io/dra-checkpoint", "version": 9, "claims": []}', "version 9 is not 1"),
    ('{"magic": "someone-else", "version": 1, "claims": []}', "not a gpupool DRA checkpoint"),
])
def test_bad_checkpoint_is_kept_aside_and_unprepare_still_cleans(dra, api, content, why):
    p = dra()
    c, = put(api, claim("kept", [result("gpu-0", "4Gi")]))
    uid = c["metadata"]["uid"]
    p.prepare([c])
    p.stop()
    path = os.path.join(p.state_dir, "checkpoint.json")
    with open(path, "w") as f:
        f.write(content)
    q = dra()
    assert why in q.log() and "kept as %s.bad" % path in q.log()
    with open(path + ".bad") as f:
        assert f.read() == content
    assert q.unprepare([c]).claims[uid].error == ""
    nothing_left(q, uid)


def test_hundred_shared_claims_leave_nothing(dra, api):
    p = dra()
    claims = put(api, *[claim("c%03d" % i, [result("gpu-%d" % (i % 2), "%dMi" % (100 + i))])
                        for i in range(100)])
    for i in range(0, 100, 10):
        resp = p.prepare(claims[i:i + 10])
        assert all(r.error == "" for r in resp.claims.values())
    assert len(os.listdir(p.cdi_root)) == 100
    assert len(os.listdir(os.path.join(p.isolation_dir, "claims"))) == 100
    assert len(p.checkpoint()["claims"]) == 100
    for i in range(0, 100, 10):
        resp = p.unprepare(claims[i:i + 10])
        assert all(r.error == "" for r in resp.claims.values())
    assert os.listdir(p.cdi_root) == []
    assert os.listdir(os.path.join(p.isolation_dir, "claims")) == []
    assert p.checkpoint()["claims"] == []
    leftovers = [n for n in os.listdir(p.state_dir)
                 if n not in ("checkpoint.json", "checkpoint.lock", "dra.sock")]
    assert leftovers == []


# ---- health ------------------------------------------------------------------------------

def test_health_stream_lists_every_device(dra):
    p = dra()
    pb, pbg = STUBS["health"]
    with p.channel(p.endpoint) as ch:
        stream = pbg.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(),
                                                                   timeout=scaled(5))
        first = next(stream)
        stream.cancel()
    assert [(d.device.pool_name, d.device.device_name, d.health) for d in first.devices] == \
        [(NODE, "gpu-0", pb.HEALTHY), (NODE, "gpu-1", pb.HEALTHY)]


def test_xid_makes_the_device_unhealthy_on_the_stream_and_it_recovers(dra):
    """The device plugin's XID health (observe/health.c, through state/) feeds
    NodeWatchResources: a critical XID on GPU 1 sends a list with gpu-1 UNHEALTHY (and a
    message), then gpu-1 HEALTHY again after the recovery probes."""
    p = dra(args=("--health-probe-interval", "100ms", "--health-recovery-probes", "2"))
    deadline = time.monotonic() + scaled(5)
    while "Health checks started" not in p.log():
        assert time.monotonic() < deadline, p.log()
        time.sleep(0.02)
    pb, pbg = STUBS["health"]
    with p.channel(p.endpoint) as ch:
        stream = pbg.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(),
                                                                   timeout=scaled(10))
        first = next(stream)
        assert {d.device.device_name: d.health for d in first.devices} == \
            {"gpu-0": pb.HEALTHY, "gpu-1": pb.HEALTHY}
        with open(p.control_path, "a") as f:
            f.write("xid 1 48\n")
        sick = next(stream)
        health = {d.device.device_name: d for d in sick.devices}
        assert health["gpu-1"].health == pb.UNHEALTHY and health["gpu-0"].health == pb.HEALTHY
        assert "XID" in health["gpu-1"].message
        assert health["gpu-1"].last_updated_time >= first.devices[1].last_updated_time
        well = next(stream)
        assert {d.device.device_name: d.health for d in well.devices} == \
            {"gpu-0": pb.HEALTHY, "gpu-1": pb.HEALTHY}
        stream.cancel()


def test_health_list_is_sent_again_before_the_kubelet_ages_it_out(dra):
    """The kubelet takes a device's health as Unknown when it was not reported within its
    timeout (30 s by default): the list comes again every 10 s, stamped with its time."""
    p = dra()
    pb, pbg = STUBS["health"]
    with p.channel(p.endpoint) as ch:
        stream = pbg.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(),
                                                                   timeout=scaled(20))
        first = next(stream)
        t0 = time.monotonic()
        again = next(stream)
        waited = time.monotonic() - t0
        stream.cancel()
    assert waited < scaled(15)   # within the resend period (10 s) of the plugin's start
    assert [d.health for d in again.devices] == [pb.HEALTHY, pb.HEALTHY]
    assert again.devices[0].last_updated_time >= first.devices[0].last_updated_time
    assert abs(again.devices[0].last_updated_time - time.time()) < scaled(5)


def test_sigterm_removes_sockets_and_keeps_prepared_claims(dra, api):
    p = dra()
    c, = put(api, claim("kept", [result("gpu-0", "4Gi")]))
    uid = c["metadata"]["uid"]
    p.prepare([c])
    assert p.stop() == 0
    assert not os.path.exists(p.registration) and not os.path.exists(p.endpoint)
    assert os.path.exists(p.spec_path(uid)) and os.path.isdir(p.region_dir(uid))


def test_removed_socket_is_served_again(dra):
    p = dra()
    os.unlink(p.registration)
    deadline = time.monotonic() + scaled(5)
    while not os.path.exists(p.registration):
        assert time.monotonic() < deadline, p.log()
        time.sleep(0.05)
    assert p.get_info().name == DRIVER


def test_driver_name_nvidia_serves_nvidias_claims(dra, api):
    """--driver-name gpu.nvidia.com: the sockets, the CDI kind and the results taken are
    NVIDIA's driver's, so claims written for it work unchanged."""
    p = dra(args=("--driver-name", "gpu.nvidia.com"), driver="gpu.nvidia.com")
    assert p.registration.endswith("/plugins_registry/gpu.nvidia.com-reg.sock")
    assert p.get_info().name == "gpu.nvidia.com"
    theirs, ours = put(api, claim("nv", [result("gpu-0", driver="gpu.nvidia.com")]),
                       claim("gp", [result("gpu-1")]))
    resp = p.prepare([theirs, ours])
    ut, uo = theirs["metadata"]["uid"], ours["metadata"]["uid"]
    assert devices_of(resp, ut) == [("gpu-0", ["k8s.gpu.nvidia.com/claim=%s-gpu-0" % ut])]
    assert p.spec(ut)["kind"] == "k8s.gpu.nvidia.com/claim"
    assert devices_of(resp, uo) == []      # not this driver's: nothing to prepare


def test_mig_devices_are_prepared_by_their_uuid(dra, api):
    """A GPU in MIG mode is its MIG devices (gpu-<i>-mig-<gi>-<ci>), as the slices publish it;
    a share of one is limited by the MIG device's UUID; the whole GPU is no device."""
    p = dra(inventory="2gpu-mig-single.json")
    mig = p.inventory.gpus[0].mig[0]
    name = "gpu-0-mig-%d-%d" % (mig.gi, mig.ci)
    share, whole = put(api, claim("mig", [result(name, "2Gi")]), claim("gpu", [result("gpu-0")]))
    resp = p.prepare([share, whole])
    us, uw = share["metadata"]["uid"], whole["metadata"]["uid"]
    assert resp.claims[us].error == ""
    assert env_of(p.spec(us)) == {
        "CUDA_DEVICE_MEMORY_LIMIT_" + envname(mig.uuid): str(2 * GIB),
        "CUDA_DEVICE_MEMORY_SHARED_CACHE_" + envname(mig.uuid): "/run/gpupool-cuda/claims/%s/region" % us}
    nodes = [n["path"] for n in p.spec(us)["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes[0] == "/dev/nvidia%d" % p.inventory.gpus[0].minor
    assert 'device "gpu-0" of pool node1 is not a device of this node' in resp.claims[uw].error
    pb, pbg = STUBS["health"]
    with p.channel(p.endpoint) as ch:
        stream = pbg.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(),
                                                                   timeout=scaled(5))
        names = [d.device.device_name for d in next(stream).devices]
        stream.cancel()
    assert name in names and "gpu-0" not in names


def test_second_instance_refuses_to_take_the_sockets(dra, api, tmp_path):
    """A second plugin on the same kubelet root must not take the sockets of a live one (the
    kubelet would talk to a plugin without the first one's checkpoint)."""
    p = dra()
    second = DraPlugin(p.root, str(tmp_path), api.url, name="second")
    second.start(wait=False)
    assert second.proc.wait(scaled(10)) == 1
    second._log.close()
    # refused at the state directory's lock, before it read or rolled back anything
    assert "another gpupool-dra-plugin uses this --state-dir" in second.log()
    assert p.get_info().name == DRIVER        # the first one still serves


def test_slices_published_for_the_devices_prepared(dra, api):
    """The program publishes its devices (dra_slices) for the pool it prepares from: one
    device per GPU, named as prepare names them, with NVML's CUDA driver version."""
    p = dra()
    deadline = time.monotonic() + scaled(5)
    while True:
        slices = [o for (r, _, _), o in api.store.objects.items() if r == "resourceslices"]
        if slices or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert len(slices) == 1, p.log()
    spec = slices[0]["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE and spec["pool"]["name"] == NODE
    names = [d["name"] for d in spec["devices"]]
    assert names == ["gpu-0", "gpu-1"]
    attrs = spec["devices"][0]["attributes"]
    assert attrs["uuid"]["string"] == uuids()[0]
    assert attrs["cudaDriverVersion"]["version"] == "12.4.0"


def test_missing_node_name_is_a_clear_error(api, tmp_path):
    proc = subprocess.run(WRAPPER + [DRA_BIN, "--kubelet-root-dir", str(tmp_path)],
                          env={"LD_LIBRARY_PATH": FAKENVML_DIR, "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, timeout=scaled(20))
    assert proc.returncode == 1
    assert "--node-name (NODE_NAME) is required" in proc.stderr


def test_claims_get_the_pid_map_nvml_inside_their_containers_needs(dra, api):
    """The plugin writes each limited claim's map of its processes' host pids to their pids in
    the container into the claim's region directory (as the device plugin does for its
    containers): NVML's process utilization inside a claim's container then answers its own
    process under its own pid, and the compute sampler can find itself."""
    from test_isolation import FAKECUDA, FAKENVML, PRELOAD, PROBE
    p = dra()
    c, = put(api, claim("mapped", [result("gpu-0", "4Gi")]))
    uid = c["metadata"]["uid"]
    assert p.prepare([c]).claims[uid].error == ""
    gpu0 = uuids()[0]
    env = env_of(p.spec(uid))
    # The container's view: the claim's region directory is where the spec mounts it.
    env = {k: v.replace("/run/gpupool-cuda/claims/%s" % uid, p.region_dir(uid))
           for k, v in env.items()}
    env.update({"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": FAKECUDA + ":" + FAKENVML,
                "FAKECUDA_DEVICES": gpu0 + "=16g", "LD_PRELOAD": PRELOAD,
                "FAKE_NVML_INVENTORY": p.inventory.path, "FAKE_NVML_CONTROL": p.control_path,
                "ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0"})
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", PROBE, "init",
                               "alloc", "64m", "hold"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        for _ in range(2):
            assert "CUDA_SUCCESS" in holder.stdout.readline()
        with open("/proc/%d/task/%d/children" % (holder.pid, holder.pid)) as f:
            host = int(f.read().split()[0])
        with open(p.control_path, "a") as f:
            f.write("process 0 %d 64 23 1\nprocess 0 %d 10 88 1\n" % (host, stranger.pid))
        pid_map = os.path.join(p.region_dir(uid), "pids")
        want = "gpupool-pids 1\n%d 1\n" % host
        deadline = time.monotonic() + scaled(5)
        while time.monotonic() < deadline and not (
                os.path.exists(pid_map) and open(pid_map).read() == want):
            time.sleep(0.05)
        assert open(pid_map).read() == want
        r = subprocess.run(["nsenter", "--target", str(host), "--pid", "--", PROBE, "init",
                            "nvml-util"], env=env, capture_output=True, text=True,
                           timeout=scaled(30))
        assert "samples=1:23" in r.stdout, (r.stdout, r.stderr)
    finally:
        for proc in (holder, stranger):
            proc.kill()
            proc.wait()
    assert p.unprepare([c]).claims[uid].error == ""
    assert not os.path.exists(p.region_dir(uid))
