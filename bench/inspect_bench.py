#!/usr/bin/python3
"""kubectl-gpupool inspect against a real kube-apiserver at 1,000 / 5,000 nodes.

Populates the cluster with bench/extender_bench.py's Cluster (8 x 32 GiB GPU
nodes, ~0.6 bound gpushare pods per node), then runs each inspect command
RUNS times and reports the wall time (median, min, max), the client's CPU
time and peak RSS (/usr/bin/time), the LIST timings it logs at -v 1 (one LIST
per collection from the watch cache; with --cache=false, pages of 500 read
from etcd) and the output size. Called by bench/inspect_bench.sh, which
starts etcd and the apiserver.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extender_bench import Api, BenchError, Cluster, log  # noqa: E402

COMMANDS = [
    ("kubectl-gpupool inspect", "kubectl-gpupool", ["inspect"]),
    ("kubectl-gpupool inspect --cache=false", "kubectl-gpupool", ["inspect", "--cache=false"]),
    ("kubectl-gpupool inspect -o json", "kubectl-gpupool", ["inspect", "-o", "json"]),
    ("kubectl-gpupool inspect -d", "kubectl-gpupool", ["inspect", "-d"]),
    ("kubectl-inspect-gpushare", "kubectl-inspect-gpushare", []),
    ("kubectl-gpupool inspect NODE", "kubectl-gpupool", ["inspect", "bench-gpu-00000"]),
]


def run_once(binary, args, kubeconfig):
    """One run: (wall s, CPU s, peak RSS KiB, output bytes, stderr text).

    CPU and peak RSS come from /usr/bin/time, whose child is forked from a
    small process: the ru_maxrss of a child forked from this Python process
    would count the Python heap (the cluster's objects) it had before exec."""
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.monotonic()
        proc = subprocess.run(["/usr/bin/time", "-f", "GPBENCH %U %S %M", binary] + args +
                              ["-v", "1"], env=env, stdout=out, stderr=err)
        wall = time.monotonic() - t
        size = out.tell()
        err.seek(0)
        text = err.read().decode(errors="replace")
    lines = text.rstrip("\n").split("\n")
    if proc.returncode != 0 or not lines[-1].startswith("GPBENCH "):
        raise BenchError(f"{binary} {args}: exit {proc.returncode}: {text[-400:]}")
    user, system, maxrss = lines[-1].split()[1:]
    return wall, float(user) + float(system), int(maxrss), size, "\n".join(lines[:-1])


def measure(binary, args, kubeconfig, runs):
    results = [run_once(binary, args, kubeconfig) for _ in range(runs)]
    walls = [r[0] for r in results]
    cpus = [r[1] for r in results]
    rss = max(r[2] for r in results)
    return walls, cpus, rss, results[-1][3], results[-1][4]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--shape", choices=["lean", "kubelet"], default="lean",
                    help="nodes as the extender needs them, or as a real kubelet reports them "
                         "(+ --system-pods DaemonSet pods per node)")
    ap.add_argument("--system-pods", type=int, default=0, choices=range(0, 5))
    args = ap.parse_args()
    api = Api(args.server, args.token)
    cluster = Cluster(args.seed, args.shape, args.system_pods)
    print(f"Node shape: {args.shape}; non-GPU pods per node: {args.system_pods}.")
    print()
    print("| nodes | pods | command | wall median (min-max) | CPU median | peak RSS | output | LIST timings (-v 1, last run) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sorted(int(s) for s in args.sizes.split(",")):
        log(f"=== {n} nodes ===")
        cluster.populate(api, n)
        for label, binary, cargs in COMMANDS:
            walls, cpus, rss, size, log_lines = measure(os.path.join(args.bin_dir, binary), cargs,
                                                        args.kubeconfig, args.runs)
            timings = "; ".join(l.split("] ", 1)[-1] for l in log_lines.splitlines() if "] " in l)
            print(f"| {n} | {cluster.bound_pods + n * args.system_pods} ({cluster.bound_pods} GPU) | `{label}` | {statistics.median(walls) * 1000:.0f} ms "
                  f"({min(walls) * 1000:.0f}-{max(walls) * 1000:.0f}) | "
                  f"{statistics.median(cpus) * 1000:.0f} ms | {rss / 1024:.1f} MiB | {size / 1024:.0f} KiB | "
                  f"{timings} |", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"FAILED: {e}")
        sys.exit(1)
