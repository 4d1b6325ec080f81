#!/usr/bin/python3
"""demo_pool.py BUILD_DIR -- the GPU pool on a simulated cluster.

Parts 3 to 6 of `make demo` (parts 1 and 2, scripts/demo.sh, show the device
plugin from the kubelet's side and libgpupool-cuda enforcing a share; parts 7 and 8,
scripts/demo_dra.py, the DRA driver and compute shares). Here:

  3. a simulated cluster: test/fakeapi/fake_apiserver.py holding three GPU
     nodes of different shapes (4 x V100 16 GiB, 2 x A100 80 GiB, 8 x T4
     16 GiB) as the node side publishes them (aliyun.com/gpu-mem capacity,
     aliyun.com/gpu-count, the per-GPU `gpupool.io/gpus` annotation);
     gpupool-scheduler-extender syncing from it;
  4. the extender placing pods exactly as kube-scheduler drives it:
     filter -> prioritize -> bind, over HTTP, with the gpushare annotations
     written and the Binding posted; a pod too big for any GPU, refused with
     a reason per node;
  5. kubectl-gpupool inspect (and its gpushare-compatible twin) reading the
     pool back from the API;
  6. gpupool-sim replaying the Alibaba openb trace through the same
     placement engine, gpushare's best fit beside gpupool's policy.

Everything is started on loopback and stopped at the end. Exit 0 on success.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
from fake_apiserver import FakeApiServer  # noqa: E402

GIB_NODES = [
    # name, gpu model, per-GPU GiB, GPUs, CPU milli, memory GiB
    ("node-v100", "Tesla-V100-SXM2-16GB", 16, 4, 32000, 128),
    ("node-a100", "NVIDIA-A100-SXM4-80GB", 80, 2, 64000, 256),
    ("node-t4", "Tesla-T4", 16, 8, 48000, 192),
]
# name, GiB, gpu-count (None: one GPU)
PODS = [
    ("train-a", 40, None), ("infer-1", 8, None), ("infer-2", 8, None),
    ("infer-3", 6, None), ("notebook", 12, None), ("dist-x2", 32, 2),
    ("infer-4", 4, None),
]
TOO_BIG = ("too-big", 96, None)


def say(text=""):
    print(text, flush=True)


def node_object(ip, name, model, gib, count, cpu, mem_gib):
    gpus = [{"index": i, "memory": gib, "model": model, "healthy": True} for i in range(count)]
    capacity = {"cpu": "%dm" % cpu, "memory": "%dGi" % mem_gib, "pods": "110",
                "aliyun.com/gpu-mem": str(gib * count), "aliyun.com/gpu-count": str(count)}
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model},
                     "annotations": {"gpupool.io/gpus": json.dumps(gpus)}},
        "status": {"capacity": capacity, "allocatable": dict(capacity),
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": ip}]},
    }


def pod_object(name, gib, count):
    limits = {"aliyun.com/gpu-mem": str(gib), "cpu": "2", "memory": "4Gi"}
    annotations = {}
    if count:
        annotations["gpupool.io/gpu-count"] = str(count)
    return {
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"schedulerName": "default-scheduler",
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": limits, "requests": dict(limits)}}]},
        "status": {"phase": "Pending"},
    }


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def wait_healthy(url, proc, log_path, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("demo: the extender exited (%s); log:\n%s" % (proc.returncode, open(log_path).read()))
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.05)
    raise SystemExit("demo: the extender did not become healthy; log:\n" + open(log_path).read())


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def schedule(api, ext, name, gib, count):
    """One scheduling cycle as kube-scheduler runs it. Returns (node, idx) or reasons."""
    api.put_object("pods", pod_object(name, gib, count))
    pod = json.loads(urllib.request.urlopen(api.url + "/api/v1/namespaces/default/pods/" + name).read())
    names = [n[0] for n in GIB_NODES]
    args = {"Pod": pod, "NodeNames": names}
    filt = post(ext + "/gpupool-scheduler/filter", args)
    if filt.get("Error"):
        return None, filt["Error"]
    passed = filt.get("NodeNames") or []
    if not passed:
        return None, filt.get("FailedNodes", {})
    prio = post(ext + "/gpupool-scheduler/prioritize", dict(args, NodeNames=passed))
    best = max(prio, key=lambda hp: hp["Score"])["Host"]
    bind = post(ext + "/gpupool-scheduler/bind", {"PodName": name, "PodNamespace": "default",
                                                  "PodUID": pod["metadata"]["uid"], "Node": best})
    if bind.get("Error"):
        return None, bind["Error"]
    after = json.loads(urllib.request.urlopen(api.url + "/api/v1/namespaces/default/pods/" + name).read())
    ann = after["metadata"].get("annotations", {})
    return (after["spec"].get("nodeName"), ann.get("ALIYUN_COM_GPU_MEM_IDX")), prio


def run_cli(build, kubeconfig, argv0, args):
    exe = os.path.join(build, "bin", argv0)
    out = subprocess.run([exe] + args, env=dict(os.environ, KUBECONFIG=kubeconfig),
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise SystemExit("demo: %s %s failed (%d): %s" % (argv0, " ".join(args), out.returncode, out.stderr))
    return out.stdout


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    for prog in ("gpupool-scheduler-extender", "kubectl-gpupool", "kubectl-inspect-gpushare", "gpupool-sim"):
        if not os.access(os.path.join(build, "bin", prog), os.X_OK):
            raise SystemExit("demo: %s/bin/%s is not built (run make)" % (build, prog))

    tmp = tempfile.mkdtemp(prefix="gpupool-pool-demo.")
    fixture = {"nodes": [node_object("10.0.0.%d" % (11 + i), *n) for i, n in enumerate(GIB_NODES)], "pods": [], "configmaps": []}
    api = FakeApiServer(fixture=fixture).start()
    kubeconfig = os.path.join(tmp, "kubeconfig")
    with open(kubeconfig, "w") as f:
        f.write("apiVersion: v1\nkind: Config\ncurrent-context: demo\n"
                "clusters:\n- name: demo\n  cluster:\n    server: %s\n"
                "users:\n- name: demo\n  user: {}\n"
                "contexts:\n- name: demo\n  context: {cluster: demo, user: demo}\n" % api.url)
    port = free_port()
    log_path = os.path.join(tmp, "extender.log")
    ext_proc = subprocess.Popen([os.path.join(build, "bin", "gpupool-scheduler-extender"),
                                 "--port", str(port), "--address", "127.0.0.1",
                                 "--kubeconfig", kubeconfig],
                                stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
    ext = "http://127.0.0.1:%d" % port
    try:
        say("\n== 3. the pool: 3 nodes, 14 GPUs of 3 models, in a simulated API server (%s)" % api.url)
        for name, model, gib, count, _, _ in GIB_NODES:
            say("   %-10s %d x %-24s %3d GiB each" % (name, count, model, gib))
        wait_healthy(ext, ext_proc, log_path)
        say("\n$ gpupool-scheduler-extender --port %d --kubeconfig ...   (synced, /healthz ok)" % port)
        say("\n== 4. kube-scheduler's cycle per pod: filter -> prioritize -> bind")
        say("   %-10s %8s  %-10s %s" % ("POD", "GPU-MEM", "NODE", "GPU(S)"))
        for name, gib, count in PODS:
            placed, _ = schedule(api, ext, name, gib, count)
            if placed is None:
                raise SystemExit("demo: pod %s was not placed: %s" % (name, _))
            node, idx = placed
            say("   %-10s %5d GiB  %-10s %s%s" % (name, gib, node, idx,
                                                  "  (%d GPUs x %d GiB)" % (count, gib // count) if count else ""))
        placed, reasons = schedule(api, ext, *TOO_BIG)
        if placed is not None:
            raise SystemExit("demo: %s should not fit anywhere, went to %s" % (TOO_BIG[0], placed))
        say("   %-10s %5d GiB  refused by every node:" % (TOO_BIG[0], TOO_BIG[1]))
        for node, why in sorted(reasons.items()):
            say("      %s: %s" % (node, why))

        say("\n== 5. the pool as operators see it")
        say("$ kubectl gpupool inspect")
        say(run_cli(build, kubeconfig, "kubectl-gpupool", ["inspect"]).rstrip())
        say("\n$ kubectl inspect gpushare        (gpushare's own layout, same binary)")
        say(run_cli(build, kubeconfig, "kubectl-inspect-gpushare", []).rstrip())
    finally:
        ext_proc.send_signal(signal.SIGTERM)
        try:
            rc = ext_proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            ext_proc.kill()
            rc = ext_proc.wait()
        api.stop()
    if rc != 0:
        raise SystemExit("demo: the extender exited %d on SIGTERM; log:\n%s" % (rc, open(log_path).read()))

    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)

    # The default trace ships in data/openb; GP_OPENB_DIR points at another copy.
    openb = os.environ.get("GP_OPENB_DIR") or os.path.join(ROOT, "data", "openb")
    nodes_csv = os.path.join(openb, "openb_node_list_gpu_node.csv")
    pods_csv = os.path.join(openb, "openb_pod_list_default.csv")
    if os.path.exists(nodes_csv) and os.path.exists(pods_csv):
        say("\n== 6. the same placement engine on the Alibaba openb trace (1,213 nodes, 6,212 GPUs, demand 130%)")
        for policy in ("binpack", "gpupool"):
            out = subprocess.run([os.path.join(build, "bin", "gpupool-sim"), "--nodes", nodes_csv,
                                  "--pods", pods_csv, "--policy", policy, "--seed", "42", "-o", "json"],
                                 capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise SystemExit("demo: gpupool-sim failed: " + out.stderr)
            rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
            seed = [r for r in rows if not r.get("summary")][0]
            say("$ gpupool-sim --policy %-8s --seed 42:  %.2f%% of cluster milli-GPU allocated (%d pods, %d failed)"
                % (policy, seed["alloc_pct"], seed["pods"], seed["failed"]))
    else:
        raise SystemExit("demo: openb trace missing: %s and %s (data/openb in the checkout, or GP_OPENB_DIR)"
                         % (nodes_csv, pods_csv))
    say("\ndemo: parts 3-6 OK")


if __name__ == "__main__":
    main()
