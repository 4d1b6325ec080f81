#!/usr/bin/python3
"""scale_bench -- the pool at tens of thousands of nodes, on a real kube-apiserver.

    bench/scale_bench.py --server URL --token TOKEN --kubeconfig FILE \
        --extender BIN --bin-dir DIR [--sizes 5000,65000] [--duration 10] [--binds 500]

Run by bench/scale_bench.sh, which starts etcd and kube-apiserver first. The
cluster only grows; for each size N:

  1. populate: N GPU nodes of mixed models, 8 GPUs each (MODELS below: GPU
     memory 16-80 GiB, `aliyun.com/gpu-mem` = 8 x that), lean shape (what the
     extender reads), and ~0.6 bound gpushare pods per node sized to the
     node's GPUs; parallel JSON POSTs as bench/extender_bench.py makes them.
  2. start the extender; start -> /healthz (its LIST+WATCH sync) and VmRSS.
  3. filter with the node list kube-scheduler 1.20 sends at N nodes:
     numFeasibleNodesToFind() with percentageOfNodesToScore unset gives
     max(50 - N/125, 5) % of N, at least 100 (3,250 at 65,000), and the
     extender gets only the feasible ones; then the worst case, every node
     name (percentageOfNodesToScore: 100). One keep-alive connection each,
     p50/p99 and the extender's CPU per request.
  4. binds through the extender against the apiserver's own Binding ceiling
     (the driver's POST Binding, 4 connections, before and after), as
     bench/extender_bench.py does.
  5. VmRSS and VmHWM after the load; stop the extender.
  6. `kubectl-gpupool inspect` (the table and -o json), RUNS times each.

Prints Markdown on stdout, progress on stderr; exit status 1 when a step fails.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extender_bench as eb  # noqa: E402
import inspect_bench as ib  # noqa: E402

GPUS_PER_NODE = 8
# (product label, GiB per GPU, share of the nodes): a mixed fleet.
MODELS = (("NVIDIA-A10", 24, 30), ("NVIDIA-A100-SXM4-80GB", 80, 20), ("Tesla-T4", 16, 25),
          ("NVIDIA-L40S", 48, 15), ("NVIDIA-H100-80GB-HBM3", 80, 10))
PODS_PER_NODE = 0.6
POD_SIZES_GIB = (2, 4, 4, 8, 8, 16)
NODE_FMT = "scale-gpu-{:05d}"


def scheduler_sample(n):
    """How many feasible nodes kube-scheduler 1.20 looks for, and so the most
    node names it sends an extender's filter (numFeasibleNodesToFind with the
    default percentageOfNodesToScore 0: adaptive)."""
    if n < 100:
        return n
    pct = max(50 - n // 125, 5)
    return max(n * pct // 100, 100)


class MixedCluster:
    """The same interface as extender_bench.Cluster (nodes, used, bound_pods,
    room_for), with per-node GPU sizes."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.nodes = []
        self.gib = {}          # node -> GiB per GPU
        self.used = {}         # node -> [GiB used per GPU]
        self.bound_pods = 0
        self.models = {}       # product -> nodes

    def _model(self):
        r = self.rng.randrange(100)
        for m in MODELS:
            if r < m[2]:
                return m
            r -= m[2]
        return MODELS[-1]

    def node_object(self, name, product, gib):
        node = eb.node_object(name)
        res = {"cpu": "64", "memory": "512Gi", "pods": "110",
               "aliyun.com/gpu-mem": str(GPUS_PER_NODE * gib),
               "aliyun.com/gpu-count": str(GPUS_PER_NODE)}
        node["status"]["capacity"] = res
        node["status"]["allocatable"] = dict(res)
        node["metadata"]["labels"]["nvidia.com/gpu.product"] = product
        node["metadata"]["labels"]["gpupool-bench"] = "scale"
        return node

    def populate(self, api, n_nodes, threads):
        start = len(self.nodes)
        new = [NODE_FMT.format(i) for i in range(start, n_nodes)]
        jobs = []
        for nm in new:
            product, gib, _ = self._model()
            self.gib[nm] = gib
            self.used[nm] = [0] * GPUS_PER_NODE
            self.models[product] = self.models.get(product, 0) + 1
            body = self.node_object(nm, product, gib)
            jobs.append(lambda a, b=body: a.must("POST", "/api/v1/nodes", b))
        t = time.monotonic()
        eb.parallel(api, jobs, threads)
        t_nodes = time.monotonic() - t
        self.nodes += new
        want = int(round(PODS_PER_NODE * n_nodes)) - self.bound_pods
        jobs = []
        for _ in range(want):
            node = self.rng.choice(self.nodes)
            g = self.rng.randrange(GPUS_PER_NODE)
            gib = self.rng.choice(POD_SIZES_GIB)
            if self.used[node][g] + gib > self.gib[node]:
                continue
            self.used[node][g] += gib
            body = eb.pod_object(f"scale-bound-{self.bound_pods + len(jobs):06d}", gib, node, g)
            body["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_DEV"] = str(self.gib[node])
            jobs.append(lambda a, b=body: a.must("POST", f"/api/v1/namespaces/{eb.NAMESPACE}/pods", b))
        t = time.monotonic()
        eb.parallel(api, jobs, threads)
        t_pods = time.monotonic() - t
        self.bound_pods += len(jobs)
        eb.log(f"populate: +{len(new)} nodes in {t_nodes:.1f}s ({len(new) / max(t_nodes, 1e-9):.0f}/s), "
               f"+{len(jobs)} bound pods in {t_pods:.1f}s ({len(jobs) / max(t_pods, 1e-9):.0f}/s)")
        return {"nodes_s": t_nodes, "pods_s": t_pods, "new_nodes": len(new), "new_pods": len(jobs)}

    def room_for(self, gib, count):
        out = []
        while len(out) < count:
            before = len(out)
            for nm in self.nodes:
                used = self.used[nm]
                g = next((g for g in range(GPUS_PER_NODE) if used[g] + gib <= self.gib[nm]), None)
                if g is None:
                    continue
                used[g] += gib
                out.append(nm)
                if len(out) == count:
                    return out
            if len(out) == before:
                raise eb.BenchError(f"no room for {count} pods of {gib} GiB")
        return out


