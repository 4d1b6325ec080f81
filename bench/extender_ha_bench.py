#!/usr/bin/python3
"""extender_ha_bench -- several gpupool-scheduler-extender replicas against a
real kube-apiserver while the active one is killed, over and over.

    bench/extender_ha_bench.py --server URL --token TOKEN --kubeconfig FILE \
        --extender BIN [--nodes 5000] [--replicas 3] [--pods 2000] \
        [--kill-every 10] [--port 39990] [--log-dir DIR]

Run by bench/extender_ha_bench.sh, which starts etcd and kube-apiserver first.

  1. populate: --nodes fake GPU nodes and ~0.6 bound pods per node
     (bench/extender_bench.py's Cluster: 8 GPUs x 32 GiB a node).
  2. start --replicas extenders with --leader-elect on ports PORT, PORT+1, ...,
     each advertising http://127.0.0.1:<its port>; read each one's VmRSS once
     synced, and again at the end (VmHWM, the peak).
  3. create --pods pending gpu-mem pods (2-16 GiB) and schedule them as
     kube-scheduler would, on 4 workers: filter on a random replica with 60
     "hot" nodes (so the GPUs fill up and a stale cache would over-commit),
     or 100 random nodes when no hot node fits; bind the chosen node on a
     random replica (the Service routes each request anywhere); a bind
     error re-queues the pod after 0.5 s, as the scheduler's backoff does.
  4. --first-kill (2) seconds into the burst, and then every --kill-every
     seconds while pods are left: SIGKILL the Lease holder (the replica whose
     port is in the Lease's gpupool.io/bind-url) and start it again at once.
  5. audit with a LIST: GiB charged per GPU (ALIYUN_COM_GPU_MEM_IDX/POD) over
     32 = over-committed; a bound pod without annotations or an annotated pod
     without a node = half-written.

Prints Markdown on stdout (over-committed GPUs, half-written pods, pods bound
per second, the longest gap without a bind, time from each kill to the next
bind, RSS per replica). Exit status 1 on an over-commit, a half-written pod,
or pods left unbound at the end.
"""

import argparse
import http.client
import json
import os
import queue
import random
import signal
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extender_bench import (GIB_PER_GPU, GPUS_PER_NODE, NAMESPACE, Api, BenchError,  # noqa: E402
                            Cluster, Extender, extender_args, log, parallel, pod_object,
                            proc_status_kib)

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpupool-scheduler-extender"
HOT_NODES = 60
SIZES_GIB = (2, 4, 4, 8, 8, 16)
PREFIX = "/gpupool-scheduler"


