#!/usr/bin/env python3
"""bench/throttle_bench.py BUILD_DIR -- the compute limit of libgpupool-cuda
(docs/compute.md) on the fake driver's simulated device (FAKECUDA_TIMELINE:
one kernel at a time, first come first served across processes, 100 us
kernels unless FAKECUDA_KERNEL_US says otherwise, a queue of 32 unless
FAKECUDA_QUEUE says otherwise).

Prints one line per figure:
  - capacity: what one process without a limit gets (the device's time the
    machine's load lets a workload fill: a split cannot exceed it);
  - achieved shares (percent of the device's time over a 3 s window after a
    0.5 s warm-up, from the timeline's own accounting) for 10/90, 30/70, 50/50,
    4 x 25, a lone 30 %, 30/70 with grid 64 vs 8192, a lone 30 % through
    cuGraphLaunch, 30/70 with two processes per container;
  - priority: a latency-bound high-priority container (launch, synchronise)
    next to a saturating normal one: its kernels' wait behind the other's as
    a fraction of their own time, with and without CUDA_TASK_PRIORITY;
  - cuLaunchKernel ns per launch (no timeline: the fake's launch is a no-op,
    so what is timed is the path): without the library, with it and no
    limit, with it and a limit (median of 5 runs of 2,000,000 launches).
"""
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
LIB = os.path.join(BUILD, "lib", "libgpupool-cuda.so")
PROBE = os.path.join(BUILD, "test", "cuda", "gpupool-launchprobe")
TOOL = os.path.join(BUILD, "test", "fakecuda", "gpupool-fakecuda-timeline")
UUID = "GPU-11111111-2222-3333-4444-555555555555"
KERNEL_US = os.environ.get("FAKECUDA_KERNEL_US", "100")
# Kernels a process may have queued: deep enough that a process descheduled
# for a few ms on a loaded machine still keeps the device fed (a real
# driver's queue holds about a thousand launches).
QUEUE = int(os.environ.get("FAKECUDA_QUEUE", "32"))
tmp = tempfile.mkdtemp()
inv = os.path.join(tmp, "inv.json")
with open(inv, "w") as f:
    json.dump({"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [
        {"uuid": UUID, "name": "NVIDIA H100 80GB HBM3", "minor": 0, "memory_mib": 81559,
         "pci_bus_id": "00000000:07:00.0"}]}, f)
run_no = [0]


def env(container, timeline, limit=None, priority=None, preload=True, queue=QUEUE):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUDA_", "FAKECUDA", "GPUPOOL_"))}
    e.update({"LD_LIBRARY_PATH": os.path.join(BUILD, "test", "fakecuda") + ":" +
              os.path.join(BUILD, "test", "fakenvml"),
              "FAKECUDA_DEVICES": UUID + "=80g", "FAKE_NVML_INVENTORY": inv,
              "FAKECUDA_KERNEL_US": KERNEL_US, "FAKECUDA_QUEUE": str(queue),
              "CUDA_DEVICE_MEMORY_SHARED_CACHE": os.path.join(tmp, "r%d-%s" % (run_no[0], container))})
    if timeline:
        e["FAKECUDA_TIMELINE"] = timeline
    if preload:
        e["LD_PRELOAD"] = LIB
    if limit is not None:
        e["CUDA_DEVICE_SM_LIMIT"] = str(limit)
    if priority is not None:
        e["CUDA_TASK_PRIORITY"] = str(priority)
        e["GPUPOOL_PRIORITY_DIR"] = tmp
    return e


def snapshot(timeline):
    now, procs = 0, {}
    for line in subprocess.run([TOOL, timeline], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        if f[0] == "now":
            now = int(f[1])
        else:
            procs[int(f[1])] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
    return now, procs


def shares(spec, warm=0.5, window=3.0):
    """spec: [(container, limit, args, n)] -> {container: percent}"""
    run_no[0] += 1
    timeline = os.path.join(tmp, "tl%d" % run_no[0])
    procs = []
    for container, limit, args, n in spec:
        for _ in range(n):
            procs.append((container, subprocess.Popen(
                [PROBE, "--ms", "0"] + shlex.split(args), env=env(container, timeline, limit),
                stdout=subprocess.PIPE, text=True)))
    for _, p in procs:
        p.stdout.readline()
    time.sleep(warm)
    t0, a = snapshot(timeline)
    time.sleep(window)
    t1, b = snapshot(timeline)
    for _, p in procs:
        p.kill()
        p.wait()
    out = {}
    for c, p in procs:
        got = b.get(p.pid, {}).get("busy", 0) - a.get(p.pid, {}).get("busy", 0)
        out[c] = out.get(c, 0.0) + 100.0 * got / (t1 - t0)
    return out


def priority(with_priority):
    run_no[0] += 1
    timeline = os.path.join(tmp, "tl%d" % run_no[0])
    low = subprocess.Popen([PROBE, "--ms", "0"], stdout=subprocess.PIPE, text=True,
                           env=env("low", timeline, priority=1 if with_priority else None,
                                   queue=2))
    low.stdout.readline()
    time.sleep(0.3)
    _, before = snapshot(timeline)
    subprocess.run([PROBE, "--count", "500", "--sync-every", "1"], check=True,
                   capture_output=True,
                   env=env("high", timeline, priority=0 if with_priority else None, queue=2))
    _, after = snapshot(timeline)
    low.kill()
    low.wait()
    rec = [after[p] for p in after if p not in before and p != low.pid][0]
    return 100.0 * rec["wait"] / rec["busy"]


def launch_ns(**kw):
    runs = []
    for _ in range(5):
        out = subprocess.run([PROBE, "--bench", "2000000"], capture_output=True, text=True,
                             check=True, env=env("bench", None, **kw)).stdout
        runs.append(float(out.split("ns_per_launch=")[1].split()[0]))
    return statistics.median(runs)


def fmt(d):
    return " / ".join("%.1f" % v for v in d.values())


print("kernel_us %s queue %d" % (KERNEL_US, QUEUE))
print("capacity: one process, no limit -> %s" % fmt(shares([("a", None, "", 1)])))
for a, b in ((10, 90), (30, 70), (50, 50)):
    print("split %d/%d -> %s" % (a, b, fmt(shares([("a", a, "", 1), ("b", b, "", 1)]))))
print("split 4x25 -> %s" % fmt(shares([(c, 25, "", 1) for c in "wxyz"])))
print("lone 30 -> %s" % fmt(shares([("a", 30, "", 1)])))
print("grid 64 vs 8192, 30/70 -> %s" % fmt(shares([("a", 30, "--grid 64", 1),
                                                  ("b", 70, "--grid 8192", 1)])))
print("graph (4 kernels) lone 30 -> %s" % fmt(shares([("a", 30, "--kind graph", 1)])))
print("2 processes per container 30/70 -> %s" % fmt(shares([("a", 30, "", 2),
                                                            ("b", 70, "", 2)])))
print("priority: high's wait / own time, percent: with %.1f, without %.1f"
      % (priority(True), priority(False)))
print("cuLaunchKernel ns: no library %.1f, library no limit %.1f, library limit 30 %.1f"
      % (launch_ns(preload=False), launch_ns(), launch_ns(limit=30)))