def filter_series(args, ext, names, tag, n):
    body = json.dumps(eb.extender_args(names)).encode()
    body_file = os.path.join(args.log_dir, f"filter-{n}-{tag}.json")
    with open(body_file, "wb") as f:
        f.write(body)
    path = f"{args.prefix}/filter"
    check = eb.check_answer("filter", *eb.post_once(args.port, path, body), len(names))
    perf_out = os.path.join(args.log_dir, f"perf-{n}-filter-{tag}.data") if args.perf else None
    r = eb.load(ext, args.client, "filter", path, body, body_file, args.duration, 1, perf_out)
    r["names"] = len(names)
    r["body_kib"] = len(body) / 1024
    r["check"] = check
    return r


def cpu_s(pid):
    try:
        return eb.proc_cpu_ticks(pid) / eb.CLK_TCK
    except (OSError, ValueError):
        return 0.0


def timed_sync(args, n, tag, extra):
    """Starts an extender, returns (it, sync s, {who: CPU s during the sync})."""
    ext = eb.Extender(args.extender, args.kubeconfig, args.port,
                      os.path.join(args.log_dir, f"extender-{n}{tag}.log"), args.extender_arg + extra)
    others = {"apiserver": args.apiserver_pid, "etcd": args.etcd_pid}
    before = {k: cpu_s(p) for k, p in others.items() if p}
    sync = ext.start(timeout=600)
    cpu = {k: cpu_s(others[k]) - v for k, v in before.items()}
    cpu["extender"] = cpu_s(ext.pid)
    return ext, sync, cpu


