#!/usr/bin/python3
"""gpumem_bench -- Allocate latency and RSS of the device plugin in gpu-mem mode (issue 9).

Setting: fake NVML with 8 x A100-80GB (640 GiB units), the fake API server answering every
request after a 2 ms delay, the kubelet simulator plus the gpumem_kubelet model (pod manager,
PodResources List), N pods of 2 units each, bound by "the extender" (annotations) and already
in the plugin's watched view before their admission. Latency is the kubelet-side time of one
Allocate RPC: List call, identity decision, ledger write, reply. The Python
client and PodResources server are included.

    GP_BUILD_DIR=build bench/gpumem_bench.py [--pods 300] [--api-delay-ms 2]

Prints one JSON object: p50/p90/p99/max in ms, RSS and peak RSS of the plugin in KiB, and
the number of PodResources List calls.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "sim"))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
import kubelet_sim  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from gpumem_kubelet import Kubelet, make_pod  # noqa: E402

RESOURCE = "aliyun.com/gpu-mem"


def rss_kib(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                out[k] = int(v.split()[0])
    return out


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--api-delay-ms", type=int, default=2)
    ap.add_argument("--inventory", default="8a100-80gb.json")
    ap.add_argument("--keep-log", action="store_true", help="print the plugin's log path and keep it")
    ap.add_argument("plugin_args", nargs="*", help="extra plugin flags (after --)")
    args = ap.parse_args()
    build = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
    work = tempfile.mkdtemp(prefix="gp-gmb-", dir="/tmp")
    api = FakeApiServer(fixture={"nodes": [{"metadata": {"name": "node1"}, "status": {}}]}).start()
    api.add_fault(method="*", path=".", action="delay", delay_ms=args.api_delay_ms, count=-1)
    sim = kubelet_sim.KubeletSim(work).start()
    kc = os.path.join(work, "kubeconfig")
    with open(kc, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "t",
                   "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                   "contexts": [{"name": "t", "context": {"cluster": "c"}}]}, f)
    model = Kubelet(sim, api, work)
    # --isolation=memory (the default) is part of the measured path: a stand-in
    # file is installed as the library, every Allocate creates a region directory.
    lib = os.path.join(work, "libgpupool-cuda.so")
    with open(lib, "wb") as f:
        f.write(b"libgpupool-cuda.so stand-in for the bench\n")
    env = dict(os.environ, NODE_NAME="node1", KUBECONFIG=kc, GP_RESOURCE_MODE="gpu-mem",
               GP_ISOLATION_LIBRARY=lib,
               GP_POD_RESOURCES_SOCKET=model.socket, GP_STATE_DIR=os.path.join(work, "state"),
               LD_LIBRARY_PATH=os.path.join(build, "test", "fakenvml"),
               FAKE_NVML_INVENTORY=os.path.join(ROOT, "test", "fakenvml", "inventories",
                                                args.inventory))
    log = open(os.path.join(work, "plugin.log"), "wb")
    proc = subprocess.Popen([os.path.join(build, "bin", "gpupool-device-plugin"),
                             "--kubelet-socket", os.path.join(work, "kubelet.sock")] + args.plugin_args,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        sim.wait_registered(RESOURCE, timeout=20)
        for i in range(args.pods):
            api.put_object("pods", make_pod("bench-%04d" % i, 2, idx=i % 8))
        # every pod in the plugin's view first: its Allocate must find it there
        deadline = time.monotonic() + 60
        while b"watching the pods" not in open(log.name, "rb").read() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        for i in range(args.pods):
            model.admit("default", "bench-%04d" % i)
        lat = model.rpc_ms
        mem = rss_kib(proc.pid)
        result = {"pods": args.pods, "api_delay_ms": args.api_delay_ms,
                  "inventory": args.inventory,
                  "allocate_ms": {"p50": round(percentile(lat, 50), 3),
                                  "p90": round(percentile(lat, 90), 3),
                                  "p99": round(percentile(lat, 99), 3),
                                  "max": round(max(lat), 3)},
                  "rss_kib": mem.get("VmRSS"), "peak_rss_kib": mem.get("VmHWM"),
                  "rss_anon_kib": mem.get("RssAnon"), "rss_file_kib": mem.get("RssFile"),
                  "threads": mem.get("Threads"),
                  "podresources_list_calls": model.list_calls}
        print(json.dumps(result))
    finally:
        proc.terminate()
        proc.wait(10)
        model.stop()
        sim.stop()
        api.stop()
        if args.keep_log:
            print("log:", log.name, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