def post(port, path, body, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Replicas:
    def __init__(self, args):
        self.exts = []
        for i in range(args.replicas):
            port = args.port + i
            self.exts.append(Extender(args.extender, args.kubeconfig, port,
                                      os.path.join(args.log_dir, f"extender-ha-{i}.log"),
                                      ["--metrics-port", "0", "--leader-elect",
                                       "--advertise-url", f"http://127.0.0.1:{port}"]
                                      + args.extender_arg))
        self.lock = threading.Lock()
        self.hwm_kib = [0] * len(self.exts)

    def ports(self):
        return [e.port for e in self.exts]

    def note_hwm(self, i):
        try:
            self.hwm_kib[i] = max(self.hwm_kib[i], proc_status_kib(self.exts[i].pid, "VmHWM"))
        except OSError:
            pass

    def holder(self, api):
        status, payload = api.request("GET", LEASE)
        if status != 200:
            return None
        lease = json.loads(payload)
        url = (lease["metadata"].get("annotations") or {}).get("gpupool.io/bind-url", "")
        if not lease["spec"].get("holderIdentity"):
            return None
        port = urllib.parse.urlsplit(url).port
        for i, e in enumerate(self.exts):
            if e.port == port:
                return i
        return None

    def kill_and_restart(self, i):
        with self.lock:
            e = self.exts[i]
            self.note_hwm(i)
            e.proc.send_signal(signal.SIGKILL)
            e.proc.wait()
            e.start()


def schedule(api, cluster, reps, names, uids, sizes, deadline_s):
    """kube-scheduler's part: filter, pick, bind, re-queue on error."""
    hot = cluster.nodes[:HOT_NODES]
    rng = random.Random(7)
    q = queue.Queue()
    for nm in names:
        q.put((0.0, nm))
    bound_at = {}
    errors = {"filter": 0, "bind": 0, "conn": 0}
    samples = []
    t0 = time.monotonic()
    done = threading.Event()

    def one(nm):
        pod = extender_args([])["Pod"]
        pod["metadata"].update({"name": nm, "uid": uids[nm]})
        lim = {"aliyun.com/gpu-mem": str(sizes[nm])}
        pod["spec"]["containers"][0]["resources"] = {"limits": lim, "requests": lim}
        for names_ in (hot, rng.sample(cluster.nodes, 100)):
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names_})
            status, payload = post(rng.choice(reps.ports()), PREFIX + "/filter", body)
            if status != 200:
                errors["filter"] += 1
                return False
            ok = json.loads(payload).get("NodeNames") or []
            if ok:
                break
        else:
            errors["filter"] += 1
            return False
        node = rng.choice(ok)
        body = json.dumps({"PodName": nm, "PodNamespace": NAMESPACE, "PodUID": uids[nm], "Node": node})
        status, payload = post(rng.choice(reps.ports()), PREFIX + "/bind", body)
        if status != 200 or json.loads(payload).get("Error"):
            errors["bind"] += 1
            if len(samples) < 5:
                samples.append(payload[:200])
            return False
        bound_at[nm] = time.monotonic()
        return True

    def worker():
        while not done.is_set():
            try:
                not_before, nm = q.get(timeout=0.2)
            except queue.Empty:
                if len(bound_at) == len(names):
                    return
                continue
            wait = not_before - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, 0.5))
                q.put((not_before, nm))
                continue
            try:
                ok = one(nm)
            except (OSError, http.client.HTTPException, ValueError):
                errors["conn"] += 1
                ok = False
            if not ok:
                q.put((time.monotonic() + 0.5, nm))
            if time.monotonic() - t0 > deadline_s:
                done.set()

    # Daemons: a failing bench must not hang on workers still re-queueing.
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    for t in ts:
        t.start()
    return ts, bound_at, errors, samples, done, t0