def run_size(args, api, cluster, n):
    pop = cluster.populate(api, n, args.threads)
    row = {"nodes": n, "pods": cluster.bound_pods, "populate": pop, "models": dict(cluster.models)}
    row["variants"] = []
    for v in args.sync_variant:
        ext, sync, cpu = timed_sync(args, n, "-" + v.strip("-").replace("=", "-"), v.split())
        rss = eb.proc_status_kib(ext.pid, "VmRSS")
        ext.stop()
        row["variants"].append((v, sync, cpu, rss))
        eb.log(f"sync with {v}: {sync:.1f}s, CPU {cpu}, VmRSS {rss / 1024:.1f} MiB")
    ext, row["sync_s"], row["sync_cpu"] = timed_sync(args, n, "", [])
    try:
        eb.log(f"sync CPU seconds: {row['sync_cpu']}")
        time.sleep(0.5)
        row["rss_sync_kib"] = eb.proc_status_kib(ext.pid, "VmRSS")
        eb.log(f"extender up: /healthz after {row['sync_s']:.2f}s, VmRSS {row['rss_sync_kib'] / 1024:.1f} MiB")
        k = scheduler_sample(n)
        # kube-scheduler starts each cycle where the previous one stopped; one window of k.
        off = cluster.rng.randrange(n)
        window = (cluster.nodes[off:] + cluster.nodes[:off])[:k]
        row["filter_sched"] = filter_series(args, ext, window, "sched", n)
        row["filter_all"] = filter_series(args, ext, cluster.nodes, "all", n)
        pre = eb.bench_api_ceiling(api, cluster, args.binds, tag="a")
        row["bind"] = eb.bench_binds(api, cluster, ext, args.prefix, args.binds)
        post = eb.bench_api_ceiling(api, cluster, args.binds, tag="b")
        row["ceiling"] = (pre + post) / 2
        row["ceiling_range"] = (min(pre, post), max(pre, post))
        row["rss_load_kib"] = eb.proc_status_kib(ext.pid, "VmRSS")
        row["hwm_kib"] = eb.proc_status_kib(ext.pid, "VmHWM")
    finally:
        row["exit"] = ext.stop()
    eb.log(f"extender stopped, exit status {row['exit']}")
    row["inspect"] = {}
    for label, cargs in (("inspect", ["inspect"]), ("inspect -o json", ["inspect", "-o", "json"])):
        walls, cpus, rss, size, _ = ib.measure(os.path.join(args.bin_dir, "kubectl-gpupool"), cargs,
                                               args.kubeconfig, args.runs)
        row["inspect"][label] = (walls, cpus, rss, size)
        eb.log(f"kubectl-gpupool {label}: median {statistics.median(walls):.2f}s "
               f"(min {min(walls):.2f}, max {max(walls):.2f}), peak RSS {rss / 1024:.1f} MiB")
    return row


