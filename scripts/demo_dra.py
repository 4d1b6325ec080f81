#!/usr/bin/python3
"""demo_dra.py BUILD_DIR -- the DRA driver and compute shares on a simulated node.

Parts 7 and 8 of `make demo` (parts 1-2: scripts/demo.sh, parts 3-6:
scripts/demo_pool.py). Here:

  7. the DRA driver: test/fakeapi/fake_apiserver.py serving resource.k8s.io/v1
     with one node; gpupool-dra-plugin started on it over the fake NVML (two
     16 GiB GPUs); the ResourceSlice it publishes; a ResourceClaim of 4 Gi
     written and allocated on gpu-0 as kube-scheduler would (consumedCapacity);
     NodePrepareResources and NodeUnprepareResources over the plugin's own
     socket as the kubelet calls them, with the per-claim CDI spec in between;
  8. compute shares (libgpupool-cuda's CUDA_DEVICE_SM_LIMIT, docs/compute.md)
     on the fake libcuda's simulated device (FAKECUDA_TIMELINE): two containers
     at 30 % and 70 % of one GPU, then a container at 30 % alone; each share is
     the device time the timeline itself accounted to the container's process.

Everything runs on loopback and in a temporary directory, and is stopped at the
end. Exit 0 on success; on a failure, a message on stderr and exit 1.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
from fake_apiserver import FakeApiServer  # noqa: E402

DRIVER = "gpu.gpupool.io"
NODE = "node-dra"
GIB = 1 << 30
# A fixed UID so that what the demo prints (and README shows) is the same every run.
CLAIM_UID = "5e1f2c3a-0000-4000-8000-00000000d7a1"
INVENTORY = os.path.join(ROOT, "test", "fakenvml", "inventories", "2gpu-16gb.json")
SIM_GPU = "GPU-11111111-2222-3333-4444-555555555555"
TOLERANCE = 5.0   # percentage points, as test/integration/test_compute_throttle.py holds them


class DemoError(Exception):
    pass


def say(text=""):
    print(text, flush=True)


def need(path, what="built"):
    if not os.path.exists(path):
        raise DemoError("%s is not %s (run make)" % (path, what))
    return path


# ---- part 7: the DRA driver ------------------------------------------------------------

def stubs(tmp):
    """Python gRPC stubs of the kubelet's DRA and registration APIs, from proto/. The
    Debian grpc-tools' protoc predates proto3 `optional`; dropping it does not change
    the wire of a set field."""
    out = os.path.join(tmp, "stubs")
    os.makedirs(out)
    names = ("dra_v1", "pluginregistration")
    for name in names:
        with open(os.path.join(ROOT, "proto", name + ".proto")) as f:
            text = re.sub(r"(?m)^  optional ", "  ", f.read())
        with open(os.path.join(out, name + ".proto"), "w") as f:
            f.write(text)
    from grpc_tools import protoc
    for name in names:
        if protoc.main(["grpc_tools.protoc", "-I" + out, "--python_out=" + out,
                        "--grpc_python_out=" + out, os.path.join(out, name + ".proto")]) != 0:
            raise DemoError("protoc failed on proto/%s.proto" % name)
    sys.path.insert(0, out)
    import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc  # noqa: E401
    return dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc


def http(method, url, body=None, ctype="application/json"):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def wait_for(what, fn, proc, log_path, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        got = fn()
        if got:
            return got
        if proc.poll() is not None:
            raise DemoError("gpupool-dra-plugin exited (%s) waiting for %s; log:\n%s"
                            % (proc.returncode, what, read(log_path)))
        if time.monotonic() > deadline:
            raise DemoError("gave up waiting for %s; plugin log:\n%s" % (what, read(log_path)))
        time.sleep(0.05)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def files_under(path):
    out = []
    for d, _, files in os.walk(path):
        out += [os.path.relpath(os.path.join(d, f), path) for f in files]
    return sorted(out)


def part7(build, tmp):
    import grpc
    dra_pb, dra_grpc, reg_pb, reg_grpc = stubs(tmp)
    plugin = need(os.path.join(build, "bin", "gpupool-dra-plugin"))
    library = need(os.path.join(build, "lib", "libgpupool-cuda.so"))
    fakenvml = os.path.dirname(need(os.path.join(build, "test", "fakenvml", "libnvidia-ml.so.1")))
    need(INVENTORY, "found")

    root = os.path.join(tmp, "node")
    kubelet = os.path.join(root, "kubelet")
    cdi_root = os.path.join(root, "cdi")
    isolation = os.path.join(root, "isolation")
    driver_root = os.path.join(root, "driver")   # no driver files to mount on this node
    os.makedirs(driver_root)
    api = FakeApiServer(fixture={"nodes": [{"metadata": {"name": NODE}}]}).start()
    kubeconfig = os.path.join(tmp, "kubeconfig")
    with open(kubeconfig, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "demo",
                   "clusters": [{"name": "demo", "cluster": {"server": api.url}}],
                   "contexts": [{"name": "demo", "context": {"cluster": "demo"}}]}, f)
    log_path = os.path.join(tmp, "dra-plugin.log")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "FAKE_NVML", "FAKECUDA", "GPUPOOL_", "NVIDIA_", "GP_"))}
    env.update({"LD_LIBRARY_PATH": fakenvml, "FAKE_NVML_INVENTORY": INVENTORY})
    log = open(log_path, "wb")
    proc = subprocess.Popen([plugin, "--node-name", NODE, "--kubeconfig", kubeconfig,
                             "--driver-root", driver_root, "--container-driver-root", driver_root,
                             "--kubelet-root-dir", kubelet, "--cdi-root", cdi_root,
                             "--isolation-dir", isolation, "--isolation-library", library],
                            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        say("\n== 7. the DRA driver: gpupool-dra-plugin on a node with 2 x 16 GiB GPUs (fake NVML),"
            " resource.k8s.io/v1 in a simulated API server (%s)" % api.url)
        wait_for("the plugin's sockets", lambda: "Serving DRA driver" in read(log_path), proc, log_path)
        registration = os.path.join(kubelet, "plugins_registry", DRIVER + "-reg.sock")
        with grpc.insecure_channel("unix:" + registration) as ch:
            info = reg_grpc.RegistrationStub(ch).GetInfo(reg_pb.InfoRequest(), timeout=10)
            reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=True), timeout=10)
        say("   kubelet -> GetInfo: %s %s, versions %s; registered"
            % (info.type, info.name, ", ".join(info.supported_versions)))

        def slices():
            return [o for (r, _, _), o in list(api.store.objects.items()) if r == "resourceslices"]
        slc, = wait_for("the ResourceSlice", slices, proc, log_path)
        spec = slc["spec"]
        say("\n   the ResourceSlice it published (driver %s, node %s, pool %s):"
            % (spec["driver"], spec["nodeName"], spec["pool"]["name"]))
        for dev in spec["devices"]:
            attrs = dev.get("attributes", {})
            cap = dev.get("capacity", {}).get("memory", {})
            value = str(cap.get("value", "?"))
            if value.isdigit():
                value += " (%g GiB)" % (int(value) / GIB)
            say("     %-6s %-22s memory %s  allowMultipleAllocations=%s  uuid %s"
                % (dev["name"], attrs.get("productName", {}).get("string", "?"),
                   value, json.dumps(dev.get("allowMultipleAllocations", False)),
                   attrs.get("uuid", {}).get("string", "?")))
        gpu0 = spec["devices"][0]
        if gpu0["name"] != "gpu-0" or not gpu0.get("allowMultipleAllocations"):
            raise DemoError("the slice does not offer gpu-0 for shares: %s" % json.dumps(spec))

        # The claim as a user writes it, then its allocation as kube-scheduler writes it.
        claims = api.url + "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
        http("POST", claims, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "gpu-4gi", "namespace": "default", "uid": CLAIM_UID},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "capacity": {"requests": {"memory": "4Gi"}}}}]}}})
        claim = http("PATCH", claims + "/gpu-4gi/status", {"status": {"allocation": {"devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
                         "shareID": "7c1b0e2a-0000-4000-8000-000000000001",
                         "consumedCapacity": {"memory": "4Gi"}}]}}}},
            ctype="application/merge-patch+json")
        uid = claim["metadata"]["uid"]
        res = claim["status"]["allocation"]["devices"]["results"][0]
        say("\n   ResourceClaim default/gpu-4gi, allocated by the scheduler: device %s/%s,"
            " consumedCapacity.memory %s" % (res["pool"], res["device"], res["consumedCapacity"]["memory"]))

        endpoint = os.path.join(kubelet, "plugins", DRIVER, "dra.sock")
        ref = dra_pb.Claim(namespace="default", name="gpu-4gi", uid=uid)
        with grpc.insecure_channel("unix:" + endpoint) as ch:
            got = dra_grpc.DRAPluginStub(ch).NodePrepareResources(
                dra_pb.NodePrepareResourcesRequest(claims=[ref]), timeout=15).claims[uid]
        if got.error:
            raise DemoError("NodePrepareResources: %s" % got.error)
        dev, = got.devices
        cdi_id, = dev.cdi_device_ids
        say("   kubelet -> NodePrepareResources: %s -> CDI device %s"
            % (dev.device_name, cdi_id.replace(uid, "<uid>")))
        spec_name = "k8s.%s-claim_%s.json" % (DRIVER, uid)
        with open(os.path.join(cdi_root, spec_name)) as f:
            cdi = json.load(f)
        say("   its CDI spec (<cdi-root>/%s), what the runtime gives the container:"
            % spec_name.replace(uid, "<uid>"))
        env_vars = [e for d in cdi["devices"] for e in d["containerEdits"].get("env", [])]
        for e in env_vars:
            say("     env    %s" % e.replace(uid, "<uid>"))
        mounts = cdi.get("containerEdits", {}).get("mounts", [])
        for m in mounts:
            say("     mount  %s" % m["containerPath"].replace(uid, "<uid>"))
        limit = [e for e in env_vars if e.startswith("CUDA_DEVICE_MEMORY_LIMIT_")]
        if limit != ["CUDA_DEVICE_MEMORY_LIMIT_%s=%d" % (
                gpu0["attributes"]["uuid"]["string"].replace("-", "_"), 4 * GIB)]:
            raise DemoError("the CDI spec does not carry gpu-0's 4 GiB limit: %s" % env_vars)
        if not os.listdir(cdi_root):
            raise DemoError("nothing under the CDI root after prepare")

        with grpc.insecure_channel("unix:" + endpoint) as ch:
            got = dra_grpc.DRAPluginStub(ch).NodeUnprepareResources(
                dra_pb.NodeUnprepareResourcesRequest(claims=[ref]), timeout=15).claims[uid]
        if got.error:
            raise DemoError("NodeUnprepareResources: %s" % got.error)
        left = files_under(cdi_root) + files_under(os.path.join(isolation, "claims"))
        with open(os.path.join(kubelet, "plugins", DRIVER, "checkpoint.json")) as f:
            checkpointed = json.load(f)["claims"]
        if left or checkpointed:
            raise DemoError("left after NodeUnprepareResources: %s, checkpoint %s" % (left, checkpointed))
        say("   kubelet -> NodeUnprepareResources: done; CDI specs left 0, claim regions left 0,"
            " claims in the checkpoint 0")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        api.stop()
    if proc.returncode != 0:
        raise DemoError("gpupool-dra-plugin exited %d on SIGTERM; log:\n%s" % (proc.returncode, read(log_path)))


# ---- part 8: compute shares ------------------------------------------------------------

def sanitizer_runtimes(lib):
    """The sanitizer runtimes lib needs (its NEEDED entries), as paths gcc knows."""
    try:
        out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True,
                             timeout=30).stdout
    except OSError:
        return []
    paths = []
    for m in re.finditer(r"Shared library: \[(lib[a-z]*san\.so[.0-9]*)\]", out):
        p = subprocess.run(["gcc", "-print-file-name=" + m.group(1)], capture_output=True,
                           text=True).stdout.strip()
        if p:
            paths.append(p)
    return paths


class SimulatedGpu:
    """One GPU of the fake libcuda's timeline: one kernel at a time, first come first
    served across processes; each process is a container of its own (its own region)."""

    def __init__(self, build, tmp, name):
        self.probe = need(os.path.join(build, "test", "cuda", "gpupool-launchprobe"))
        self.tool = need(os.path.join(build, "test", "fakecuda", "gpupool-fakecuda-timeline"))
        self.lib = need(os.path.join(build, "lib", "libgpupool-cuda.so"))
        need(os.path.join(build, "test", "fakecuda", "libcuda.so.1"))
        self.libpath = os.path.join(build, "test", "fakecuda") + ":" + os.path.join(build, "test", "fakenvml")
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.timeline = os.path.join(self.dir, "timeline")
        self.inventory = os.path.join(self.dir, "inventory.json")
        with open(self.inventory, "w") as f:
            json.dump({"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [
                {"uuid": SIM_GPU, "name": "NVIDIA H100 80GB HBM3", "minor": 0, "memory_mib": 81559,
                 "pci_bus_id": "00000000:07:00.0"}]}, f)
        self.procs = []   # (container, Popen)
        # A sanitized build's library (make asan) needs the sanitizer runtimes ahead of it in
        # the preload list, where a sanitized program has them (as scripts/demo.sh does).
        self.preload = ":".join(sanitizer_runtimes(self.lib) + [self.lib])

    def start(self, container, limit):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUDA_", "ALIYUN_COM_GPU_MEM", "FAKECUDA", "FAKE_NVML", "GPUPOOL_"))}
        env.update({"LD_LIBRARY_PATH": self.libpath, "LD_PRELOAD": self.preload,
                    "FAKECUDA_DEVICES": SIM_GPU + "=80g", "FAKE_NVML_INVENTORY": self.inventory,
                    "FAKECUDA_TIMELINE": self.timeline, "FAKECUDA_KERNEL_US": "500",
                    "FAKECUDA_QUEUE": "16", "CUDA_DEVICE_SM_LIMIT": str(limit),
                    "CUDA_DEVICE_MEMORY_SHARED_CACHE": os.path.join(self.dir, "region-" + container)})
        p = subprocess.Popen([self.probe, "--ms", "0"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append((container, p))
        if p.stdout.readline().strip() != "ready":
            p.wait()
            raise DemoError("gpupool-launchprobe (%s) did not start: %s" % (container, p.stderr.read()))

    def snapshot(self):
        out = subprocess.run([self.tool, self.timeline], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise DemoError("gpupool-fakecuda-timeline failed: %s" % out.stderr)
        now, procs = 0, {}
        for line in out.stdout.splitlines():
            f = line.split()
            if f[0] == "now":
                now = int(f[1])
            else:
                procs[int(f[1])] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
        return now, procs

    def shares(self, warm=0.5, window=2.0):
        """Each container's percent of the device's time over the window, after a warm-up."""
        time.sleep(warm)
        t0, a = self.snapshot()
        time.sleep(window)
        t1, b = self.snapshot()
        return {c: 100.0 * (b.get(p.pid, {}).get("busy", 0) - a.get(p.pid, {}).get("busy", 0)) / (t1 - t0)
                for c, p in self.procs}

    def stop(self):
        errors = []
        for c, p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            err = p.stderr.read()
            p.stdout.close()
            p.stderr.close()
            if "gpupool-cuda:" in err:
                errors.append("%s: %s" % (c, err.strip()))
        self.procs = []
        if errors:
            raise DemoError("the library complained: %s" % "; ".join(errors))


def measure(build, tmp, name, want):
    """want: [(container, limit)] -> {container: percent}. A share off by more than the
    tolerance is measured afresh, three tries in all, before it fails the demo: on a loaded
    2-core machine a window can be starved of CPU, which no limiter can make up for."""
    for attempt in (1, 2, 3):
        gpu = SimulatedGpu(build, tmp, "%s-%d" % (name, attempt))
        try:
            for container, limit in want:
                gpu.start(container, limit)
            got = gpu.shares()
        finally:
            gpu.stop()
        if all(abs(got[c] - limit) <= TOLERANCE for c, limit in want):
            return got
    raise DemoError("compute shares %s, wanted %s within %.0f points"
                    % (", ".join("%s %.1f %%" % kv for kv in got.items()),
                       ", ".join("%s %d %%" % kv for kv in want), TOLERANCE))


def part8(build, tmp):
    say("\n== 8. compute shares: CUDA_DEVICE_SM_LIMIT on one simulated GPU (fake libcuda's timeline:"
        " one kernel at a time, 500 us kernels)")
    say("   two containers, each launching kernels as fast as it can:")
    got = measure(build, tmp, "split", [("container-a", 30), ("container-b", 70)])
    for c, limit in (("container-a", 30), ("container-b", 70)):
        say("     %s  CUDA_DEVICE_SM_LIMIT=%d  -> %.1f %% of the GPU's time" % (c, limit, got[c]))
    say("   a container alone (the limit is a cap, not a weight):")
    got = measure(build, tmp, "lone", [("container-a", 30)])
    say("     %s  CUDA_DEVICE_SM_LIMIT=30  -> %.1f %% of the GPU's time" % ("container-a", got["container-a"]))
    say("   (each within %.0f points of its limit, measured over 2 s by the device's own accounting)" % TOLERANCE)


def main():
    if len(sys.argv) > 2:
        sys.exit("usage: %s [BUILD_DIR]" % sys.argv[0])
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    tmp = tempfile.mkdtemp(prefix="gpd-demo.", dir="/tmp")   # socket paths stay short
    try:
        part7(build, tmp)
        part8(build, tmp)
    except DemoError as e:
        sys.stdout.flush()
        print("\ndemo: FAILED: %s" % e, file=sys.stderr)
        return 1
    except ImportError as e:
        print("demo: %s lacks %s (Debian: python3-grpcio python3-grpc-tools python3-protobuf)"
              % (sys.executable, e.name), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say("\ndemo: parts 7-8 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
