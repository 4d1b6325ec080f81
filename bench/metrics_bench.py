#!/usr/bin/python3
"""metrics_bench -- the node agent's /metrics with 256 containers on 8 GPUs (issue 26 goals).

Setting: the device plugin in gpu-mem mode (fake NVML, 8 x A100-80GB; the fake API server; the
kubelet simulator plus the gpumem_kubelet model), N pods of one container each (2 units,
GPU i % 8) admitted, so the plugin made N region directories; each gets a region file for
its GPU, a genuine one written by libgpupool-cuda (gpupool-cudaprobe over the fake libcuda),
and the fake NVML lists one real process (a sleeper) per container on the container's GPU: N
container series pairs and N process series triples per scrape, every /proc read real. Each
sleeper runs in a pid namespace of its own (unshare --pid, as in a container) and holds no
region slot and is in no pod, so each takes the longest naming path (pid namespace link,
status, cgroup). Needs root (unshare) and curl.

    GP_BUILD_DIR=build bench/metrics_bench.py [--pods 256] [--scrapes 200]

Prints one JSON object: scrape time over HTTP (curl's time_total, ms: p50/p90/p99/max), the
plugin's CPU time per scrape (all its threads, from schedstat: unlike the wall time, not
inflated by a loaded machine; the load average is printed beside it), the body's
size and series count, and the plugin's RSS (KiB) after warm-up scrapes without regions and
processes, then after the measured scrapes with them.
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
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def cpu_ns(pid):
    """CPU time of every thread of pid so far (schedstat: ns, not 10 ms ticks)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def inner_host_pid(pid):
    """The host pid of unshare's forked child (the sleeper in its own pid namespace)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = f.read().split()
        if kids:
            return int(kids[0])
        time.sleep(0.01)
    raise RuntimeError("unshare %d started no child" % pid)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def scrape(url):
    """curl, not urllib: the client's own cost stays out of the figure."""
    p = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{time_total}", url],
                       capture_output=True, check=True)
    body, _, total = p.stdout.rpartition(b"\n")
    return float(total) * 1000.0, body