def audit(api):
    use, half = {}, []
    for p in api.list_all(f"/api/v1/namespaces/{NAMESPACE}/pods"):
        a = p["metadata"].get("annotations") or {}
        node, idx, mem = p["spec"].get("nodeName"), a.get("ALIYUN_COM_GPU_MEM_IDX"), a.get("ALIYUN_COM_GPU_MEM_POD")
        if bool(node) != bool(idx and mem):
            half.append(p["metadata"]["name"])
            continue
        if not node:
            continue
        gpus = idx.split(",")
        for g in gpus:
            use[(node, g)] = use.get((node, g), 0) + int(mem) // len(gpus)
    over = sorted(k for k, v in use.items() if v > GIB_PER_GPU)
    return over, half, use


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--extender", required=True)
    ap.add_argument("--extender-arg", action="append", default=[])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--kill-every", type=float, default=10.0)
    ap.add_argument("--first-kill", type=float, default=2.0,
                    help="seconds into the burst of the first kill (the burst may end before 10 s)")
    ap.add_argument("--port", type=int, default=39990)
    ap.add_argument("--deadline", type=float, default=900.0, help="give up after this many seconds")
    ap.add_argument("--log-dir", default=".")
    args = ap.parse_args()

    api = Api(args.server, args.token)
    cluster = Cluster(42)
    cluster.populate(api, args.nodes)
    reps = Replicas(args)
    rss_sync = []
    try:
        for e in reps.exts:
            e.start()
        time.sleep(0.5)
        rss_sync = [proc_status_kib(e.pid, "VmRSS") for e in reps.exts]
        log("replicas up, VmRSS " + ", ".join(f"{k / 1024:.1f}" for k in rss_sync) + " MiB")
        t = time.monotonic()
        while reps.holder(api) is None:
            if time.monotonic() - t > 60:
                raise BenchError("no replica took the Lease within 60 s")
            time.sleep(0.2)
        log(f"replica {reps.holder(api)} holds the Lease after {time.monotonic() - t:.1f}s")

        rng = random.Random(11)
        names = [f"ha-{i:05d}" for i in range(args.pods)]
        sizes = {nm: rng.choice(SIZES_GIB) for nm in names}
        uids = {}

        def create(a, nm):
            uids[nm] = a.must("POST", f"/api/v1/namespaces/{NAMESPACE}/pods",
                              pod_object(nm, sizes[nm], role="ha"))["metadata"]["uid"]
        parallel(api, [lambda a, nm=nm: create(a, nm) for nm in names])
        time.sleep(1.0)   # the replicas' watches see the pending pods

        ts, bound_at, errors, samples, done, t0 = schedule(api, cluster, reps, names, uids, sizes,
                                                           args.deadline)
        kills = []        # (monotonic time of the kill, replica)
        next_kill = t0 + args.first_kill
        while any(t.is_alive() for t in ts):
            time.sleep(0.1)
            for i in range(len(reps.exts)):
                reps.note_hwm(i)
            if time.monotonic() >= next_kill and len(bound_at) < len(names):
                h = reps.holder(api)
                if h is not None:
                    kills.append((time.monotonic(), h))
                    log(f"SIGKILL replica {h} (holder), {len(bound_at)}/{len(names)} bound")
                    reps.kill_and_restart(h)
                next_kill = time.monotonic() + args.kill_every
        t_end = max(bound_at.values(), default=time.monotonic())
        for i in range(len(reps.exts)):
            reps.note_hwm(i)
    finally:
        for e in reps.exts:
            e.stop()

    over, half, use = audit(api)
    times = sorted(bound_at.values())
    gaps = [b - a for a, b in zip([t0] + times, times)]
    recov = []
    for tk, _ in kills:
        after = [t for t in times if t > tk]
        recov.append(after[0] - tk if after else float("inf"))
    unbound = len(names) - len(bound_at)
    print(f"## {args.replicas} extender replicas, {args.nodes} nodes, {args.pods} pods, "
          f"the Lease holder SIGKILLed every {args.kill_every:.0f} s")
    print()
    print("| figure | value | goal |")
    print("|---|---|---|")
    print(f"| over-committed GPUs | {len(over)} | 0 |")
    print(f"| pods bound without annotations / annotated without a bind | {len(half)} | 0 |")
    print(f"| pods bound | {len(bound_at)} of {len(names)} | all |")
    print(f"| pods bound per second (first request to last bind) | {len(bound_at) / max(t_end - t0, 1e-9):.0f} | |")
    print(f"| holder kills | {len(kills)} | |")
    print(f"| kill -> next bind, max / median | {max(recov, default=0):.1f} s / "
          f"{sorted(recov)[len(recov) // 2] if recov else 0:.1f} s | <= 15 s |")
    print(f"| longest gap without a bind | {max(gaps, default=0):.1f} s | <= 15 s |")
    print(f"| bind errors re-queued (refused, not the leader, connection) | {errors['bind']} / {errors['conn']} | |")
    print(f"| VmRSS after sync, per replica | {', '.join(f'{k / 1024:.1f}' for k in rss_sync)} MiB | <= 16 MiB |")
    print(f"| VmHWM (peak), per replica slot | {', '.join(f'{k / 1024:.1f}' for k in reps.hwm_kib)} MiB | <= 16 MiB |")
    if samples:
        log("sample bind errors: " + " | ".join(s.decode(errors="replace") for s in samples))
    if over:
        log("over-committed: " + ", ".join(f"{n}/GPU{g}={use[(n, g)]}GiB" for n, g in over[:10]))
    bad = over or half or unbound
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"FAILED: {e}")
        sys.exit(1)
