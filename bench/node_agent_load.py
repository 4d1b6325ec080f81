#!/usr/bin/python3
"""node_agent_load -- the API requests one node's device plugin makes, counted.

    GP_BUILD_DIR=build bench/node_agent_load.py [--duration 330] [--pods 30]

Runs the real gpupool-device-plugin in gpu-mem mode on an 8-GPU node (fake
NVML, inventory 8a100-80gb.json) against the test suite's fake API server and
kubelet simulator, admits --pods gpu-mem pods spread over the run (each is
Allocated by the kubelet model, as a kubelet admits a pod), and counts every
request the fake API server recorded by kind: watches opened, LISTs, GETs and
writes. --duration should exceed 300 s: the plugin re-publishes the node and
its watch is renewed every 5 minutes (DEFAULT_WATCH_TIMEOUT_S in src/kube/kube.c,
REPUBLISH_MS in src/deviceplugin/gpumem/gpumem_service.c), so a shorter run
misses them. Prints a Markdown table; multiply the steady-state rates by the
node count for the apiserver's load from the whole fleet.
"""

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("test/integration", "test/fakeapi", "test/sim"):
    sys.path.insert(0, os.path.join(ROOT, sub))
import conftest  # noqa: E402  (PLUGIN_BIN and the fake NVML from GP_BUILD_DIR)
from fake_apiserver import FakeApiServer  # noqa: E402
from gpumem_kubelet import Kubelet, make_pod  # noqa: E402

RESOURCE = "aliyun.com/gpu-mem"
NODE = "node1"


def kind(req):
    m, path, q = req["method"], req["path"], req["query"]
    if m == "GET" and q.get("watch") in ("1", "true"):
        return "WATCH " + path
    if m == "GET" and path.endswith("/pods") or path.endswith("/nodes") and m == "GET":
        return "LIST " + path
    if "/namespaces/" in path and "/pods/" in path:
        path = "/api/v1/namespaces/NS/pods/NAME" + path.split("/pods/", 1)[1].partition("/")[1] + \
            path.split("/pods/", 1)[1].partition("/")[2]
    elif "/events" in path:
        path = "/api/v1/namespaces/NS/events"
    return f"{m} {path}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=330)
    ap.add_argument("--pods", type=int, default=30)
    ap.add_argument("--warmup", type=float, default=10,
                    help="seconds after registration counted as start-up, not steady state")
    args = ap.parse_args()
    conftest.require_binaries = lambda fakenvml=False: None
    sockdir = tempfile.mkdtemp(prefix="gp-", dir="/tmp")
    workdir = tempfile.mkdtemp(prefix="gp-agent-load-")
    api = FakeApiServer(fixture={"nodes": [{"metadata": {"name": NODE},
                                            "status": {"capacity": {}, "allocatable": {}}}]})
    api.start()
    kubelet = conftest.KubeletSim(sockdir).start()
    model = None
    p = None
    try:
        kc = os.path.join(workdir, "kubeconfig")
        with open(kc, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "t",
                       "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                       "contexts": [{"name": "t", "context": {"cluster": "c"}}]}, f)
        lib = os.path.join(workdir, "libgpupool-cuda.so")
        with open(lib, "wb") as f:
            f.write(b"stand-in\n")
        env = {"NODE_NAME": NODE, "KUBECONFIG": kc, "GP_RESOURCE_MODE": "gpu-mem",
               "GP_POD_RESOURCES_SOCKET": os.path.join(sockdir, "pod-resources", "kubelet.sock"),
               "GP_STATE_DIR": os.path.join(workdir, "state"), "GP_ISOLATION_LIBRARY": lib,
               "GP_ISOLATION_DIR": os.path.join(workdir, "isolation")}
        p = conftest.Plugin(sockdir, workdir, kubelet, "8a100-80gb.json", ["--node-labels"], env, None, (),
                            None, "plugin0")
        p.start()
        kubelet.wait_for(lambda: kubelet.endpoints.get(RESOURCE) is not None and
                         kubelet.endpoints[RESOURCE].snapshots, 10, "registration")
        model = Kubelet(kubelet, api, sockdir)
        p.wait_log(r"gpu-mem: watching the pods of this node", 10)
        t_reg = time.monotonic()
        steady_from = time.time() + args.warmup
        gap = args.duration / max(args.pods, 1)
        for i in range(args.pods):
            time.sleep(gap if i else args.warmup)
            name = f"load-{i:03d}"
            api.put_object("pods", make_pod(name, units=4, idx=i % 8, node=NODE))
            model.admit("default", name)
        time.sleep(max(0.0, t_reg + args.warmup + args.duration - time.monotonic()))
        t_end = time.time()
        if not p.alive():
            print(p.log(), file=sys.stderr)
            return 1
        reqs = api.requests()
    finally:
        if p is not None:
            p.stop()
            p.close()
        if model is not None:
            model.stop()
        kubelet.stop()
        api.stop()
        shutil.rmtree(sockdir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    start = collections.Counter(kind(r) for r in reqs if r["time"] < steady_from)
    steady = collections.Counter(kind(r) for r in reqs if r["time"] >= steady_from)
    minutes = (t_end - steady_from) / 60
    print(f"One node, 8 GPUs (fake NVML), gpu-mem mode with --node-labels; "
          f"steady state {minutes:.1f} min with {args.pods} pods admitted "
          f"({args.pods / minutes:.1f}/min).")
    print()
    print("| request | start-up (first %.0f s) | steady state, count | per minute |" % args.warmup)
    print("|---|---:|---:|---:|")
    for k in sorted(set(start) | set(steady)):
        print(f"| `{k}` | {start[k]} | {steady[k]} | {steady[k] / minutes:.2f} |")
    writes = sum(v for k, v in steady.items() if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))
    watches = sum(v for k, v in steady.items() if k.startswith("WATCH"))
    print()
    print(f"Steady state: {writes / minutes:.2f} writes/min ({writes} in {minutes:.1f} min, "
          f"{args.pods} of them pod admissions), {watches / minutes:.2f} watch requests/min "
          f"(one watch open at any time).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