def genuine_region(build, work, uuid):
    """A region file as libgpupool-cuda writes it: one process charged 1 MiB."""
    d = os.path.join(work, "template")
    os.makedirs(d)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "test", "fakecuda"),
               FAKECUDA_DEVICES=uuid + "=80g", CUDA_DEVICE_MEMORY_LIMIT="2g",
               CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(d, "region"),
               LD_PRELOAD=os.path.join(build, "lib", "libgpupool-cuda.so"))
    subprocess.run([os.path.join(build, "test", "cuda", "gpupool-cudaprobe"), "init", "alloc",
                    "1m"], env=env, check=True, capture_output=True)
    with open(os.path.join(d, "region." + uuid), "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=256)
    ap.add_argument("--scrapes", type=int, default=200)
    args = ap.parse_args()
    build = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
    inventory = os.path.join(ROOT, "test", "fakenvml", "inventories", "8a100-80gb.json")
    uuids = [g["uuid"] for g in json.load(open(inventory))["gpus"]]
    work = tempfile.mkdtemp(prefix="gp-mb-", dir="/tmp")
    api = FakeApiServer(fixture={"nodes": [{"metadata": {"name": "node1"}, "status": {}}]}).start()
    sim = kubelet_sim.KubeletSim(work).start()
    kc = os.path.join(work, "kubeconfig")
    with open(kc, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "t",
                   "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                   "contexts": [{"name": "t", "context": {"cluster": "c"}}]}, f)
    model = Kubelet(sim, api, work)
    lib = os.path.join(work, "libgpupool-cuda.so")
    with open(lib, "wb") as f:
        f.write(b"libgpupool-cuda.so stand-in for the bench\n")
    control = os.path.join(work, "nvml-control")
    state = os.path.join(work, "state")
    env = dict(os.environ, NODE_NAME="node1", KUBECONFIG=kc, GP_RESOURCE_MODE="gpu-mem",
               GP_ISOLATION_LIBRARY=lib, GP_POD_RESOURCES_SOCKET=model.socket,
               GP_STATE_DIR=state, GP_METRICS_ADDR="127.0.0.1:0",
               LD_LIBRARY_PATH=os.path.join(build, "test", "fakenvml"),
               FAKE_NVML_INVENTORY=inventory, FAKE_NVML_CONTROL=control)
    log = open(os.path.join(work, "plugin.log"), "wb")
    proc = subprocess.Popen([os.path.join(build, "bin", "gpupool-device-plugin"),
                             "--kubelet-socket", os.path.join(work, "kubelet.sock")],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    sleepers, inner = [], []
    try:
        sim.wait_registered(RESOURCE, timeout=20)
        text = b""
        deadline = time.monotonic() + 60
        while b"watching the pods" not in text and time.monotonic() < deadline:
            time.sleep(0.05)
            text = open(log.name, "rb").read()
        addr = text.split(b"Serving Prometheus metrics on http://")[1].split(b"/metrics")[0]
        url = "http://%s/metrics" % addr.decode()
        for i in range(args.pods):
            api.put_object("pods", make_pod("bench-%04d" % i, 2, idx=i % 8))
        time.sleep(1.0)
        for i in range(args.pods):
            model.admit("default", "bench-%04d" % i)
        for _ in range(20):
            scrape(url)
        cpu0 = cpu_ns(proc.pid)
        for _ in range(args.scrapes):
            scrape(url)
        cpu_before_ms = (cpu_ns(proc.pid) - cpu0) / 1e6 / args.scrapes
        rss_before = rss_kib(proc.pid)

        region = genuine_region(build, work, uuids[0])
        base = os.path.join(state, "isolation", "containers")
        dirs = sorted(os.listdir(base))
        for n, d in enumerate(dirs):
            with open(os.path.join(base, d, "region." + uuids[n % 8]), "wb") as f:
                f.write(region)
        for _ in range(args.pods):
            s = subprocess.Popen(["unshare", "--pid", "--fork", "sleep", "600"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            inner.append(inner_host_pid(s.pid))
            sleepers.append(s)
        with open(control, "a") as f:
            for k, pid in enumerate(inner):
                f.write("process %d %d %d %d %d\n" % (k % 8, pid, 100 + k, k % 100, k % 50))
        for _ in range(5):
            scrape(url)
        times, body = [], b""
        cpu0 = cpu_ns(proc.pid)
        for _ in range(args.scrapes):
            ms, body = scrape(url)
            times.append(ms)
        cpu_per_scrape_ms = (cpu_ns(proc.pid) - cpu0) / 1e6 / args.scrapes
        rss_after = rss_kib(proc.pid)
        lines = body.decode().splitlines()
        result = {
            "pods": args.pods, "region_dirs": len(dirs), "gpus": 8,
            "processes": len(sleepers), "scrapes": args.scrapes,
            "scrape_ms": {"p50": round(percentile(times, 50), 3),
                          "p90": round(percentile(times, 90), 3),
                          "p99": round(percentile(times, 99), 3),
                          "max": round(max(times), 3)},
            "plugin_cpu_ms_per_scrape": round(cpu_per_scrape_ms, 3),
            "plugin_cpu_ms_per_scrape_without_usage": round(cpu_before_ms, 3),
            "load_average": os.getloadavg()[0],
            "body_bytes": len(body),
            "container_series": sum(l.startswith("gpupool_container_gpu_memory_used_bytes{")
                                    for l in lines),
            "process_series": sum(l.startswith("gpupool_process_gpu_memory_used_bytes{")
                                  for l in lines),
            "rss_kib_before": rss_before, "rss_kib_after": rss_after,
            "rss_growth_kib": rss_after - rss_before,
        }
        print(json.dumps(result))
    finally:
        for pid in inner:   # the sleeper is its namespace's init: killing unshare leaves it
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for s in sleepers:
            s.kill()
            s.wait()
        proc.terminate()
        proc.wait(10)
        model.stop()
        sim.stop()
        api.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