def report(rows, args):
    print("| nodes (8 GPUs each, mixed models) | " + " | ".join(f"{r['nodes']:,}" for r in rows) + " | goal at 65,000 |")
    print("|---|" + "---:|" * len(rows) + "---|")

    def line(label, fn, goal=""):
        print(f"| {label} | " + " | ".join(fn(r) for r in rows) + f" | {goal} |")

    line("bound gpu-mem pods", lambda r: f"{r['pods']:,}")
    line("start → /healthz (full LIST+WATCH sync)", lambda r: f"{r['sync_s']:.1f} s", "≤ 30 s")
    line("CPU during the sync: extender / apiserver / etcd",
         lambda r: " / ".join("%.1f s" % r["sync_cpu"].get(k, float("nan"))
                              for k in ("extender", "apiserver", "etcd")))
    line("VmRSS after sync", lambda r: f"{eb.mib(r['rss_sync_kib'])} MiB", "≤ 64 MiB")
    for key, what in (("filter_sched", "kube-scheduler's list"), ("filter_all", "every node")):
        line(f"filter, {what}: names (body)",
             lambda r, k=key: f"{r[k]['names']:,} ({r[k]['body_kib']:.0f} KiB)")
        line(f"filter, {what}: p50 / p99 (1 conn)",
             lambda r, k=key: f"{r[k]['p50_ms']:.2f} / {r[k]['p99_ms']:.2f} ms",
             "p99 ≤ 10 ms" if key == "filter_sched" else "")
        line(f"filter, {what}: extender CPU / request", lambda r, k=key: f"{r[k]['cpu_ms']:.2f} ms")
    line("binds/s through the extender (4 conns)",
         lambda r: f"{r['bind']['binds_per_s']:.0f} ({r['bind']['binds']} in {r['bind']['answered_s']:.2f} s)")
    line("apiserver's Binding ceiling, same run (before–after)",
         lambda r: f"{r['ceiling']:.0f} ({r['ceiling_range'][0]:.0f}–{r['ceiling_range'][1]:.0f})")
    line("binds/s as % of the ceiling", lambda r: f"{100 * r['bind']['binds_per_s'] / r['ceiling']:.0f} %", "≥ 90 %")
    line("VmRSS after load / VmHWM", lambda r: f"{eb.mib(r['rss_load_kib'])} / {eb.mib(r['hwm_kib'])} MiB")
    for label in ("inspect", "inspect -o json"):
        line(f"`kubectl gpupool {label}` wall median (min–max)",
             lambda r, l=label: "%.2f s (%.2f–%.2f)" % (statistics.median(r["inspect"][l][0]),
                                                        min(r["inspect"][l][0]), max(r["inspect"][l][0])),
             "≤ 2 s" if label == "inspect" else "")
        line(f"`kubectl gpupool {label}` CPU / peak RSS",
             lambda r, l=label: "%.2f s / %.1f MiB" % (statistics.median(r["inspect"][l][1]),
                                                     r["inspect"][l][2] / 1024))
    line("extender exit status on SIGTERM", lambda r: str(r["exit"]))
    for i, v in enumerate(rows[-1]["variants"]):
        line(f"start → /healthz with `{v[0]}` (CPU extender / apiserver / etcd; VmRSS)",
             lambda r, i=i: "%.1f s (%s; %s MiB)" % (
                 r["variants"][i][1], " / ".join("%.1f" % r["variants"][i][2].get(k, float("nan"))
                                                 for k in ("extender", "apiserver", "etcd")),
                 eb.mib(r["variants"][i][3])) if i < len(r["variants"]) else "")
    print()
    last = rows[-1]
    print("Models (nodes): " + ", ".join(f"{m} {c:,}" for m, c in sorted(last["models"].items())) + ".")
    print(f"Client {args.client}, {args.duration} s per filter series, {args.runs} inspect runs, "
          f"{args.binds} binds per series. Set-up: " + "; ".join(
              f"{r['populate']['new_nodes']:,} nodes in {r['populate']['nodes_s']:.0f} s and "
              f"{r['populate']['new_pods']:,} pods in {r['populate']['pods_s']:.0f} s" for r in rows) + ".")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--extender", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--extender-arg", action="append", default=[])
    ap.add_argument("--sizes", default="5000,65000")
    ap.add_argument("--port", type=int, default=39997)
    ap.add_argument("--prefix", default="/gpupool-scheduler")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--binds", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--client", choices=("wrk", "python"), default="wrk")
    ap.add_argument("--log-dir", default=".")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--apiserver-pid", type=int, default=0)
    ap.add_argument("--etcd-pid", type=int, default=0)
    ap.add_argument("--sync-variant", action="append", default=[],
                    help="extender arguments (space-separated) to time a sync with first (repeatable)")
    args = ap.parse_args()
    api = eb.Api(args.server, args.token)
    cluster = MixedCluster(args.seed)
    rows = []
    try:
        for n in sorted(int(s) for s in args.sizes.split(",")):
            eb.log(f"=== {n} nodes ===")
            rows.append(run_size(args, api, cluster, n))
    except eb.BenchError as e:
        eb.log(f"FAILED: {e}")
        if rows:
            report(rows, args)
        return 1
    report(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
